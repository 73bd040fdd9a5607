import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import (
    TransformerSchedule,
    build_loss,
    build_model,
    build_optimizer,
    hparams,
    paper_adam,
)
from keras_transformer.training.schedules import FusedAdam, cooldown_window, fitted_peak_step


def eq3(step_num, d_model=512, warmup_steps=4000):
    return d_model ** -0.5 * min(step_num ** -0.5, step_num * warmup_steps ** -1.5)


@pytest.mark.parametrize("step_num", [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000, 300_000])
def test_schedule_equals_eq3(step_num):
    # Keras passes optimizer.iterations (0 for the first update); eq. 3 counts from 1.
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    assert float(schedule(step_num - 1)) == pytest.approx(eq3(step_num), rel=1e-6)


def test_peak_is_at_warmup():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    rates = np.asarray(schedule(np.arange(20_000)))
    assert np.argmax(rates) + 1 == 4000
    assert rates.max() == pytest.approx(512 ** -0.5 * 4000 ** -0.5, rel=1e-6)


def test_multiplier_scales_the_rate():
    assert float(TransformerSchedule(256, 100, multiplier=2.0)(50)) == pytest.approx(
        2 * eq3(51, 256, 100), rel=1e-6)


def test_config_roundtrip():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, multiplier=0.5)
    clone = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert isinstance(clone, TransformerSchedule)
    assert float(clone(7)) == float(schedule(7))


def test_paper_adam():
    adam = paper_adam(d_model=512)
    assert isinstance(adam, FusedAdam) and isinstance(adam, keras.optimizers.Adam)
    assert (adam.beta_1, adam.beta_2, adam.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(adam._learning_rate, TransformerSchedule)
    big = build_optimizer("transformer_big")
    assert big._learning_rate.d_model == 1024 and big._learning_rate.warmup_steps == 4000


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(d_model=512, warmup_steps=0)
    for start, end in ((100, 100), (200, 100), (-1, 100), (100, None)):
        with pytest.raises(ValueError, match="0 <= cooldown_start < cooldown_end"):
            TransformerSchedule(512, 4000, cooldown_start=start, cooldown_end=end)


@pytest.mark.parametrize("iterations", [0, 499, 799, 800, 801, 900, 998, 999, 1000, 5000])
def test_cooldown_is_eq3_times_a_line_falling_to_zero(iterations):
    schedule = TransformerSchedule(256, 500, cooldown_start=800, cooldown_end=1000)
    remaining = min(1.0, max(0.0, (1000 - iterations) / 200))
    assert float(schedule(iterations)) == pytest.approx(
        eq3(iterations + 1, 256, 500) * remaining, rel=1e-6, abs=1e-12)


def test_the_last_update_before_the_end_is_the_last_above_zero():
    rates = np.asarray(TransformerSchedule(256, 10, cooldown_start=40, cooldown_end=50)(
        np.arange(60)))
    assert (rates[:50] > 0).all() and (rates[50:] == 0).all()
    assert (np.diff(rates[40:51]) < 0).all()


def test_cooldown_moves_inside_a_compiled_train_step_without_retracing():
    schedule = TransformerSchedule(256, 500)
    assert schedule.cooldown is None
    rate = tf.function(schedule)
    before = float(rate(tf.constant(900, tf.int64)))
    assert before == pytest.approx(eq3(901, 256, 500), rel=1e-6)
    schedule.set_cooldown(800, 1000)
    assert float(rate(tf.constant(900, tf.int64))) == pytest.approx(before / 2, rel=1e-5)
    assert rate.experimental_get_tracing_count() == 1
    assert schedule.cooldown == (800, 1000)


def test_cooldown_config_roundtrip_and_window():
    schedule = TransformerSchedule(256, 100, cooldown_start=300, cooldown_end=400)
    clone = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert clone.cooldown == (300, 400) and float(clone(350)) == float(schedule(350))
    assert cooldown_window(4398, 0.2) == (3518, 4398)
    assert cooldown_window(4398, 0.0) is None
    assert cooldown_window(3, 0.01) == (2, 3)  # at least one update cools down
    small = hparams.get("transformer_small")
    assert build_optimizer(small, train_steps=1000).learning_rate_schedule.cooldown == (800, 1000)
    assert build_optimizer(small).learning_rate_schedule.cooldown == (80_000, 100_000)
    # The paper's sets keep eq. 3 to the end.
    assert build_optimizer("transformer_base").learning_rate_schedule.cooldown is None
    assert build_optimizer(small.override(cooldown_fraction=0.0)).learning_rate_schedule.cooldown \
        is None


@pytest.mark.parametrize("step_num", [1, 50, 250, 251, 999, 1000, 1001, 5000])
def test_an_earlier_peak_rises_to_eq3s_peak_holds_it_then_follows_eq3(step_num):
    schedule = TransformerSchedule(256, 1000, peak_step=250)
    peak = eq3(1000, 256, 1000)
    expected = (peak * step_num / 250 if step_num <= 250 else
                peak if step_num <= 1000 else eq3(step_num, 256, 1000))
    assert float(schedule(step_num - 1)) == pytest.approx(expected, rel=1e-6)
    # Never above eq. 3's peak: a shorter warmup of eq. 3 itself would have raised it.
    assert float(schedule(step_num - 1)) <= peak * (1 + 1e-6)


def test_the_peak_moves_inside_a_compiled_train_step_and_round_trips():
    schedule = TransformerSchedule(256, 1000, cooldown_start=400, cooldown_end=500)
    assert schedule.peak_step == 1000  # eq. 3's
    rate = tf.function(schedule)
    assert float(rate(tf.constant(99, tf.int64))) == pytest.approx(eq3(100, 256, 1000), rel=1e-6)
    schedule.set_peak_step(100)
    assert float(rate(tf.constant(99, tf.int64))) == pytest.approx(eq3(1000, 256, 1000), rel=1e-6)
    assert float(rate(tf.constant(450, tf.int64))) == pytest.approx(eq3(1000, 256, 1000) / 2,
                                                                    rel=1e-5)  # cooling down
    assert rate.experimental_get_tracing_count() == 1
    clone = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert clone.peak_step == 100 and clone.cooldown == (400, 500)
    for bad in (0, 1001, None):
        with pytest.raises(ValueError, match=r"peak_step must be in \[1, warmup_steps=1000\]"):
            schedule.set_peak_step(bad)


def test_a_run_shorter_than_its_warmup_peaks_within_its_max_warmup_fraction():
    assert fitted_peak_step(1000, 600, 0.25) == 150
    assert fitted_peak_step(1000, 4000, 0.25) == 1000  # long enough for eq. 3's warmup
    assert fitted_peak_step(1000, 600, 0.0) == 1000  # the paper's: eq. 3 whatever the length
    assert fitted_peak_step(1000, 1, 0.25) == 1
    small = hparams.get("transformer_small")
    assert small.max_warmup_fraction == 0.8
    assert build_optimizer(small, train_steps=600).learning_rate_schedule.peak_step == 480
    assert build_optimizer(small, train_steps=2000).learning_rate_schedule.peak_step == 1000
    assert build_optimizer(small).learning_rate_schedule.peak_step == 1000
    assert build_optimizer("transformer_base", train_steps=600).learning_rate_schedule \
        .peak_step == 4000


def adam_trajectory(optimizer, compiled, densify=False, steps=4):
    """Weights of a dense matrix and an embedding table after `steps` updates of `optimizer`.

    The table's gradient comes from a gather, so it arrives as IndexedSlices (rows 1 and 3
    twice, row 0 never), as an embedding's does; `densify` converts it to a dense tensor first.
    """
    rng = np.random.default_rng(0)
    dense = keras.Variable(rng.normal(size=(3, 4)).astype("float32"), name="dense")
    table = keras.Variable(rng.normal(size=(5, 4)).astype("float32"), name="table")
    inputs = tf.constant(rng.normal(size=(6, 3)).astype("float32"))
    ids = tf.constant([1, 3, 3, 2, 4, 1])

    def step():
        with tf.GradientTape() as tape:
            hidden = tf.matmul(inputs, dense.value) * tf.gather(table.value, ids)
            loss = tf.reduce_sum(tf.sin(hidden))
        gradients = tape.gradient(loss, [dense.value, table.value])
        assert isinstance(gradients[1], tf.IndexedSlices)
        if densify:
            gradients[1] = tf.convert_to_tensor(gradients[1])
        optimizer.apply(gradients, [dense, table])

    step = tf.function(step) if compiled else step
    for _ in range(steps):
        step()
    return [dense.numpy(), table.numpy()], optimizer


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_adam_updates_like_keras_adam(compiled):
    settings = dict(learning_rate=0.05, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    # Keras's own update squares an IndexedSlices gradient slice by slice (a row gathered twice
    # gets g1^2 + g2^2 in v instead of (g1 + g2)^2), so the reference sees the dense gradient.
    expected, reference = adam_trajectory(keras.optimizers.Adam(**settings), compiled,
                                          densify=True)
    actual, fused = adam_trajectory(FusedAdam(**settings), compiled)
    for want, got in zip(expected, actual):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(expected[1][0] - actual[1][0]).max() == 0  # a row without gradient stays put
    for want, got in zip(reference.variables, fused.variables):  # the same slots, alike
        assert got.path.split("/")[1:] == want.path.split("/")[1:]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_weights_saved_with_keras_adam_load_with_fused_adam(tmp_path):
    """Checkpoints written before the optimizer became FusedAdam resume with it (one layer:
    the optimizer's variables are the same kind at every depth, and a second doubled tracing)."""
    hp = hparams.get("transformer_tiny", num_layers=1)
    batch = ((np.array([[5, 6, 1]]), np.array([[0, 7, 8]])), np.array([[7, 8, 1]]))
    keras.utils.set_random_seed(0)
    before = build_model(hp, 20)
    before.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss=build_loss(hp))
    before.train_on_batch(*batch)
    before.save_weights(tmp_path / "model.weights.h5")
    after = build_model(hp, 20)
    after.compile(optimizer=FusedAdam(learning_rate=0.01), loss=build_loss(hp))
    after.optimizer.build(after.trainable_variables)
    after.load_weights(tmp_path / "model.weights.h5")
    assert int(after.optimizer.iterations) == 1
    for want, got in zip(before.optimizer.variables, after.optimizer.variables):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_fused_adam_serializes():
    optimizer = paper_adam(d_model=256, warmup_steps=100)
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(clone, FusedAdam)
    assert clone.get_config() == optimizer.get_config()
