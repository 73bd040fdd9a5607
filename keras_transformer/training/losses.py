"""Label-smoothed cross-entropy over non-padding tokens (paper section 5.4)."""

import keras
from keras import ops

from keras_transformer.runtime import backend
from keras_transformer.token_ids import PAD_ID


def token_weights(y_true, sample_weight=None, pad_id=PAD_ID):
    """float32 [batch, length]: 0 on padding targets, else the sample weight (default 1).

    `sample_weight` may be per token [batch, length] or per sentence [batch] (as Keras passes it).
    """
    weights = ops.cast(ops.not_equal(y_true, pad_id), "float32")
    if sample_weight is None:
        return weights
    sample_weight = ops.cast(sample_weight, "float32")
    if len(sample_weight.shape) == 1:
        sample_weight = sample_weight[:, None]
    return weights * sample_weight


def smoothed_cross_entropy(labels, logits, label_smoothing):
    """Per-token cross-entropy against (1 - eps) * one_hot(label) + eps / vocab_size.

    This is the smoothing of Szegedy et al. (2016), which the paper cites: the uniform share eps/V
    goes to every class, the true one included. No one-hot tensor is built:
    -sum_k q_k log p_k = logsumexp(z) - (1 - eps) z_label - (eps / V) sum_k z_k,
    whose gradient is softmax(z) - (1 - eps) one_hot(label) - eps/V. Written out (rather than
    left to autodiff) because the logits are the largest tensor of a training step ([tokens,
    vocab]): autodiff of the label gather scattered into a dense copy of them, about a tenth of a
    transformer_base step (bench/RESULTS.md). One softmax gives both: its largest probability is
    exp(max_k z_k - logsumexp(z)) >= 1/V, so logsumexp(z) = max_k z_k - log(max_k p_k) without a
    second pass of exp. TensorFlow's softmax (oneDNN's on a CPU) took 34 ms where its fused
    SparseSoftmaxCrossEntropyWithLogits took 109 (2,944 tokens x 2,000 ids, loss and gradient, one
    thread; 220 against 638 at 4,000 x 8,000; Cascade Lake Xeon, 2026-11-28, bench/loss_kernel.py).

    Off TensorFlow (JAX) the first line is written in keras.ops and differentiated by autodiff
    (XLA fuses the label gather's scatter there).

    Args:
        labels: int [...], each in [0, vocab_size).
        logits: [..., vocab_size].
        label_smoothing: eps in [0, 1).

    Returns:
        float32 [...].
    """
    if not backend.is_tensorflow():
        logits = ops.cast(logits, "float32")
        at_labels = ops.take_along_axis(logits, ops.cast(labels, "int32")[..., None], axis=-1)
        loss = ops.logsumexp(logits, axis=-1) - (1.0 - label_smoothing) * at_labels[..., 0]
        if label_smoothing:
            loss -= label_smoothing / logits.shape[-1] * ops.sum(logits, axis=-1)
        return loss
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    vocab_size = logits.shape[-1]

    @tf.custom_gradient
    def loss_and_gradient(logits):
        flat_logits = tf.reshape(logits, [-1, vocab_size])
        flat_labels = tf.reshape(labels, [-1])
        probabilities = tf.nn.softmax(flat_logits)
        log_sum_exp = (tf.reduce_max(flat_logits, axis=-1)
                       - tf.math.log(tf.reduce_max(probabilities, axis=-1)))
        loss = log_sum_exp - (1.0 - label_smoothing) * tf.gather(flat_logits, flat_labels,
                                                                  batch_dims=1)
        if label_smoothing:
            loss -= label_smoothing / vocab_size * tf.reduce_sum(flat_logits, axis=-1)

        def gradient(upstream):
            at_labels = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], axis=1)
            grad = tf.tensor_scatter_nd_add(
                probabilities - label_smoothing / vocab_size if label_smoothing else
                probabilities, at_labels, tf.fill(tf.shape(flat_labels), label_smoothing - 1.0))
            return tf.reshape(grad * tf.reshape(upstream, [-1, 1]), tf.shape(logits))

        return tf.reshape(loss, tf.shape(labels)), gradient

    return loss_and_gradient(logits)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Label-smoothed cross-entropy from logits that ignores padding targets.

    The default reduction averages over the non-padding tokens of the batch (padding gets weight
    0; any `sample_weight` multiplies in). `reduction="sum"` gives the sum over tokens, for callers
    that normalise across replicas themselves.

    Args:
        label_smoothing: epsilon_ls (0.1 in the paper).
        pad_id: target id that carries no loss.

    Example:
    >>> loss = LabelSmoothedCrossEntropy(0.1)
    >>> float(loss(np.array([[2, 0]]), np.zeros((1, 2, 4))))  # Uniform logits: log(4).
    1.386...
    """

    def __init__(self, label_smoothing=0.1, pad_id=PAD_ID, reduction="mean_with_sample_weight",
                 name="label_smoothed_cross_entropy", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def __call__(self, y_true, y_pred, sample_weight=None):
        return super().__call__(y_true, y_pred,
                                sample_weight=token_weights(y_true, sample_weight, self.pad_id))

    def call(self, y_true, y_pred):
        return smoothed_cross_entropy(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        config = super().get_config()
        config.update(label_smoothing=self.label_smoothing, pad_id=self.pad_id)
        return config
