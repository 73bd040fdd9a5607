"""Ensembles: several models' probabilities averaged at every step, through one step function,
so beam search, sampling and scoring take them as they take one model."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.search import scoring
from keras_transformer.search.steps import cached_step, ensemble_step

VOCAB = 24
SOURCE = np.array([[5, 6, 7, 8, kt.EOS_ID], [9, 4, kt.EOS_ID, 0, 0]])


@pytest.fixture
def two_models():
    """Two transformer_tiny models with different random weights."""
    models = []
    for seed in (1, 2):
        keras.utils.set_random_seed(seed)
        models.append(kt.build_model("transformer_tiny", vocab_size=VOCAB))
    return models


def test_an_ensemble_of_a_model_with_itself_is_that_model(two_models):
    model = two_models[0]
    alone = kt.beam_decode(model, SOURCE, max_output_length=12, beam_size=3)
    twice = kt.beam_decode([model, model], SOURCE, max_output_length=12, beam_size=3)
    np.testing.assert_array_equal(alone[0], twice[0])
    np.testing.assert_allclose(alone[1], twice[1], atol=1e-5)


def test_each_step_averages_the_members_probabilities(two_models):
    (step_a, cache_a), (step_b, cache_b) = (cached_step(m, tf.constant(SOURCE))
                                            for m in two_models)
    step_fn, cache = ensemble_step(two_models, tf.constant(SOURCE))
    ids = tf.constant([kt.PAD_ID, kt.PAD_ID])
    for step, next_ids in enumerate(([4, 9], [11, 3])):
        mixed, cache = step_fn(ids, step, cache)
        logits_a, cache_a = step_a(ids, step, cache_a)
        logits_b, cache_b = step_b(ids, step, cache_b)
        expected = np.log((tf.nn.softmax(logits_a).numpy().astype("float64")
                           + tf.nn.softmax(logits_b).numpy()) / 2)
        np.testing.assert_allclose(mixed, expected, atol=1e-5)
        ids = tf.constant(next_ids)


def test_an_ensembles_beams_score_as_its_averaged_probabilities(two_models):
    ids, scores = kt.beam_decode(two_models, SOURCE, max_output_length=10, beam_size=3, alpha=0.6)
    batch, beams, length = ids.shape
    rows = (np.repeat(SOURCE, beams, axis=0), tf.reshape(ids, [batch * beams, length]))
    together = kt.score(two_models, *rows, alpha=0.6)
    np.testing.assert_allclose(tf.reshape(together["scores"], [batch, beams]), scores,
                               atol=1e-4)
    # Token by token: log of the mean of the members' probabilities.
    a, b = (kt.score(m, *rows)["token_log_probs"].numpy().astype("float64")
            for m in two_models)
    mask = scoring.target_mask(rows[1]).numpy()
    expected = np.where(mask, np.log((np.exp(a) + np.exp(b)) / 2), 0.0)
    np.testing.assert_allclose(together["token_log_probs"], expected, atol=1e-5)


def test_sampling_and_greedy_take_an_ensemble(two_models):
    greedy = kt.greedy_decode(two_models, SOURCE, max_output_length=8)
    beam_one = kt.beam_decode(two_models, SOURCE, max_output_length=8, beam_size=1, alpha=0.0)
    np.testing.assert_array_equal(greedy[0], beam_one[0][:, 0])
    first, again = (kt.sample_decode(two_models, SOURCE, max_output_length=8, seed=[4, 2])
                    for _ in range(2))
    np.testing.assert_array_equal(first[0], again[0])
