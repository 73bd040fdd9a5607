"""What the searches over output sequences share (paper section 6.1): the step-function
contract, per-sentence length limits and the while loop's shapes.

Each search (beam_search.py; sampling.py: greedy decoding and sampling) is a pure function of a
step function and a cache, in the manner of the TF Model Garden's beam search, so it knows
nothing about the model and compiles into one `tf.while_loop` that runs inside `tf.function`,
under `jit_compile=True` and in an exported SavedModel:

    step_fn(ids int32 [rows], step int32 scalar, cache) -> (logits [rows, vocab], cache)

`ids` are the tokens at position `step` (`start_id` at step 0), one per hypothesis; `cache` is any
nest of tensors whose leading dimension is `rows`, returned with the same structure and leading
dimension. A search with several hypotheses a sentence (beam search) gives each sentence
consecutive rows, rows = batch x hypotheses (`tf.repeat`, not `tf.tile`): `decoding.cached_step`
relies on it, keeping the encoder's keys and values one row a sentence. The cache's other
dimensions may change from step to step (a cache that grows by a position a step, as
`Transformer.init_cache(max_length=None)` makes); under `jit_compile=True` they must not
(preallocated buffers written at `step`, as `Transformer.init_cache(max_length=n)` makes).

A search may be given a target prefix per sentence, `prefix_ids` int32 [batch, prefix_length]
(subwords, 0-padded): its first tokens are forced to the prefix's, each still scored by the
model's log-probability, and the search goes on from there (CTranslate2's `target_prefix`,
fairseq's `--prefix-size`). A parser's search may be held to well-formed trees over each sentence
(`tree_constraint.TreeConstraint`).

Each sentence has its own length limit `max_lengths[b]` (tokens produced, end of sentence
included): its hypotheses end there whether or not they produced `eos_id`, so a sentence's result
does not depend on the other sentences of its batch.
"""

import tensorflow as tf

from keras_transformer.token_ids import PAD_ID

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


def prefix_forcer(prefix_ids, batch, copies=1):
    """A function (logits [rows, vocab], step) -> logits with every token but the
    prefix's at `step` set to -inf, in the rows whose prefix reaches `step`; None without a
    prefix.

    Args:
        prefix_ids: int [batch, prefix_length], 0-padded, or None.
        batch: sentences (int32 scalar), to check prefix_ids against.
        copies: rows a sentence has (beam search: beam_size), consecutive.
    """
    if prefix_ids is None:
        return None
    prefix_ids = tf.cast(prefix_ids, tf.int32)
    check = tf.debugging.assert_equal(
        tf.shape(prefix_ids)[0], batch, message="prefix_ids needs one row per sentence")
    with tf.control_dependencies([check]):
        prefix_ids = tf.repeat(prefix_ids, copies, axis=0)
    # A column of padding stands for an empty prefix, so a step can always read one.
    prefix_ids = tf.pad(prefix_ids, [[0, 0], [0, 1]])
    last = tf.shape(prefix_ids)[1] - 1

    def force(logits, step):
        forced = tf.gather(prefix_ids, tf.minimum(step, last), axis=1)
        other = tf.range(tf.shape(logits)[-1])[None, :] != forced[:, None]
        return tf.where((forced != PAD_ID)[:, None] & other, NEG_INF, logits)

    return force
