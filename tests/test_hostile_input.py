"""Hostile input at the serving boundary: the Translator's string signature (what kt-export saves
and kt-translate runs) answers every input with a translation or a clear error, and then still
translates as before. The SavedModel in a process without this package and kt-translate get the
same fixed cases in tests/test_export.py; reliability/soak.py mixes them into a 10-minute,
8-thread load.

Hypothesis runs the "ci" profile here (a fixed set of examples); for the long form:
    python -m pytest tests/test_hostile_input.py --hypothesis-profile campaign
"""

import re

import hostile_inputs
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from keras_transformer import export
from keras_transformer.model_dir import ConfigError

SENTENCE = hostile_inputs.TEXTS["sentence"]


@pytest.fixture(autouse=True)
def _seeded():
    """Replaces conftest's per-test seeding here: tf.random.set_seed drops tensorflow-text's
    tokenizer resource, which the module's traced Translator holds (inference needs no seed)."""


@pytest.fixture(scope="module")
def serving(trained):
    """A Translator with test-sized bounds, and its translation of a plain sentence."""
    translator = export.Translator(trained.model, trained.vocabulary, max_input_length=64,
                                   max_batch_size=64)
    return translator, translator.translate(tf.constant([SENTENCE]))


def check_reply(translator, texts, what):
    """Translates `texts` (bytes); checks one finite score <= 0 and valid UTF-8 per text."""
    reply = translator.translate(tf.constant(texts, tf.string))
    translations, scores = reply["translations"].numpy(), reply["scores"].numpy()
    assert translations.shape == scores.shape == (len(texts),), what
    for text, translation in zip(texts, translations):
        translation.decode("utf-8")  # raises on invalid UTF-8
        if not text.decode("utf-8", errors="replace").strip():
            assert translation == b"", (what, text[:40])
    assert np.all(np.isfinite(scores)) and np.all(scores <= 0), (what, scores)
    return translations


def assert_still_translates(serving):
    translator, before = serving
    after = translator.translate(tf.constant([SENTENCE]))
    assert after["translations"].numpy()[0] == before["translations"].numpy()[0]
    np.testing.assert_allclose(after["scores"], before["scores"], rtol=1e-6)


def test_every_fixed_case_alone_and_all_in_one_batch(serving):
    translator, _ = serving
    alone = {name: check_reply(translator, [text], name)[0]
             for name, text in hostile_inputs.TEXTS.items()}
    assert alone["empty"] == alone["whitespace only"] == b""
    assert all(alone[name] for name in hostile_inputs.TEXTS if name not in ("empty",
                                                                            "whitespace only"))
    together = check_reply(translator, list(hostile_inputs.TEXTS.values()), "all at once")
    # Batched with the others, each text gets its own translation (padding is masked).
    assert list(together) == list(alone.values())
    assert_still_translates(serving)


def test_long_inputs_are_cut_so_outputs_are_bounded(serving):
    translator, _ = serving
    for name in ("100k characters, one word", "100k characters, multibyte", "10k tokens",
                 "combining marks stacked"):
        ids = translator.tokenize(tf.constant([hostile_inputs.TEXTS[name]]))["source_ids"]
        assert ids.shape[1] <= translator.decoding.max_input_length, name
        output = translator.translate_ids(ids)["ids"]
        assert output.shape[1] <= translator.decoding.max_output_length, name


def test_batches_empty_and_huge(serving):
    translator, _ = serving
    empty = translator.translate(tf.constant(hostile_inputs.EMPTY_BATCH, tf.string))
    assert empty["translations"].shape == empty["scores"].shape == (0,)
    huge = tf.constant([SENTENCE] * hostile_inputs.HUGE_BATCH_SIZE)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="too many sentences in one request: the limit \\(max_batch_size\\) "
                             "is 64; split the batch"):
        translator.translate(huge)
    assert_still_translates(serving)


def test_a_request_is_held_to_its_search_positions_few_long_or_many_short(trained):
    bounds = dict(max_input_length=64, max_batch_size=64, extra_length=2)
    unbounded = export.Translator(trained.model, trained.vocabulary, **bounds)
    short, long = (unbounded.tokenize(tf.constant([text]))["source_ids"]
                   for text in ("Jesus wept.", SENTENCE))
    short_limit, long_limit = (int(unbounded.limits_of(ids)[0]) for ids in (short, long))
    assert 5 * short_limit <= 2 * long_limit < 3 * long_limit
    # Two long sentences at beam 4 fit exactly; so do five short ones; three long ones do not.
    translator = export.Translator(trained.model, trained.vocabulary, **bounds,
                                   max_output_length=long_limit,
                                   max_search_positions=2 * 4 * long_limit)
    assert translator.settings()["max_search_positions"] == 2 * 4 * long_limit
    for ids in (tf.tile(long, [2, 1]), tf.tile(short, [5, 1])):
        np.testing.assert_array_equal(translator.translate_ids(ids)["ids"],
                                      unbounded.translate_ids(ids)["ids"])
    refusal = re.escape(f"a search past the limit (max_search_positions) of "
                        f"{2 * 4 * long_limit} positions: sentences x beam size (4) x the "
                        f"longest output limit; send fewer or shorter sentences")
    with pytest.raises(tf.errors.InvalidArgumentError, match=refusal):
        translator.translate_ids(tf.tile(long, [3, 1]))
    # Sampling's n draws count as its beams.
    assert translator.sample_n_best_ids(long, 8, 1.0)["ids"].shape[:2] == (1, 8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="beam size \\(9\\)"):
        translator.sample_n_best_ids(long, 9, 1.0)
    # One sentence at beam 4 and its longest (64 + 2 tokens) must fit.
    with pytest.raises(ConfigError, match="max_search_positions must be at least 264, got 263"):
        export.Translator(trained.model, trained.vocabulary, **bounds, max_search_positions=263)


texts = st.one_of(
    st.binary(max_size=800),
    st.text(max_size=300).map(str.encode),
    st.text(st.characters(categories=("Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp", "So", "Co")),
            max_size=300).map(str.encode),
    st.lists(st.sampled_from([b"word", b" ", b"\x00", b"\xff", "\u202e".encode(),
                              "\U0001f600".encode(), "\u0301".encode()]),
             max_size=400).map(b"".join),
    st.sampled_from(list(hostile_inputs.TEXTS.values())),
)


@given(batch=st.lists(texts, max_size=8))
def test_generated_inputs_get_a_translation_each(serving, batch):
    check_reply(serving[0], batch, "generated")


def test_still_translates_after_the_generated_inputs(serving):
    assert_still_translates(serving)
