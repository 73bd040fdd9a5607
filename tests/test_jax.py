"""The model library under Keras's JAX backend against TensorFlow's: the same logits, loss and
gradients from the same weights; `model.fit` with token-exact accumulation; a cooldown that moves
under a traced step; N devices = 1 device; weights files (with the optimizer's state) shared both
ways. tests/jax_checks.py runs the JAX half in one subprocess with 4 host CPU devices."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_accumulation import VOCAB, batch_of_unequal_rows

import keras_transformer as kt


def tiny():
    """transformer_tiny with one layer a side: the JAX half's compiles grow with the layers."""
    hp = kt.hparams.get("transformer_tiny", dropout=0.0, num_layers=1)
    keras.utils.set_random_seed(3)
    return hp, kt.build_model(hp, VOCAB)


def compiled(hp, model):
    model.compile(optimizer=kt.build_optimizer(hp, train_steps=100), loss=kt.build_loss(hp))
    model.optimizer.build(model.trainable_variables)
    return model


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """{"tf": TensorFlow's results, "jax": the subprocess's arrays, "facts": its facts}."""
    work = tmp_path_factory.mktemp("jax")
    (source, target_input), target = batch_of_unequal_rows()
    np.savez(work / "reference.npz", source=source, target_input=target_input, target=target)
    hp, model = tiny()
    model.save_weights(work / "initial.weights.h5")
    tf_results = {"logits": model((source, target_input)).numpy()}
    with tf.GradientTape() as tape:
        loss = kt.build_loss(hp)(target, model((source, target_input)))
    tf_results["loss"] = loss.numpy()
    tf_results["gradients"] = [g.numpy() for g in tape.gradient(
        loss, model.trainable_variables)]
    compiled(hp, model)
    for _ in range(2):
        model.train_on_batch((source, target_input), target)
    model.save_weights(work / "tf_trained.weights.h5")
    tf_results["trained_logits"] = model((source, target_input)).numpy()

    # LLVM at -O0 without its expensive passes: XLA's compiles dominate the JAX half, which
    # then took 72-78 s against 92-122 (alternating, two each, Cascade Lake, 2026-11-28). Not
    # for TensorFlow's XLA tests: their compiled steps run long enough to lose more than that.
    environment = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                   "XLA_FLAGS": "--xla_force_host_platform_device_count=4 "
                                "--xla_backend_optimization_level=0 "
                                "--xla_llvm_disable_expensive_passes=true"}
    checks = pathlib.Path(__file__).with_name("jax_checks.py")
    run = subprocess.run([sys.executable, str(checks), str(work)], env=environment,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return {"tf": tf_results, "jax": dict(np.load(work / "jax.npz")),
            "facts": json.loads((work / "jax.json").read_text()), "work": work,
            "batch": ((source, target_input), target)}


def test_logits_loss_and_gradients_equal_tensorflows(both):
    tf_results, jax_results = both["tf"], both["jax"]
    assert both["facts"]["backend"] == "jax"
    # 1 encoder and 1 decoder layer's attention (3) in the forward pass and in the gradient's
    assert both["facts"]["fused_attention_calls"] == 6
    np.testing.assert_allclose(jax_results["logits"], tf_results["logits"], atol=2e-5)
    np.testing.assert_allclose(jax_results["loss"], tf_results["loss"], rtol=1e-6)
    for i, gradient in enumerate(tf_results["gradients"]):
        np.testing.assert_allclose(jax_results[f"gradient_{i}"], gradient, atol=1e-6,
                                   err_msg=f"gradient {i}")


def test_fit_accumulates_micro_batches_token_exactly(both):
    jax_results, facts = both["jax"], both["facts"]
    whole = jax_results["accumulated_1"]
    for steps in (4,):  # micro-batches of 18, 15, 3 and 4 real tokens
        np.testing.assert_allclose(jax_results[f"accumulated_{steps}"], whole, atol=2e-6)
        assert facts[f"accumulated_{steps}_loss"] == pytest.approx(facts["accumulated_1_loss"],
                                                                   rel=1e-6)
        assert facts[f"accumulated_{steps}_traces"] == 1
    assert facts["batch_shape"] == [8, 9, 9]


def test_a_cooldown_moves_under_a_traced_step(both):
    facts = both["facts"]
    first, second = facts["movement_per_update"]
    # The 19th update moved; the rate fell to zero for the 20th (of the 20-step run).
    assert first > 1e-4 and second == 0.0
    assert "traced into a jax train step as a constant" in facts["plain_adam_refused"]
    # Between two steps JAX's fit holds the window outside its variables: moving it then would
    # be lost, so it is refused until the callback reads `self.model`.
    assert "read `self.model` in the callback" in facts["unsynced_refused"]


def test_weights_and_optimizer_state_cross_between_backends(both):
    facts, work = both["facts"], both["work"]
    (source, target_input), _ = both["batch"]
    losses = facts["losses_20"]
    assert facts["steps_20"] == 20 and losses[-1] < 0.8 * losses[0]
    hp, model = tiny()
    compiled(hp, model).load_weights(work / "jax_trained.weights.h5")
    assert int(model.optimizer.iterations.numpy()) == 20
    np.testing.assert_allclose(model((source, target_input)).numpy(),
                               both["jax"]["trained_logits"], atol=2e-5)
    assert facts["tf_trained_steps"] == 2
    np.testing.assert_allclose(both["jax"]["tf_trained_logits"], both["tf"]["trained_logits"],
                               atol=2e-5)


def test_n_devices_train_as_one(both):
    jax_results = both["jax"]
    assert both["facts"]["device_count"] == 4
    # Dropout on: the masks of a global batch do not depend on its shards.
    np.testing.assert_allclose(jax_results["devices_4"], jax_results["devices_1"], atol=2e-6)


def test_word_dropout_draws_under_jax(both):
    dropout = both["facts"]["word_dropout"]
    assert 0.4 < dropout["unknown_share"] < 0.6 and dropout["rest_kept"]


def test_the_model_library_needs_no_tensorflow_under_jax(both):
    facts = both["facts"]
    # Its import was refused: every check above ran without it.
    assert facts["tensorflow_loaded"] is False
    assert "kt.beam_decode runs on Keras's TensorFlow backend" in facts["beam_decode_refused"]
