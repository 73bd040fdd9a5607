import numpy as np
import pytest
from conftest import assert_roundtrip

from keras_transformer import MultiHeadAttention, scaled_dot_product_attention


def numpy_attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V for one head: q [tq, dk], k [tk, dk], v [tk, dv]."""
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v, weights


def test_scaled_dot_product_attention_equals_numpy(rng):
    b, tq, tk, h, dk, dv = 2, 3, 5, 2, 4, 6
    q, k = rng.normal(size=(b, h, tq, dk)), rng.normal(size=(b, h, tk, dk))
    v = rng.normal(size=(b, h, tk, dv))
    mask = rng.random((b, tq, tk)) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    out, weights = scaled_dot_product_attention(
        q.astype("float32"), k.astype("float32"), v.astype("float32"), mask)
    assert out.shape == (b, h, tq, dv) and weights.shape == (b, h, tq, tk)
    for i in range(b):
        for j in range(h):
            expected, expected_weights = numpy_attention(q[i, j], k[i, j], v[i, j], mask[i])
            np.testing.assert_allclose(np.asarray(out)[i, j], expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.asarray(weights)[i, j], expected_weights, atol=1e-6)


def test_a_mask_without_batch_axis_applies_to_queries_not_heads(rng):
    # Four heads and four queries: a mask broadcast along the wrong axis would go unnoticed.
    q = rng.normal(size=(2, 4, 4, 3)).astype("float32")
    causal = np.tril(np.ones((4, 4), bool))
    out_2d, _ = scaled_dot_product_attention(q, q, q, causal)
    out_3d, _ = scaled_dot_product_attention(q, q, q, np.broadcast_to(causal, (2, 4, 4)))
    np.testing.assert_allclose(np.asarray(out_2d), np.asarray(out_3d), atol=1e-6)


def test_fully_masked_query_gives_finite_output(rng):
    q = rng.normal(size=(1, 1, 2, 4)).astype("float32")
    out, weights = scaled_dot_product_attention(q, q, q, np.zeros((1, 2, 2), bool))
    assert np.all(np.isfinite(out)) and np.allclose(np.asarray(weights), 0.5)


def test_multi_head_attention_equals_numpy_with_independent_dk_dv(rng):
    # d_k = 3 and d_v = 5 have nothing to do with d_model / h = 4 (Table 3 rows A and B).
    d_model, h, dk, dv = 8, 2, 3, 5
    layer = MultiHeadAttention(num_heads=h, d_k=dk, d_v=dv)
    query = rng.normal(size=(2, 4, d_model)).astype("float32")
    memory = rng.normal(size=(2, 6, d_model)).astype("float32")
    mask = np.ones((2, 1, 6), bool)
    mask[1, 0, 4:] = False
    out = np.asarray(layer(query, memory, attention_mask=mask))
    assert out.shape == (2, 4, d_model)
    wq, wk, wv, wo = (np.asarray(w) for w in
                      (layer.query_kernel, layer.key_kernel, layer.value_kernel,
                       layer.output_kernel))
    assert wq.shape == (d_model, h * dk) and wv.shape == (d_model, h * dv)
    assert wo.shape == (h * dv, d_model)
    for i in range(2):
        heads = [numpy_attention(query[i] @ wq[:, j * dk:(j + 1) * dk],
                                 memory[i] @ wk[:, j * dk:(j + 1) * dk],
                                 memory[i] @ wv[:, j * dv:(j + 1) * dv],
                                 np.broadcast_to(mask[i], (4, 6)))[0] for j in range(h)]
        np.testing.assert_allclose(out[i], np.concatenate(heads, -1) @ wo, rtol=1e-5, atol=1e-5)


def test_projection_biases_are_added_after_each_of_the_four_matrices(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=3, d_v=5, use_bias=True)
    query = rng.normal(size=(2, 4, 8)).astype("float32")
    memory = rng.normal(size=(2, 6, 8)).astype("float32")
    layer(query, memory)
    for bias in (layer.query_bias, layer.key_bias, layer.value_bias, layer.output_bias):
        assert not np.any(bias.numpy())  # they start at zero
        bias.assign(rng.normal(size=bias.shape))
    out = np.asarray(layer(query, memory))
    wq, wk, wv, wo, bq, bk, bv, bo = (np.asarray(w) for w in (
        layer.query_kernel, layer.key_kernel, layer.value_kernel, layer.output_kernel,
        layer.query_bias, layer.key_bias, layer.value_bias, layer.output_bias))
    for i in range(2):
        q, k, v = query[i] @ wq + bq, memory[i] @ wk + bk, memory[i] @ wv + bv
        heads = [numpy_attention(q[:, j * 3:(j + 1) * 3], k[:, j * 3:(j + 1) * 3],
                                 v[:, j * 5:(j + 1) * 5], np.ones((4, 6), bool))[0]
                 for j in range(2)]
        np.testing.assert_allclose(out[i], np.concatenate(heads, -1) @ wo + bo, rtol=1e-5,
                                   atol=1e-5)
    assert len(MultiHeadAttention(num_heads=2, d_k=3).weights) == 0  # unbuilt: none yet
    assert_roundtrip(layer, query, memory)


def test_masked_keys_do_not_influence_output(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=4)
    query = rng.normal(size=(1, 3, 8)).astype("float32")
    memory = rng.normal(size=(1, 5, 8)).astype("float32")
    mask = np.array([[[True, True, True, False, False]]])
    changed = memory.copy()
    changed[:, 3:] = rng.normal(size=(1, 2, 8)) * 100
    np.testing.assert_allclose(np.asarray(layer(query, memory, attention_mask=mask)),
                               np.asarray(layer(query, changed, attention_mask=mask)), atol=1e-6)


def test_self_attention_cache_equals_full_causal_attention(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=4, d_v=3)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    causal = np.tril(np.ones((5, 5), bool))[None]
    full = np.asarray(layer(x, attention_mask=causal))
    cache = (np.zeros((2, 2, 7, 4), "float32"), np.zeros((2, 2, 7, 3), "float32"))
    for t in range(5):
        mask = (np.arange(7) <= t)[None, None, :]
        out, cache = layer(x[:, t:t + 1], attention_mask=mask, cache=cache, cache_index=t)
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, t], atol=1e-5)


def test_precomputed_memory_cache_equals_recomputation(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=4)
    query = rng.normal(size=(2, 3, 8)).astype("float32")
    memory = rng.normal(size=(2, 6, 8)).astype("float32")
    expected = np.asarray(layer(query, memory))
    out, _ = layer(query, cache=layer.compute_key_value(memory))
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-6)


def test_attention_dropout_follows_the_layer_dtype_policy(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=4, dropout=0.1, dtype="mixed_bfloat16")
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    assert layer(x, training=True).dtype == "bfloat16"


def test_attention_dropout_only_in_training(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=4, dropout=0.5)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x, training=False)))
    assert not np.allclose(np.asarray(layer(x, training=True)), np.asarray(layer(x)))


def test_return_attention_scores_rows_sum_to_one(rng):
    layer = MultiHeadAttention(num_heads=4, d_k=2, output_dim=6)
    out, weights = layer(rng.normal(size=(2, 3, 8)).astype("float32"),
                         return_attention_scores=True)
    assert out.shape == (2, 3, 6) and weights.shape == (2, 4, 3, 3)
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-5)


def test_config_roundtrip(rng):
    layer = MultiHeadAttention(num_heads=2, d_k=3, d_v=5, output_dim=7, dropout=0.1)
    clone = assert_roundtrip(layer, rng.normal(size=(2, 4, 8)).astype("float32"),
                             rng.normal(size=(2, 6, 8)).astype("float32"))
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize("d_v", [None, 4])
def test_d_v_defaults_to_d_k(d_v):
    assert MultiHeadAttention(num_heads=2, d_k=4, d_v=d_v).d_v == 4
