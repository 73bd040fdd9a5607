"""Greedy decoding through the key/value cache, compiled into one TensorFlow graph.

Each step feeds the previous token and reads the cache, so a sentence of n tokens costs n
one-position decoder passes; the encoder runs once and the encoder-decoder keys and values are
computed once (`Transformer.init_cache`).
"""

import tensorflow as tf

from keras_transformer.masks import EOS_ID, PAD_ID, padding_mask


def decode_length(source_ids, extra_length=50, max_length=None):
    """The paper's output bound: the longest real source length + `extra_length` (section 6.1).

    Returns an int32 scalar, capped at `max_length` when given.
    """
    source_lengths = tf.reduce_sum(tf.cast(padding_mask(source_ids), tf.int32), axis=1)
    length = tf.reduce_max(source_lengths) + extra_length
    return length if max_length is None else tf.minimum(length, max_length)


@tf.function(reduce_retracing=True)
def greedy_decode(model, source_ids, max_length):
    """The most probable next token at every step, until end of sentence or `max_length` tokens.

    Args:
        model: a `Transformer`.
        source_ids: int [batch, source_length], 0-padded.
        max_length: scalar int, the most tokens to produce (end of sentence included).

    Returns:
        (ids int32 [batch, max_length], 0 after each sentence's end of sentence; scores float32
        [batch], the sum of the chosen tokens' log-probabilities).
    """
    source_ids = tf.cast(source_ids, tf.int32)
    max_length = tf.cast(max_length, tf.int32)
    batch = tf.shape(source_ids)[0]
    cache = model.init_cache(model.encode(source_ids), padding_mask(source_ids), max_length)

    def step_fn(step, previous, output, finished, scores, cache):
        logits, cache = model.decode(previous[:, None], cache=cache, step=step)
        log_probs = tf.nn.log_softmax(logits[:, -1])
        chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.where(finished, PAD_ID, chosen)
        scores += tf.where(finished, 0.0, tf.reduce_max(log_probs, axis=-1))
        output = tf.tensor_scatter_nd_update(
            output, tf.stack([tf.range(batch), tf.fill([batch], step)], axis=1), chosen)
        return step + 1, chosen, output, finished | (chosen == EOS_ID), scores, cache

    def not_done(step, previous, output, finished, scores, cache):
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(finished)))

    initial = (tf.constant(0), tf.fill([batch], PAD_ID), tf.zeros([batch, max_length], tf.int32),
               tf.zeros([batch], tf.bool), tf.zeros([batch]), cache)
    _, _, output, _, scores, _ = tf.while_loop(not_done, step_fn, initial)
    return output, scores
