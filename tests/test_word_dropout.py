"""Source word dropout (Sennrich & Zhang 2019): which ids it replaces, how often, and only in
training; the model reads the dropped ids."""

import keras
import numpy as np
import pytest

import keras_transformer as kt


def sentences(rng, rows=200, length=50, vocab=100):
    """Ids of real tokens, then eos, then padding of different lengths per row."""
    ids = rng.integers(0, vocab, size=(rows, length)).astype("int32")
    for row in range(rows):
        end = rng.integers(1, length)
        ids[row, end] = kt.EOS_ID
        ids[row, end + 1:] = kt.PAD_ID
    return ids


def test_replaces_real_tokens_with_unk_at_the_rate(rng):
    ids = sentences(rng)
    dropped = kt.WordDropout(0.3, seed=5)(ids, training=True).numpy()
    changed = dropped != ids
    assert (dropped[changed] == kt.UNK_ID).all()
    real = ids > kt.UNK_ID
    assert not changed[~real].any()  # padding, eos and unk itself stay
    assert 0.28 < changed[real].mean() < 0.32, changed[real].mean()


def test_only_in_training(rng):
    ids = sentences(rng)
    layer = kt.WordDropout(0.5, seed=5)
    for training in (False, None):
        np.testing.assert_array_equal(layer(ids, training=training).numpy(), ids)


def test_a_new_draw_every_call(rng):
    ids = sentences(rng)
    layer = kt.WordDropout(0.5, seed=5)
    assert (layer(ids, training=True).numpy() != layer(ids, training=True).numpy()).any()


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_rate_outside_0_1_is_refused(rate):
    with pytest.raises(ValueError, match="WordDropout rate must be in"):
        kt.WordDropout(rate)
    with pytest.raises(kt.HParamsError, match="source_word_dropout"):
        kt.hparams.get("transformer_tiny", source_word_dropout=rate)


def test_config_round_trip():
    layer = keras.layers.deserialize(keras.layers.serialize(kt.WordDropout(0.2, seed=3)))
    assert (layer.rate, layer.unk_id, layer.seed) == (0.2, kt.UNK_ID, 3)


def test_the_encoder_reads_the_dropped_ids(rng):
    """With every real token dropped and no other dropout, training encodes the sentence as
    the unknown token repeated, in place: what encoding those ids outside training gives."""
    model = kt.build_model(kt.hparams.get("transformer_tiny", dropout=0.0,
                                          source_word_dropout=0.9999999), 100)
    ids = sentences(rng, rows=4, length=12)
    all_unknown = np.where(ids > kt.UNK_ID, kt.UNK_ID, ids)
    np.testing.assert_allclose(model.encode(ids, training=True).numpy(),
                               model.encode(all_unknown, training=False).numpy(), atol=1e-6)
    assert np.abs(model.encode(ids, training=False).numpy()
                  - model.encode(all_unknown, training=False).numpy()).max() > 0.1
    assert model.get_config()["source_word_dropout"] == 0.9999999


def test_a_model_without_it_holds_no_extra_random_state():
    """Checkpoints store every random stream's state: a model trained before the option existed
    must still load, so the layer exists only where it is used."""
    plain = kt.build_model("transformer_tiny", 100)
    dropping = kt.build_model(kt.hparams.get("transformer_tiny", source_word_dropout=0.1), 100)
    assert plain.source_word_dropout_layer is None
    assert len(dropping.variables) == len(plain.variables) + 1
