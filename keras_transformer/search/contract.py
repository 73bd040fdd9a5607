"""What the searches over output sequences share (paper section 6.1): the step-function
contract, per-sentence length limits and the while loop's shapes.

Each search (beam.py; sampling.py: greedy decoding and sampling) is a pure function of a
step function and a cache, in the manner of the TF Model Garden's beam search, so it knows
nothing about the model and compiles into one `tf.while_loop` that runs inside `tf.function`,
under `jit_compile=True` and in an exported SavedModel:

    step_fn(ids int32 [rows], step int32 scalar, cache) -> (logits [rows, vocab], cache)

`ids` are the tokens at position `step` (`start_id` at step 0), one per hypothesis; `cache` is any
nest of tensors whose leading dimension is `rows`, returned with the same structure and leading
dimension. A search with several hypotheses a sentence (beam search) gives each sentence
consecutive rows, rows = batch x hypotheses (`tf.repeat`, not `tf.tile`): `steps.cached_step`
relies on it, keeping the encoder's keys and values one row a sentence. The cache's other
dimensions may change from step to step (a cache that grows by a position a step, as
`Transformer.init_cache(cache_length=None)` makes); under `jit_compile=True` they must not
(preallocated buffers written at `step`, as `Transformer.init_cache(cache_length=n)` makes).

A search also takes a list of processors (processors.py): each adjusts a step's logits from the
hypotheses so far (forcing a target prefix, holding a parser to trees), keeping its own state in
the search's loop state beside the cache.

Each sentence has its own length limit `max_lengths[b]` (tokens produced, end of sentence
included): its hypotheses end there whether or not they produced `eos_id`, so a sentence's result
does not depend on the other sentences of its batch.
"""

import functools

import tensorflow as tf

NEG_INF = float("-inf")

# tf.function without autograph, for every decoding function (the searches, scoring, the
# MT-LSTM and the Translator): the searches are written as tf.while_loop, and autograph's
# conversion of the model's code (Keras does not convert it either) was 1.6 s of a 2.4 s first
# trace of greedy decoding on transformer_tiny, in every process. So the code these reach (the
# searches, the step functions, Transformer.encode / init_cache / decode_cached) must not branch
# on tensors in Python: such an `if` fails at trace time.
graph_function = functools.partial(tf.function, autograph=False)


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


# The fields of a search's loop state (a NamedTuple) that hold a row a hypothesis and whose other
# dimensions may change from step to step: the step function's cache, the processors' states.
ROW_FIELDS = ("cache", "processor_states")


def loop_shapes(state):
    """The shape invariants of a search's loop state (a NamedTuple with `ROW_FIELDS`): those
    fields' tensors keep their leading (rows) dimension, every other field its shape."""
    def rows_only(t):
        return t.shape[:1].concatenate([None] * (t.shape.rank - 1))

    return state._replace(**{name: tf.nest.map_structure(
        rows_only if name in ROW_FIELDS else (lambda t: t.shape), getattr(state, name))
        for name in state._fields})


def same_shapes(invariants, state):
    """`state` with the static shapes of `invariants`, which a while loop's state must keep
    (batch reshapes and gathers lose a static batch size)."""
    return tf.nest.map_structure(tf.ensure_shape, state, invariants)


def search_loop(not_done, step, initial):
    """`tf.while_loop` over a search's loop state, a NamedTuple (`loop_shapes`): runs
    state = step(state) while not_done(state), and returns the last state."""
    invariants = loop_shapes(initial)
    # One loop variable, the state itself, so that `not_done` and `step` read it by name.
    (final,) = tf.while_loop(not_done, lambda state: (same_shapes(invariants, step(state)),),
                             (initial,), shape_invariants=(invariants,))
    return final


def write_position(buffer, step, values):
    """buffer [..., length] with position `step` replaced by values [...]; XLA-friendly."""
    return tf.where(tf.range(tf.shape(buffer)[-1]) == step, values[..., None], buffer)


def vocabulary_top_k(values, k):
    """`tf.math.top_k(values, k)` over a vocabulary: the same (values, indices) [rows, k], best
    first, ties to the lower index (for values without NaN), in less time.

    TensorFlow's TopK over a row takes many times the row's maximum on a CPU. So the
    vocabulary is cut into chunks of at most 64 ids: the k best ids lie in the k chunks with the
    highest maxima (a chunk holds one of them iff its maximum is one of them; ties go to the
    lower chunk, as top_k's to the lower index), and top_k runs over those k chunks' ids only.
    Beam 4's [128, 32000] with k 8: 1.3 ms against 7.4 ms a call; beam 21's [672, 32000] with
    k 42: 14.7 against 40.3 ms (`python -m bench.optimisations`, bench/RESULTS.md). A
    vocabulary with no divisor in [16, 64] is padded with -inf to a multiple of 64 (one copy of
    the values; [128, 31999]: 2.5 against 7.8 ms): the padding's ids come after every real id,
    so they lose every tie and are never returned (k <= vocab). With too few chunks to save
    anything, tf.math.top_k runs.

    Args:
        values: float [rows, vocab], vocab static for the chunked path.
        k: a Python int (or, for tf.math.top_k, an int32 scalar) <= vocab.
    """
    vocab = values.shape[-1]
    if not vocab or not isinstance(k, int):
        return tf.math.top_k(values, k)
    chunk = next((c for c in range(64, 15, -1) if vocab % c == 0), 64)
    chunk_count = -(-vocab // chunk)
    if chunk_count < 2 * k:
        return tf.math.top_k(values, k)
    if vocab % chunk:
        values = tf.pad(values, [[0, 0], [0, -vocab % chunk]], constant_values=float("-inf"))
    rows = tf.shape(values)[0]
    chunks = tf.reshape(values, [rows, chunk_count, chunk])
    _, best_chunks = tf.math.top_k(tf.reduce_max(chunks, axis=-1), k)
    # In id order, so top_k over the candidates breaks ties by id as it would over all.
    best_chunks = tf.sort(best_chunks, axis=-1)
    candidates = tf.reshape(tf.gather(chunks, best_chunks, batch_dims=1), [rows, k * chunk])
    top_values, position = tf.math.top_k(candidates, k)
    ids = tf.gather(best_chunks, position // chunk, batch_dims=1) * chunk + position % chunk
    return top_values, ids
