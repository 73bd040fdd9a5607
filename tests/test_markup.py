"""data/markup.py: items out of the text and back, exactly; what a bad translation breaks is
named; limits refused."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_transformer.data import markup

WORDS = st.sampled_from(["the", "cat", "sat", "on", "mat", "é", "naïve", "(", ")", ",", ".",
                         "¿", "?", "50%", "a.b", "x-y"])
ITEMS = st.sampled_from(["{0}", "{name}", "{{ user }}", "%s", "%1$d", "%-5.2f", "42", "3.14",
                         "1,234.5", "2026-12-01", "https://example.org/a?b=1", "www.x.org",
                         "me@example.org", "<br/>", "<img src='a.png'/>", "</p>"])
SPACES = st.sampled_from(["", " ", " ", "  ", "\t"])


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
                attributes = draw(st.sampled_from(["", ' href="/x?a=1&b=2"', " class='c'"]))
                out.append(f"<{name}{attributes}>" + draw(SPACES).join(pieces(depth + 1)) +
                           f"</{name}>")
        return out
    return draw(SPACES).join(pieces(0))


@settings(max_examples=300, deadline=None)
@given(marked_up_texts())
def test_masking_and_unmasking_give_the_text_back(text):
    masked = markup.mask(text)
    assert markup.problems(masked.text, masked.items) == []
    assert markup.unmask(masked.text, masked.items) == text
    # What the model sees holds no item, and every item's token once.
    for item in masked.items:
        if item.kind != "tag":
            assert item.text not in re.sub(r"｟[^｠]*｠", " ", masked.text).split()
        assert masked.text.count(item.token) == 1
    assert all(token in markup.TOKENS for token in re.findall(r"｟[^｠]*｠", masked.text))


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
