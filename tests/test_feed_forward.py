import math

import numpy as np
import pytest
from conftest import assert_roundtrip

from keras_transformer import PositionwiseFeedForward


def test_equals_eq2(rng):
    layer = PositionwiseFeedForward(d_ff=16)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    out = np.asarray(layer(x))
    w1, b1 = (np.asarray(w) for w in (layer.inner.kernel, layer.inner.bias))
    w2, b2 = (np.asarray(w) for w in (layer.outer.kernel, layer.outer.bias))
    assert w1.shape == (8, 16) and w2.shape == (16, 8)
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation, formula", [
    ("swish", lambda h: h / (1 + np.exp(-h))),  # Marian's: x sigmoid(x)
    ("gelu", lambda h: 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2))))])  # exact
def test_other_activations_take_the_place_of_the_relu(rng, activation, formula):
    layer = PositionwiseFeedForward(d_ff=16, activation=activation)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    out = np.asarray(layer(x))
    w1, b1, w2, b2 = (np.asarray(w) for w in (layer.inner.kernel, layer.inner.bias,
                                               layer.outer.kernel, layer.outer.bias))
    np.testing.assert_allclose(out, formula(x @ w1 + b1) @ w2 + b2, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="activation must be one of"):
        PositionwiseFeedForward(d_ff=16, activation="tanh")


def test_positions_are_independent(rng):
    layer = PositionwiseFeedForward(d_ff=16)
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    np.testing.assert_allclose(np.asarray(layer(x))[:, 2], np.asarray(layer(x[:, 2:3]))[:, 0],
                               atol=1e-6)


def test_relu_dropout_only_in_training(rng):
    layer = PositionwiseFeedForward(d_ff=64, relu_dropout=0.5)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x, training=False)))
    assert not np.allclose(np.asarray(layer(x, training=True)), np.asarray(layer(x)))


def test_config_roundtrip(rng):
    assert_roundtrip(PositionwiseFeedForward(d_ff=16, relu_dropout=0.1, activation="gelu"),
                     rng.normal(size=(2, 3, 8)).astype("float32"))
