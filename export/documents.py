"""Documents in, documents out: a `Translator` over whole texts (paragraphs, line breaks, lines far
longer than a training pair), the same way in kt-translate --documents and in an exported
graph (`translate_document`).

A document is cut into sentences (`data.documents.split`: every line and paragraph break and the
spacing between sentences kept as they are). A sentence of more tokens than the translator reads
(`max_input_length`, end of sentence included) is not cut: it is split after its clause marks
(`,;:` and a space), and a clause still too long into windows of whole words that fit, each part
translated on its own and put back with the text that was between the parts. Each document's
metadata says how many sentences it had and how many were split either way; only a single word
longer than the limit is ever cut.
"""

import typing

import tensorflow as tf

from keras_transformer.data import documents, markup
from keras_transformer.export.lines import n_best_lines
from keras_transformer.export.markup_lines import markup_n_best_lines, unmasked
from keras_transformer.export.translator import source_ids_of
from keras_transformer.search.contract import graph_function
from keras_transformer.search.steps import source_lengths

DOCUMENTS = tf.TensorSpec([None], tf.string, name="documents")


class Parts(typing.NamedTuple):
    """A batch of documents in parts: pieces and is_sentence are `data.documents.split`'s, with
    long sentences split; the counts are int32 [docs]."""

    pieces: tf.RaggedTensor
    is_sentence: tf.RaggedTensor
    sentences: tf.Tensor  # sentences the document had before any was split
    split_at_clauses: tf.Tensor  # sentences too long, split after their clause marks
    split_into_windows: tf.Tensor  # clauses still too long, split into windows of words


def parts(vocabulary, texts, max_input_length):
    """tf.string [docs] -> `Parts`: every sentence piece of at most max_input_length - 1
    subwords (the end of sentence is the last), but for single words longer than that."""
    limit = max_input_length - 1

    def count_tokens(texts):
        return tf.cast(vocabulary.tokenize(texts).row_lengths(), tf.int32)

    def too_long(pieces, is_sentence):
        # Over the flat values (the two share their rows): `&` of two ragged tensors traces
        # assertions that their rows match.
        return is_sentence.with_flat_values(
            is_sentence.flat_values & (count_tokens(pieces.flat_values) > limit))

    def per_document(flags):
        return tf.reduce_sum(tf.cast(flags, tf.int32), axis=1)

    pieces, is_sentence = documents.split(texts)
    sentences = per_document(is_sentence)
    long_sentences = too_long(pieces, is_sentence)
    pieces, is_sentence = documents.refine(pieces, is_sentence, long_sentences,
                                           *documents.clause_spans(tf.boolean_mask(
                                               pieces.flat_values, long_sentences.flat_values)))
    long_clauses = too_long(pieces, is_sentence)
    pieces, is_sentence = documents.refine(
        pieces, is_sentence, long_clauses, *documents.word_windows(
            tf.boolean_mask(pieces.flat_values, long_clauses.flat_values), count_tokens,
            limit))
    return Parts(pieces, is_sentence, sentences, per_document(long_sentences),
                 per_document(long_clauses))


def with_translations(parts, translations):
    """tf.string [docs]: the documents of `parts` with their sentence pieces replaced, in order,
    by `translations` (tf.string [sentence pieces])."""
    positions = tf.where(parts.is_sentence.flat_values)
    return documents.join(parts.pieces.with_flat_values(tf.tensor_scatter_nd_update(
        parts.pieces.flat_values, positions, translations)))


def translate_document(translator, text, *, batch_size, sampling=None, keep_markup=False,
                       first_sentence=1):
    """One document (str) translated as `DocumentTranslator` translates it, its sentence
    parts in length-sorted batches of `batch_size` (`n_best_lines`; `sampling` as there, its
    batches drawing as part of a longer input whose sentence `first_sentence` this document's
    first is); with `keep_markup`, each part's markup kept (`data.markup`). Returns (the
    translation, the `Parts` of the document).

    Raises:
        markup.MarkupError: with keep_markup, a sentence with more items than markup allows.
    """
    split = parts(translator.vocabulary, tf.constant([text]), translator.decoding.max_input_length)
    sentences = [piece.decode("utf-8") for piece in tf.boolean_mask(
        split.pieces.flat_values, split.is_sentence.flat_values).numpy()]
    if keep_markup:
        masked = [markup.mask(sentence) for sentence in sentences]
        best = unmasked(markup_n_best_lines(translator, masked, 1, batch_size,
                                            sampling=sampling, first_line=first_sentence),
                        masked)
    else:
        best = n_best_lines(translator, sentences, 1, batch_size, sampling=sampling,
                            first_line=first_sentence)
    translations = [hypotheses[0].text for hypotheses in best]
    translated = with_translations(split, tf.constant(translations, tf.string))
    return translated.numpy()[0].decode("utf-8"), split


class DocumentTranslator(tf.Module):
    """`translate_documents`, a graph function over a `Translator`'s: what kt-export saves as the
    `translate_document` signature.

    Bounds: at most the translator's max_batch_size documents a request, each of at most
    `max_document_bytes` bytes, and at most `max_sentences` sentence parts in all; more is an
    INVALID_ARGUMENT error saying which limit, before anything is translated (a document is
    never cut). The parts are translated longest first, max_batch_size at a time or as many as
    the translator's max_search_positions lets one search take.
    """

    def __init__(self, translator, *, max_document_bytes=65_536, max_sentences=1_024,
                 name="document_translator"):
        super().__init__(name=name)
        self.translator = translator
        self.max_document_bytes = max_document_bytes
        self.max_sentences = max_sentences

    @graph_function(input_signature=[DOCUMENTS])
    def translate_documents(self, texts):
        """tf.string [docs] -> {"translations": tf.string [docs], "sentences",
        "split_at_clauses", "split_into_windows": int32 [docs] (see `Parts`)}."""
        translator = self.translator
        longest = tf.reduce_max(tf.concat([tf.strings.length(texts), [0]], 0))
        with tf.control_dependencies([
                tf.debugging.assert_less_equal(
                    tf.size(texts), translator.bounds.max_batch_size, message=f"too many "
                    f"documents in one request: the limit (max_batch_size) is "
                    f"{translator.bounds.max_batch_size}"),
                tf.debugging.assert_less_equal(longest, self.max_document_bytes, message=(
                    f"a document is longer than the limit of {self.max_document_bytes} bytes; "
                    f"split it into smaller documents (at paragraph breaks) and send those"))]):
            texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
        split = parts(translator.vocabulary, texts, translator.decoding.max_input_length)
        sentences = tf.boolean_mask(split.pieces.flat_values, split.is_sentence.flat_values)
        count = tf.size(sentences)
        with tf.control_dependencies([tf.debugging.assert_less_equal(
                count, self.max_sentences, message=f"too many sentences in one request: the "
                f"limit is {self.max_sentences}; send fewer documents at a time")]):
            source_ids = source_ids_of(translator.vocabulary, sentences,
                                       translator.decoding.max_input_length,
                                       translator.bounds.max_input_bytes)
        limits = translator.output_limits_of(source_ids)
        order = tf.argsort(limits, direction="DESCENDING", stable=True)
        translated = tf.TensorArray(tf.string, size=0, dynamic_size=True, infer_shape=False,
                                    element_shape=[None])

        def translate_batch(start, index, translated):
            # Longest first, so a batch's first part has its longest limit: as many parts as
            # the translator's bounds let one search take with that limit.
            rows = order[start:start + translator.bounds.rows_within_bound(limits[order[start]])]
            ids = tf.gather(source_ids, rows)
            ids = ids[:, :tf.maximum(tf.reduce_max(source_lengths(ids)), 1)]
            # translate_ids, not translate: no checks of the parts, which no output returns.
            result = translator.detokenize(translator.translate_ids(ids)["ids"])
            return start + tf.size(rows), index + 1, translated.write(index, result)

        _, _, translated = tf.while_loop(lambda start, *_: start < count, translate_batch,
                                         (tf.constant(0), tf.constant(0), translated))
        in_order = tf.gather(translated.concat(), tf.math.invert_permutation(order))
        return {"translations": with_translations(split, in_order),
                "sentences": split.sentences, "split_at_clauses": split.split_at_clauses,
                "split_into_windows": split.split_into_windows}
