"""Strings in, translations out, in one TensorFlow graph: run by kt-translate, saved by kt-export.

Because `kt-translate` and the exported SavedModel call the same `tf.function`s of one
`Translator`, an exported model translates as its checkpoint does.
"""

import tensorflow as tf

from keras_transformer.decoding import beam_decode, decode_lengths
from keras_transformer.token_ids import EOS_ID, PAD_ID

TEXTS = tf.TensorSpec([None], tf.string, name="inputs")
IDS = tf.TensorSpec([None, None], tf.int32, name="source_ids")


class Translator(tf.Module):
    """A trained `Transformer` and its vocabulary, with the decoding settings and request bounds.

    What one request can cost is bounded: at most `max_batch_size` sentences (more is an error),
    each cut to `max_input_bytes` bytes and then to `max_input_length` tokens (end of sentence
    included) before translating, and at most `max_output_length` tokens produced for each.

    Args:
        model: a `Transformer`.
        vocabulary: the `data.Vocabulary` it was trained with.
        beam_size, alpha, extra_length: beam search settings (the paper: 4, 0.6, 50).
        max_input_length: longest source in tokens; longer ones are truncated.
        max_output_length: longest translation in tokens; default max_input_length +
            extra_length.
        max_batch_size: most sentences a call may carry.
        max_input_bytes: bytes of a text read at most; default 16 per input token, far more
            than real text needs, so tokenizing a huge string costs no more than a long one.
    """

    def __init__(self, model, vocabulary, beam_size=4, alpha=0.6, extra_length=50,
                 max_input_length=256, max_output_length=None, max_batch_size=64,
                 max_input_bytes=None, name="translator"):
        super().__init__(name=name)
        vocabulary.check_size(model.vocab_size)
        if model.position_encoding == "learned":
            max_input_length = min(max_input_length, model.max_length)
        for field, value, minimum in (("beam_size", beam_size, 1), ("max_batch_size",
                                       max_batch_size, 1), ("max_input_length", max_input_length,
                                       2)):  # room for a token and the end of sentence
            if value < minimum:
                raise ValueError(f"{field} must be at least {minimum}, got {value}")
        self.model = model
        self.vocabulary = vocabulary
        # Keras keeps the model's layers in lists that tf.Module does not follow; the SavedModel
        # needs every variable the functions read to be tracked.
        self.model_variables = list(model.variables)
        self.beam_size = beam_size
        self.alpha = alpha
        self.extra_length = extra_length
        self.max_input_length = max_input_length
        self.max_output_length = max_output_length or max_input_length + extra_length
        self.max_batch_size = max_batch_size
        self.max_input_bytes = max_input_bytes or 16 * max_input_length

    def settings(self):
        """The decoding settings and bounds, as a JSON-able dict."""
        return {name: getattr(self, name) for name in (
            "beam_size", "alpha", "extra_length", "max_input_length", "max_output_length",
            "max_batch_size", "max_input_bytes")}

    def _check_batch(self, batch_size):
        return tf.debugging.assert_less_equal(
            batch_size, tf.cast(self.max_batch_size, batch_size.dtype),
            message=f"too many sentences in one request: the limit (max_batch_size) is "
                    f"{self.max_batch_size}; split the batch")

    @tf.function(input_signature=[TEXTS])
    def tokenize(self, texts):
        """tf.string [batch] -> {"source_ids": int32 [batch, length]}: subwords + end of
        sentence, 0-padded.

        Bytes that are not UTF-8 become U+FFFD; an empty or blank text (white space only, as
        `str.isspace` has it) becomes a row of zeros (no end of sentence), which
        `translate_ids` answers with an empty translation.
        """
        with tf.control_dependencies([self._check_batch(tf.size(texts))]):
            texts = tf.strings.substr(texts, 0, self.max_input_bytes)
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
        ids = self.vocabulary.encode(texts, self.max_input_length).to_tensor(PAD_ID)
        # A batch of only empty texts still gets a (padding) column for the encoder to read.
        ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])
        return {"source_ids": tf.cast(ids, tf.int32)}

    @tf.function(input_signature=[IDS])
    def translate_ids(self, source_ids):
        """int32 source ids [batch, length] (subwords + end of sentence, 0-padded) ->
        {"ids": int32 [batch, output_length] (0 after end of sentence), "scores": float32
        [batch], log-probability / length penalty}. Rows longer than max_input_length are cut
        and end with end of sentence, as `tokenize` cuts texts; a row of zeros gets an empty
        output with score 0.
        """
        with tf.control_dependencies([self._check_batch(tf.shape(source_ids)[0])]):
            cut = tf.reduce_any(source_ids[:, self.max_input_length:] != PAD_ID, axis=1)
        source_ids = source_ids[:, :self.max_input_length]
        width = tf.shape(source_ids)[1]
        last_column = tf.range(width) == width - 1
        source_ids = tf.where(cut[:, None] & last_column, EOS_ID, source_ids)
        empty = tf.reduce_all(source_ids == PAD_ID, axis=1)
        limits = tf.minimum(decode_lengths(source_ids, self.extra_length),
                            self.max_output_length)
        ids, scores = beam_decode(self.model, source_ids, tf.where(empty, 1, limits),
                                  beam_size=self.beam_size, alpha=self.alpha)
        ids = tf.where(empty[:, None], PAD_ID, ids[:, 0])
        return {"ids": ids, "scores": tf.where(empty, 0.0, scores[:, 0])}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detokenize(self, ids):
        """int32 [batch, length] -> tf.string [batch], each read up to its end of sentence."""
        return self.vocabulary.detokenize(ids)

    @tf.function(input_signature=[TEXTS])
    def translate(self, texts):
        """tf.string [batch] -> {"translations": tf.string [batch], "scores": float32 [batch]}."""
        result = self.translate_ids(self.tokenize(texts)["source_ids"])
        return {"translations": self.detokenize(result["ids"]), "scores": result["scores"]}
