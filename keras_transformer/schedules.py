"""The paper's learning-rate schedule and Adam settings (section 5.3)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = multiplier * d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5) (eq. 3).

    The rate rises linearly for `warmup_steps` steps, peaks at step_num = warmup_steps, then
    decays with the inverse square root of the step number.

    Keras calls a schedule with `optimizer.iterations`, the number of updates already applied,
    which is 0 for the first update; eq. 3 counts steps from 1 (its value at 0 is 0, a wasted
    update). So `schedule(iterations)` returns eq. 3 at step_num = iterations + 1.

    Args:
        d_model: model width.
        warmup_steps: 4000 in the paper.
        multiplier: constant factor (1.0 in the paper).

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 7)  # step_num 4000, the peak: 512^-0.5 * 4000^-0.5
    0.0006988
    """

    def __init__(self, d_model, warmup_steps=4000, multiplier=1.0):
        if d_model < 1 or warmup_steps < 1:
            raise ValueError(f"d_model and warmup_steps must be >= 1, got d_model={d_model}, "
                             f"warmup_steps={warmup_steps}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.multiplier = multiplier

    def __call__(self, step):
        step_num = ops.cast(step, "float32") + 1.0
        return (self.multiplier * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(step_num), step_num * self.warmup_steps ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
                "multiplier": self.multiplier}


def paper_adam(d_model, warmup_steps=4000, multiplier=1.0, beta_1=0.9, beta_2=0.98,
               epsilon=1e-9):
    """Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 on the eq. 3 schedule, as in section 5.3."""
    return keras.optimizers.Adam(
        learning_rate=TransformerSchedule(d_model, warmup_steps, multiplier),
        beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
