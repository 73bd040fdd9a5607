import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    keras.utils.set_random_seed(1234)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_ids(rng, batch, length, vocab_size, min_id=2):
    """Token ids without pad (0) or eos (1)."""
    return rng.integers(min_id, vocab_size, size=(batch, length)).astype("int32")


def assert_roundtrip(layer, *inputs, **call_kwargs):
    """from_config(get_config()) with the same weights computes the same output."""
    expected = layer(*inputs, **call_kwargs)
    clone = layer.__class__.from_config(layer.get_config())
    clone(*inputs, **call_kwargs)  # builds
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(clone(*inputs, **call_kwargs)), np.asarray(expected),
                               rtol=1e-6, atol=1e-6)
    return clone
