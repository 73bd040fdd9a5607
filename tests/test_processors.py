"""Decoding processors (keras_transformer/search/processors.py): a new one, written here without
touching the searches, works in beam search, greedy decoding and sampling, its state follows
the hypotheses, and the decode functions and the Translator take it."""

from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf
from test_beam_search import EOS, exhaustive, log_softmax, table_step

import keras_transformer as kt
from keras_transformer.export import Translator

NEG_INF = float("-inf")


class NeverEmit(NamedTuple):
    """The toy of docs/python.md: no hypothesis ever writes `token_id`."""
    token_id: int

    def start(self, layout):
        def adjust(logits, ids, step, state):
            banned = tf.range(tf.shape(logits)[-1]) == self.token_id
            return tf.where(banned, NEG_INF, logits), state

        return adjust, ()


class AtMostOnce(NamedTuple):
    """`token_id` at most once a hypothesis, remembered in state (bool [rows]: written yet)
    rather than read off the ids, so a search that did not reorder it would break it."""
    token_id: int

    def start(self, layout):
        rows = tf.shape(layout.max_lengths)[0] * layout.copies

        def adjust(logits, ids, step, written):
            last = tf.gather(ids, tf.maximum(step - 1, 0), axis=1)
            written |= (step > 0) & (last == self.token_id)
            banned = written[:, None] & (tf.range(tf.shape(logits)[-1]) == self.token_id)
            return tf.where(banned, NEG_INF, logits), written

        return adjust, tf.zeros([rows], tf.bool)


LIMITS = [4, 2, 3]


@pytest.fixture
def table(rng):
    return rng.normal(scale=2.0, size=(3, 4, 3, 3))


def expected_beam(table, keep, alpha=0.6):
    """Every sentence's hypotheses that `keep` accepts, best first, as 12 beams return them."""
    return [[(score, tokens) for score, tokens in exhaustive(table, sentence, limit, alpha)
             if keep(tokens)][:12] for sentence, limit in enumerate(LIMITS)]


def assert_beams(ids, scores, expected):
    for sentence, hypotheses in enumerate(expected):
        for k, (score, tokens) in enumerate(hypotheses):
            np.testing.assert_allclose(scores[sentence, k], score, rtol=1e-5)
            assert ids[sentence, k].numpy().tolist() == list(tokens) + [0] * (
                max(LIMITS) - len(tokens))
        assert np.all(np.isneginf(scores[sentence, len(hypotheses):]))


@pytest.mark.parametrize("token", [0, 2])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_beam_search_with_a_new_processor_finds_the_best_hypotheses_without_the_token(
        table, token, jit_compile):
    """A beam wide enough for every hypothesis (test_beam_search) returns exactly the
    enumeration's best among those without the token, scored by the model's log-probabilities;
    in a graph and under XLA."""
    step_fn, cache = table_step(table)
    search = tf.function(lambda: kt.beam_search(
        step_fn, cache, LIMITS, beam_size=12, buffer_length=max(LIMITS),
        processors=[NeverEmit(token)]), jit_compile=jit_compile)
    ids, scores = search()
    assert_beams(ids, scores, expected_beam(table, lambda tokens: token not in tokens))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_processors_state_follows_its_hypothesis_through_the_beam(table, jit_compile):
    step_fn, cache = table_step(table)
    search = tf.function(lambda: kt.beam_search(
        step_fn, cache, LIMITS, beam_size=12, buffer_length=max(LIMITS),
        processors=[AtMostOnce(2)]), jit_compile=jit_compile)
    ids, scores = search()
    assert_beams(ids, scores, expected_beam(table, lambda tokens: tokens.count(2) <= 1))


def model_log_prob(table, sentence, row):
    """The model's log-probability of a row's tokens, up to its end (or its limit)."""
    tokens = row[:row.index(EOS) + 1] if EOS in row else row[:LIMITS[sentence]]
    log_probs = log_softmax(table[sentence].astype("float64"))
    previous = [0] + tokens[:-1]
    return sum(log_probs[t, p, y] for t, (p, y) in enumerate(zip(previous, tokens)))


@pytest.mark.parametrize("temperature, top_k", [(0.0, 0), (1.0, 0), (3.0, 2)])
def test_greedy_and_sampling_choose_as_a_model_that_never_wants_the_token(rng, temperature,
                                                                          top_k):
    """Masking the token chooses what a step function giving it no probability would, seed for
    seed; the scores stay the model's own log-probabilities. Greedy rows that never chose it
    anyway come out identical to the unconstrained search."""
    table = rng.normal(scale=2.0, size=(3, 4, 3, 3))
    token = 2
    step_fn, cache = table_step(table)
    masked_step, _ = table_step(np.where(np.arange(3) == token, -np.inf, table))
    settings = dict(temperature=temperature, top_k=top_k, seed=[5, 6])
    ids, scores = kt.sampling_search(step_fn, cache, LIMITS, processors=[NeverEmit(token)],
                                     **settings)
    masked_ids, _ = kt.sampling_search(masked_step, cache, LIMITS, **settings)
    np.testing.assert_array_equal(ids.numpy(), masked_ids.numpy())
    assert token not in ids.numpy()
    for sentence, row in enumerate(ids.numpy().tolist()):
        np.testing.assert_allclose(scores[sentence], model_log_prob(table, sentence, row),
                                   rtol=1e-5)
    if temperature == 0:
        free_ids, free_scores = kt.sampling_search(step_fn, cache, LIMITS)
        untouched = ~np.any(free_ids.numpy() == token, axis=1)
        assert untouched.any() and not untouched.all()
        np.testing.assert_array_equal(ids.numpy()[untouched], free_ids.numpy()[untouched])
        np.testing.assert_array_equal(scores.numpy()[untouched], free_scores.numpy()[untouched])


def most_common_token(ids):
    tokens, counts = np.unique(ids[ids > kt.EOS_ID], return_counts=True)
    return int(tokens[counts.argmax()])


def test_the_decode_functions_take_processors_beside_prefixes(rng):
    model = kt.build_model(kt.hparams.get("transformer_tiny"), 25)
    source = rng.integers(2, 25, size=(4, 6)).astype("int32")
    source[:, -1] = kt.EOS_ID
    free, free_scores = kt.greedy_decode(model, source, max_output_length=8)
    token = most_common_token(free.numpy())
    ids, scores = kt.greedy_decode(model, source, max_output_length=8,
                                   processors=[NeverEmit(token)])
    untouched = ~np.any(free.numpy() == token, axis=1)
    assert token not in ids.numpy()
    np.testing.assert_array_equal(ids.numpy()[untouched], free.numpy()[untouched])
    np.testing.assert_array_equal(scores.numpy()[untouched], free_scores.numpy()[untouched])
    # A prefix (a convenience) comes first; the processor still holds after it.
    prefix = np.array([[3], [4], [0], [5]], "int32")
    for jit_compile in (False, True):
        beams, _ = kt.beam_decode(model, source, max_output_length=8, beam_size=3,
                                  jit_compile=jit_compile, prefix_ids=prefix,
                                  processors=[NeverEmit(token)])
        assert token not in beams.numpy()
        assert beams.numpy()[[0, 1, 3], :, 0].tolist() == [[3] * 3, [4] * 3, [5] * 3]
    sampled, _ = kt.sample_decode(model, source, max_output_length=8, seed=[1, 2],
                                  processors=[NeverEmit(token)])
    assert token not in sampled.numpy()


@pytest.mark.slow
def test_the_translator_applies_its_processors_to_every_search(rng, bible_vocab):
    model = kt.build_model(kt.hparams.get("transformer_tiny"), bible_vocab.vocab_size)
    source = rng.integers(2, bible_vocab.vocab_size, size=(3, 6)).astype("int32")
    source[:, -1] = kt.EOS_ID
    settings = dict(beam_size=2, max_input_length=8, max_output_length=10, max_batch_size=4)
    unconstrained = Translator(model, bible_vocab, **settings)
    free = unconstrained.translate_n_best_ids(source)["ids"]
    token = most_common_token(free.numpy())
    for jit_compile in (False, True):
        translator = Translator(model, bible_vocab, jit_compile=jit_compile,
                                processors=[NeverEmit(token)], **settings)
        assert token not in translator.translate_n_best_ids(source)["ids"].numpy()
    sampled = translator.sample_n_best_ids(source, 2, 1.0, seed=(3, 4))["ids"]
    assert token not in sampled.numpy()
