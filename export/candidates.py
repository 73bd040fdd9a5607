"""A vocabulary shortlist inside the graph: the candidates of a batch's search.

`data.shortlist` builds a `Shortlist` and reads and writes its file; a `Translator` holds it as a
`CandidateTable`, two variables (so a SavedModel stores it once, not in every signature's graph),
and each search computes over the union of its batch's candidates (`beam_decode`'s
`candidates`).
"""

import tensorflow as tf

from keras_transformer.search.candidates import with_special_ids


class CandidateTable(tf.Module):
    """A `data.shortlist.Shortlist` as tensors.

    Args:
        shortlist: the `Shortlist`.
        source_vocab_size: the source vocabulary's ids (the table's rows).

    Attributes:
        table: int32 variable [source_vocab_size, width], each source id's candidates (padded
            with end of sentence).
        always: int32 variable [n], the ids every search may write.
    """

    def __init__(self, shortlist, source_vocab_size, name="shortlist"):
        super().__init__(name=name)
        self.table = tf.Variable(shortlist.table(source_vocab_size), trainable=False,
                                 name="table")
        self.always = tf.Variable(shortlist.always, trainable=False, name="always")

    def of(self, source_ids, forced=None):
        """int32 [k], ascending from padding and end of sentence (`with_special_ids`, the rule
        the searches read candidates by): the candidates of a search of `source_ids` (int
        [batch, length], 0-padded): each source id's, the ids always kept, and `forced` (int32
        [n], what the search's constraints may write)."""
        ids = [tf.reshape(tf.gather(self.table, tf.cast(source_ids, tf.int32)), [-1]),
               self.always] + ([] if forced is None else [tf.cast(forced, tf.int32)])
        return with_special_ids(tf.concat(ids, axis=0))
