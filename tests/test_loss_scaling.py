"""kt.LossScaleOptimizer on one device: what compile wraps, and that it saves and loads (its
check across replicas is in tests/test_distributed.py)."""

import warnings

import keras
import numpy as np
import pytest

import keras_transformer as kt

VOCAB = 30


@pytest.fixture()
def float16_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def compiled(optimizer):
    # One layer: loss scaling does not depend on depth, and a second doubled tracing.
    hp = kt.hparams.get("transformer_tiny", num_layers=1)
    model = kt.build_model(hp, VOCAB)
    model.compile(optimizer=optimizer, loss=kt.build_loss(hp))
    return model


def test_compile_wraps_the_optimizer_under_float16_only(float16_policy):
    inner = keras.optimizers.SGD(0.1)
    model = compiled(inner)
    assert type(model.optimizer) is kt.LossScaleOptimizer
    assert model.optimizer.inner_optimizer is inner
    theirs = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=8.0,
                                                 dynamic_growth_steps=10)
    remade = compiled(theirs).optimizer
    assert type(remade) is kt.LossScaleOptimizer
    assert (remade.initial_scale, remade.dynamic_growth_steps) == (8.0, 10)
    assert remade.inner_optimizer is theirs.inner_optimizer
    keras.mixed_precision.set_global_policy("float32")
    assert type(compiled(keras.optimizers.SGD(0.1)).optimizer) is keras.optimizers.SGD


def test_a_float16_model_saves_and_loads_with_its_loss_scale(float16_policy, tmp_path):
    model = compiled(keras.optimizers.SGD(0.1))
    source = np.array([[5, 6, 7, 1]], "int32")
    model.train_on_batch((source, np.array([[0, 5, 6, 7]], "int32")), source)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded.optimizer) is kt.LossScaleOptimizer
    assert float(loaded.optimizer.dynamic_scale) == float(model.optimizer.dynamic_scale)
    assert int(loaded.optimizer.iterations) == 1


def test_weights_files_leave_the_schedule_window_out(float16_policy, tmp_path):
    """The optimizer's state in a weights file is Keras's Adam's, whatever window the schedule
    has (under JAX the state carries it): a resumed run keeps the window it was built with."""
    model = compiled(kt.paper_adam(32, 100, cooldown=(50, 100)))
    keras_adam = compiled(keras.optimizers.Adam(kt.TransformerSchedule(32, 100)))
    for built in (model, keras_adam):
        built.optimizer.build(built.trainable_variables)
    assert len(model.optimizer.variables) == len(keras_adam.optimizer.variables)
    source = np.array([[5, 6, 7, 1]], "int32")
    model.train_on_batch((source, np.array([[0, 5, 6, 7]], "int32")), source)
    model.save_weights(tmp_path / "m.weights.h5")
    resumed = compiled(kt.paper_adam(32, 100, cooldown=(80, 100)))
    resumed.optimizer.build(resumed.trainable_variables)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns when it skips an optimizer's state
        resumed.load_weights(tmp_path / "m.weights.h5")
    assert int(resumed.optimizer.iterations) == 1
    assert resumed.optimizer.inner_optimizer.learning_rate_schedule.cooldown == (80, 100)
