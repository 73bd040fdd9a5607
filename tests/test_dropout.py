"""kt.Dropout on one device: Keras's masks, draw for draw (the replicas' own masks are checked in
tests/test_distributed.py)."""

import keras
import numpy as np
import pytest

import keras_transformer as kt


@pytest.mark.parametrize("noise_shape", [None, (None, 1, None)])
def test_one_device_draws_kerass_masks(noise_shape):
    inputs = np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32")
    ours = kt.Dropout(0.3, noise_shape=noise_shape, seed=11)
    theirs = keras.layers.Dropout(0.3, noise_shape=noise_shape, seed=11)
    for _ in range(3):  # each call advances the seed alike
        expected = theirs(inputs, training=True).numpy()
        np.testing.assert_array_equal(ours(inputs, training=True).numpy(), expected)
    assert np.count_nonzero(expected == 0) > 0
    np.testing.assert_array_equal(ours(inputs, training=False).numpy(), inputs)
    np.testing.assert_array_equal(kt.Dropout(1.0)(inputs, training=True).numpy(), 0 * inputs)


def test_it_is_a_keras_serializable():
    layer = kt.Dropout(0.25, noise_shape=(None, 1), seed=3, name="drop")
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(again) is kt.Dropout
    assert (again.rate, again.noise_shape, again.seed, again.name) == (0.25, (None, 1), 3, "drop")


def test_word_dropout_draws_what_keras_would_on_one_device():
    ids = np.arange(3, 43, dtype="int32").reshape(4, 10)
    layer = kt.WordDropout(0.5, seed=4)
    generator = keras.random.SeedGenerator(4)
    for _ in range(2):
        draw = keras.random.uniform(ids.shape, seed=generator).numpy()
        np.testing.assert_array_equal(layer(ids, training=True).numpy(),
                                      np.where(draw < 0.5, kt.UNK_ID, ids))
