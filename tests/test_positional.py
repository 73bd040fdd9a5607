import numpy as np
import pytest
import tensorflow as tf
from conftest import assert_roundtrip

import keras_transformer as kt
from keras_transformer import LearnedPositionEmbedding, SinusoidalPositionEncoding


def paper_formula(length, d_model):
    pe = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            pe[pos, 2 * i] = np.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, 2 * i + 1] = np.cos(pos / 10000 ** (2 * i / d_model))
    return pe


def test_sinusoids_equal_the_papers_formula():
    out = np.asarray(SinusoidalPositionEncoding()(np.zeros((2, 50, 16), "float32")))
    assert out.shape == (50, 16)
    np.testing.assert_allclose(out, paper_formula(50, 16), atol=2e-5)


def marian_formula(length, d_model):
    """Hugging Face's MarianSinusoidalPositionalEmbedding._init_weight, in numpy."""
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / d_model)
                              for j in range(d_model)] for pos in range(length)])
    out = np.zeros((length, d_model))
    out[:, :d_model // 2] = np.sin(position_enc[:, 0::2])
    out[:, d_model // 2:] = np.cos(position_enc[:, 1::2])
    return out


def test_split_sinusoids_equal_marians_table():
    layer = SinusoidalPositionEncoding(layout="split")
    np.testing.assert_allclose(np.asarray(layer(np.zeros((1, 50, 16), "float32"))),
                               marian_formula(50, 16), atol=2e-5)
    np.testing.assert_allclose(np.asarray(layer(np.zeros((1, 3, 16)), start_index=47)),
                               marian_formula(50, 16)[47:], atol=2e-5)
    with pytest.raises(ValueError, match="layout must be one of"):
        SinusoidalPositionEncoding(layout="concatenated")


def test_sinusoids_start_index_shifts_positions():
    layer = SinusoidalPositionEncoding()
    full = np.asarray(layer(np.zeros((1, 10, 8), "float32")))
    np.testing.assert_allclose(np.asarray(layer(np.zeros((1, 3, 8), "float32"), start_index=7)),
                               full[7:], atol=1e-6)


def test_sinusoids_accept_any_length():
    assert SinusoidalPositionEncoding()(np.zeros((1, 5000, 4), "float32")).shape == (5000, 4)


def test_learned_positions_slice_the_table():
    layer = LearnedPositionEmbedding(max_positions=12)
    out = np.asarray(layer(np.zeros((2, 5, 8), "float32"), start_index=3))
    np.testing.assert_array_equal(out, np.asarray(layer.position_embeddings)[3:8])


def test_learned_positions_refuse_lengths_past_the_table():
    layer = LearnedPositionEmbedding(max_positions=4)
    with pytest.raises(ValueError, match="max_positions=4"):
        layer(np.zeros((1, 5, 8), "float32"))

    @tf.function(input_signature=[tf.TensorSpec([1, None, 8])])
    def dynamic(x):
        return layer(x)

    with pytest.raises(tf.errors.InvalidArgumentError, match="max_positions=4"):
        dynamic(np.zeros((1, 5, 8), "float32"))


def test_config_roundtrip():
    x = np.zeros((1, 3, 8), "float32")
    assert_roundtrip(SinusoidalPositionEncoding(max_wavelength=100), x)
    assert_roundtrip(LearnedPositionEmbedding(max_positions=6), x)


def test_configs_saved_before_the_rename_load():
    """Saved configs (kt-classify's classifier.keras holds the Transformer's) called the position
    table max_length before 0.1.0."""
    old = dict(LearnedPositionEmbedding(max_positions=6).get_config())
    old["max_length"] = old.pop("max_positions")
    assert LearnedPositionEmbedding.from_config(old).max_positions == 6
    config = kt.Transformer(vocab_size=20, d_model=8, d_ff=16, num_heads=2, num_layers=1,
                            position_encoding="learned", max_positions=7).get_config()
    config["max_length"] = config.pop("max_positions")
    assert kt.Transformer.from_config(config).max_positions == 7
