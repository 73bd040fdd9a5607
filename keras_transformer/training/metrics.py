"""Token accuracy and perplexity over non-padding tokens."""

import keras
from keras import ops

from keras_transformer.token_ids import PAD_ID
from keras_transformer.training.losses import smoothed_cross_entropy, token_weights


class _NonPadTokenMean(keras.metrics.Metric):
    """Mean of a per-token value over every non-padding target token seen since the reset.

    `token_values(y_true, y_pred)` returns the float32 [batch, length] values to average.
    """

    def __init__(self, token_values, name, pad_id=PAD_ID, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.token_values = token_values
        self.pad_id = pad_id
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        weights = token_weights(y_true, sample_weight, self.pad_id)
        values = self.token_values(y_true, y_pred)
        self.total.assign_add(ops.cast(ops.sum(values * weights), self.dtype))
        self.count.assign_add(ops.cast(ops.sum(weights), self.dtype))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def get_config(self):
        return dict(super().get_config(), pad_id=self.pad_id)


def _correct_tokens(y_true, y_pred):
    predicted = ops.argmax(y_pred, axis=-1)
    return ops.cast(ops.equal(predicted, ops.cast(y_true, predicted.dtype)), "float32")


def _cross_entropy(y_true, y_pred):
    return smoothed_cross_entropy(y_true, y_pred, label_smoothing=0.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenAccuracy(_NonPadTokenMean):
    """Fraction of non-padding target tokens whose argmax prediction is right."""

    def __init__(self, name="token_accuracy", pad_id=PAD_ID, dtype=None):
        super().__init__(_correct_tokens, name=name, pad_id=pad_id, dtype=dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_NonPadTokenMean):
    """exp of the mean (unsmoothed) cross-entropy per non-padding target token."""

    def __init__(self, name="perplexity", pad_id=PAD_ID, dtype=None):
        super().__init__(_cross_entropy, name=name, pad_id=pad_id, dtype=dtype)

    def result(self):
        return ops.exp(super().result())


@keras.saving.register_keras_serializable(package="keras_transformer")
class TargetTokens(keras.metrics.Metric):
    """Real (non-padding) target tokens seen since the last reset; divide by time for tokens/s."""

    def __init__(self, name="target_tokens", pad_id=PAD_ID, dtype="float32"):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        self.count.assign_add(ops.cast(ops.sum(token_weights(y_true, None, self.pad_id)),
                                       self.dtype))

    def result(self):
        return ops.convert_to_tensor(self.count)

    def get_config(self):
        return dict(super().get_config(), pad_id=self.pad_id)
