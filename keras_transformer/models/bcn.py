"""The biattentive classification network (BCN) of McCann et al. (2017), section 5.

For a pair of word-vector sequences w~x [n, d] and w~y [m, d] (for one sentence, y is x):

    x = ReLU-feed-forward(w~x)            y = ReLU-feed-forward(w~y)          (shared)
    X = biLSTM(x)                         Y = biLSTM(y)                       (shared)
    A = X Y^T [n, m];  A_x = softmax(A) over X's words;  A_y = softmax(A^T) over Y's words
    C_x = A_x^T X [m, d'];  C_y = A_y^T Y [n, d']
    X|y = biLSTM([X; X - C_y; X * C_y])   Y|x = biLSTM([Y; Y - C_x; Y * C_x])  (shared)
    beta_x = softmax(X|y v + b) over words;  x_self = X|y^T beta_x
    x_pool = [max(X|y); mean(X|y); min(X|y); x_self]   (y_pool likewise)
    logits = batch-normalized maxout network([x_pool; y_pool])

Padding never takes part: it is out of every softmax, max, mean and min (the inputs' Keras mask,
or ids == 0 where the caller passes a mask).
"""

import keras
from keras import ops

from keras_transformer.layers.dropout import Dropout
from keras_transformer.models.recurrent import bidirectional_lstm

_NEG = -1e9


def biattention(X, Y, x_mask, y_mask):
    """The paper's biattention: (C_x [batch, m, d], C_y [batch, n, d]) for X [batch, n, d] and
    Y [batch, m, d] with boolean masks [batch, n] and [batch, m]."""
    A = ops.einsum("bnd,bmd->bnm", X, Y)
    A_x = ops.softmax(ops.where(x_mask[:, :, None], A, _NEG), axis=1)  # over X's words
    A_y = ops.softmax(ops.where(y_mask[:, None, :], A, _NEG), axis=2)  # over Y's words
    C_x = ops.einsum("bnm,bnd->bmd", A_x, X)
    C_y = ops.einsum("bnm,bmd->bnd", A_y, Y)
    return C_x, C_y


@keras.saving.register_keras_serializable(package="keras_transformer")
class Maxout(keras.layers.Layer):
    """A maxout layer (Goodfellow et al. 2013): the largest of `pieces` affine maps per unit."""

    def __init__(self, units, pieces=4, **kwargs):
        super().__init__(**kwargs)
        self.units, self.pieces = units, pieces
        self.dense = keras.layers.Dense(units * pieces, name="pieces")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x):
        pieces = ops.reshape(self.dense(x), (-1, self.units, self.pieces))
        return ops.max(pieces, axis=-1)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "pieces": self.pieces}


@keras.saving.register_keras_serializable(package="keras_transformer")
class BiattentiveClassificationNetwork(keras.layers.Layer):
    """The BCN over word vectors: [batch, n, d] (one sentence) or a pair of them -> logits.

    Args:
        num_classes: classes of the task.
        hidden_size: width of the feed-forward layer and of each LSTM direction.
        maxout_units: width of the maxout network's hidden layers.
        maxout_pieces: affine pieces per maxout unit.
        dropout: dropout after the feed-forward layer, on the integration's inputs, and before
            each maxout layer.

    Call arguments:
        inputs: vectors [batch, n, d], or (x [batch, n, d], y [batch, m, d]).
        mask: the Keras mask(s) of the inputs (bool [batch, n], or a pair); padding words.
        training: enables dropout and batch statistics.

    Returns:
        float32 logits [batch, num_classes].
    """

    def __init__(self, num_classes, hidden_size=300, maxout_units=300, maxout_pieces=4,
                 dropout=0.2, **kwargs):
        super().__init__(**kwargs)
        self.num_classes, self.hidden_size, self.dropout = num_classes, hidden_size, dropout
        self.maxout_units, self.maxout_pieces = maxout_units, maxout_pieces
        self.feed_forward = keras.layers.Dense(hidden_size, activation="relu",
                                               name="feed_forward")
        self.encoder = bidirectional_lstm(hidden_size, name="encoder")
        self.integrator = bidirectional_lstm(hidden_size, name="integrator")
        self.self_attention = keras.layers.Dense(1, name="self_attention")  # v, b
        self.maxout = [Maxout(maxout_units, maxout_pieces, name=f"maxout_{i}") for i in range(2)]
        # Momentum 0.9, not Keras's 0.99: the paper's tasks train for a few hundred steps an
        # epoch, and slower moving statistics leave evaluation with the initial ones.
        self.batch_norms = [keras.layers.BatchNormalization(momentum=0.9,
                                                            name=f"batch_norm_{i}")
                            for i in range(3)]
        self.classifier = keras.layers.Dense(num_classes, name="classifier")
        self.dropout_layer = Dropout(dropout)
        self.supports_masking = True

    def build(self, input_shape):
        pair = isinstance(input_shape, (tuple, list)) and isinstance(input_shape[0],
                                                                     (tuple, list))
        vectors = input_shape[0] if pair else input_shape
        self.feed_forward.build(vectors)
        words = (None, None, self.hidden_size)
        self.encoder.build(words)
        self.integrator.build((None, None, 6 * self.hidden_size))
        self.self_attention.build((None, None, 2 * self.hidden_size))
        width = 16 * self.hidden_size  # two pools of [max; mean; min; self] over 2 x hidden
        for norm, maxout in zip(self.batch_norms, self.maxout):
            norm.build((None, width))
            maxout.build((None, width))
            width = self.maxout_units
        self.batch_norms[-1].build((None, width))
        self.classifier.build((None, width))

    def _encode(self, vectors, mask, training):
        x = self.dropout_layer(self.feed_forward(vectors), training=training)
        return self.encoder(x, mask=mask, training=training)

    def _pool(self, X, mask, training):
        """[X; X - C; X * C] [batch, n, 6 hidden] -> [max; mean; min; self] [batch, 8 hidden]."""
        integrated = self.integrator(self.dropout_layer(X, training=training), mask=mask,
                                     training=training)
        real = mask[..., None]
        scores = ops.where(real, self.self_attention(integrated), _NEG)
        attended = ops.sum(ops.softmax(scores, axis=1) * integrated, axis=1)
        count = ops.maximum(ops.sum(ops.cast(real, integrated.dtype), axis=1), 1.0)
        return ops.concatenate([
            ops.max(ops.where(real, integrated, _NEG), axis=1),
            ops.sum(ops.where(real, integrated, 0.0), axis=1) / count,
            ops.min(ops.where(real, integrated, -_NEG), axis=1),
            attended], axis=-1)

    def call(self, inputs, mask=None, training=None):
        pair = isinstance(inputs, (tuple, list))
        x_vectors, y_vectors = inputs if pair else (inputs, inputs)
        if mask is None or (pair and mask[0] is None):
            mask = (None, None) if pair else None
        x_mask, y_mask = mask if pair else (mask, mask)
        x_mask = _or_all_words(x_mask, x_vectors)
        y_mask = _or_all_words(y_mask, y_vectors)
        X = self._encode(x_vectors, x_mask, training)
        Y = X if not pair else self._encode(y_vectors, y_mask, training)
        C_x, C_y = biattention(X, Y, x_mask, y_mask)
        x_pool = self._pool(ops.concatenate([X, X - C_y, X * C_y], axis=-1), x_mask, training)
        y_pool = self._pool(ops.concatenate([Y, Y - C_x, Y * C_x], axis=-1), y_mask, training)
        h = ops.concatenate([x_pool, y_pool], axis=-1)
        for norm, maxout in zip(self.batch_norms, self.maxout):
            h = maxout(self.dropout_layer(norm(h, training=training), training=training))
        return self.classifier(self.batch_norms[-1](h, training=training))

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "hidden_size": self.hidden_size, "maxout_units": self.maxout_units,
                "maxout_pieces": self.maxout_pieces, "dropout": self.dropout}


def _or_all_words(mask, vectors):
    if mask is None:
        return ops.ones(ops.shape(vectors)[:2], "bool")
    return ops.cast(mask, "bool")
