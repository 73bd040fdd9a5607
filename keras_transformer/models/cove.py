"""Contextualized word vectors from a translation encoder (McCann et al. 2017, section 4).

CoVe(w) = MT-LSTM(GloVe(w)): the top layer of a trained MT-LSTM's encoder, frozen, read by a
downstream model beside GloVe(w) (`CoVe`). The paper's idea, that a translation encoder is a
reusable sentence encoder, applies to the Transformer's encoder too (`TransformerCoVe`): it reads
subword pieces, so its vectors of a word's pieces are averaged into one vector a word, aligned
with the word ids GloVe and the BCN read.
"""

import keras
import tensorflow as tf
from keras import ops


def _freeze(model):
    """Makes `model` and every weight it has so far untrainable. A model deserialized with
    trainable False (from a saved CoVe) keeps its sublayers' weights trainable through
    `model.trainable = False` (Keras 3.15), so the weights themselves are frozen too."""
    model.trainable = False
    for weight in model.weights:
        weight.trainable = False


def _frozen(model):
    """`model`, or the model its config describes (from get_config), frozen."""
    if isinstance(model, dict):
        model = keras.saving.deserialize_keras_object(model)
    _freeze(model)
    return model


def _built_frozen(model):
    """Builds `model` if it is not, then freezes the weights building made."""
    if not model.built:
        model.build()
    _freeze(model)


@keras.saving.register_keras_serializable(package="keras_transformer")
class CoVe(keras.layers.Layer):
    """Context vectors from a trained MT-LSTM's encoder, frozen: CoVe(w) = MT-LSTM(GloVe(w)).

    Call arguments:
        word_ids: int [batch, n], word ids of the MT-LSTM's source vocabulary, 0-padded.

    Returns:
        float32 [batch, n, 2 hidden_size], zero at padding; the mask (ids != 0) travels with it
        as its Keras mask. With `with_glove=True`, [GloVe(w); CoVe(w)]: [batch, n, dimensions +
        2 hidden_size], the input the paper gives downstream models.

    Example:
    >>> cove = CoVe(mt_lstm)            # shares (and freezes) mt_lstm's weights
    >>> cove = keras_transformer.model_dir.cove.load_cove("runs/mt_lstm")  # a kt-train run
    >>> vectors = cove(word_ids)        # [batch, n, 2 * mt_lstm.hidden_size]
    """

    def __init__(self, mt_lstm, with_glove=False, **kwargs):
        super().__init__(**kwargs)
        self.mt_lstm = _frozen(mt_lstm)
        self.with_glove = with_glove
        self.supports_masking = True

    def build(self, input_shape=None):
        _built_frozen(self.mt_lstm)

    def call(self, word_ids):
        vectors, mask = self.mt_lstm.encode(word_ids, training=False)
        if self.with_glove:
            vectors = ops.concatenate([self.mt_lstm.glove(word_ids), vectors], axis=-1)
        return vectors

    def compute_mask(self, word_ids, mask=None):
        return ops.not_equal(word_ids, 0)

    def get_config(self):
        config = super().get_config()
        config.update(mt_lstm=keras.saving.serialize_keras_object(self.mt_lstm),
                      with_glove=self.with_glove)
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerCoVe(keras.layers.Layer):
    """A trained Transformer's encoder as a word encoder, frozen: the mean of its top layer's
    outputs over each word's subword pieces.

    The encoder reads a sentence as it was trained to, as subword pieces ending with the end of
    sentence; `data.glove.word_pieces` makes them from text, with the pieces of each word.

    Call arguments:
        inputs: (word_ids [batch, n], piece_ids [batch, p], word_spans [batch, n', 2]), int:
            the words' ids in any word vocabulary, 0-padded, which give the output its length
            and mask; the sentence's subword ids with the end of sentence, 0-padded; and each
            word's pieces [first, last + 1) ([0, 0) for none; words past n' have none).

    Returns:
        float32 [batch, n, d_model], zero at padding and for words without pieces, with the
        mask word_ids != 0.
    """

    def __init__(self, transformer, **kwargs):
        super().__init__(**kwargs)
        self.transformer = _frozen(transformer)
        self.supports_masking = True

    def build(self, input_shape=None):
        _built_frozen(self.transformer)

    def call(self, inputs):
        word_ids, piece_ids, word_spans = inputs
        outputs = self.transformer.encode(piece_ids, training=False)
        # Sums over [first, last + 1) as differences of running sums, zero before the first.
        running = tf.pad(tf.cumsum(outputs, axis=1), [[0, 0], [1, 0], [0, 0]])
        words = tf.shape(word_ids)[1]
        spans = tf.cast(word_spans[:, :words], tf.int32)
        spans = tf.pad(spans, [[0, 0], [0, words - tf.shape(spans)[1]], [0, 0]])
        first, end = spans[..., 0], tf.maximum(spans[..., 1], spans[..., 0])
        sums = tf.gather(running, end, batch_dims=1) - tf.gather(running, first, batch_dims=1)
        means = sums / tf.cast(tf.maximum(end - first, 1), sums.dtype)[..., None]
        return means * ops.cast(ops.not_equal(word_ids, 0), means.dtype)[..., None]

    def compute_mask(self, inputs, mask=None):
        return ops.not_equal(inputs[0], 0)

    def compute_output_shape(self, input_shape):
        return (*input_shape[0], self.transformer.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(transformer=keras.saving.serialize_keras_object(self.transformer))
        return config
