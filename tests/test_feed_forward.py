import numpy as np
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
    assert_roundtrip(PositionwiseFeedForward(d_ff=16, relu_dropout=0.1),
                     rng.normal(size=(2, 3, 8)).astype("float32"))
