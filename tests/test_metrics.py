import keras
import numpy as np
import pytest

from keras_transformer import Perplexity, TokenAccuracy


def test_token_accuracy_ignores_padding():
    labels = np.array([[2, 3, 0], [1, 0, 0]])
    logits = np.zeros((2, 3, 4), "float32")
    logits[0, 0, 2] = logits[0, 1, 1] = logits[1, 0, 1] = 1.0  # right, wrong, right
    logits[:, :, 0] += np.array([[0, 0, 9], [0, 9, 9]])  # padding "predicted" as 0: ignored
    metric = TokenAccuracy()
    metric.update_state(labels, logits)
    assert float(metric.result()) == pytest.approx(2 / 3)


def test_perplexity_is_exp_of_mean_token_cross_entropy_across_batches(rng):
    metric = Perplexity()
    losses = []
    for _ in range(3):
        labels = rng.integers(1, 6, size=(2, 4))
        labels[0, 2:] = 0
        logits = rng.normal(size=(2, 4, 6)).astype("float32")
        real = labels != 0
        losses.extend(keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None)(labels[real], logits[real]))
        metric.update_state(labels, logits)
    assert float(metric.result()) == pytest.approx(np.exp(np.mean(losses)), rel=1e-5)
    metric.reset_state()
    assert float(metric.result()) == 1.0


def test_config_roundtrip():
    metric = keras.metrics.deserialize(keras.metrics.serialize(TokenAccuracy(name="acc")))
    assert isinstance(metric, TokenAccuracy) and metric.name == "acc"
    assert isinstance(keras.metrics.deserialize(keras.metrics.serialize(Perplexity())), Perplexity)
