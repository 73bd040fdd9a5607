"""A request's beam search in length-sorted batches, inside the graph.

One search runs every row until its longest row's limit, over source columns as wide as the
longest input: a request of 100 short sentences and one of 659 tokens searched as one batch
costs 100 rows x 700 steps. kt-translate sorts lines by length and searches `batch_size` at a
time (`data.length_sorted_batches`); a `Translator`'s signatures do the same within one call,
so the Python API and a served SavedModel cost what the command does. A request no larger than
a batch is searched as it was given, in one search.
"""

import tensorflow as tf

from keras_transformer.search.processors import rows_gathered


def search_in_batches(search, source_ids, limits, constraints, *, batch_size, beam_size):
    """`search(source_ids, limits, constraints)` run on the rows of `source_ids` in batches of
    `batch_size`, longest first (ties in input order), each cut to its longest row, as
    `data.length_sorted_batches` makes kt-translate's; results back in input order.

    Args:
        search: (int32 [rows, length], int32 [rows], constraints) -> (ids int32 [rows,
            beam_size, width], scores float32 [rows, beam_size]), e.g. a beam search.
        source_ids: int32 [batch, length], 0-padded.
        limits: int32 [batch], each sentence's output limit.
        constraints: processors holding each sentence to inputs of its own
            (`processors.rows_gathered` gives each batch its rows of them).
        batch_size: the most rows one search runs.
        beam_size: the hypotheses each search returns a sentence.

    Returns:
        (ids int32 [batch, beam_size, width]: each row's padded to the widest batch's width;
        scores float32 [batch, beam_size]).
    """
    rows = tf.shape(source_ids)[0]
    lengths = tf.math.count_nonzero(source_ids, axis=1, dtype=tf.int32)
    # Within one batch the order changes nothing but which rows share it: keep the caller's.
    order = tf.cond(rows > batch_size, lambda: tf.argsort(-lengths, stable=True),
                    lambda: tf.range(rows))

    def search_batch(start, ids, scores):
        batch = order[start:start + batch_size]
        width = tf.maximum(1, tf.reduce_max(tf.gather(lengths, batch)))
        batch_ids, batch_scores = search(
            tf.gather(source_ids, batch)[:, :width], tf.gather(limits, batch),
            [rows_gathered(constraint, batch) for constraint in constraints])
        widest = tf.maximum(tf.shape(ids)[2], tf.shape(batch_ids)[2])
        ids = tf.tensor_scatter_nd_update(_widened(ids, widest), batch[:, None],
                                          _widened(batch_ids, widest))
        scores = tf.tensor_scatter_nd_update(scores, batch[:, None], batch_scores)
        return start + batch_size, ids, scores

    _, ids, scores = tf.while_loop(
        lambda start, *_: start < rows, search_batch,
        (tf.constant(0), tf.zeros([rows, beam_size, 0], tf.int32),
         tf.fill([rows, beam_size], float("-inf"))),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, beam_size, None]),
                          tf.TensorShape([None, beam_size])),
        # One search at a time: each already uses every core, and two would double the memory.
        parallel_iterations=1)
    return ids, scores


def _widened(ids, width):
    """int32 [rows, beam, w] 0-padded to [rows, beam, width] (width >= w)."""
    return tf.pad(ids, [[0, 0], [0, 0], [0, width - tf.shape(ids)[2]]])
