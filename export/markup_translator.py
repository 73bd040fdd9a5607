"""Markup's two passes, once for every caller: `markup_passes` translates a batch of masked
texts without their tags, then places each tagged text's tags in that translation (beam search
or sampling first; kt-translate --markup and kt-translate --documents through
export/markup_lines.py, which masks in Python and names a bad line). Beside it, the SavedModel's
`translate_with_markup` signature (kt-export --markup), which masks in the graph
(`data.markup_graph`, the same patterns as `data.markup`), runs `markup_passes` and puts the
items back.
"""

import tensorflow as tf

from keras_transformer.data import markup_graph
from keras_transformer.export.translator import TEXTS
from keras_transformer.search.contract import graph_function
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


def _as_wide(values, width, padding):
    """[batch, n, ...] -> [batch, width, ...]: cut, or padded with `padding` along axis 1."""
    values = values[:, :width]
    pad = [[0, 0], [0, width - tf.shape(values)[1]]] + [[0, 0]] * (len(values.shape) - 2)
    return tf.pad(values, pad, constant_values=padding)


def _replaced(first, rows, placed):
    """The n-best result `first` (ids int32 [batch, n, length], scores and log_probs float32
    [batch, n]) with its `rows` (int64 [tagged]) replaced by `placed` (the same keys, [tagged,
    beam, ...]): n columns each, placements past the beam's padded with -inf scores."""
    n = tf.shape(first["scores"])[1]
    length = tf.maximum(tf.shape(first["ids"])[2], tf.shape(placed["ids"])[2])
    replaced = {}
    for key, padding in (("ids", PAD_ID), ("scores", float("-inf")),
                         ("log_probs", float("-inf"))):
        values, new = first[key], _as_wide(placed[key], n, padding)
        if key == "ids":
            values, new = (tf.pad(v, [[0, 0], [0, 0], [0, length - tf.shape(v)[2]]])
                           for v in (values, new))
        replaced[key] = tf.tensor_scatter_nd_update(values, rows[:, None], new)
    return replaced


def markup_passes(translator, first_pass, *, untagged_ids, untagged_items, source_ids, items,
                  tagged):
    """Masked texts' n best, every hypothesis holding each of its text's items once, tags well
    nested, in two passes: the texts without their tags (`markup.without_tags`) are translated
    by `first_pass`, their other items held to; then, for each text with tags whose first pass
    found a hypothesis, its tags are placed in that pass's best hypothesis (with sampling, the
    first sample drawn with a finite score), whose words stay as they are
    (`Translator.place_markup_ids`, beam search). So tags change where they go, never what the
    translation says; a tagged text's n best are placements of one text. Runs in a graph or
    eagerly.

    Args:
        translator: a `Translator` whose vocabulary holds markup's tokens.
        first_pass: (source ids int32 [batch, length], item_ids, opening) -> an n-best
            result as `Translator.translate_n_best_ids_with_markup` gives it (ids int32
            [batch, n, length], scores and log_probs float32 [batch, n]); that search, or
            `Translator.sample_n_best_ids`.
        untagged_ids: int32 [batch, length], the texts without their tags, tokenized.
        untagged_items: (item_ids, opening) of those texts' items
            (`markup.constraint_inputs`, `markup_graph.constraint_inputs`).
        source_ids: int32 [batch, length], the masked texts with their tags, tokenized.
        items: (item_ids, opening) of all their items.
        tagged: bool [batch], the texts with tags.

    Returns:
        `first_pass`'s result, each placed row's n hypotheses replaced by its placements (the
        beam's, cut to n, or padded with -inf scores).
    """
    first = first_pass(untagged_ids, *untagged_items)
    found = tf.math.is_finite(first["scores"])  # samples are in the order drawn, not ranked
    rows = tf.where(tagged & tf.reduce_any(found, axis=1))[:, 0]

    def placed():
        def of_rows(values):
            return tf.gather(values, rows)

        best = tf.argmax(tf.cast(of_rows(found), tf.int32), axis=1, output_type=tf.int32)
        text_ids = _ended(tf.gather(of_rows(first["ids"]), best, batch_dims=1))
        return _replaced(first, rows, translator.place_markup_ids(
            of_rows(source_ids), *map(of_rows, items), text_ids))

    return tf.cond(tf.size(rows) > 0, placed, lambda: dict(first))


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
                translator.bounds.check_batch(tf.size(texts)),
                tf.debugging.assert_less_equal(longest, self.max_text_bytes, message=(
                    f"a text is longer than {self.max_text_bytes} bytes (the limit of "
                    f"translate_with_markup); split it"))]):
            # The whole text, as kt-translate masks a line: items past the cut that tokenizing
            # makes are still placed, not lost.
            masked = markup_graph.mask(tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8",
                                                                    errors="replace"))
        untagged_ids = translator.tokenize(masked.untagged)["source_ids"]
        # Both searches held to the translator's bounds before the first runs: placing the tags
        # searches a tagged text's translation (at most its limit, and an end of sentence) with
        # its items' tokens in it.
        tagged = tf.reduce_any(masked.is_tag, axis=1)
        items = tf.cast(masked.tokens.row_lengths(), tf.int32)
        limits = translator.limits_of(untagged_ids) + tf.where(tagged, 1 + items, 0)
        untagged_ids = translator.bounds.checked_search(untagged_ids, limits,
                                                        translator.decoding.beam_size)
        best = markup_passes(
            translator, translator.translate_n_best_ids_with_markup, untagged_ids=untagged_ids,
            untagged_items=markup_graph.constraint_inputs(
                tf.ragged.boolean_mask(masked.tokens, ~masked.is_tag), self.token_ids),
            source_ids=translator.tokenize(masked.text)["source_ids"],
            items=markup_graph.constraint_inputs(masked.tokens, self.token_ids), tagged=tagged)
        return {"translations": markup_graph.unmask(translator.detokenize(best["ids"][:, 0]),
                                                    masked),
                "scores": best["scores"][:, 0]}
