import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import LabelSmoothedCrossEntropy, build_loss
from keras_transformer.training.losses import smoothed_cross_entropy


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_equals_hand_computed_smoothed_cross_entropy():
    logits = np.array([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4], [5.0, 5.0, 5.0, 5.0]]],
                      "float32")
    labels = np.array([[2, 3, 0]])  # the last target is padding
    eps, vocab = 0.1, 4
    expected = []
    for t in range(2):
        target = np.full(vocab, eps / vocab)
        target[labels[0, t]] += 1 - eps
        expected.append(-(target * log_softmax(logits[0, t])).sum())
    loss = LabelSmoothedCrossEntropy(label_smoothing=eps)(labels, logits)
    assert float(loss) == pytest.approx(np.mean(expected), rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_gradient_is_softmax_minus_the_smoothed_target(rng, eps, jit_compile):
    # The loss writes its gradient by hand: d loss_t / d z_t = softmax(z_t) - q_t, for every
    # token t and each token's upstream weight.
    logits = rng.normal(size=(2, 3, 5)).astype("float32") * 3
    labels = rng.integers(0, 5, size=(2, 3))
    upstream = rng.uniform(size=(2, 3)).astype("float32")

    @tf.function(jit_compile=jit_compile)
    def gradient(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = tf.reduce_sum(smoothed_cross_entropy(labels, z, eps) * upstream)
        return loss, tape.gradient(loss, z)

    loss, grad = gradient(tf.constant(logits))
    target = np.full(logits.shape, eps / 5)
    np.put_along_axis(target, labels[..., None], 1 - eps + eps / 5, axis=-1)
    softmax = np.exp(log_softmax(logits))
    np.testing.assert_allclose(grad, (softmax - target) * upstream[..., None], atol=1e-6)
    expected = -(target * log_softmax(logits)).sum(-1)
    np.testing.assert_allclose(loss, (expected * upstream).sum(), rtol=1e-5)


def test_without_smoothing_equals_keras_cross_entropy_on_real_tokens(rng):
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    labels = rng.integers(1, 7, size=(3, 5))
    labels[1, 3:] = 0
    real = labels != 0
    expected = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        labels[real], logits[real])
    assert float(LabelSmoothedCrossEntropy(0.0)(labels, logits)) == pytest.approx(
        float(expected), rel=1e-5)


def test_padding_positions_carry_no_loss(rng):
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    labels = np.array([[2, 3, 0, 0], [4, 5, 1, 0]])
    changed = logits.copy()
    changed[0, 2:] = rng.normal(size=(2, 6)) * 50
    loss = LabelSmoothedCrossEntropy(0.1)
    assert float(loss(labels, logits)) == pytest.approx(float(loss(labels, changed)), rel=1e-6)


def test_sum_reduction_and_sample_weight(rng):
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[2, 3, 0], [4, 1, 0]])
    mean = float(LabelSmoothedCrossEntropy(0.1)(labels, logits))
    total = float(LabelSmoothedCrossEntropy(0.1, reduction="sum")(labels, logits))
    assert total == pytest.approx(4 * mean, rel=1e-5)
    weighted = float(LabelSmoothedCrossEntropy(0.1, reduction="sum")(
        labels, logits, sample_weight=np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])))
    assert weighted == pytest.approx(float(LabelSmoothedCrossEntropy(0.1, reduction="sum")(
        labels[:1], logits[:1])), rel=1e-5)


def test_per_sentence_sample_weight_weights_every_token_of_the_sentence(rng):
    logits = rng.normal(size=(3, 3, 5)).astype("float32")  # batch == length on purpose
    labels = np.array([[2, 3, 0], [4, 1, 0], [2, 2, 2]])
    per_sentence = np.array([1.0, 0.0, 2.0])
    loss = LabelSmoothedCrossEntropy(0.1, reduction="sum")
    assert float(loss(labels, logits, sample_weight=per_sentence)) == pytest.approx(
        float(loss(labels, logits, sample_weight=per_sentence[:, None] * np.ones((3, 3)))),
        rel=1e-6)


def test_config_roundtrip_and_hparams():
    loss = keras.losses.deserialize(keras.losses.serialize(LabelSmoothedCrossEntropy(0.2)))
    assert isinstance(loss, LabelSmoothedCrossEntropy) and loss.label_smoothing == 0.2
    assert build_loss("table3_d_ls02").label_smoothing == 0.2
    with pytest.raises(ValueError, match="label_smoothing"):
        LabelSmoothedCrossEntropy(1.5)
