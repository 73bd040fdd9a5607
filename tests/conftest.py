import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="session")
def bible_vocab_path(tmp_path_factory):
    """A 2,000-id vocabulary built from the bundled corpus, once per test session."""
    import data

    path = tmp_path_factory.mktemp("vocab") / "bible2k.model"
    data.build_vocabulary(data.corpus_texts(data.get_source("bible_en_es")), 2000, path)
    return path


@pytest.fixture
def bible_vocab(bible_vocab_path, _seeded):
    """Loaded after the test's seeding: tf.random.set_seed drops tensorflow-text's tokenizer."""
    import data

    return data.Vocabulary.load(bible_vocab_path)


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
