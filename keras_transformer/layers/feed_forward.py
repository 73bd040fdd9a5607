"""Position-wise feed-forward network (paper section 3.3)."""

import keras

from keras_transformer.errors import check_one_of
from keras_transformer.hparams import FFN_ACTIVATIONS
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.rows import from_rows, rows_of

# Keras' name where it differs from the hparams field's. Keras' "gelu" is the exact one
# (approximate=False), as Marian's and BERT's.
_KERAS_NAMES = {"swish": "silu"}


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to every position alike (eq. 2).

    Args:
        d_ff: inner width (2048 in the base model).
        relu_dropout: dropout on the activation's output (off in the paper; tensor2tensor's
            relu_dropout).
        kernel_initializer: initializer of W1 and W2.
        activation: the paper's "relu"; "swish" (x sigmoid(x), Marian's OPUS-MT models) or
            "gelu" (the exact, erf-based one) in its place (`hparams.FFN_ACTIVATIONS`).

    Call arguments:
        inputs: [batch, length, d_model].

    Returns:
        [batch, length, d_model].

    Example:
    >>> PositionwiseFeedForward(d_ff=64)(np.zeros((2, 3, 16))).shape
    TensorShape([2, 3, 16])
    """

    def __init__(self, d_ff, relu_dropout=0.0, kernel_initializer="glorot_uniform",
                 activation="relu", **kwargs):
        super().__init__(**kwargs)
        check_one_of("activation", activation, FFN_ACTIVATIONS, ValueError)
        self.d_ff = d_ff
        self.relu_dropout = relu_dropout
        self.activation = activation
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.inner = keras.layers.Dense(d_ff, activation=_KERAS_NAMES.get(activation, activation),
                                        dtype=self.dtype_policy,
                                        kernel_initializer=self.kernel_initializer, name="inner")
        self.dropout_layer = Dropout(relu_dropout, dtype=self.dtype_policy)
        self.outer = None  # Its width is the input's, known in build.

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)
        self.outer = keras.layers.Dense(inputs_shape[-1], dtype=self.dtype_policy,
                                        kernel_initializer=self.kernel_initializer, name="outer")
        self.outer.build(tuple(inputs_shape[:-1]) + (self.d_ff,))

    def call(self, inputs, training=None):
        rows, leading = rows_of(inputs)  # one MatMul each (keras_transformer.layers.rows)
        return from_rows(self.outer(self.dropout_layer(self.inner(rows), training=training)),
                         leading)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_ff=self.d_ff,
            relu_dropout=self.relu_dropout,
            activation=self.activation,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config
