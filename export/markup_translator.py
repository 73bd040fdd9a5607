"""Tagged text with each request: the SavedModel's `translate_with_markup` signature (kt-export
--markup), which translates as kt-translate --markup does (export/markup_lines.py), in the graph:
items masked (`data.markup_graph`, the same patterns as `data.markup`), the text without its
tags translated, the tags placed in that translation, the items put back.
"""

import tensorflow as tf

from keras_transformer.data import markup_graph
from keras_transformer.decoding import graph_function
from keras_transformer.export.translator import TEXTS
from keras_transformer.token_ids import EOS_ID, PAD_ID


def _ended(ids):
    """int32 [batch, length] hypotheses (0 after end of sentence) -> [batch, longest], each
    ending with end of sentence (one that stopped at its limit gets one), no column of only
    padding: the texts `Translator.place_markup_ids` keeps."""
    lengths = tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1)
    ended = tf.reduce_any(ids == EOS_ID, axis=1)
    ids = tf.pad(ids, [[0, 0], [0, 1]])
    at_end = tf.range(tf.shape(ids)[1])[None, :] == lengths[:, None]
    ids = tf.where(at_end & ~ended[:, None], EOS_ID, ids)
    return ids[:, :tf.reduce_max(lengths + tf.cast(~ended, tf.int32))]


def _widened(ids, width):
    return tf.pad(ids, [[0, 0], [0, width - tf.shape(ids)[1]]])


# The most bytes of one tagged text: it is masked whole before tokenizing cuts it (its tags
# may hold long attributes), so this bounds what masking one request costs.
MAX_TEXT_BYTES = 64 * 1024


class MarkupTranslator(tf.Module):
    """`translate_with_markup`, a graph function over a `Translator`'s, whose vocabulary must
    hold markup's tokens (`Vocabulary.markup_ids`; a model trained with --markup_rate).

    Bounds, besides the translator's: each text at most `max_text_bytes` bytes, checked before
    any of the request is masked."""

    def __init__(self, translator, *, max_text_bytes=MAX_TEXT_BYTES, name="markup_translator"):
        super().__init__(name=name)
        self.translator = translator
        self.max_text_bytes = max_text_bytes
        self.token_ids = tf.constant(translator.vocabulary.markup_ids(), tf.int32)

    def _constraint(self, masked, keep):
        return markup_graph.constraint_inputs(tf.ragged.boolean_mask(masked.tokens, keep),
                                              self.token_ids)

    def _placed(self, masked, ids, scores):
        """`ids` and `scores` with the rows of tagged texts replaced by their translations (ids)
        with the tags placed in them (`Translator.place_markup_ids`)."""
        translator = self.translator
        rows = tf.where(tf.reduce_any(masked.is_tag, axis=1))[:, 0]
        text_ids = _ended(tf.gather(ids, rows))
        source_ids = translator.tokenize(tf.gather(masked.text, rows))["source_ids"]
        tokens = tf.gather(masked.tokens, rows)
        item_ids, opening = markup_graph.constraint_inputs(tokens, self.token_ids)
        placed = translator.place_markup_ids(source_ids, item_ids, opening, text_ids)
        placed_ids = placed["ids"][:, 0]
        width = tf.maximum(tf.shape(ids)[1], tf.shape(placed_ids)[1])
        ids = tf.tensor_scatter_nd_update(_widened(ids, width), rows[:, None],
                                          _widened(placed_ids, width))
        return ids, tf.tensor_scatter_nd_update(scores, rows[:, None], placed["scores"][:, 0])

    @graph_function(input_signature=[TEXTS])
    def translate_with_markup(self, texts):
        """Tagged texts -> {"translations": tf.string [batch], "scores": float32 [batch]}: each
        translation holds its text's tags (attributes as they were), placeholders, URLs,
        e-mail addresses and numbers exactly once, tags well nested, as kt-translate --markup
        gives it. A text longer than max_text_bytes, with more than 50 tag pairs and lone
        tags or 50 other items, or holding a placeholder token (｟1｠) already, is an
        INVALID_ARGUMENT error.

        The text without its tags is translated first (its other items held to); then, for a
        text with tags, its tags are placed in that translation, whose words stay as they are.
        """
        translator = self.translator
        longest = tf.reduce_max(tf.concat([tf.strings.length(texts), [0]], 0))
        with tf.control_dependencies([
                translator.check_batch(tf.size(texts)),
                tf.debugging.assert_less_equal(longest, self.max_text_bytes, message=(
                    f"a text is longer than {self.max_text_bytes} bytes (the limit of "
                    f"translate_with_markup); split it"))]):
            # The whole text, as kt-translate masks a line: items past the cut that tokenizing
            # makes are still placed, not lost.
            masked = markup_graph.mask(tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8",
                                                                    errors="replace"))
        source_ids = translator.tokenize(masked.untagged)["source_ids"]
        # Both searches held to the translator's bounds before the first runs: placing the tags
        # searches a tagged text's translation (at most its limit, and an end of sentence) with
        # its items' tokens in it.
        tagged = tf.reduce_any(masked.is_tag, axis=1)
        items = tf.cast(masked.tokens.row_lengths(), tf.int32)
        limits = translator.limits_of(source_ids) + tf.where(tagged, 1 + items, 0)
        source_ids = translator.checked_search(source_ids, limits, translator.beam_size)
        first = translator.translate_n_best_ids_with_markup(
            source_ids, *self._constraint(masked, ~masked.is_tag))
        ids, scores = first["ids"][:, 0], first["scores"][:, 0]
        ids, scores = tf.cond(tf.reduce_any(tagged), lambda: self._placed(masked, ids, scores),
                              lambda: (ids, scores))
        return {"translations": markup_graph.unmask(translator.detokenize(ids), masked),
                "scores": scores}
