"""What the searches over output sequences share (paper section 6.1): the step-function
contract, per-sentence length limits and the while loop's shapes.

Each search (beam_search.py; sampling.py: greedy decoding and sampling) is a pure function of a
step function and a cache, in the manner of the TF Model Garden's beam search, so it knows
nothing about the model and compiles into one `tf.while_loop` that runs inside `tf.function`,
under `jit_compile=True` and in an exported SavedModel:

    step_fn(ids int32 [rows], step int32 scalar, cache) -> (logits [rows, vocab], cache)

`ids` are the tokens at position `step` (`start_id` at step 0), one per hypothesis; `cache` is any
nest of tensors whose leading dimension is `rows`, returned with the same structure and leading
dimension. Its other dimensions may change from step to step (a cache that grows by a position a
step, as `Transformer.init_cache(max_length=None)` makes); under `jit_compile=True` they must not
(preallocated buffers written at `step`, as `Transformer.init_cache(max_length=n)` makes).

Each sentence has its own length limit `max_lengths[b]` (tokens produced, end of sentence
included): its hypotheses end there whether or not they produced `eos_id`, so a sentence's result
does not depend on the other sentences of its batch.
"""

import tensorflow as tf

NEG_INF = float("-inf")


def longest(lengths):
    """The largest of int32 lengths [batch]; 0 for an empty batch (reduce_max would give
    int32's minimum)."""
    return tf.reduce_max(tf.concat([lengths, [0]], axis=0))


def limits_and_buffer(max_lengths, batch_size, buffer_length):
    """Per-sentence limits int32 [batch] and the buffer length (int32 scalar or Python int)."""
    max_lengths = tf.cast(max_lengths, tf.int32)
    if max_lengths.shape.rank == 0:
        max_lengths = tf.fill([batch_size], max_lengths)
    if buffer_length is None:
        buffer_length = longest(max_lengths)
    return tf.minimum(max_lengths, buffer_length), buffer_length


def batch_size(cache):
    return tf.shape(tf.nest.flatten(cache)[0])[0]


def loop_shapes(state):
    """The shape invariants of a search's loop state, whose last element is the cache: the
    cache's tensors keep their leading (rows) dimension, the rest keep their shapes."""
    *rest, cache = state
    return (*(t.shape for t in rest), tf.nest.map_structure(
        lambda t: t.shape[:1].concatenate([None] * (t.shape.rank - 1)), cache))


def same_shapes(invariants, state):
    """`state` with the static shapes of `invariants`, which a while loop's state must keep
    (batch reshapes and gathers lose a static batch size)."""
    return tf.nest.map_structure(tf.ensure_shape, state, invariants)


def write_position(buffer, step, values):
    """buffer [..., length] with position `step` replaced by values [...]; XLA-friendly."""
    return tf.where(tf.range(tf.shape(buffer)[-1]) == step, values[..., None], buffer)
