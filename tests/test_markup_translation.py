"""Markup through training and kt-translate: training pairs that show a model the placeholder
tokens (data/markup_pairs.py), vocabularies that keep them whole, and kt-translate --markup,
whose every output holds each of its line's items exactly once, tags well nested, under beam
search, greedy decoding and sampling."""

import json
import random
import re

import pytest
from client_process import run_client
from conftest import bundled_lines, run_main
from test_trainer import kt_train, small_corpus  # noqa: F401  (a fixture)

from keras_transformer import data, model_dir
from keras_transformer.data import markup, markup_pairs, word_alignment
from keras_transformer.export import export_command, translate
from keras_transformer.export.lines import Sampling, n_best_lines
from keras_transformer.export.markup_lines import markup_n_best_lines
from keras_transformer.export.translator import Translator
from keras_transformer.model_dir import ConfigError, RunConfig
from keras_transformer.model_dir.config_file import with_hparams

TOKEN = re.compile(r"｟/?t?\d+/?｠")
TAG_TOKEN = re.compile(r"｟/?t\d+/?｠")
TAGGED = [
    'Click <a href="/pay?id=7&amp;x=1">here</a> to pay {amount} before 2026-12-01.',
    "And <b>God</b> said, Let there be light: and there was light.",
    # Real HTML: a comment (holding a tag) and a quoted > stay whole, each once.
    "<p>In the beginning <i>God</i> created the heaven and the earth.</p><!-- v1 <i> --><br/>",
    "Write to help@example.com or visit https://example.org/faq for %s more.",
    "<b><i>nested</i> tags</b> and <unclosed> and 42, {{user}}.",
    "No markup at all.",
    "",
    """<img src='a.png' alt="1 > 0"/>""",
    # References are text (read decoded, written escaped); a script is one item, kept verbatim.
    "Tom &amp; Jerry&#39;s house. Don&#8217;t go, it&#8217;s late.",
    "<p>Hello friend.</p><script>var s = '<b>not a tag</b>';</script>",
]


def test_augmented_pairs_hold_the_same_tokens_on_both_sides(small_corpus):  # noqa: F811
    pairs = list(zip(*(map(str.rstrip, bundled_lines("train", lang, 3000))
                       for lang in ("en", "es"))))
    rewritten = [markup_pairs.augment(*pair) for pair in pairs]
    assert rewritten == [markup_pairs.augment(*pair) for pair in pairs]  # the pair decides
    changed = [new for new, old in zip(rewritten, pairs) if new != old]
    assert 0.25 < len(changed) / len(pairs) < 0.35  # DEFAULT_RATE 0.3
    seen = set()
    for source, target in changed:
        tokens = TOKEN.findall(source)
        assert tokens and sorted(tokens) == sorted(TOKEN.findall(target)), (source, target)
        items = [markup.Item("tag", "", token) for token in tokens]
        assert markup.problems(source, items) == markup.problems(target, items) == []
        seen.add((bool(re.search("｟t2", source)), bool(re.search(r"｟\d", source))))
    assert seen >= {(False, False), (True, False), (False, True)}  # tags, nested, placeholders
    # Shared items keep their tokens in either order; an item on one side only: left as it is.
    assert markup_pairs.augment("3 apples and 5 pears", "5 peras y 3 manzanas", rate=1) == (
        "｟1｠ apples and ｟2｠ pears", "｟2｠ peras y ｟1｠ manzanas")
    assert markup_pairs.augment("3 apples", "tres manzanas", rate=1) == ("3 apples",
                                                                        "tres manzanas")
    # Only the training split is rewritten; a vocabulary of the source keeps the tokens whole.
    corpus = data.directory_source(small_corpus, "en", "es")
    augmented = data.MarkupAugmentedSource(corpus)
    for split, rewrites in (("train", True), ("dev", False)):
        plain, new = (list(source.pairs(split).as_numpy_iterator())
                      for source in (corpus, augmented))
        assert (plain != new) == rewrites and len(plain) == len(new)
    assert data.corpus_whole_tokens(augmented) == markup.TOKENS


def toy_pairs(count, seed):
    """Pairs of 3-8 distinct words "w<n>" and their translations "v<n>" in reverse order, with
    an untranslated "la" somewhere in each translation."""
    chooser = random.Random(seed)
    pairs = []
    for _ in range(count):
        numbers = chooser.sample(range(40), chooser.randint(3, 8))
        target = [f"v{n}" for n in reversed(numbers)]
        target.insert(chooser.randrange(len(target) + 1), "la")
        pairs.append((" ".join(f"w{n}" for n in numbers), " ".join(target)))
    return pairs


@pytest.fixture(scope="module")
def toy_aligner():
    return word_alignment.Ibm1Aligner.fit(toy_pairs(1500, 1))


def test_ibm1_alignments_find_each_words_translation(toy_aligner):
    for source, target in toy_pairs(50, 2):
        source_words, target_words = source.split(), target.split()
        truth = {(i, target_words.index(word.replace("w", "v")))
                 for i, word in enumerate(source_words)}
        assert set(toy_aligner.links(word_alignment.words(source),
                                     word_alignment.words(target))) == truth


def test_consistent_spans_are_the_phrase_pairs_of_the_links():
    # source words 0-3 (2 unlinked), target words 0-2; (1, 3) would hold target 1, linked to 0
    assert word_alignment.consistent_spans([(0, 1), (1, 0), (3, 2)]) == [
        ((0, 0), (1, 1)), ((0, 1), (0, 1)), ((0, 3), (0, 2)), ((1, 1), (0, 0)), ((3, 3), (2, 2))]


def test_made_up_tags_wrap_a_phrase_and_its_translation(toy_aligner):
    wrapped = 0
    for source, target in toy_pairs(300, 3):
        new_source, new_target = markup_pairs.augment(source, target, 1, toy_aligner)
        for number in {int(n) for n in re.findall(r"｟t(\d+)｠", new_source)}:
            inside = [re.search(rf"｟t{number}｠(.*?)｟/t{number}｠", text).group(1).split()
                      for text in (new_source, new_target)]
            words = [{w for w in side if not TOKEN.fullmatch(w) and w != "la"} for side in inside]
            assert {w.replace("w", "v") for w in words[0]} == words[1], (new_source, new_target)
            wrapped += len(words[0]) < len(source.split())
    assert wrapped > 100  # most pairs got a phrase, not the whole sentence


GREEDY_FLAGS = ("--beam_size", "1", "--max_input_length", "64", "--extra_length", "10")


@pytest.fixture(scope="module")
def tagged_translation(markup_run, tmp_path_factory):
    """kt-translate --markup of TAGGED (written to tagged.en) with GREEDY_FLAGS, all 8 lines in
    one batch: (the input file, the CompletedProcess). One run for both tests that read it, as
    each compares it with 8 lines searched together: translations computed at batch size 8, and
    the SavedModel's, served in one request of 8."""
    source = tmp_path_factory.mktemp("tagged") / "tagged.en"
    source.write_text("\n".join(TAGGED) + "\n", encoding="utf-8")
    result = run_main(translate.main, "--model_dir", markup_run, "--markup", "--input", source,
                      "--batch_size", len(TAGGED), *GREEDY_FLAGS)
    assert result.returncode == 0, result.stderr
    return source, result


@pytest.mark.slow
def test_every_search_keeps_each_item_once_and_kt_translate_puts_them_back(markup_run,
                                                                           tagged_translation):
    loaded = model_dir.load(markup_run)
    translator = Translator(loaded.model, loaded.vocabulary, max_input_length=64,
                            extra_length=10)  # an untrained model runs to the limit
    masked = [markup.mask(text) for text in TAGGED]
    items = [line.items for line in masked]
    for sampling in (None, Sampling(1.0, 0, 3)):
        # One pass (the items where the model puts them) and two (the tags placed in the
        # untagged line's translation, kt-translate's way).
        one_pass = n_best_lines(translator, [line.text for line in masked], 2, 4,
                                sampling=sampling, markup_items=items)
        two_passes = markup_n_best_lines(translator, masked, 2, 4, sampling=sampling)
        for line, *bests in zip(masked, one_pass, two_passes):
            for hypothesis in [h for best in bests for h in best]:
                assert markup.problems(hypothesis.text, line.items) == [], hypothesis.text
    # Sampling may draw more than the beam holds: a tagged line's n best are placements of its
    # first sample's text (the beam's at most), an untagged line keeps every sample.
    drawn = markup_n_best_lines(translator, masked, 6, 4, sampling=Sampling(1.0, 0, 5))
    for line, best in zip(masked, drawn):
        tagged = any(item.kind == "tag" for item in line.items)
        assert (1 <= len(best) <= translator.decoding.beam_size) if tagged else (len(best) == 6)
    untagged = [markup.without_tags(line) for line in masked]
    plain = n_best_lines(translator, [line.text for line in untagged], 1, 4,
                         markup_items=[line.items for line in untagged])
    for line, text, best in zip(masked, plain, markup_n_best_lines(translator, masked, 2, 4)):
        tagged = any(item.kind == "tag" for item in line.items)
        for hypothesis in best if tagged else []:  # the text to the letter, the tags in it
            assert " ".join(TAG_TOKEN.sub(" ", hypothesis.text).split()) == " ".join(
                text[0].text.split()), hypothesis.text
    greedy = Translator(loaded.model, loaded.vocabulary, max_input_length=64, beam_size=1,
                        extra_length=10)
    expected = [markup.unmask(best[0].text, line.items) for line, best in zip(
        masked, markup_n_best_lines(greedy, masked, 1, 8))]
    tagged_file, result = tagged_translation
    assert result.stdout.splitlines() == expected
    assert f"{tagged_file}:5: unbalanced tags <unclosed>: each is kept once" in (
        result.stderr) and result.stderr.count("unbalanced") == 1
    assert all(source.count("<") == output.count("<") for source, output in zip(
        TAGGED, expected))
    assert "<!-- v1 <i> -->" in expected[2] and expected[7] == TAGGED[7]
    # No reference read as a number item ("...8217."), and every & written as one starts one.
    assert not re.search(r"\d", expected[8]), expected[8]
    assert not re.search(r"&(?!amp;|lt;|gt;|quot;|#39;|#x27;)", expected[8]), expected[8]
    assert "<script>var s = '<b>not a tag</b>';</script>" in expected[9], expected[9]


MARKUP_CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

serve = tf.saved_model.load(sys.argv[1]).signatures["translate_with_markup"]
replies = []
for lines in json.loads(sys.stdin.read()):
    try:
        out = serve(inputs=tf.constant(lines, tf.string))["translations"].numpy()
        replies.append([text.decode() for text in out])
    except tf.errors.InvalidArgumentError as error:
        replies.append(error.message)
print(json.dumps(replies))
"""


@pytest.mark.slow
def test_the_saved_model_translates_tagged_text_as_kt_translate_does(markup_run,
                                                                      tagged_translation,
                                                                      tmp_path):
    exported = run_main(export_command.main, "--model_dir", markup_run, "--output",
                        tmp_path / "export", "--markup", "--max_batch_size", len(TAGGED),
                        *GREEDY_FLAGS)
    assert exported.returncode == 0, exported.stderr
    assert ", translate_with_markup;" in exported.stdout
    _, result = tagged_translation
    requests = [TAGGED, TAGGED[5:], TAGGED[5:7], ["<br/>" * 51], ["a ｟1｠ b"],
                ["ok", "<b>" + "1 " * 40_000 + "</b>"]]  # refused before it is masked
    reply = run_client(MARKUP_CLIENT, tmp_path / "export" / "1", input=json.dumps(requests))
    assert reply.returncode == 0, reply.stderr
    served, untagged, no_items, too_many, holds_token, too_long = json.loads(reply.stdout)
    assert served == result.stdout.splitlines()
    assert untagged == served[5:] and no_items == served[5:7]  # no placing pass, no items
    assert "a text holds more than 50 tag pairs and lone tags" in too_many
    assert "already holds a placeholder token" in holds_token
    assert "a text is longer than 65536 bytes (the limit of translate_with_markup)" in too_long


def test_markup_needs_a_vocabulary_that_keeps_the_tokens_whole(trained_model_dir, markup_run,
                                                               small_corpus, tmp_path):  # noqa: F811
    for main, *flags in ((translate.main, ), (export_command.main, "--output", tmp_path / "x")):
        refused = run_main(main, "--model_dir", trained_model_dir, "--markup", *flags)
        assert refused.returncode == 2
        assert f"{trained_model_dir / 'vocab.model'} does not keep markup's placeholder " \
               f"tokens" in refused.stderr
    trained = kt_train(tmp_path / "run", small_corpus, "--vocab", trained_model_dir /
                       "vocab.model", "--markup_rate", "0.3", "--train_steps", "1")
    assert trained.returncode != 0 and "does not keep markup's placeholder" in trained.stderr
    (tmp_path / "line.en").write_text(" ".join(f"{n}" for n in range(51)), encoding="utf-8")
    too_many = run_main(translate.main, "--model_dir", markup_run, "--markup", "--input",
                        tmp_path / "line.en")
    assert too_many.returncode == 2 and f"{tmp_path / 'line.en'}:1: 51 placeholders" in \
        too_many.stderr
    with pytest.raises(ConfigError, match="a parser or an MT-LSTM has none"):
        RunConfig.from_dict({"format_version": 2, "data": {"corpus": "ptb:/x",
                                                             "markup_rate": 0.3}}).check()
    with pytest.raises(ConfigError, match="a parser or an MT-LSTM has none"):
        with_hparams(RunConfig.from_dict({"format_version": 2, "data": {"markup_rate": 0.3},
                                          "model": {"hparams_name": "cove_mt_lstm"}})).check()
    with pytest.raises(ConfigError, match="data.markup_rate must be at least 0.0 and below 1"):
        RunConfig.from_dict({"format_version": 2, "data": {"markup_rate": 1.0}})
