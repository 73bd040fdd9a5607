"""Checks on what users pass in, with messages that name the offending input."""

import tensorflow as tf
from keras import ops


def guarded(value, condition, message, *data):
    """Returns `value`, failing with `message` (and `data`) when bool tensor `condition` is False.

    Eager: raises `tf.errors.InvalidArgumentError` at once. In a graph, whatever consumes the
    returned tensor runs after the check, so a bad value cannot reach an op that would fail first
    with a less helpful message (a gather's "indices[3] = 40 is not in [0, 40)").
    """
    with tf.control_dependencies([tf.debugging.Assert(condition, [message, *data], summarize=8)]):
        return tf.identity(value)


def token_ids(ids, name, vocab_size):
    """Returns `ids` as an int32 [batch, length] tensor, or raises naming `name`.

    Raises:
        TypeError: the ids are not integers.
        ValueError: the ids are not of rank 2.
        tf.errors.InvalidArgumentError: an id lies outside [0, vocab_size).
    """
    ids = ops.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(f"{name} must hold integer token ids, got {ids.dtype.name}")
    if ids.shape.rank != 2:
        raise ValueError(f"{name} must have shape [batch, length], got shape {ids.shape}")
    ids = ops.cast(ids, "int32")
    return guarded(
        ids, ops.logical_and(ops.all(ids >= 0), ops.all(ids < vocab_size)),
        f"{name} holds token ids outside [0, {vocab_size}) (the model's vocab_size); "
        f"min and max ids:", ops.min(ids), ops.max(ids))
