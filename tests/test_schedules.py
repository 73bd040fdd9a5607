import keras
import numpy as np
import pytest

from keras_transformer import TransformerSchedule, build_optimizer, paper_adam


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
    assert isinstance(adam, keras.optimizers.Adam)
    assert (adam.beta_1, adam.beta_2, adam.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(adam._learning_rate, TransformerSchedule)
    big = build_optimizer("transformer_big")
    assert big._learning_rate.d_model == 1024 and big._learning_rate.warmup_steps == 4000


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(d_model=512, warmup_steps=0)
