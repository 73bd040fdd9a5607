"""A glossary with each request: the SavedModel's `translate_with_glossary` signature (kt-export
--glossaries), which finds the request's source terms in its sentences and holds each
translation to their target terms, as kt-translate --glossary does with a file
(`data.glossary`, `keras_transformer.search.constraints.glossary.GlossaryConstraint`).
"""

import tensorflow as tf

from keras_transformer.data.glossary import CONTROL, required_terms
from keras_transformer.export.translator import TEXTS
from keras_transformer.search.contract import graph_function

GLOSSARY_SOURCES = tf.TensorSpec([None], tf.string, name="glossary_sources")
GLOSSARY_TARGETS = tf.TensorSpec([None], tf.string, name="glossary_targets")


class GlossaryTranslator(tf.Module):
    """`translate_with_glossary`, a graph function over a `Translator`'s.

    Bounds, besides the translator's: at most `max_terms` term pairs a request, each term at
    most `max_term_bytes` bytes, UTF-8, not empty and without control characters.
    """

    def __init__(self, translator, *, max_terms=256, max_term_bytes=256,
                 name="glossary_translator"):
        super().__init__(name=name)
        self.translator = translator
        self.max_terms = max_terms
        self.max_term_bytes = max_term_bytes

    def _checked_terms(self, sources, targets):
        terms = tf.concat([sources, targets], 0)
        lengths = tf.strings.length(terms)
        utf8 = tf.strings.unicode_transcode(terms, "UTF-8", "UTF-8", errors="replace") == terms
        checks = [
            tf.debugging.assert_equal(tf.reduce_all(utf8), True, message=(
                "a glossary term is not UTF-8")),
            # No term may hold what found terms are overwritten with (data.glossary).
            tf.debugging.assert_equal(tf.reduce_any(tf.strings.regex_full_match(
                terms, f"(?s).*{CONTROL}.*")), False, message=(
                "a glossary term holds a control character")),
            tf.debugging.assert_equal(tf.size(sources), tf.size(targets), message=(
                "glossary_sources and glossary_targets must pair up: as many of each")),
            tf.debugging.assert_less_equal(tf.size(sources), self.max_terms, message=(
                f"too many glossary terms in one request: the limit is {self.max_terms}")),
            tf.debugging.assert_less_equal(tf.reduce_max(tf.concat([lengths, [0]], 0)),
                                           self.max_term_bytes, message=(
                f"a glossary term is longer than {self.max_term_bytes} bytes")),
            tf.debugging.assert_greater(tf.reduce_min(tf.concat([lengths, [1]], 0)), 0,
                                        message="a glossary term is empty")]
        with tf.control_dependencies(checks):
            # Longest source term first, as data.glossary.Glossary orders them.
            order = tf.argsort(-tf.strings.length(sources, unit="UTF8_CHAR"), stable=True)
            return tf.gather(sources, order), tf.gather(targets, order)

    @graph_function(input_signature=[TEXTS, GLOSSARY_SOURCES, GLOSSARY_TARGETS])
    def translate_with_glossary(self, texts, glossary_sources, glossary_targets):
        """Sentences and the request's glossary -> {"translations": tf.string [batch],
        "scores": float32 [batch], "terms_required": int32 [batch] (the target terms each
        translation was held to)}.

        Args:
            texts: tf.string [batch], as for `Translator.translate`.
            glossary_sources, glossary_targets: tf.string [terms]: where glossary_sources[i]
                stands in a sentence as whole words, its translation must hold
                glossary_targets[i] (of overlapping source terms, the longest; of equally long
                ones, the first given).

        A sentence whose required target terms need more tokens than its translation may have
        is an INVALID_ARGUMENT error that names it (its index in the batch).
        """
        translator = self.translator
        sources, targets = self._checked_terms(glossary_sources, glossary_targets)
        source_ids = translator.tokenize(texts)["source_ids"]
        texts = tf.strings.substr(texts, 0, translator.bounds.max_input_bytes)
        required = required_terms(texts, sources)  # [batch, terms]
        target_ids = translator.target_subwords(targets)[:, :translator.decoding.max_output_length]
        target_ids = target_ids.to_tensor(0)  # [terms, length]; max_terms bounds the terms
        phrase_ids = _required_phrases(required, target_ids)
        # At least one (all-padding) phrase of one token: the constraint reads phrase 0, token 0.
        shape = tf.shape(phrase_ids)
        phrase_ids = tf.pad(phrase_ids, [[0, 0], [0, tf.maximum(0, 1 - shape[1])],
                                         [0, tf.maximum(0, 1 - shape[2])]])
        needed = tf.reduce_sum(tf.cast(phrase_ids != 0, tf.int32), axis=[1, 2])
        limits = translator.limits_of(source_ids)
        too_many = (needed >= limits) & (needed > 0)
        with tf.control_dependencies([tf.debugging.Assert(~tf.reduce_any(too_many), [
                "the glossary terms of the sentence at this index need more tokens than its "
                "translation may have:",
                tf.argmax(tf.concat([tf.cast(too_many, tf.int32), [0]], 0))])]):  # any rows
            phrase_ids = tf.identity(phrase_ids)
        best = translator.translate_n_best_ids_with_glossary(source_ids, phrase_ids)
        return {"translations": translator.detokenize(best["ids"][:, 0]),
                "scores": best["scores"][:, 0],
                "terms_required": tf.reduce_sum(tf.cast(required, tf.int32), axis=1)}


def _required_phrases(required, target_ids):
    """int32 [batch, most required, length]: each sentence's required phrases (`required`,
    bool [batch, terms]; `target_ids` [terms, length]) in the request's order, 0-padded. The
    search's constraint works over every phrase of a row at each step, so its width is the
    most terms one sentence requires, not the request's terms (256 at most)."""
    order = tf.argsort(tf.cast(~required, tf.int32), axis=1, stable=True)  # required first
    most = tf.reduce_max(tf.concat([tf.reduce_sum(tf.cast(required, tf.int32), axis=1), [0]], 0))
    order = order[:, :most]
    kept = tf.gather(required, order, batch_dims=1)
    return tf.where(kept[:, :, None], tf.gather(target_ids, order), 0)
