"""Checks on what users pass in, with messages that name the offending input."""

import keras
import numpy as np
from keras import ops

from keras_transformer.runtime import backend


def guarded(value, condition, message, *data):
    """Returns `value`, failing with `message` (and `data`) when bool tensor `condition` is False.

    TensorFlow, eager: raises `tf.errors.InvalidArgumentError` at once. In a graph, whatever
    consumes the returned tensor runs after the check, so a bad value cannot reach an op that
    would fail first with a less helpful message (a gather's "indices[3] = 40 is not in [0,
    40)"). JAX: a concrete condition raises ValueError at once; inside `jax.jit` or `jax.grad`
    the condition is not known until the program runs and nothing is checked (a JAX program
    cannot stop itself; `ops.take` there gives NaN rows for ids past the table, silently).
    """
    if backend.is_tensorflow():
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.Assert(condition, [message, *data],
                                                          summarize=8)]):
            return tf.identity(value)
    if not backend.is_traced(condition) and not bool(condition):
        raise ValueError(" ".join([message, *(str(np.asarray(item)) for item in data)]))
    return value


def token_ids(ids, name, vocab_size):
    """Returns `ids` as an int32 [batch, length] tensor, or raises naming `name`.

    Raises:
        TypeError: the ids are not integers.
        ValueError: the ids are not of rank 2 (or, under JAX, an id lies outside [0,
            vocab_size)).
        tf.errors.InvalidArgumentError: an id lies outside [0, vocab_size) (TensorFlow).
    """
    ids = ops.convert_to_tensor(ids)
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if "int" not in dtype:
        raise TypeError(f"{name} must hold integer token ids, got {dtype}")
    if len(ids.shape) != 2:
        raise ValueError(f"{name} must have shape [batch, length], got shape {ids.shape}")
    ids = ops.cast(ids, "int32")
    return guarded(
        ids, ops.logical_and(ops.all(ids >= 0), ops.all(ids < vocab_size)),
        f"{name} holds token ids outside [0, {vocab_size}) (the model's vocab_size); "
        f"min and max ids:", ops.min(ids), ops.max(ids))
