import numpy as np
import pytest
from conftest import assert_roundtrip

from keras_transformer import DecoderLayer, EncoderLayer

ARGS = dict(num_heads=2, d_ff=32, d_k=4, d_v=6)


def test_encoder_layer_is_two_post_norm_residual_blocks(rng):
    layer = EncoderLayer(**ARGS)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.ones((2, 1, 5), bool)
    out = np.asarray(layer(x, attention_mask=mask))
    # LayerNorm(x + Sublayer(x)) twice (section 3.1), recomposed from the layer's own parts.
    y = layer.self_attention_block.norm(x + layer.self_attention(x, attention_mask=mask))
    expected = layer.feed_forward_block.norm(y + layer.feed_forward(y))
    np.testing.assert_allclose(out, np.asarray(expected), atol=1e-5)
    # Post-norm: every position's output is normalized.
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-4)


def test_decoder_layer_is_three_post_norm_residual_blocks(rng):
    layer = DecoderLayer(**ARGS)
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    memory = rng.normal(size=(2, 6, 8)).astype("float32")
    causal = np.tril(np.ones((4, 4), bool))[None]
    out = np.asarray(layer(x, memory, self_attention_mask=causal))
    y = layer.self_attention_block.norm(x + layer.self_attention(x, attention_mask=causal))
    z = layer.encoder_decoder_attention_block.norm(y + layer.encoder_decoder_attention(y, memory))
    expected = layer.feed_forward_block.norm(z + layer.feed_forward(z))
    np.testing.assert_allclose(out, np.asarray(expected), atol=1e-5)


def layer_norm(layer_normalization, x, epsilon=1e-6):
    """LayerNorm over the last axis in NumPy, with a Keras layer's gain and bias."""
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return ((x - mean) / np.sqrt(variance + epsilon) * np.asarray(layer_normalization.gamma)
            + np.asarray(layer_normalization.beta))


def randomize_norms(layer, rng):
    """Every layer normalization of `layer` a different function (not the identity), so a test
    notices one used in another's place."""
    for variable in layer.weights:
        if "layer_norm" in variable.path:
            mean = 1.0 if variable.path.endswith("gamma") else 0.0
            variable.assign(rng.normal(mean, 0.3, variable.shape))


def test_pre_norm_encoder_layer_normalizes_what_each_sublayer_reads(rng):
    layer = EncoderLayer(**ARGS, layer_norm_position="pre")
    layer.build((2, 5, 8))
    randomize_norms(layer, rng)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.ones((2, 1, 5), bool)
    out = np.asarray(layer(x, attention_mask=mask))
    # x + Sublayer(LayerNorm(x)) twice; the sums themselves are not normalized.
    read = layer_norm(layer.self_attention_block.norm, x)
    y = x + np.asarray(layer.self_attention(read, attention_mask=mask))
    expected = y + np.asarray(layer.feed_forward(layer_norm(layer.feed_forward_block.norm, y)))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert np.abs(out.mean(-1)).max() > 0.05


def test_pre_norm_decoder_layer_normalizes_what_each_sublayer_reads(rng):
    layer = DecoderLayer(**ARGS, layer_norm_position="pre")
    layer.build((2, 4, 8), (2, 6, 8))
    randomize_norms(layer, rng)
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    memory = rng.normal(size=(2, 6, 8)).astype("float32")
    causal = np.tril(np.ones((4, 4), bool))[None]
    out = np.asarray(layer(x, memory, self_attention_mask=causal))
    y = x + np.asarray(layer.self_attention(layer_norm(layer.self_attention_block.norm, x),
                                            attention_mask=causal))
    z = y + np.asarray(layer.encoder_decoder_attention(
        layer_norm(layer.encoder_decoder_attention_block.norm, y), memory))
    expected = z + np.asarray(layer.feed_forward(layer_norm(layer.feed_forward_block.norm, z)))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_encoder_ignores_content_at_padded_positions(rng):
    layer = EncoderLayer(**ARGS)
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    mask = np.array([[[True] * 4 + [False] * 2]])
    changed = x.copy()
    changed[:, 4:] = rng.normal(size=(1, 2, 8)) * 10
    np.testing.assert_allclose(np.asarray(layer(x, attention_mask=mask))[:, :4],
                               np.asarray(layer(changed, attention_mask=mask))[:, :4], atol=1e-5)


def test_residual_dropout_only_in_training(rng):
    layer = EncoderLayer(**ARGS, dropout=0.3)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x, training=False)))
    assert not np.allclose(np.asarray(layer(x, training=True)), np.asarray(layer(x)))


@pytest.mark.parametrize("position", ["post", "pre"])
def test_decoder_cache_equals_full_pass(rng, position):
    layer = DecoderLayer(**ARGS, layer_norm_position=position)
    layer.build((2, 5, 8), (2, 3, 8))
    randomize_norms(layer, rng)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    memory_mask = np.array([[[True, True, True]], [[True, True, False]]])
    full = np.asarray(layer(x, memory, self_attention_mask=np.tril(np.ones((5, 5), bool))[None],
                            memory_mask=memory_mask))
    cache = layer.init_cache(memory, cache_length=5)
    assert cache["self_keys"].shape == (2, 2, 5, 4) and cache["self_values"].shape == (2, 2, 5, 6)
    for t in range(5):
        out, cache = layer.call_cached(x[:, t:t + 1], cache,
                                       self_attention_mask=(np.arange(5) <= t)[None, None],
                                       memory_mask=memory_mask, cache_index=t)
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, t], atol=1e-5)


def test_hypotheses_sharing_a_memory_row_decode_as_with_the_memory_tiled(rng):
    # Beam search keeps the encoder's keys and values once per sentence; its k hypotheses
    # (consecutive rows) attend as one query of k positions.
    layer = DecoderLayer(**ARGS)
    copies = 3
    memory = rng.normal(size=(2, 4, 8)).astype("float32")
    memory_mask = np.array([[[True] * 4], [[True, True, False, False]]])
    x = rng.normal(size=(2 * copies, 4, 8)).astype("float32")
    layer.build(x.shape, memory.shape)
    tiled = layer.init_cache(np.repeat(memory, copies, axis=0))
    # The self-attention buffers hold a row per hypothesis either way.
    shared = dict(layer.init_cache(memory), self_keys=tiled["self_keys"],
                  self_values=tiled["self_values"])
    assert shared["memory_keys"].shape[0] == 2 and tiled["memory_keys"].shape[0] == 6
    for t in (0, 2):  # two positions a step: a sentence's query is copies x 2 positions long
        causal = (np.arange(t + 2)[None, :] <= t + np.arange(2)[:, None])[None]
        expected, tiled = layer.call_cached(x[:, t:t + 2], tiled, causal,
                                            np.repeat(memory_mask, copies, axis=0))
        out, shared = layer.call_cached(x[:, t:t + 2], shared, causal, memory_mask)
        assert out.shape == (6, 2, 8)
        np.testing.assert_allclose(np.asarray(out), np.asarray(expected), atol=1e-5)


def test_config_roundtrip(rng):
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    assert_roundtrip(EncoderLayer(**ARGS, dropout=0.2, attention_dropout=0.1, relu_dropout=0.1), x)
    assert_roundtrip(DecoderLayer(**ARGS, layer_norm_epsilon=1e-5, layer_norm_position="pre"),
                     x, x)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_normalization_is_keras_own_with_its_gradient_written_out(rng, policy):
    """The same outputs as keras.layers.LayerNormalization, to the bit, and the same gradients
    with respect to the inputs, gamma and beta within float32 rounding (the written-out formula
    against automatic differentiation of Keras's)."""
    import keras
    import tensorflow as tf

    from keras_transformer.layers.layer_norm import LayerNormalization

    x = rng.normal(1.0, 3.0, size=(3, 5, 16)).astype("float32")
    upstream = rng.normal(size=(3, 5, 16)).astype("float32")
    weights = [rng.normal(1.0, 0.5, 16).astype("float32"), rng.normal(0.0, 0.5, 16).astype(
        "float32")]
    keras.mixed_precision.set_global_policy(policy)
    try:
        results = []
        for layer in (LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(
                epsilon=1e-6)):
            layer.build(x.shape)
            layer.set_weights(weights)
            inputs = tf.cast(x, layer.compute_dtype)
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                outputs = layer(inputs)
                loss = tf.reduce_sum(tf.cast(outputs, "float32") * upstream)
            gradients = tape.gradient(loss, [inputs, layer.gamma, layer.beta])
            results.append([np.asarray(tf.cast(value, "float32"))
                            for value in [outputs, *gradients]])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    (ours, *our_gradients), (keras_own, *keras_gradients) = results
    np.testing.assert_array_equal(ours, keras_own)
    for name, a, b in zip(("inputs", "gamma", "beta"), our_gradients, keras_gradients):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max(), err_msg=name)
