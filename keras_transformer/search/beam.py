"""Beam search with the GNMT length penalty and early termination (paper section 6.1), a pure
function of a step function and a cache (the contract is in contract.py).

Beside GNMT's, it offers Hugging Face `generate`'s ranking ("hf"), so that an imported model
(model_dir/marian.py) translates as it did there: log-probability / length ** alpha, and a
sentence settled (taking no more finished hypotheses) once its worst finished score is at least
its best alive hypothesis's score if that ended now (`generate`'s default early_stopping=False;
a heuristic: with alpha > 0 a longer hypothesis could still have scored higher).
"""

from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.errors import check_one_of
from keras_transformer.hparams import LENGTH_NORMALIZATIONS
from keras_transformer.search.contract import (
    NEG_INF,
    batch_size,
    limits_and_buffer,
    longest,
    search_loop,
    vocabulary_top_k,
    write_position,
)
from keras_transformer.search.processors import Layout, start_processors
from keras_transformer.search.settings import DecodingConfig
from keras_transformer.token_ids import EOS_ID, PAD_ID


class BeamState(NamedTuple):
    """Beam search's loop state (K = beam_size, rows = batch x K, a sentence's consecutive).

    Fields:
        step: int32 scalar, the position being chosen.
        alive_ids: int32 [batch, K, buffer_length], the hypotheses still going, 0 from `step`.
        alive_log_probs: float32 [batch, K], their log-probabilities, best first (-inf: none).
        finished_ids: int32 [batch, K, buffer_length], the best hypotheses ended so far.
        finished_scores: float32 [batch, K], their scores (log-probability / length
            penalty), best first (-inf: none).
        settled: bool [batch], sentences whose search is over. GNMT: their finished
            hypotheses can no longer change (recomputed each step); "hf": they take no more
            finished hypotheses, by generate's rule (once settled, settled for good).
        cache: the step function's cache, a nest of [rows, ...], row k of a sentence the
            state of its alive hypothesis k.
        processor_states: a tuple, one a processor (processors.py), each a nest of
            [rows, ...] rows as the cache's.
    """
    step: tf.Tensor
    alive_ids: tf.Tensor
    alive_log_probs: tf.Tensor
    finished_ids: tf.Tensor
    finished_scores: tf.Tensor
    settled: tf.Tensor
    cache: Any
    processor_states: tuple


def length_penalty(length, alpha, normalization="gnmt"):
    """What a hypothesis's log-probability is divided by, float32: GNMT's length penalty ((5 +
    length) / 6) ** alpha (Wu et al. 2016, eq. 14), or with `normalization` "hf" Hugging Face's
    length ** alpha (the tokens generated, end of sentence included; an empty output counts as
    one token, so that its score is its log-probability, not 0 / 0)."""
    check_one_of("length normalization", normalization, LENGTH_NORMALIZATIONS, ValueError)
    length = tf.cast(length, tf.float32)
    return tf.pow(tf.maximum(length, 1.0) if normalization == "hf" else (5.0 + length) / 6.0,
                  alpha)


def beam_search(step_fn, cache, max_lengths, *, beam_size=4, alpha=0.6, buffer_length=None,
                eos_id=EOS_ID, start_id=PAD_ID, early_stopping=True, processors=(),
                length_normalization="gnmt"):
    """Beam search with a length penalty and early termination (GNMT's, or Hugging Face's).

    Every step extends each of the `beam_size` alive hypotheses of a sentence by every token and
    ranks the extensions by log-probability: those among the best `beam_size` that end
    (`eos_id`, or the sentence's length limit) join the finished hypotheses, scored by
    log-probability / `length_penalty(length, alpha, length_normalization)`, and the best
    `beam_size` that do not end stay alive (taken from the best 2 * beam_size, so the beam stays
    full). The search stops when every sentence is settled (`_settled`): with GNMT's penalty,
    once its `beam_size`-th finished score is at least the best score an alive hypothesis could
    still reach (its log-probability can only fall, and the penalty is largest at the limit), so
    the returned hypotheses are those a search run to the limit would return; with "hf", by
    generate's rule (the module docstring).

    Args:
        step_fn: see the module docstring; called with `rows = batch * beam_size`.
        cache: nest of tensors [batch, ...]; each is repeated `beam_size` times along axis 0.
        max_lengths: int [batch] or scalar, the most tokens a hypothesis may have (the paper:
            input length + 50).
        beam_size: hypotheses kept per sentence (the paper: 4; parsing 21).
        alpha: length penalty exponent >= 0 (the paper: 0.6; parsing 0.3); 0 ranks by
            log-probability alone.
        buffer_length: length of the returned ids, >= max(max_lengths); a Python int makes the
            shapes static, which `jit_compile=True` needs. Default: max(max_lengths).
        eos_id: the token that ends a hypothesis (-1: none does; every hypothesis runs to its
            limit).
        start_id: the token fed at step 0.
        early_stopping: stop once no alive hypothesis can enter the finished ones; False runs to
            the longest limit (same result, for tests and benchmarks).
        processors: a list of decoding processors (processors.py), applied in order to every
            step's logits: e.g. `processors.PrefixForcing` (every hypothesis of a sentence
            starts with its target prefix), `constraints.tree.TreeConstraint` (only well-formed
            trees, for a parser). Their states are reordered with the hypotheses.
        length_normalization: "gnmt" (as above) or "hf": Hugging Face generate's ranking and
            stopping rule (the module docstring), and a hypothesis's last token at its limit
            is end of sentence (forced_eos_token_id), to give an imported model's outputs
            there.

    Returns:
        (ids int32 [batch, beam_size, buffer_length], 0 after each hypothesis's end;
        scores float32 [batch, beam_size], best first; -inf where fewer hypotheses exist, as
        for a sentence whose limit is 0 or whose processors leave no token).
    """
    # Checked as every decoding setting is (a negative alpha would favour endless hypotheses).
    DecodingConfig(beam_size=beam_size, alpha=alpha, length_normalization=length_normalization)
    batch = batch_size(cache)
    max_lengths, buffer_length = limits_and_buffer(max_lengths, batch, buffer_length)
    beams = beam_size
    # Under "hf" the last position is end of sentence's (`_end_at_limit`): processors that plan
    # the tokens to come (a glossary's phrases, a prefix) must finish one token sooner.
    adjust, processor_states = start_processors(processors, Layout(
        max_lengths - 1 if length_normalization == "hf" else max_lengths, beams))
    initial = BeamState(
        step=tf.constant(0),
        alive_ids=tf.zeros([batch, beams, buffer_length], tf.int32),
        # Only the first beam is alive at the start, or the first step would pick one token K
        # times; a sentence with no room (limit <= 0) starts with none.
        alive_log_probs=tf.where(max_lengths[:, None] > 0,
                                 tf.constant([[0.0] + [NEG_INF] * (beams - 1)]), NEG_INF),
        finished_ids=tf.zeros([batch, beams, buffer_length], tf.int32),
        finished_scores=tf.fill([batch, beams], NEG_INF),
        settled=tf.zeros([batch], tf.bool),
        cache=tf.nest.map_structure(lambda t: tf.repeat(t, beams, axis=0), cache),
        processor_states=processor_states)
    step = _beam_step(step_fn, adjust if processors else None, max_lengths, beams=beams,
                      alpha=alpha, eos_id=eos_id, start_id=start_id,
                      normalization=length_normalization)
    last_step = longest(max_lengths)

    def not_done(state):
        within = state.step < last_step
        if not early_stopping:
            return within
        return within & tf.logical_not(tf.reduce_all(state.settled))

    final = search_loop(not_done, step, initial)
    return final.finished_ids, final.finished_scores


def _settled(state, length, max_lengths, alpha, normalization):
    """bool [batch]: the sentences of `state` (after `length` tokens) whose finished hypotheses
    can no longer change. GNMT: the K-th finished score is at least the best an alive
    hypothesis could reach (its log-probability can only fall; the penalty is largest at the
    limit), so the result is that of a search run to the limit. "hf": generate's rule (sticky,
    and settled sentences take no more finished hypotheses)."""
    worst_finished = state.finished_scores[:, -1]  # -inf until K have finished
    if normalization == "gnmt":
        best_reachable = state.alive_log_probs[:, 0] / length_penalty(max_lengths, alpha)
        return worst_finished >= best_reachable  # -inf alive: nothing left
    if_ended_now = state.alive_log_probs[:, 0] / length_penalty(length, alpha, normalization)
    return state.settled | ((worst_finished > NEG_INF) & (if_ended_now <= worst_finished))


def _end_at_limit(logits, normalizer, at_limit, eos_id):
    """Under "hf", the token at a hypothesis's limit (bool at_limit [rows]) is end of sentence,
    at no cost (log-probability 0), as generate's forced_eos_token_id makes it (every Marian
    config sets it); the other rows' logits and normalizers [rows, 1] pass unchanged."""
    if eos_id < 0:
        return logits, normalizer
    only_eos = tf.where(tf.range(tf.shape(logits)[-1]) == eos_id, 0.0, NEG_INF)
    return (tf.where(at_limit[:, None], only_eos[None, :], logits),
            tf.where(at_limit[:, None], 0.0, normalizer))


def _beam_step(step_fn, adjust, max_lengths, *, beams, alpha, eos_id, start_id, normalization):
    """Beam search's loop body: a function BeamState -> BeamState one token on. `adjust`: the
    started processors' (`processors.start_processors`), or None."""
    batch = tf.shape(max_lengths)[0]

    def step(state):
        previous = tf.gather(state.alive_ids, tf.maximum(state.step - 1, 0), axis=2)
        previous = tf.where(state.step == 0, start_id, previous)
        logits, cache = step_fn(tf.reshape(previous, [-1]), state.step, state.cache)
        logits = tf.cast(logits, tf.float32)
        # log-softmax = logits - normalizer: the best tokens of a row are its best logits, so
        # only the candidates are normalized (not the whole vocabulary: 4% of a decode's time).
        normalizer = tf.reduce_logsumexp(logits, axis=-1, keepdims=True)
        processor_states = state.processor_states
        if adjust:
            logits, processor_states = adjust(
                logits, tf.reshape(state.alive_ids, [batch * beams, -1]), state.step,
                processor_states)
        if normalization == "hf":
            logits, normalizer = _end_at_limit(logits, normalizer, state.step + 1 >= tf.repeat(
                max_lengths, beams), eos_id)
        # 2K candidates leave K that do not end even if K of them end; a sentence's best 2K
        # are among the best 2K of each of its rows.
        vocab = logits.shape[-1]  # static where known: XLA needs k at compile time
        row_logits, row_token = vocabulary_top_k(logits, min(2 * beams, vocab) if vocab else
                                                 tf.minimum(2 * beams, tf.shape(logits)[-1]))
        totals = state.alive_log_probs[:, :, None] + tf.reshape(row_logits - normalizer,
                                                                [batch, beams, -1])
        top_log_probs, top_index = tf.math.top_k(tf.reshape(totals, [batch, -1]), k=2 * beams)
        top_beam = top_index // tf.shape(row_token)[-1]
        top_token = tf.gather(tf.reshape(row_token, [batch, -1]), top_index, batch_dims=1)
        top_ids = write_position(tf.gather(state.alive_ids, top_beam, batch_dims=1), state.step,
                                 top_token)
        length = state.step + 1
        ends = (top_token == eos_id) | (length >= max_lengths[:, None])

        alive_log_probs, keep = tf.math.top_k(tf.where(ends, NEG_INF, top_log_probs), k=beams)
        parent = tf.gather(top_beam, keep, batch_dims=1) + tf.range(batch)[:, None] * beams

        def follow_parents(rows):
            return tf.nest.map_structure(lambda t: tf.gather(t, tf.reshape(parent, [-1])), rows)

        # Only the best K candidates may finish (as fairseq and Hugging Face do): an end ranked
        # below K continuations is not what a beam of K would have chosen. So beam 1 follows the
        # greedy path, and with alpha 0 returns exactly what greedy decoding does.
        finishes = ends & (tf.range(2 * beams) < beams)
        if normalization == "hf":
            finishes &= tf.logical_not(state.settled)[:, None]
        ended_scores = tf.where(
            finishes, top_log_probs / length_penalty(length, alpha, normalization), NEG_INF)
        finished_scores, finished = tf.math.top_k(
            tf.concat([state.finished_scores, ended_scores], axis=1), k=beams)
        next_state = BeamState(
            step=length, alive_ids=tf.gather(top_ids, keep, batch_dims=1),
            alive_log_probs=alive_log_probs,
            finished_ids=tf.gather(tf.concat([state.finished_ids, top_ids], axis=1), finished,
                                   batch_dims=1),
            finished_scores=finished_scores, settled=state.settled, cache=follow_parents(cache),
            processor_states=follow_parents(processor_states))
        return next_state._replace(
            settled=_settled(next_state, length, max_lengths, alpha, normalization))

    return step
