"""Checks on what users pass in, with messages that name the offending input."""

import tensorflow as tf
from keras import ops


def assert_true(condition, message, *data):
    """Fails with `message` (and `data`) when the boolean tensor `condition` is False.

    Eager: raises `tf.errors.InvalidArgumentError` at once. In a `tf.function` the check runs as
    part of the graph (automatic control dependencies order it before the values it guards).
    """
    tf.debugging.Assert(condition, [message, *data], summarize=8)


def token_ids(ids, name, vocab_size):
    """Returns `ids` as an int32 [batch, length] tensor, or raises naming `name`.

    Raises:
        TypeError: the ids are not integers.
        ValueError: the ids are not of rank 2.
        tf.errors.InvalidArgumentError: an id lies outside [0, vocab_size).
    """
    ids = ops.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype.name}")
    if ids.shape.rank != 2:
        raise ValueError(f"{name} must have shape [batch, length], got shape {ids.shape}")
    ids = ops.cast(ids, "int32")
    assert_true(
        ops.logical_and(ops.all(ids >= 0), ops.all(ids < vocab_size)),
        f"{name} holds token ids outside [0, {vocab_size}) (the model's vocab_size); "
        f"min and max ids:", ops.min(ids), ops.max(ids))
    return ids
