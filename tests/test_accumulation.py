"""Gradient accumulation (`compile(accumulate_steps=K)`): K micro-batches make exactly the
update of their union, weighted by real target tokens (the two-replica case is in
tests/test_distributed.py)."""

import functools

import keras
import numpy as np
import pytest

import keras_transformer as kt

VOCAB = 30


def batch_of_unequal_rows():
    """((source, target_input), target_output): 8 rows whose real target tokens differ a lot
    between the halves and quarters a split into 2 or 4 micro-batches makes."""
    rng = np.random.default_rng(7)
    source = rng.integers(2, VOCAB, (8, 9)).astype("int32")
    target = rng.integers(2, VOCAB, (8, 9)).astype("int32")
    for row, (source_length, target_length) in enumerate(
            [(9, 9), (8, 9), (9, 8), (5, 7), (2, 1), (3, 2), (1, 1), (4, 3)]):
        source[row, source_length:] = 0
        target[row, target_length:] = 0
    target_input = np.pad(target[:, :-1], [(0, 0), (1, 0)])
    return (source, target_input), target


def real_tokens_per_micro_batch(target, steps):
    rows = -(-len(target) // steps)
    return [int(np.count_nonzero(target[i * rows:(i + 1) * rows])) for i in range(steps)]


def largest_movement(initial, model):
    return max(np.abs(a - b).max() for a, b in zip(initial, model.get_weights()))


def one_update(accumulate_steps, initial, hp, batch, jit_compile=False):
    # Plain SGD: the weights move by the gradient itself. Adam's first step, lr * g / (|g| +
    # epsilon), would turn rounding noise in gradients near zero into whole steps.
    model = kt.build_model(hp, VOCAB)
    model.set_weights(initial)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=kt.build_loss(hp),
                  metrics=[kt.TokenAccuracy(), kt.Perplexity(), kt.TargetTokens()],
                  accumulate_steps=accumulate_steps, jit_compile=jit_compile)
    logs = model.train_on_batch(*batch, return_dict=True)
    return model, logs


@pytest.fixture(scope="module")
def tiny():
    # One layer: accumulation does not depend on depth, and each case builds and traces a step.
    hp = kt.hparams.get("transformer_tiny", dropout=0.0, num_layers=1)
    keras.utils.set_random_seed(3)
    return hp, kt.build_model(hp, VOCAB).get_weights()


@pytest.fixture(scope="module")
def float32_update(tiny):
    """steps -> (model, logs) of `one_update(steps, ...)` from `tiny` on batch_of_unequal_rows()
    in float32, made once a module: each is a build, compile and traced step, and no test changes
    the model it reads."""
    hp, initial = tiny
    return functools.cache(lambda steps: one_update(steps, initial, hp, batch_of_unequal_rows()))


@pytest.mark.slow
def test_micro_batches_of_unequal_tokens_make_the_update_of_the_whole_batch(tiny,
                                                                           float32_update):
    _, initial = tiny
    batch = batch_of_unequal_rows()
    assert real_tokens_per_micro_batch(batch[1], 2) == [33, 7]
    assert real_tokens_per_micro_batch(batch[1], 4) == [18, 15, 3, 4]
    whole, whole_logs = float32_update(1)
    assert largest_movement(initial, whole) > 1e-3
    # 3 does not divide 8 rows: the last micro-batch is made up with an all-padding row.
    for steps in (2, 3, 4, 8):
        model, logs = float32_update(steps)
        assert int(model.optimizer.iterations) == 1  # one update, not K
        for a, b in zip(whole.get_weights(), model.get_weights()):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
        assert logs.keys() == whole_logs.keys()
        for name, value in whole_logs.items():
            np.testing.assert_allclose(logs[name], value, rtol=1e-5, err_msg=name)


def test_accumulation_compiles_with_xla(tiny, float32_update):
    hp, initial = tiny
    whole, _ = float32_update(1)
    compiled, _ = one_update(4, initial, hp, batch_of_unequal_rows(), jit_compile=True)
    for a, b in zip(whole.get_weights(), compiled.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_an_equal_weight_average_of_micro_batches_would_differ(tiny, float32_update):
    # What Keras's own gradient_accumulation_steps computes: the mean of the micro-batches'
    # token-normalized gradients. With these unequal counts it is measurably another update,
    # so the test above can tell the two apart.
    hp, initial = tiny
    (source, target_input), target = batch_of_unequal_rows()
    whole, _ = float32_update(1)
    model = kt.build_model(hp, VOCAB)
    model.set_weights(initial)
    model.compile(optimizer=keras.optimizers.SGD(1.0, gradient_accumulation_steps=2),
                  loss=kt.build_loss(hp))
    for rows in (slice(0, 4), slice(4, 8)):
        model.train_on_batch((source[rows], target_input[rows]), target[rows])
    difference = max(np.abs(a - b).max() for a, b in zip(whole.get_weights(),
                                                          model.get_weights()))
    # Measured 0.225 against a largest movement of 0.168: another update altogether, hundreds of
    # times the float16 test's tolerance below (4 float16 epsilons of the movement, 6.6e-4).
    assert difference > 0.5 * largest_movement(initial, whole)


def test_loss_scaling_spans_the_micro_batches(tiny):
    hp, initial = tiny
    batch = batch_of_unequal_rows()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        whole, _ = one_update(1, initial, hp, batch)
        accumulated, _ = one_update(4, initial, hp, batch)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert isinstance(accumulated.optimizer, keras.optimizers.LossScaleOptimizer)
    assert int(accumulated.optimizer.iterations) == 1
    # float16 activations and gradients: equal to a few of float16's relative steps of the
    # largest movement (measured: 6.5e-5, 0.4 of one; the equal-weight average of micro-batches,
    # Keras's, is 0.28 off here, more than the movement itself).
    atol = 4 * np.finfo(np.float16).eps * largest_movement(initial, whole)
    for a, b in zip(whole.get_weights(), accumulated.get_weights()):
        np.testing.assert_allclose(a, b, atol=atol, rtol=0)
    changed = [not np.array_equal(a, b) for a, b in zip(initial, accumulated.get_weights())]
    assert all(changed)


def test_accumulate_steps_survives_save_and_load(float32_update, tmp_path):
    model, _ = float32_update(4)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.accumulate_steps == 4
    assert int(loaded.optimizer.iterations) == 1


@pytest.mark.parametrize("steps, loss, message", [
    (0, None, "accumulate_steps must be an integer >= 1, got 0"),
    (True, None, "accumulate_steps must be an integer >= 1, got True"),
    (2.0, None, "accumulate_steps must be an integer >= 1, got 2.0"),
    (2, "sparse_categorical_crossentropy", "needs the loss kt.build_loss gives"),
])
def test_bad_accumulate_steps_are_refused(steps, loss, message):
    hp = kt.hparams.get("transformer_tiny")
    model = kt.build_model(hp, VOCAB)
    with pytest.raises(ValueError, match=message):
        model.compile(optimizer="adam", loss=loss or kt.build_loss(hp), accumulate_steps=steps)
