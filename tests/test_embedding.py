import keras
import numpy as np
import pytest
from conftest import assert_roundtrip

from keras_transformer import SharedEmbedding


def test_embeddings_are_scaled_by_sqrt_d_model():
    layer = SharedEmbedding(vocab_size=10, d_model=16)
    ids = np.array([[3, 0, 9]])
    out = np.asarray(layer(ids))
    np.testing.assert_allclose(out, np.asarray(layer.embeddings)[ids] * 4.0, rtol=1e-6)


def test_unscaled_embeddings_and_a_bias_on_the_logits(rng):
    layer = SharedEmbedding(vocab_size=10, d_model=16, scale=False, output_bias=True)
    ids = np.array([[3, 0, 9]])
    np.testing.assert_allclose(np.asarray(layer(ids)), np.asarray(layer.embeddings)[ids])
    layer.bias.assign(rng.normal(size=10))
    hidden = rng.normal(size=(1, 2, 16)).astype("float32")
    np.testing.assert_allclose(np.asarray(layer(hidden, reverse=True)),
                               hidden @ np.asarray(layer.embeddings).T + np.asarray(layer.bias),
                               rtol=1e-5, atol=1e-5)
    assert_roundtrip(layer, ids)


def test_reverse_uses_the_same_matrix_transposed(rng):
    layer = SharedEmbedding(vocab_size=10, d_model=16)
    x = rng.normal(size=(2, 3, 16)).astype("float32")
    logits = np.asarray(layer(x, reverse=True))
    assert logits.shape == (2, 3, 10)
    np.testing.assert_allclose(logits, x @ np.asarray(layer.embeddings).T, rtol=1e-5, atol=1e-5)
    assert len(layer.weights) == 1
    kernel = layer.output_kernel()  # the transposed matrix made once, as searches do
    assert kernel.shape == (16, 10)
    np.testing.assert_allclose(layer(x, reverse=True, output_kernel=kernel), logits, rtol=1e-6)
    with pytest.raises(ValueError, match="reverse=True"):
        layer(np.array([[1]]), output_kernel=kernel)


def test_initial_scaled_embeddings_have_unit_variance():
    layer = SharedEmbedding(vocab_size=4000, d_model=64)
    assert abs(np.var(np.asarray(layer(np.arange(4000)[None]))) - 1.0) < 0.05


def test_logits_are_float32_under_mixed_precision(rng):
    layer = SharedEmbedding(vocab_size=10, d_model=8, dtype="mixed_bfloat16")
    assert layer(np.array([[1, 2]])).dtype == "bfloat16"
    assert layer(rng.normal(size=(1, 2, 8)).astype("float32"), reverse=True).dtype == "float32"
    assert layer.embeddings.dtype == "float32"
    assert layer.output_kernel().dtype == "bfloat16"  # cast once per search, not per step


def test_config_roundtrip():
    assert_roundtrip(SharedEmbedding(vocab_size=10, d_model=8), np.array([[1, 2, 3]]))
    restored = keras.layers.deserialize(keras.layers.serialize(SharedEmbedding(10, 8)))
    assert isinstance(restored, SharedEmbedding) and restored.d_model == 8
