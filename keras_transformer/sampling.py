"""Greedy decoding and sampling (temperature, top-k): one hypothesis a sentence, a pure function
of a step function and a cache (the contract is in search.py)."""

import tensorflow as tf

from keras_transformer.search import (
    NEG_INF,
    batch_size,
    limits_and_buffer,
    loop_shapes,
    prefix_forcer,
    same_shapes,
    vocabulary_top_k,
    write_position,
)
from keras_transformer.token_ids import EOS_ID, PAD_ID
from keras_transformer.tree_constraint import tree_masker


def sampling_search(step_fn, cache, max_lengths, temperature=0.0, top_k=0, seed=None,
                    buffer_length=None, eos_id=EOS_ID, start_id=PAD_ID, prefix_ids=None,
                    tree_constraint=None):
    """One hypothesis a sentence, choosing each token greedily or by sampling.

    Args:
        step_fn, cache, max_lengths, buffer_length, eos_id, start_id, prefix_ids,
            tree_constraint: as for `beam_search`.
        temperature: 0 takes the most probable token (greedy decoding); > 0 samples from
            softmax(logits / temperature).
        top_k: with sampling, draw only among the `top_k` most probable tokens (0: all).
        seed: int [2] (or a Python pair) for `tf.random.stateless_categorical`; the same seed
            gives the same samples. None draws one.

    Returns:
        (ids int32 [batch, buffer_length], 0 after each sentence's end; scores float32 [batch],
        the sum of the chosen tokens' log-probabilities under the model, untempered).
    """
    if not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    batch = batch_size(cache)
    max_lengths, buffer_length = limits_and_buffer(max_lengths, batch, buffer_length)
    force = prefix_forcer(prefix_ids, batch)
    mask_trees = tree_masker(tree_constraint, max_lengths)
    if temperature > 0:
        seed = (tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32) if seed is None
                else tf.cast(seed, tf.int32))

    def choose(logits, step):
        if temperature == 0:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        logits = logits / temperature
        if top_k:
            kth_best = vocabulary_top_k(logits, top_k)[0][:, -1:]
            logits = tf.where(logits < kth_best, NEG_INF, logits)
        step_seed = tf.random.experimental.stateless_fold_in(seed, step)
        return tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int32)[:, 0]

    def step_body(*state):
        step, previous, ids, finished, scores, cache = state
        logits, cache = step_fn(previous, step, cache)
        logits = tf.cast(logits, tf.float32)
        # The chosen token's log-probability is its logit - normalizer (beam_search's formula,
        # so that beam 1 scores as greedy decoding does). Masking after the normalizer keeps a
        # forced token's own probability as its score, and leaves sampling nothing else to draw.
        normalizer = tf.reduce_logsumexp(logits, axis=-1)
        if force:
            logits = force(logits, step)
        if mask_trees:
            logits = mask_trees(logits, step, ids)
        # A row the masks left no token (a prefix a tree cannot start with) ends here, -inf.
        # Without masks every row keeps its tokens: no pass over the vocabulary to find out.
        stuck = (tf.reduce_all(logits == NEG_INF, axis=-1) if force or mask_trees
                 else tf.zeros_like(finished))
        chosen = tf.where(finished | stuck, PAD_ID, choose(logits, step))
        chosen_log_prob = tf.where(stuck, NEG_INF,
                                   tf.gather(logits, chosen, batch_dims=1) - normalizer)
        scores += tf.where(finished, 0.0, chosen_log_prob)
        ids = write_position(ids, step, chosen)
        finished |= stuck | (chosen == eos_id) | (step + 1 >= max_lengths)
        return same_shapes(invariants, (step + 1, chosen, ids, finished, scores, cache))

    def not_done(step, previous, ids, finished, scores, cache):
        return (step < buffer_length) & tf.logical_not(tf.reduce_all(finished))

    initial = (tf.constant(0), tf.fill([batch], start_id),
               tf.zeros([batch, buffer_length], tf.int32), max_lengths <= 0,
               tf.zeros([batch]), cache)
    invariants = loop_shapes(initial)
    _, _, ids, _, scores, _ = tf.while_loop(not_done, step_body, initial,
                                            shape_invariants=invariants)
    return ids, scores
