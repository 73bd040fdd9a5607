import json
import pathlib
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import random_ids

import keras_transformer as kt

VOCAB = 40
# The paper's choices that Marian's OPUS-MT models make otherwise.
MARIAN_OPTIONS = dict(ffn_activation="swish", attention_bias=True, sinusoid_layout="split",
                      output_bias=True, scale_embeddings=False)


def tiny_model(dtype=None, **overrides):
    return kt.build_model(kt.hparams.get("transformer_tiny", **overrides), VOCAB, dtype=dtype)


def padded_pair(rng, batch=3, source_length=7, target_length=6):
    """Source with sentence-final eos and trailing padding of different lengths per row."""
    source = random_ids(rng, batch, source_length, VOCAB)
    for row, real in enumerate(range(source_length, 0, -2)[:batch]):
        source[row, real - 1] = kt.EOS_ID
        source[row, real:] = kt.PAD_ID
    target = random_ids(rng, batch, target_length, VOCAB)
    target[:, 0] = kt.PAD_ID  # shifted right
    return source, target


def test_logits_shape_and_dtype(rng):
    logits = tiny_model()(padded_pair(rng))
    assert logits.shape == (3, 6, VOCAB) and logits.dtype == tf.float32


def test_causal_mask_later_targets_do_not_change_earlier_logits(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    logits = np.asarray(model((source, target)))
    for i in range(target.shape[1] - 1):
        changed = target.copy()
        changed[:, i + 1:] = random_ids(rng, 3, target.shape[1] - i - 1, VOCAB)
        changed_logits = np.asarray(model((source, changed)))
        np.testing.assert_allclose(changed_logits[:, :i + 1], logits[:, :i + 1], atol=1e-5)
        assert not np.allclose(changed_logits[:, i + 1:], logits[:, i + 1:])


def test_source_padding_does_not_change_logits(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    logits = np.asarray(model((source, target)))
    more_padding = np.pad(source, [(0, 0), (0, 5)])
    np.testing.assert_allclose(np.asarray(model((more_padding, target))), logits, atol=1e-5)
    # A sentence scored alone equals the same sentence in a batch padded for a longer one.
    alone = np.asarray(model((source[2:, :3], target[2:])))
    np.testing.assert_allclose(alone, logits[2:], atol=1e-5)


def _softmax_attention(queries_in, keys_in, attention, mask):
    """Eq. 1 in numpy from a MultiHeadAttention's own kernels: [batch, heads, queries, keys]."""
    def heads(x, kernel):
        y = np.asarray(x) @ np.asarray(kernel)
        return y.reshape(y.shape[0], y.shape[1], attention.num_heads, -1)
    q = heads(queries_in, attention.query_kernel)
    k = heads(keys_in, attention.key_kernel)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(mask[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def test_attention_scores_are_the_weights_the_layers_use(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    logits, weights = model((source, target), return_attention_scores=True)
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(model((source, target))))
    layers, heads = model.num_layers, model.num_heads
    assert {name: tuple(w.shape) for name, w in weights.items()} == {
        "encoder_self_attention": (3, layers, heads, 7, 7),
        "decoder_self_attention": (3, layers, heads, 6, 6),
        "encoder_decoder_attention": (3, layers, heads, 6, 7)}
    for w in weights.values():
        np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, rtol=1e-5)
    keys_real = (source != kt.PAD_ID)[:, None, None, None, :]
    assert not np.asarray(weights["encoder_self_attention"])[~np.broadcast_to(
        keys_real, weights["encoder_self_attention"].shape)].any()
    assert not np.asarray(weights["encoder_decoder_attention"])[~np.broadcast_to(
        keys_real, weights["encoder_decoder_attention"].shape)].any()
    future = np.triu(np.ones((6, 6), bool), k=1)
    assert not np.asarray(weights["decoder_self_attention"])[..., future].any()

    # Recomputed with eq. 1 from the first layers' inputs and kernels.
    source_mask = (source != kt.PAD_ID)[:, None, :]
    x = model._embed(source, model.source_embedding, model.encoder_positions,
                     model.encoder_input_dropout, False)
    expected = _softmax_attention(x, x, model.encoder_layers[0].self_attention,
                                  np.broadcast_to(source_mask, (3, 7, 7)))
    np.testing.assert_allclose(weights["encoder_self_attention"][:, 0], expected, atol=1e-5)
    decoder = model.decoder_layers[0]
    y = model._embed(target, model.embedding, model.decoder_positions,
                     model.decoder_input_dropout, False)
    y = decoder.self_attention_block(y, decoder.self_attention(
        y, attention_mask=kt.causal_mask(6)))
    expected = _softmax_attention(y, model.encode(source), decoder.encoder_decoder_attention,
                                  np.broadcast_to(source_mask, (3, 6, 7)))
    np.testing.assert_allclose(weights["encoder_decoder_attention"][:, 0], expected, atol=1e-5)


@pytest.mark.parametrize("overrides", [
    dict(position_encoding="sinusoidal"), dict(position_encoding="learned"),
    dict(embedding_sharing="none"), dict(layer_norm_position="pre"), MARIAN_OPTIONS],
    ids=["sinusoidal", "learned", "untied", "pre-norm", "marian-options"])
@pytest.mark.parametrize("cache_length", [8, None], ids=["preallocated", "growing"])
def test_step_by_step_cached_decoding_equals_full_pass(rng, overrides, cache_length):
    model = tiny_model(**overrides)
    for variable in model.weights:  # every norm a different function, no bias zero
        if "norm" in variable.path or "bias" in variable.path:
            mean = 1.0 if variable.path.endswith("gamma") else 0.0
            variable.assign(rng.normal(mean, 0.3, variable.shape))
    source, target = padded_pair(rng)
    full = np.asarray(model((source, target)))
    memory = model.encode(source)
    cache = model.init_cache(memory, kt.padding_mask(source), cache_length=cache_length)
    for step in range(target.shape[1]):
        logits, cache = model.decode_cached(target[:, step:step + 1], cache, step=step,
                                     grow_cache=cache_length is None)
        np.testing.assert_allclose(np.asarray(logits)[:, 0], full[:, step], atol=1e-5)
    held = cache["layers"][0]["self_keys"].shape[2]
    assert held == (8 if cache_length else target.shape[1])


def test_a_growing_cache_takes_chunks_in_a_compiled_loop(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    full = np.asarray(model((source, target)))

    @tf.function
    def decode_chunk(ids, cache, step):
        return model.decode_cached(ids, cache, step=step, grow_cache=True)

    cache = model.init_cache(model.encode(source), kt.padding_mask(source))
    for step in range(0, 6, 3):
        logits, cache = decode_chunk(target[:, step:step + 3], cache, tf.constant(step))
        np.testing.assert_allclose(np.asarray(logits), full[:, step:step + 3], atol=1e-5)


@pytest.mark.parametrize("cache_length, grow_cache, message", [
    (None, False, "grow_cache=True"),  # a growing cache written as a preallocated one
    (6, True, "growing cache"),  # and the other way round
])
def test_a_cache_used_as_the_other_kind_is_an_error(rng, cache_length, grow_cache, message):
    model = tiny_model()
    source, target = padded_pair(rng)
    cache = model.init_cache(model.encode(source), kt.padding_mask(source), cache_length)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        model.decode_cached(target[:, :1], cache, step=0, grow_cache=grow_cache)


def test_a_growing_cache_refuses_a_step_it_does_not_hold(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    _, cache = model.decode_cached(target[:, :2], model.init_cache(
        model.encode(source), kt.padding_mask(source)), step=0, grow_cache=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="positions a growing cache holds"):
        model.decode_cached(target[:, 3:4], cache, step=3, grow_cache=True)


def test_cached_decoding_in_chunks_and_under_xla(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    full = np.asarray(model((source, target)))

    # One graph for every step: the step index and the cache are tensors, shapes stay fixed.
    @tf.function(jit_compile=True)
    def decode_chunk(ids, cache, step):
        return model.decode_cached(ids, cache, step=step)

    cache = model.init_cache(model.encode(source), kt.padding_mask(source), cache_length=6)
    for step in range(0, 6, 2):
        logits, cache = decode_chunk(target[:, step:step + 2], cache, tf.constant(step))
        np.testing.assert_allclose(np.asarray(logits), full[:, step:step + 2], atol=1e-5)


def test_decoding_past_the_cache_is_an_error(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    cache = model.init_cache(model.encode(source), kt.padding_mask(source), cache_length=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="past the end of the cache"):
        model.decode_cached(target[:, :3], cache, step=0)


def test_one_embedding_matrix_serves_source_target_and_softmax():
    model = tiny_model()
    # Every weight is the embedding's or a layer's: there is no separate softmax kernel.
    layers = model.encoder_layers + model.decoder_layers
    assert model.count_params() == VOCAB * 32 + sum(layer.count_params() for layer in layers)


@pytest.mark.parametrize("sharing, tables", [("all", 1), ("target", 2), ("none", 3)])
def test_embedding_sharing_decides_how_many_token_matrices_there_are(sharing, tables):
    model = tiny_model(embedding_sharing=sharing)
    layers = model.encoder_layers + model.decoder_layers
    assert model.count_params() == tables * VOCAB * 32 + sum(
        layer.count_params() for layer in layers)
    assert model.get_config()["embedding_sharing"] == sharing


def test_untied_tables_are_saved_under_names_of_their_own(tmp_path):
    """A weights file names each table after the attribute holding it; numbered names would
    change with the order the layers are made in, and old files would load into the wrong
    tables."""
    import h5py

    model = tiny_model(embedding_sharing="none", layer_norm_position="pre")
    model.save_weights(tmp_path / "m.weights.h5")
    with h5py.File(tmp_path / "m.weights.h5") as saved:
        assert {"embedding", "encoder_embedding", "decoder_projection", "encoder_norm",
                "decoder_norm"} <= set(saved)
        assert "layers" not in saved  # where Keras puts layers no attribute of its own holds


def test_untied_matrices_each_serve_their_own_side(rng):
    """With embedding_sharing="none", the source table feeds only the encoder, the target table
    only the decoder's input, and the projection only the logits."""
    model = tiny_model(embedding_sharing="none")
    source, target = padded_pair(rng)
    memory, mask = np.asarray(model.encode(source)), kt.padding_mask(source)
    logits = np.asarray(model.decode(target, memory, mask))

    model.source_embedding.embeddings.assign(rng.normal(size=(VOCAB, 32)))
    assert np.abs(np.asarray(model.encode(source)) - memory).max() > 0.1
    np.testing.assert_allclose(np.asarray(model.decode(target, memory, mask)), logits, atol=1e-6)

    # A zero target table leaves the decoder's input its positions alone, whatever the ids.
    model.embedding.embeddings.assign(np.zeros((VOCAB, 32)))
    other_ids = np.where(target == kt.PAD_ID, target, (target + 1) % VOCAB)
    np.testing.assert_allclose(np.asarray(model.decode(other_ids, memory, mask)),
                               np.asarray(model.decode(target, memory, mask)), atol=1e-5)
    assert np.abs(np.asarray(model.decode(target, memory, mask)) - logits).max() > 0.01

    model.output_projection.embeddings.assign(np.zeros((VOCAB, 32)))
    assert not np.asarray(model.decode(target, memory, mask)).any()


def test_pre_norm_normalizes_each_stacks_output(rng):
    """Pre-norm layers leave their sums unnormalized; the model normalizes the encoder's output
    (the memory) and the decoder's (before the projection) once, with layers of their own."""
    model = tiny_model(layer_norm_position="pre")
    source, target = padded_pair(rng)
    memory = np.asarray(model.encode(source))
    np.testing.assert_allclose(memory.mean(-1), 0.0, atol=1e-4)
    stack = model.source_embedding(source) + model.encoder_positions(
        model.source_embedding(source))
    for layer in model.encoder_layers:
        stack = layer(stack, attention_mask=kt.padding_mask(source)[:, None, :])
    np.testing.assert_allclose(np.asarray(model.encoder_norm(stack)), memory, atol=1e-5)
    assert tiny_model().encoder_norm is None and tiny_model().decoder_norm is None


def test_learned_positions_are_separate_tables_for_encoder_and_decoder():
    model = tiny_model(position_encoding="learned")
    tables = [w for w in model.weights if "position_embeddings" in w.path]
    assert len(tables) == 2 and all(w.shape == (64, 32) for w in tables)


def test_decoding_before_any_call_builds_the_model(rng):
    model = kt.Transformer(vocab_size=VOCAB, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    source, target = padded_pair(rng)
    cache = model.init_cache(model.encode(source), kt.padding_mask(source), cache_length=6)
    step_logits, _ = model.decode_cached(target[:, :1], cache, step=0)
    full = model((source, target))  # builds nothing twice
    np.testing.assert_allclose(np.asarray(step_logits)[:, 0], np.asarray(full)[:, 0], atol=1e-5)


def test_a_step_given_the_output_kernel_made_once_projects_as_without(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    cache = model.init_cache(model.encode(source), kt.padding_mask(source))
    # Every cache tensor has the batch first, so a search may repeat and reorder all of them.
    assert all(t.shape[0] == source.shape[0] for t in tf.nest.flatten(cache))
    made_here, _ = model.decode_cached(target[:, :1], cache, step=0, grow_cache=True)
    given, _ = model.decode_cached(target[:, :1], cache, step=0, grow_cache=True,
                                   output_kernel=model.output_kernel())
    np.testing.assert_allclose(given, made_here, rtol=1e-6)


def test_step_may_be_any_integer_tensor(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    full = np.asarray(model((source, target)))
    cache = model.init_cache(model.encode(source), kt.padding_mask(source), cache_length=6)
    for step in range(2):
        logits, cache = model.decode_cached(target[:, step:step + 1], cache,
                                            step=tf.constant(step, tf.int64))
        np.testing.assert_allclose(np.asarray(logits)[:, 0], full[:, step], atol=1e-5)


def test_dropout_only_in_training(rng):
    model = tiny_model(dropout=0.3)
    pair = padded_pair(rng)
    np.testing.assert_array_equal(np.asarray(model(pair)), np.asarray(model(pair)))
    assert not np.allclose(np.asarray(model(pair, training=True)), np.asarray(model(pair)))


@pytest.mark.parametrize("keep", ["input", "residual"])
def test_residual_dropout_acts_on_embedding_sums_and_sublayer_outputs(rng, keep):
    """Section 5.4: dropout on each sub-layer output and on the embedding + position sums."""
    model = tiny_model(dropout=0.5)
    input_dropouts = [model.encoder_input_dropout, model.decoder_input_dropout]
    residual_dropouts = [
        block.dropout_layer for layer in model.encoder_layers + model.decoder_layers
        for block in (layer.self_attention_block, layer.feed_forward_block,
                      getattr(layer, "encoder_decoder_attention_block", None)) if block]
    for dropout in residual_dropouts if keep == "input" else input_dropouts:
        dropout.rate = 0.0
    pair = padded_pair(rng)
    assert not np.allclose(np.asarray(model(pair, training=True)), np.asarray(model(pair)))


@pytest.mark.parametrize("policy,compute_dtype", [("mixed_bfloat16", tf.bfloat16),
                                                   ("mixed_float16", tf.float16)])
def test_mixed_precision_computes_in_16_bits_with_float32_weights_and_logits(
        rng, policy, compute_dtype):
    model = tiny_model(attention_dropout=0.1, dtype=policy)
    source, target = padded_pair(rng)
    logits = model((source, target), training=True)
    assert logits.dtype == tf.float32 and np.all(np.isfinite(logits))
    assert model.encode(source).dtype == compute_dtype
    assert {w.dtype for w in model.weights} == {"float32"}
    # The cache keeps one dtype from step to step, so it can be a tf.while_loop variable.
    cache = model.init_cache(tf.cast(model.encode(source), tf.float32), kt.padding_mask(source),
                             cache_length=4)
    _, next_cache = model.decode_cached(target[:, :1], cache, step=0)
    assert tf.nest.map_structure(lambda t: t.dtype, next_cache) == tf.nest.map_structure(
        lambda t: t.dtype, cache)


def test_get_config_from_config(rng):
    model = tiny_model(d_k=5, d_v=3, position_encoding="learned", **MARIAN_OPTIONS)
    clone = kt.Transformer.from_config(model.get_config())
    clone.build()
    clone.set_weights(model.get_weights())
    pair = padded_pair(rng)
    np.testing.assert_allclose(np.asarray(clone(pair)), np.asarray(model(pair)), atol=1e-6)


def test_save_and_load_keras_file(rng, tmp_path):
    model = tiny_model(d_v=6, embedding_sharing="none", **MARIAN_OPTIONS)
    pair = padded_pair(rng)
    expected = np.asarray(model(pair))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, kt.Transformer) and loaded.d_v == 6
    assert loaded.embedding_sharing == "none" and len(loaded.weights) == len(model.weights)
    np.testing.assert_allclose(np.asarray(loaded(pair)), expected, atol=1e-6)


def test_keras_file_loads_in_a_fresh_process(rng, tmp_path):
    model = tiny_model()
    pair = padded_pair(rng)
    model(pair)
    model.save(tmp_path / "m.keras")
    np.savez(tmp_path / "io.npz", source=pair[0], target=pair[1], logits=np.asarray(model(pair)))
    script = textwrap.dedent(f"""
        import json, numpy as np, keras
        import keras_transformer  # registers the custom objects
        io = np.load({str(tmp_path / "io.npz")!r})
        model = keras.models.load_model({str(tmp_path / "m.keras")!r})  # safe_mode by default
        logits = np.asarray(model((io["source"], io["target"])))
        print(json.dumps(float(np.abs(logits - io["logits"]).max())))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) < 1e-6


def test_nothing_turns_keras_safe_mode_off():
    """The project never loads a `.keras` file with safe_mode off (so a file's lambdas and
    pickled code never run); the test above shows the model loads with it on."""
    root = pathlib.Path(kt.__file__).parent.parent
    for package in ("keras_transformer", "data", "model_dir", "trainer", "export", "demo", "bench",
                    "reliability", "notebooks"):
        for path in [*(root / package).rglob("*.py"), *(root / package).rglob("*.ipynb")]:
            text = path.read_text(encoding="utf-8")
            for unsafe in ("safe_mode=False", "enable_unsafe_deserialization"):
                assert unsafe not in text, f"{path} uses {unsafe}"


@pytest.mark.parametrize("bad_id", [VOCAB, -1])
def test_out_of_range_ids_are_named(rng, bad_id):
    model = tiny_model()
    source, target = padded_pair(rng)
    source[0, 0] = bad_id
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"source_ids holds token ids outside \[0, {VOCAB}\)"):
        model((source, target))
    source[0, 0] = 2
    target[1, 1] = bad_id
    with pytest.raises(tf.errors.InvalidArgumentError, match="target_ids holds token ids outside"):
        model((source, target))


def test_out_of_range_ids_are_caught_inside_tf_function(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    source[0, 0] = VOCAB + 5
    with pytest.raises(tf.errors.InvalidArgumentError, match="source_ids holds token ids"):
        tf.function(model)((source, target))


def test_wrong_dtype_and_rank_are_named(rng):
    model = tiny_model()
    source, target = padded_pair(rng)
    with pytest.raises(TypeError, match="source_ids must hold integer token ids, got float32"):
        model((source.astype("float32"), target))
    with pytest.raises(ValueError, match=r"target_ids must have shape \[batch, length\]"):
        model((source, target[..., None]))
    with pytest.raises(ValueError, match="pair"):
        model(source)


def test_invalid_constructor_arguments():
    with pytest.raises(ValueError, match="not divisible"):
        kt.Transformer(vocab_size=10, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="position_encoding"):
        kt.Transformer(vocab_size=10, position_encoding="rotary")


def test_cached_decoding_refuses_rows_that_do_not_group_into_the_cache_sentences(rng):
    model = kt.build_model("transformer_tiny", 50)
    source = random_ids(rng, 2, 5, 50)
    cache = model.init_cache(model.encode(source), kt.padding_mask(source))

    def hypotheses(rows):  # the self-attention buffers with a row per hypothesis
        return dict(cache, layers=[dict(layer, **{name: tf.gather(layer[name], rows) for name in (
            "self_keys", "self_values")}) for layer in cache["layers"]])

    logits, _ = model.decode_cached(random_ids(rng, 4, 1, 50), hypotheses([0, 0, 1, 1]), step=0,
                                    grow_cache=True)
    assert logits.shape == (4, 1, 50)
    with pytest.raises(tf.errors.InvalidArgumentError, match="k rows per sentence of the cache"):
        model.decode_cached(random_ids(rng, 3, 1, 50), hypotheses([0, 0, 1]), step=0,
                            grow_cache=True)
