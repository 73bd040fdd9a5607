"""The searches as pure functions, on step functions whose every sequence can be enumerated."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_transformer.search.beam import beam_search, length_penalty
from keras_transformer.search.contract import vocabulary_top_k
from keras_transformer.search.processors import PrefixForcing
from keras_transformer.search.sampling import sampling_search

EOS = 1
VOCAB = 3  # 0 (an ordinary token here), end of sentence, 2


def table_step(table):
    """A step function whose logits are table[sentence, step, previous token] (float [B, L, V, V]).

    The cache holds each row's sentence index, so it follows the hypotheses through reordering.
    """
    table = tf.constant(table, tf.float32)

    def step_fn(ids, step, cache):
        index = tf.stack([cache["sentence"], tf.fill(tf.shape(ids), step), ids], axis=1)
        return tf.gather_nd(table, index), cache

    return step_fn, {"sentence": tf.range(table.shape[0])}


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def exhaustive(table, sentence, limit, alpha, start=0, *, vocab=VOCAB, keeps=None,
               bonuses=None):
    """Every hypothesis of one sentence with its penalized score, best first.

    For a constrained search: only those `keeps(tokens)` accepts, each token's log-probability
    plus `bonuses(log_probs, previous, tokens)[t]` (what a processor adds to it)."""
    log_probs = log_softmax(table[sentence].astype("float64"))
    hypotheses = []
    for length in range(1, limit + 1):
        for tokens in itertools.product(range(vocab), repeat=length):
            if EOS in tokens[:-1] or (length < limit and tokens[-1] != EOS):
                continue  # ended early, or neither ended nor reached the limit
            if keeps is not None and not keeps(tokens):
                continue
            previous = (start,) + tokens[:-1]
            added = bonuses(log_probs, previous, tokens) if bonuses else [0.0] * length
            total = sum(log_probs[t, p, y] + bonus
                        for t, (p, y, bonus) in enumerate(zip(previous, tokens, added)))
            hypotheses.append((total / ((5 + length) / 6) ** alpha, tokens))
    return sorted(hypotheses, key=lambda pair: -pair[0])


@pytest.fixture
def table(rng):
    return rng.normal(scale=2.0, size=(3, 4, VOCAB, VOCAB))


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_beam_wide_enough_finds_the_exhaustive_best_hypotheses(table, alpha):
    limits = [4, 2, 3]
    step_fn, cache = table_step(table)
    # 12 beams hold every prefix and every candidate of a step up to the last one (3 tokens,
    # limits <= 4); then only length ranks the candidates, which keeps the search exact.
    ids, scores = beam_search(step_fn, cache, limits, beam_size=12, alpha=alpha)
    for sentence, limit in enumerate(limits):
        expected = exhaustive(table, sentence, limit, alpha)[:12]
        for k, (score, tokens) in enumerate(expected):
            np.testing.assert_allclose(scores[sentence, k], score, rtol=1e-5)
            padded = list(tokens) + [0] * (max(limits) - len(tokens))
            assert ids[sentence, k].numpy().tolist() == padded


def test_the_length_penalty_is_gnmts():
    np.testing.assert_allclose(length_penalty(10, 0.6), (15 / 6) ** 0.6, rtol=1e-6)
    np.testing.assert_allclose(length_penalty([1, 7], 0.0), [1.0, 1.0])


def test_a_narrow_beam_keeps_the_best_it_found_with_exact_scores(table):
    step_fn, cache = table_step(table)
    ids, scores = beam_search(step_fn, cache, [4, 4, 4], beam_size=2, alpha=0.6)
    for sentence in range(3):
        every = dict((tokens, score) for score, tokens in exhaustive(table, sentence, 4, 0.6))
        for k in range(2):
            tokens = tuple(t for t in ids[sentence, k].numpy())
            end = tokens.index(EOS) + 1 if EOS in tokens else 4
            np.testing.assert_allclose(scores[sentence, k], every[tokens[:end]], rtol=1e-5)
        assert scores[sentence, 0] >= scores[sentence, 1]


def test_early_stopping_returns_what_running_to_the_limit_returns(rng):
    # End of sentence is likely at every step, so every sentence settles long before 30.
    table = rng.normal(size=(4, 30, VOCAB, VOCAB))
    table[..., EOS] += 3.0
    step_fn, cache = table_step(table)
    steps = []

    def counting_step(ids, step, cache):
        steps.append(int(step))  # eager: the loop body runs in Python
        return step_fn(ids, step, cache)

    early = beam_search(counting_step, cache, 30, beam_size=2, alpha=0.6)
    full = beam_search(step_fn, cache, 30, beam_size=2, alpha=0.6, early_stopping=False)
    for a, b in zip(early, full):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(steps) < 15


def greedy_lengths(ids, limits):
    return [list(row).index(EOS) + 1 if EOS in row else limit
            for row, limit in zip(ids.numpy().tolist(), limits)]


def test_beam_one_without_length_penalty_is_greedy(rng):
    # Many steps and a likely end of sentence: many chances for a second-ranked end to enter.
    table = rng.normal(size=(16, 12, VOCAB, VOCAB))
    table[..., EOS] += 1.0
    step_fn, cache = table_step(table)
    beam_ids, beam_scores = beam_search(step_fn, cache, 12, beam_size=1, alpha=0.0)
    greedy_ids, greedy_log_probs = sampling_search(step_fn, cache, 12)
    np.testing.assert_array_equal(beam_ids[:, 0].numpy(), greedy_ids.numpy())
    np.testing.assert_allclose(beam_scores[:, 0], greedy_log_probs, rtol=1e-6)
    # With a length penalty, beam 1 goes on looking past greedy's end and keeps the better.
    _, penalized = beam_search(step_fn, cache, 12, beam_size=1, alpha=0.6)
    greedy_scores = greedy_log_probs / length_penalty(greedy_lengths(greedy_ids, [12] * 16), 0.6)
    assert np.all(penalized[:, 0] >= greedy_scores - 1e-6)


def test_xla_gives_the_same_hypotheses(table):
    step_fn, cache = table_step(table)
    search = tf.function(jit_compile=True)(
        lambda: beam_search(step_fn, cache, [4, 2, 3], beam_size=3, buffer_length=6))
    xla_ids, xla_scores = search()
    ids, scores = beam_search(step_fn, cache, [4, 2, 3], beam_size=3)
    np.testing.assert_array_equal(xla_ids.numpy()[:, :, :4], ids.numpy())
    assert not xla_ids.numpy()[:, :, 4:].any()
    np.testing.assert_allclose(xla_scores, scores, rtol=1e-6)


def test_an_empty_batch_gives_empty_results():
    step_fn, cache = table_step(np.zeros((0, 4, VOCAB, VOCAB)))
    ids, scores = beam_search(step_fn, cache, tf.zeros([0], tf.int32), beam_size=4)
    assert ids.shape == (0, 4, 0) and scores.shape == (0, 4)
    ids, scores = sampling_search(step_fn, cache, tf.zeros([0], tf.int32))
    assert ids.shape == (0, 0) and scores.shape == (0,)


def test_no_end_of_sentence_runs_every_hypothesis_to_its_limit(table):
    step_fn, cache = table_step(table)
    ids, scores = beam_search(step_fn, cache, [4, 2, 3], beam_size=2, alpha=0.6, eos_id=-1)
    for sentence, limit in enumerate([4, 2, 3]):
        log_probs = log_softmax(table[sentence].astype("float64"))
        for k in range(2):
            tokens = ids[sentence, k].numpy()[:limit]
            previous = np.concatenate([[0], tokens[:-1]])
            total = log_probs[np.arange(limit), previous, tokens].sum()  # all `limit` tokens
            np.testing.assert_allclose(scores[sentence, k], total / ((5 + limit) / 6) ** 0.6,
                                       rtol=1e-5)


def test_a_sentence_without_room_has_no_hypothesis_alone_or_batched(table):
    step_fn, cache = table_step(table[:2])
    ids, scores = beam_search(step_fn, cache, [0, 3], beam_size=2)
    assert np.all(np.isneginf(scores[0])) and not ids.numpy()[0].any()
    step_fn, cache = table_step(table[:1])
    alone_ids, alone_scores = beam_search(step_fn, cache, [0], beam_size=2)
    assert np.all(np.isneginf(alone_scores)) and alone_ids.shape == (1, 2, 0)


def test_sampling_is_reproducible_and_draws_from_the_top_k(rng):
    table = rng.normal(size=(64, 6, VOCAB, VOCAB))
    step_fn, cache = table_step(table)
    first = sampling_search(step_fn, cache, 6, temperature=1.0, seed=[3, 4])
    again = sampling_search(step_fn, cache, 6, temperature=1.0, seed=[3, 4])
    other = sampling_search(step_fn, cache, 6, temperature=1.0, seed=[5, 6])
    np.testing.assert_array_equal(first[0], again[0])
    assert not np.array_equal(first[0], other[0])
    top1 = sampling_search(step_fn, cache, 6, temperature=1.0, top_k=1, seed=[3, 4])
    np.testing.assert_array_equal(top1[0], sampling_search(step_fn, cache, 6)[0])
    # top_k=2 never picks a sentence's least likely token at any step it takes.
    ids = sampling_search(step_fn, cache, 6, temperature=5.0, top_k=2, seed=[1, 2])[0].numpy()
    for sentence, row in enumerate(ids):
        previous = 0
        for step, token in enumerate(row):
            if step and row[step - 1] == EOS:
                break
            assert token != table[sentence, step, previous].argmin()
            previous = token


@pytest.mark.parametrize("search, bad, message", [
    (beam_search, dict(beam_size=0), "beam_size"), (beam_search, dict(alpha=-0.1), "alpha"),
    (beam_search, dict(alpha=float("nan")), "alpha"),
    (sampling_search, dict(temperature=float("inf")), "temperature"),
    (sampling_search, dict(temperature=-1.0), "temperature"),
    (sampling_search, dict(temperature=1.0, top_k=-1), "top_k")])
def test_bad_arguments_are_named(table, search, bad, message):
    step_fn, cache = table_step(table)
    with pytest.raises(ValueError, match=message):
        search(step_fn, cache, 4, **bad)


def test_static_batch_shapes_stay_static(table):
    step_fn, cache = table_step(table[:1])
    search = tf.function(lambda: beam_search(step_fn, cache, [4], beam_size=2))
    assert search()[0].shape == (1, 2, 4)
    greedy = tf.function(lambda: sampling_search(step_fn, cache, [4]))
    assert greedy()[0].shape == (1, 4)


# Target prefixes: token 2 is the only one a prefix can force here (0 pads a prefix, 1 ends).
PREFIXES = [[2, 2], [0, 0], [2, 0]]  # two tokens, none, one


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_prefix_forces_the_first_tokens_and_the_search_goes_on_exactly(table, alpha):
    limits = [4, 2, 3]
    step_fn, cache = table_step(table)
    ids, scores = beam_search(step_fn, cache, limits, beam_size=12, alpha=alpha,
                              processors=[PrefixForcing(PREFIXES)])
    for sentence, (limit, prefix) in enumerate(zip(limits, PREFIXES)):
        prefix = tuple(token for token in prefix if token)
        # The hypotheses a search with its first steps forced can reach, scored with the
        # prefix's own log-probabilities.
        expected = [(score, tokens) for score, tokens in exhaustive(table, sentence, limit, alpha)
                    if tokens[:len(prefix)] == prefix]
        assert expected and len(expected) <= 12
        for k, (score, tokens) in enumerate(expected):
            np.testing.assert_allclose(scores[sentence, k], score, rtol=1e-5)
            padded = list(tokens) + [0] * (max(limits) - len(tokens))
            assert ids[sentence, k].numpy().tolist() == padded
        assert np.all(np.isneginf(scores[sentence, len(expected):]))


def test_greedy_and_sampling_follow_a_prefix_and_score_it(table):
    limits = [4, 2, 3]
    step_fn, cache = table_step(table)
    for temperature, seed in ((0.0, None), (1.0, [7, 8])):
        ids, scores = sampling_search(step_fn, cache, limits, temperature=temperature,
                                      seed=seed, processors=[PrefixForcing(PREFIXES)])
        for sentence, prefix in enumerate(PREFIXES):
            prefix = [token for token in prefix if token]
            row = ids[sentence].numpy().tolist()
            assert row[:len(prefix)] == prefix
            tokens = row[:row.index(EOS) + 1] if EOS in row else row[:limits[sentence]]
            log_probs = log_softmax(table[sentence].astype("float64"))
            previous = [0] + tokens[:-1]
            expected = sum(log_probs[t, p, y] for t, (p, y) in enumerate(zip(previous, tokens)))
            np.testing.assert_allclose(scores[sentence], expected, rtol=1e-5)
    # Greedy after the prefix: the most probable token at each step.
    ids, _ = sampling_search(*table_step(table[:1]), [4], processors=[PrefixForcing([[2]])])
    assert ids[0, 1] == table[0, 1, 2].argmax()


def test_a_prefix_needs_a_row_per_sentence(table):
    step_fn, cache = table_step(table)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one row per sentence"):
        beam_search(step_fn, cache, 4, beam_size=2, processors=[PrefixForcing([[2]])])


@settings(max_examples=40)
@given(st.sampled_from([1000, 2048, 3200, 6400, 1301, 4099]), st.integers(1, 10),
       st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.5, 0.999]), st.booleans(),
       st.booleans())
def test_vocabulary_top_k_is_top_k(vocab, k, seed, masked, few_values, jit_compile):
    """The chunked top-k (every case here has at least 2k chunks, so it is the path taken; 1301
    and 4099 are primes, padded to whole chunks) gives tf.math.top_k's values and ids, ties
    (many equal values, rows mostly or wholly -inf as the tree constraint leaves them) to the
    lower id included, as beam_decode runs it: in a graph and under XLA."""
    rng = np.random.default_rng(seed)
    values = (rng.integers(0, 4, size=(5, vocab)) if few_values
              else rng.normal(size=(5, vocab))).astype("float32")
    values[rng.random(values.shape) < masked] = -np.inf
    values[0] = -np.inf
    expected = tf.math.top_k(values, k)
    got = tf.function(vocabulary_top_k, jit_compile=jit_compile)(tf.constant(values), k)
    np.testing.assert_array_equal(got[0].numpy(), expected.values.numpy())
    np.testing.assert_array_equal(got[1].numpy(), expected.indices.numpy())


def generate_beam_search(table, sentence, limit, beams, alpha):
    """transformers 5.23's `_beam_search` for one sentence, transcribed (generate's defaults:
    early_stopping=False, forced end of sentence at the limit): (score, ids) best first."""
    running, finished, settled = [(0.0, [])] + [(-1e9, [])] * (beams - 1), [], False
    for step in range(limit):
        length = step + 1
        candidates = []
        for score, ids in running:
            log_probs = log_softmax(table[sentence, step, ids[-1] if ids else 0])
            if length == limit:  # ForcedEOSTokenLogitsProcessor
                log_probs = np.where(np.arange(VOCAB) == EOS, 0.0, -np.inf)
            candidates += [(score + log_probs[t], ids + [t]) for t in range(VOCAB)]
        top = sorted(candidates, key=lambda c: -c[0])[:2 * beams]
        ends = [ids[-1] == EOS or length >= limit for _, ids in top]
        if not settled:  # only the best `beams` candidates may finish
            finished += [(score / length ** alpha, ids) for rank, ((score, ids), end)
                         in enumerate(zip(top, ends)) if end and rank < beams]
            finished = sorted(finished, key=lambda c: -c[0])[:beams]
        running = ([c for c, end in zip(top, ends) if not end] + [(-1e9, [])] * beams)[:beams]
        settled |= len(finished) == beams and running[0][0] / length ** alpha <= finished[-1][0]
        if settled:
            break
    return finished


@pytest.mark.parametrize("beams", [1, 2, 3])
def test_hf_normalization_is_generates_beam_search(rng, beams):
    """length_normalization "hf" against the transcription above on random tables: the same
    finished hypotheses and scores, end of sentence favoured so that they end at every length,
    some settled by generate's heuristic before a better one could finish."""
    sentences, limit, alpha = 40, 6, 1.0
    table = rng.normal(size=(sentences, limit, VOCAB, VOCAB)) * 2.0
    table[..., EOS] -= 1.0
    ids, scores = beam_search(*table_step(table), limit, beam_size=beams, alpha=alpha,
                              eos_id=EOS, length_normalization="hf")
    for sentence in range(sentences):
        expected = generate_beam_search(table, sentence, limit, beams, alpha)
        for k, (score, hypothesis) in enumerate(expected):
            np.testing.assert_allclose(scores[sentence, k], score, rtol=1e-5)
            assert list(ids[sentence, k, :len(hypothesis)]) == hypothesis
            assert not ids[sentence, k, len(hypothesis):].numpy().any()
        assert np.all(np.isneginf(scores[sentence, len(expected):]))
