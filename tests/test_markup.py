"""data/markup.py: items out of the text and back, exactly; what a bad translation breaks is
named; limits refused. keras_transformer/search/constraints/markup.py: searches that keep them."""

import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from test_beam_search import exhaustive, table_step

import keras_transformer as kt
from keras_transformer.data import markup, markup_graph
from keras_transformer.search.constraints.markup import MarkupConstraint

WORDS = st.sampled_from(["the", "cat", "sat", "on", "mat", "é", "naïve", "(", ")", ",", ".",
                         "¿", "?", "50%", "a.b", "x-y", "v1.2", "3rd", "12.5kg", "ñ2026", "€5",
                         "«7»", "x_1", ".5", "日本", "500।", "٥٠", "5😀", "詳細はwww.x.jp",
                         # Character references: text (decoded for the model), never numbers.
                         "&amp;", "Jerry&#39;s", "&#8217;", "&nbsp;", "&lt;b&gt;", "&#x1F600;",
                         "&#39;42", "&unknown;", "&", "a<b"])
ITEMS = st.sampled_from(["{0}", "{name}", "{{ user }}", "%s", "%1$d", "%-5.2f", "42", "3.14",
                         "1,234.5", "2026-12-01", "https://example.org/a?b=1", "www.x.org",
                         "me@example.org", "<br/>", "<img src='a.png'/>", "</p>",
                         # Real HTML: > and < inside quoted values, comments (holding tags),
                         # CDATA, a doctype and a processing instruction, each kept whole.
                         '<img alt="1 > 0" src="a.png">', "<!-- <b> x > y -->",
                         "<![CDATA[ a < b ]]>", "<!DOCTYPE html>", '<?xml version="1.0"?>',
                         # Code: a <script> or <style> element is one lone tag, verbatim.
                         "<script>var s = '<b>x</b>' && 1 &amp; 2;</script>",
                         "<style type='text/css'>p > a { color: red }</style>",
                         "<SCRIPT src='a.js'></SCRIPT>"])
SPACES = st.sampled_from(["", " ", " ", "  ", "\t", "\u00a0"])


@st.composite
def marked_up_texts(draw):
    """Words, items and tag pairs (nested as drawn), joined by spaces or nothing."""
    def pieces(depth):
        out = []
        for _ in range(draw(st.integers(0, 4))):
            choice = draw(st.integers(0, 2 if depth < 3 else 1))
            if choice == 0:
                out.append(draw(WORDS))
            elif choice == 1:
                out.append(draw(ITEMS))
            else:
                name = draw(st.sampled_from(["b", "i", "a", "span"]))
                attributes = draw(st.sampled_from(["", ' href="/x?a=1&b=2"', " class='c'",
                                                   ' title="1 > 0"', " data-x='<i>'"]))
                out.append(f"<{name}{attributes}>" + draw(SPACES).join(pieces(depth + 1)) +
                           f"</{name}>")
        return out
    return draw(SPACES).join(pieces(0))


@settings(max_examples=300, deadline=None)
@given(marked_up_texts())
def test_masking_and_unmasking_give_the_text_back(text):
    masked = markup.mask(text)
    assert markup.problems(masked.text, masked.items) == []
    unmasked = markup.unmask(masked.text, masked.items, escaped=masked.escaped)
    if masked.escaped:  # the same characters, written with HTML's escapes of & < >
        assert markup.decoded(unmasked) == markup.decoded(text)
        # ... and no decoded "&lt;b&gt;" read as a tag when the output is read again (a
        # reference to a token bracket, "&#65375;", stays as written, so is read again as
        # "&amp;" and a number: the same characters, other items).
        assert [(item.kind, item.text) for item in markup.mask(unmasked).items] == [
            (item.kind, item.text) for item in masked.items]
    else:
        assert unmasked == text
    # Every item's token once (with the round trip: each item's text taken out, not copied;
    # the same text may stay as text elsewhere: "42" in "%s42" touches a word, so is none).
    for item in masked.items:
        assert masked.text.count(item.token) == 1
    assert all(token in markup.TOKENS for token in re.findall(r"｟[^｠]*｠", masked.text))


def _joined_at_random(text, rng):
    """`text` with some of its spaces taken out: a translation with words beside its tokens."""
    words = text.split(" ")
    return words[0] + "".join(rng.choice(["", " ", " "]) + word for word in words[1:])


@settings(max_examples=3, deadline=None)
@given(st.lists(marked_up_texts(), min_size=100, max_size=100))
def test_the_graph_masks_and_unmasks_as_python_does(texts):
    texts += ["<b>open <i>x</i> and <br/> stray </p> end", "", " \t", "{0}{1}<b></b>.",
              '<img alt="1 > 0" src="a.png"> ok', "a <!-- <b> --> b <![CDATA[<i>]]></b>",
              "Tom &amp; Jerry&#39;s house.", "<p>Hello friend.</p><script>var s = '<b>not a "
              "tag</b>';</script>", "&#0;&#128;&#x110000;&#xD800;&#00065;&#x41;&notit;&#65375;"]
    masked = markup_graph.mask(tf.constant(texts))
    rng = np.random.default_rng(0)
    translations = [_joined_at_random(markup.mask(text).text, rng) for text in texts]
    unmasked = markup_graph.unmask(tf.constant(translations), masked).numpy()
    for row, (text, translation) in enumerate(zip(texts, translations)):
        expected = markup.mask(text)
        assert masked.text[row].numpy().decode() == expected.text
        assert masked.untagged[row].numpy().decode() == markup.without_tags(expected).text
        for field in ("space_before", "space_after", "word_before", "word_after"):
            assert getattr(masked, field)[row].numpy().tolist() == [
                getattr(item, field) for item in expected.items]
        assert [(text.decode(), token.decode(), tag) for text, token, tag in zip(
            masked.items[row].numpy(), masked.tokens[row].numpy(),
            masked.is_tag[row].numpy())] == [
            (item.text, item.token, item.kind == "tag") for item in expected.items]
        assert masked.escaped[row].numpy() == expected.escaped
        assert unmasked[row].decode() == markup.unmask(translation, expected.items,
                                                       escaped=expected.escaped)


def test_the_graph_refuses_what_python_refuses():
    pairs = "<b>x</b> " * 26  # 52 tags, 26 pairs: within the limit of 50 pairs and lone tags
    masked = markup_graph.mask(tf.constant([pairs, pairs + "<br/>" * 24]))
    assert masked.text[1].numpy().decode() == markup.mask(pairs + "<br/>" * 24).text
    for text, message in ((" ".join(["7"] * 51), "more than 50 placeholders"),
                          ("<br/>" * 51, "more than 50 tag pairs and lone tags"),
                          (pairs + "<br/>" * 25, "more than 50 tag pairs and lone tags"),
                          ("<i>" * 10_000, "more than 50 tag pairs and lone tags"),
                          ("a ｟1｠ b", "already holds a placeholder token")):
        with pytest.raises(markup.MarkupError):
            markup.mask(text)
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            markup_graph.mask(tf.constant(["ok", text]))
    masked = markup_graph.mask(tf.constant(["<b>{0}</b>"]))
    for translation, message in (("｟t1｠ ｟2｠ ｟/t1｠", "a token its source does not"),
                                 ("｟t1｠ ｟/t1｠", "each of its source's items once"),
                                 ("｟t1｠ ｟1｠ ｟1｠ ｟/t1｠", "each of its source's items once")):
        with pytest.raises(markup.MarkupError):
            markup.unmask(translation, markup.mask("<b>{0}</b>").items)
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            markup_graph.unmask(tf.constant([translation]), masked)


def test_references_are_text_and_code_one_verbatim_item():
    """The issue's cases: `&#39;` was a number item; a script was translated as prose."""
    masked = markup.mask("Tom &amp; Jerry&#39;s house.")
    assert (masked.text, masked.items, masked.escaped) == ("Tom & Jerry's house.", (), True)
    assert markup.unmask("Tom & Jerry's casa.", (), escaped=True) == "Tom &amp; Jerry's casa."
    masked = markup.mask("Don&#8217;t go, it&#8217;s late. " + "&#39;" * 51)  # no 50 limit
    assert masked.text == "Don’t go, it’s late. " + "'" * 51 and masked.items == ()
    script = "<script>var s = '<b>not a tag</b>';</script>"
    masked = markup.mask(f"<p>Hello friend.</p>{script}")
    assert masked.text == "｟t1｠ Hello friend. ｟/t1｠ ｟t2/｠"
    assert [item.text for item in masked.items] == ["<p>", "</p>", script]
    assert markup.unbalanced(masked) == []
    assert markup.unmask("｟t1｠ Hola amigo. ｟/t1｠ ｟t2/｠", masked.items) == (
        f"<p>Hola amigo.</p>{script}")


def test_items_by_kind_tags_paired_in_order_and_attributes_kept():
    masked = markup.mask('Click <a href="/x">here</a> to pay {amount} before 2026-12-01, '
                         'or mail <b>me@example.org</b> (see https://example.org/help).')
    assert masked.text == ("Click ｟t1｠ here ｟/t1｠ to pay ｟1｠ before ｟2｠ , "
                           "or mail ｟t2｠ ｟3｠ ｟/t2｠ (see ｟4｠ ).")
    assert [(item.kind, item.text) for item in masked.items] == [
        ("tag", '<a href="/x">'), ("tag", "</a>"), ("placeholder", "{amount}"),
        ("number", "2026-12-01"), ("tag", "<b>"), ("email", "me@example.org"), ("tag", "</b>"),
        ("url", "https://example.org/help")]
    spanish = ("Pulse ｟t1｠ aquí ｟/t1｠ para pagar ｟1｠ antes del ｟2｠ , "
               "o escriba a ｟t2｠ ｟3｠ ｟/t2｠ (vea ｟4｠ ).")
    assert markup.unmask(spanish, masked.items) == (
        'Pulse <a href="/x">aquí</a> para pagar {amount} antes del 2026-12-01, o escriba a '
        '<b>me@example.org</b> (vea https://example.org/help).')


def test_unpaired_and_self_closing_tags_stand_alone_and_pairs_nest():
    masked = markup.mask("<b>open <i>x</i> and <br/> stray </p> end")
    assert masked.text == "｟t2/｠ open ｟t1｠ x ｟/t1｠ and ｟t3/｠ stray ｟t4/｠ end"
    assert markup.mask("50% sure, 3 of 4").text == "｟1｠ % sure, ｟2｠ of ｟3｠"
    # Unbalanced: the unclosed <b> and the stray </p>; not a self-closing tag or a void <br>.
    assert markup.unbalanced(markup.mask("<b>open <i>x</i> and <br/> <br> stray </p>")) == [
        "<b>", "</p>"]
    assert markup.unbalanced(markup.mask("<b>x</b> <img src='a.png'>")) == []
    # Alone by nature: a comment, CDATA, a doctype; a quoted > does not end a tag.
    masked = markup.mask('<!DOCTYPE html><!-- <b> --><p title="a > b">x</p><![CDATA[<i>]]>')
    assert [(item.text, item.token) for item in masked.items] == [
        ("<!DOCTYPE html>", "｟t2/｠"), ("<!-- <b> -->", "｟t3/｠"),
        ('<p title="a > b">', "｟t1｠"), ("</p>", "｟/t1｠"), ("<![CDATA[<i>]]>", "｟t4/｠")]
    assert markup.unbalanced(masked) == []


@pytest.mark.parametrize("translation, message", [
    ("｟t1｠ x ｟/t1｠", "｟1｠ appears 0 time(s), the source has it 1"),
    ("｟t1｠ ｟1｠ ｟1｠ ｟/t1｠", "｟1｠ appears 2 time(s), the source has it 1"),
    ("｟t1｠ ｟1｠ ｟/t1｠ ｟7｠", "｟7｠ appears 1 time(s), the source has it 0"),
    ("｟/t1｠ ｟1｠ ｟t1｠", "｟/t1｠ closes nothing open"),
    ("｟t1｠ ｟t2｠ ｟1｠ ｟/t1｠ ｟/t2｠", "｟/t1｠ closes ｟t2｠"),
])
def test_a_translation_that_loses_repeats_or_crosses_items_is_refused_naming_them(
        translation, message):
    masked = markup.mask("<b><i>{0}</i></b>")
    assert masked.text == "｟t1｠ ｟t2｠ ｟1｠ ｟/t2｠ ｟/t1｠"
    assert message in markup.problems(translation, masked.items)
    with pytest.raises(markup.MarkupError, match=re.escape(message)):
        markup.unmask(translation, masked.items)


def test_too_many_items_or_a_token_in_the_source_are_refused():
    with pytest.raises(markup.MarkupError, match=r"51 placeholders, URLs, e-mail addresses and "
                                                 r"numbers; at most 50"):
        markup.mask(" ".join(["7"] * 51))
    with pytest.raises(markup.MarkupError, match="51 tags; at most 50"):
        markup.mask("<br/>" * 51)
    with pytest.raises(markup.MarkupError, match="already holds a placeholder token"):
        markup.mask("a ｟1｠ b")


# The constraint in the search: a toy vocabulary of 6 ids, 0 a word, 2 a piece that continues
# one (never right after an item), 1 end of sentence, 3 and 4 a tag pair's tokens, 5 an item
# token no sentence has.
VOCAB, MARKERS = 6, [3, 4, 5]
AFTER_ITEM_OK = [True, True, False, True, True, True]
LIMITS = [4, 3, 2]
ITEM_IDS, OPENING = [[3, 4], [0, 0], [3, 4]], [[-1, 0], [-1, -1], [-1, 0]]


def keeps_the_markup(sentence, tokens):
    """The rule, written over a whole hypothesis: the sentence's items once each, in order."""
    if 5 in tokens or any(a in (3, 4) and b == 2 for a, b in zip(tokens, tokens[1:])):
        return False
    if sentence == 1:
        return 3 not in tokens and 4 not in tokens
    return tokens.count(3) == tokens.count(4) == 1 and tokens.index(3) < tokens.index(4)


def enumeration(table, sentence, limit, alpha):
    """Every hypothesis the rule keeps, with its penalized score, best first. An item token
    takes the end's probability too (one item is allowed at a time here)."""
    def bonuses(log_probs, previous, tokens):
        return [np.logaddexp(0.0, log_probs[t, p, 1] - log_probs[t, p, y]) if y in (3, 4)
                else 0.0 for t, (p, y) in enumerate(zip(previous, tokens))]

    return exhaustive(table, sentence, limit, alpha, vocab=VOCAB,
                      keeps=lambda tokens: keeps_the_markup(sentence, tokens), bonuses=bonuses)


def constraint():
    return MarkupConstraint(tf.constant(ITEM_IDS), tf.constant(OPENING), tf.constant(MARKERS),
                            tf.constant(AFTER_ITEM_OK))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_beam_search_under_the_constraint_finds_the_best_hypotheses_that_keep_the_markup(
        rng, jit_compile):
    """A beam as wide as every prefix returns the enumeration's best among the hypotheses that
    keep each item once, well nested (sentence 3's limit leaves room for the items alone)."""
    table = rng.normal(scale=2.0, size=(3, max(LIMITS), VOCAB, VOCAB))
    step_fn, cache = table_step(table)
    beam = VOCAB ** (max(LIMITS) - 1)
    search = tf.function(lambda: kt.beam_search(
        step_fn, cache, LIMITS, beam_size=beam, buffer_length=max(LIMITS),
        processors=[constraint()]), jit_compile=jit_compile)
    ids, scores = search()
    for sentence, limit in enumerate(LIMITS):
        expected = enumeration(table, sentence, limit, 0.6)
        assert expected and (sentence != 2 or [t for _, t in expected] == [(3, 4)])
        for k, (score, tokens) in enumerate(expected[:8]):
            np.testing.assert_allclose(scores[sentence, k], score, rtol=1e-5)
            assert ids[sentence, k].numpy().tolist()[:len(tokens)] == list(tokens)


def test_greedy_and_sampled_outputs_keep_the_markup(rng):
    table = rng.normal(scale=2.0, size=(3, max(LIMITS), VOCAB, VOCAB))
    step_fn, cache = table_step(table)
    for temperature, seed in [(0.0, None), (1.0, [1, 0]), (1.0, [2, 0]), (3.0, [3, 0])]:
        ids, _ = kt.sampling_search(step_fn, cache, tf.constant(LIMITS),
                                    temperature=temperature, seed=seed,
                                    processors=[constraint()])
        for sentence, row in enumerate(ids.numpy().tolist()):
            tokens = tuple(row[:row.index(1) + 1] if 1 in row else row[:LIMITS[sentence]])
            assert keeps_the_markup(sentence, tokens), (temperature, sentence, tokens)
