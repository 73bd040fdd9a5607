"""A `Translator`'s beam search under XLA, on inputs padded to a few shapes.

XLA compiles a program for each input shape, so inputs are padded to a few: rows to a power of
two (or max_batch_size), columns to one of `lengths` (the length buckets of `kt-train
--jit_compile`), at most len(lengths) x (log2(max_batch_size) + 1) programs. Outputs are the
same, with more padding.
"""

import tensorflow as tf

from keras_transformer.data import batching
from keras_transformer.search.processors import PrefixForcing, rows_added


class XlaShapes:
    """The padded shapes of a translator's XLA searches.

    Args:
        max_input_length: the longest input (the last column bucket holds it).
        max_batch_size: the most rows (the last row bucket).

    Attributes:
        lengths: the column widths inputs are padded to, ascending.
        rows: the row counts inputs are padded to, ascending.
    """

    def __init__(self, max_input_length, max_batch_size):
        self.lengths = batching.bucket_widths(batching.bucket_boundaries(
            max_input_length, step=batching.XLA_BUCKET_GROWTH))
        self.rows = sorted({min(2 ** k, max_batch_size)
                            for k in range(max_batch_size.bit_length() + 1)})

    def beam_decode(self, search, source_ids, limits, constraints, output_width):
        """`search(source_ids, limits, constraints)` (a beam search compiled with XLA) on the
        inputs padded to one of the shapes: added rows are all padding, limit 1 (empty
        translations), held to nothing, and cut off again; `output_width(padded_length)` is
        the output buffer's width, which a prefix is padded to.

        Returns:
            what `search` returns, its rows cut back to `source_ids`'.
        """
        rows, length = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
        missing_rows = tf.gather(self.rows, tf.searchsorted(self.rows, [rows])[0]) - rows
        limits = tf.pad(limits, [[0, missing_rows]], constant_values=1)
        constraints = [rows_added(constraint, missing_rows) for constraint in constraints]

        def decode_at(padded_length):
            def decode():
                ids = tf.pad(source_ids, [[0, missing_rows], [0, padded_length - length]])
                # A prefix as wide as the output (no limit lets one be wider).
                width = output_width(padded_length)
                held = [constraint.with_width(width) if isinstance(constraint, PrefixForcing)
                        else constraint for constraint in constraints]
                return search(tf.ensure_shape(ids, [None, padded_length]), limits, held)
            return decode

        ids, scores = tf.switch_case(tf.searchsorted(self.lengths, [length])[0],
                                     [decode_at(padded) for padded in self.lengths])
        return ids[:rows], scores[:rows]
