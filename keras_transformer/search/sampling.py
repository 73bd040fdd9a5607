"""Greedy decoding and sampling (temperature, top-k): one hypothesis a sentence, a pure function
of a step function and a cache (the contract is in contract.py)."""

from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.search.contract import (
    NEG_INF,
    batch_size,
    limits_and_buffer,
    search_loop,
    vocabulary_top_k,
    write_position,
)
from keras_transformer.search.processors import Layout, start_processors
from keras_transformer.token_ids import EOS_ID, PAD_ID


class SamplingState(NamedTuple):
    """The loop state of `sampling_search` (one row a sentence).

    Fields:
        step: int32 scalar, the position being chosen.
        previous: int32 [batch], the token each row chose last (`start_id` before step 0).
        ids: int32 [batch, buffer_length], the tokens chosen, 0 from `step` and after an end.
        finished: bool [batch], whether a row has ended.
        scores: float32 [batch], the sum of the chosen tokens' log-probabilities.
        cache: the step function's cache, a nest of [batch, ...].
        processor_states: a tuple, one a processor (processors.py), each a nest of [batch, ...].
    """
    step: tf.Tensor
    previous: tf.Tensor
    ids: tf.Tensor
    finished: tf.Tensor
    scores: tf.Tensor
    cache: Any
    processor_states: tuple


def sampling_search(step_fn, cache, max_lengths, *, temperature=0.0, top_k=0, seed=None,
                    buffer_length=None, eos_id=EOS_ID, start_id=PAD_ID, processors=()):
    """One hypothesis a sentence, choosing each token greedily or by sampling.

    Args:
        step_fn, cache, max_lengths, buffer_length, eos_id, start_id, processors: as for
            `beam_search`.
        temperature: 0 takes the most probable token (greedy decoding); > 0 samples from
            softmax(logits / temperature). A float32 scalar tensor samples at its value (> 0):
            a traced search then serves every temperature.
        top_k: with sampling, draw only among the `top_k` most probable tokens (0: all).
        seed: int [2] (or a Python pair) for `tf.random.stateless_categorical`; the same seed
            gives the same samples. None draws one.

    Returns:
        (ids int32 [batch, buffer_length], 0 after each sentence's end; scores float32 [batch],
        the sum of the chosen tokens' log-probabilities under the model, untempered; -inf for a
        sentence its processors left no token).
    """
    if not tf.is_tensor(temperature):
        check_temperature(temperature)
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    batch = batch_size(cache)
    max_lengths, buffer_length = limits_and_buffer(max_lengths, batch, buffer_length)
    adjust, processor_states = start_processors(processors, Layout(max_lengths, 1))
    choose = _chooser(temperature, top_k, seed)

    def step(state):
        logits, cache = step_fn(state.previous, state.step, state.cache)
        logits = tf.cast(logits, tf.float32)
        # The chosen token's log-probability is its logit - normalizer (beam_search's formula,
        # so that beam 1 scores as greedy decoding does). Adjusting after the normalizer keeps
        # a forced token's own probability as its score, and leaves sampling nothing else to
        # draw.
        normalizer = tf.reduce_logsumexp(logits, axis=-1)
        processor_states = state.processor_states
        if processors:
            logits, processor_states = adjust(logits, state.ids, state.step, processor_states)
        # A row the processors left no token (a prefix a tree cannot start with) ends here,
        # -inf. Without processors every row keeps its tokens: no pass over the vocabulary.
        stuck = (tf.reduce_all(logits == NEG_INF, axis=-1) if processors
                 else tf.zeros_like(state.finished))
        chosen = tf.where(state.finished | stuck, PAD_ID, choose(logits, state.step))
        chosen_log_prob = tf.where(stuck, NEG_INF,
                                   tf.gather(logits, chosen, batch_dims=1) - normalizer)
        return SamplingState(
            step=state.step + 1, previous=chosen,
            ids=write_position(state.ids, state.step, chosen),
            finished=state.finished | stuck | (chosen == eos_id)
            | (state.step + 1 >= max_lengths),
            scores=state.scores + tf.where(state.finished, 0.0, chosen_log_prob),
            cache=cache, processor_states=processor_states)

    def not_done(state):
        return (state.step < buffer_length) & tf.logical_not(tf.reduce_all(state.finished))

    initial = SamplingState(
        step=tf.constant(0), previous=tf.fill([batch], start_id),
        ids=tf.zeros([batch, buffer_length], tf.int32), finished=max_lengths <= 0,
        scores=tf.zeros([batch]), cache=cache, processor_states=processor_states)
    final = search_loop(not_done, step, initial)
    return final.ids, final.scores


def check_temperature(temperature):
    """Raises ValueError unless `temperature` (a Python number) is finite and >= 0."""
    if not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")


def _chooser(temperature, top_k, seed):
    """A function (logits float32 [batch, vocab], step) -> int32 [batch], the tokens chosen:
    the most probable at temperature 0, else drawn (see `sampling_search`)."""
    greedy = not tf.is_tensor(temperature) and temperature == 0
    if not greedy:
        seed = (tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32) if seed is None
                else tf.cast(seed, tf.int32))

    def choose(logits, step):
        if greedy:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        logits = logits / temperature
        if top_k:
            # Over a shortlist's candidates (a width known only at run time) there may be
            # fewer than top_k: then all of them.
            k = top_k if logits.shape[-1] else tf.minimum(top_k, tf.shape(logits)[-1])
            kth_best = vocabulary_top_k(logits, k)[0][:, -1:]
            logits = tf.where(logits < kth_best, NEG_INF, logits)
        step_seed = tf.random.experimental.stateless_fold_in(seed, step)
        return tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int32)[:, 0]

    return choose
