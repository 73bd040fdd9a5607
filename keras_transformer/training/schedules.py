"""The paper's learning-rate schedule and Adam settings (section 5.3)."""

import keras
from keras import ops

from keras_transformer.runtime import backend


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = multiplier * d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5) (eq. 3),
    optionally falling linearly to zero over the last updates of a run (a cooldown).

    The rate rises linearly for `warmup_steps` steps, peaks at step_num = warmup_steps, then
    decays with the inverse square root of the step number.

    Keras calls a schedule with `optimizer.iterations`, the number of updates already applied,
    which is 0 for the first update; eq. 3 counts steps from 1 (its value at 0 is 0, a wasted
    update). So `schedule(iterations)` returns eq. 3 at step_num = iterations + 1.

    The cooldown is not the paper's: eq. 3 never reaches zero, and a short run stopped on it ends
    with weights that still move a lot each update. From update `cooldown_start` on, the rate is
    eq. 3 times (cooldown_end - iterations) / (cooldown_end - cooldown_start), so the update at
    iterations = cooldown_end - 1 is the last with a rate above zero (the warmup-stable-decay
    schedules of Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
    Training Durations", where a linear cooldown over the last 10-20% of steps matches cosine
    decay). The window lives in variables, so `set_cooldown` can place it while a compiled
    train step runs (kt-train does when it learns how many steps a time budget holds). Under
    JAX a traced step reads a variable as a constant unless it is part of the state the step
    is given: there the window moves only with this module's optimizer (`FusedAdam`,
    `paper_adam`), whose state carries it; with another optimizer `set_cooldown` after the
    first step raises instead of being ignored.

    A run too short for eq. 3's warmup can reach its peak sooner, not higher: with `peak_step`
    P < warmup_steps W, the rate rises linearly to eq. 3's peak, d_model^-0.5 * W^-0.5, at
    step_num P, holds it until step_num W, and follows eq. 3 from there (a warmup-stable-decay
    shape; P = W is eq. 3 exactly). Shortening eq. 3's own warmup instead would raise the peak
    to d_model^-0.5 * P^-0.5 (a higher peak was worse at short budgets: bench/RESULTS.md,
    "A higher learning rate is worse at this budget"). `set_peak_step`
    moves P while a compiled train step runs, as `set_cooldown` moves the cooldown.

    Args:
        d_model: model width.
        warmup_steps: 4000 in the paper.
        multiplier: constant factor (1.0 in the paper).
        cooldown_start, cooldown_end: the cooldown's updates (both or neither; None: eq. 3
            throughout).
        peak_step: the step_num at which the rate first reaches its peak, 1 to warmup_steps
            (None: warmup_steps, eq. 3's).

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 7)  # step_num 4000, the peak: 512^-0.5 * 4000^-0.5
    0.0006988
    >>> cooled = TransformerSchedule(512, 4000, cooldown_start=80_000, cooldown_end=100_000)
    >>> float(cooled(90_000)) == 0.5 * float(schedule(90_000))
    True
    >>> early = TransformerSchedule(512, 4000, peak_step=1000)
    >>> float(early(999)) == float(early(3999)) == float(schedule(3999))  # the peak, held
    True
    """

    def __init__(self, d_model, warmup_steps=4000, multiplier=1.0, cooldown_start=None,
                 cooldown_end=None, peak_step=None):
        if d_model < 1 or warmup_steps < 1:
            raise ValueError(f"d_model and warmup_steps must be >= 1, got d_model={d_model}, "
                             f"warmup_steps={warmup_steps}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.multiplier = multiplier
        # Not in checkpoints: whoever builds the schedule knows its window.
        # "int": int64 on TensorFlow (as before; an int32 variable would live in a GPU's host
        # memory), int32 under JAX (which has no int64 by default).
        self._cooldown = keras.Variable([0, 0], dtype="int", trainable=False,
                                        name="cooldown_window")
        self._peak_step = keras.Variable(warmup_steps, dtype="int", trainable=False,
                                         name="peak_step")
        self.in_optimizer_state = False  # FusedAdam's state carries the variables (JAX)
        self._traced = False
        if cooldown_start is not None or cooldown_end is not None:
            self.set_cooldown(cooldown_start, cooldown_end)
        if peak_step is not None:
            self.set_peak_step(peak_step)

    @property
    def variables(self):
        """The variables behind the cooldown window and the peak step."""
        return [self._cooldown, self._peak_step]

    def _check_attached(self):
        """Raises where JAX's `fit` holds the window's values outside the variables (between
        two steps, until `callback.model` or `model.jax_state_sync()` puts them back)."""
        if any(getattr(v, "_value", True) is None for v in self.variables):
            raise RuntimeError(
                "this TransformerSchedule's window is in a JAX fit's state: read `self.model` "
                "in the callback (or call model.jax_state_sync()) before moving or reading it")

    def _check_movable(self):
        """Raises where moving the window would not reach a traced step."""
        self._check_attached()
        if self._traced and not self.in_optimizer_state:
            raise RuntimeError(
                f"this TransformerSchedule was traced into a {backend.name()} train step as a "
                f"constant: its window can move while training only with kt.FusedAdam "
                f"(kt.paper_adam, kt.build_optimizer), whose state carries it")

    @property
    def cooldown(self):
        """(cooldown_start, cooldown_end), or None when the rate is eq. 3 throughout."""
        self._check_attached()
        start, end = (int(value) for value in self._cooldown.numpy())
        return (start, end) if end > 0 else None

    def set_cooldown(self, start, end):
        """Makes the rate fall linearly from eq. 3 at update `start` to zero at update `end`."""
        if start is None or end is None or not 0 <= start < end:
            raise ValueError(f"a cooldown needs 0 <= cooldown_start < cooldown_end, got "
                             f"cooldown_start={start}, cooldown_end={end}")
        self._check_movable()
        self._cooldown.assign([start, end])

    @property
    def peak_step(self):
        """The step_num at which the rate first reaches its peak (warmup_steps: eq. 3's)."""
        self._check_attached()
        return int(self._peak_step.numpy())

    def set_peak_step(self, peak_step):
        """Makes the rate reach eq. 3's peak at step_num `peak_step` (1 to warmup_steps) and
        hold it until eq. 3's own peak."""
        if peak_step is None or not 1 <= peak_step <= self.warmup_steps:
            raise ValueError(f"peak_step must be in [1, warmup_steps={self.warmup_steps}], got "
                             f"{peak_step}")
        self._check_movable()
        self._peak_step.assign(peak_step)

    def __call__(self, step):
        iterations = ops.cast(step, "float32")
        self._traced = self._traced or backend.is_traced(iterations)
        step_num = iterations + 1.0
        peak = self.warmup_steps ** -0.5
        rise = step_num / ops.cast(self._peak_step, "float32") * peak
        # With peak_step = warmup_steps, rise is eq. 3's step_num * warmup_steps^-1.5, which
        # stays below the held peak until the two meet at step_num = warmup_steps: eq. 3.
        rate = (self.multiplier * self.d_model ** -0.5
                * ops.minimum(ops.minimum(rise, peak), ops.rsqrt(step_num)))
        start, end = ops.unstack(ops.cast(self._cooldown, "float32"))
        remaining = ops.clip((end - iterations) / ops.maximum(end - start, 1.0), 0.0, 1.0)
        return ops.where(end > 0, rate * remaining, rate)

    def get_config(self):
        start, end = self.cooldown or (None, None)
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
                "multiplier": self.multiplier, "cooldown_start": start, "cooldown_end": end,
                "peak_step": self.peak_step}


def fitted_peak_step(warmup_steps, train_steps, max_warmup_fraction):
    """The step at which a run of `train_steps` updates reaches its peak rate: eq. 3's
    `warmup_steps`, or the first `max_warmup_fraction` of the run where that comes sooner (a
    fraction of 0: eq. 3's always).

    >>> fitted_peak_step(1000, 600, 0.25), fitted_peak_step(1000, 6000, 0.25)
    (150, 1000)
    """
    if not max_warmup_fraction:
        return warmup_steps
    return max(1, min(warmup_steps, round(max_warmup_fraction * train_steps)))


def cooldown_window(train_steps, cooldown_fraction):
    """(start, end) of a cooldown over the last `cooldown_fraction` of `train_steps` updates, or
    None for a fraction of 0.

    >>> cooldown_window(4000, 0.2)
    (3200, 4000)
    """
    if not cooldown_fraction:
        return None
    return train_steps - max(1, round(cooldown_fraction * train_steps)), train_steps


def window_variables(optimizer):
    """The variables of the `TransformerSchedule` that `optimizer` (or the optimizer a
    `LossScaleOptimizer` wraps) follows, or []."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = getattr(inner, "_learning_rate", None)
    return schedule.variables if isinstance(schedule, TransformerSchedule) else []


class WindowNotSaved:
    """Optimizer mixin: its weights-file state leaves out a `TransformerSchedule`'s window (which
    its state carries under JAX), so files written under either backend load under the other,
    and a resumed run keeps the window its builder gave it."""

    def _saved_variables(self):
        window = window_variables(self)
        return [v for v in self.variables if not any(v is w for w in window)]

    def save_own_variables(self, store):
        for i, variable in enumerate(self._saved_variables()):
            store[str(i)] = variable.numpy()

    def load_own_variables(self, store):
        saved = self._saved_variables()
        if len(store.keys()) != len(saved):  # as Keras's: a mismatch warns and loads nothing
            return super().load_own_variables(store)
        for i, variable in enumerate(saved):
            variable.assign(store[str(i)])


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(WindowNotSaved, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with each variable's update done by TensorFlow's fused kernel
    (on other backends Keras's update, which XLA fuses itself).

    The update is Adam's as Keras writes it, term for term (m and v moving averages, the bias
    correction folded into the rate, epsilon added to sqrt(v)), with the same arguments and the
    same slot variables, so weights files of one load into the other. Keras spells the update
    as a dozen element-wise ops, each a pass over every parameter; `ResourceApplyAdam` reads
    the variable, both moments and the gradient once (for the base model's 60M parameters,
    0.142 -> 0.056 s an update on a 2-core CPU: `python -m bench.optimisations`).

    One difference: an embedding's gradient (IndexedSlices) is made dense first, so a row
    gathered twice gets (g1 + g2)^2 in v, as dense Adam defines it; Keras's update squares the
    slices one by one and gets g1^2 + g2^2. With `amsgrad=True` this is Keras's Adam unchanged.

    Under JAX the optimizer's state also carries a `TransformerSchedule`'s window (its
    `variables`), so that a traced step reads where `set_cooldown` put it; checkpoints leave
    them out on every backend, so a weights file loads under either.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scalars_made = None  # (graph, rate, dtype, scalars) during an `apply`
        if not backend.is_tensorflow():  # TensorFlow reads the variables where they are
            for variable in window_variables(self):
                self._track_variable(variable)
            self.learning_rate_schedule.in_optimizer_state = True

    @property
    def learning_rate_schedule(self):
        """The `LearningRateSchedule` the rate follows, or None for a constant rate."""
        # Keras keeps it private; `learning_rate` gives only its current value.
        schedule = self._learning_rate
        return (schedule if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule)
                else None)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or not backend.is_tensorflow():
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        tf_variable = variable.value if isinstance(variable, keras.Variable) else variable
        index = self._get_variable_index(variable)
        # An embedding's gradient arrives as IndexedSlices; the kernel takes a dense one.
        gradient = tf.cast(tf.convert_to_tensor(gradient), tf_variable.dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=tf_variable.handle, m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle, grad=gradient,
            **self._kernel_scalars(learning_rate, tf_variable.dtype))

    def _kernel_scalars(self, learning_rate, dtype):
        """ResourceApplyAdam's scalar arguments in `dtype` for this step, made once an `apply`
        (and graph) and read by every variable's update: each made its own before, 14 ops a
        variable in a traced step (transformer_tiny's 61 variables: 889 of its 4,805 ops)."""
        import tensorflow as tf

        graph = tf.compat.v1.get_default_graph()
        cached = self._scalars_made
        if cached and cached[0] is graph and cached[1] is learning_rate and cached[2] == dtype:
            return cached[3]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = (tf.cast(beta, dtype) for beta in (self.beta_1, self.beta_2))
        scalars = dict(beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
                       lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
                       epsilon=tf.cast(self.epsilon, dtype))
        self._scalars_made = (graph, learning_rate, dtype, scalars)
        return scalars

    def apply(self, grads, trainable_variables=None):
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._scalars_made = None  # the next step reads the variables again


def paper_adam(d_model, warmup_steps=4000, multiplier=1.0, beta_1=0.9, beta_2=0.98,
               epsilon=1e-9, cooldown=None, ema_decay=None, peak_step=None):
    """Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 on the eq. 3 schedule, as in section 5.3.

    The optimizer is `FusedAdam`: Keras's Adam with TensorFlow's one-pass update kernel.
    `cooldown`: None, or the (start, end) updates of a `TransformerSchedule` cooldown;
    `peak_step`: None (eq. 3's warmup), or its shorter rise (`TransformerSchedule`).
    `ema_decay`: None (the paper), or d in (0, 1): the optimizer also keeps an exponential moving
    average of the weights, Keras's `use_ema` (after update t, a_t = d a_{t-1} + (1 - d) w_t,
    a_1 = w_1), which `fit` copies into the model at its end.
    """
    return FusedAdam(
        learning_rate=TransformerSchedule(d_model, warmup_steps, multiplier,
                                          *(cooldown or (None, None)), peak_step=peak_step),
        beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, use_ema=bool(ema_decay),
        ema_momentum=ema_decay or 0.99)
