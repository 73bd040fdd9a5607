"""The callbacks kt-train runs besides evaluation: progress lines, periodic checkpoints, a time
limit, and stopping cleanly on SIGTERM."""

import math
import os
import signal
import threading
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.model_dir.checkpoints import step_of
from keras_transformer.training.schedules import fitted_peak_step


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss stopped being a finite number)."""


def scalar(value):
    """A logged value as a float (logs are shape [1] under MultiWorkerMirroredStrategy)."""
    return float(np.ravel(value)[0])


class TrainingLog(keras.callbacks.Callback):
    """Every `every` steps: learning rate, and loss, accuracy, target tokens and target tokens/s
    over those steps.

    Written to TensorBoard (if `writer`), and printed as one line when `print_lines` (when the
    output is not a terminal, where Keras's progress bar shows the same). Tokens/s count the time
    spent in train steps (input pipeline included; evaluation and checkpoints not). Stops
    training with a TrainingError when the loss is not finite.
    """

    def __init__(self, every, writer=None, print_lines=True):
        super().__init__()
        self.every = every
        self.writer = writer
        self.print_lines = print_lines

    def on_train_begin(self, logs=None):
        # Time inside train steps only (data included, evaluation and checkpoints excluded).
        self._busy, self._busy_at_log, self._tokens, self._tokens_at_log = 0.0, 0.0, 0.0, 0.0
        self._seen = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._batch_start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self._busy += time.monotonic() - self._batch_start
        # Only for the message below (see TokenLevelTraining.report_batch_shape).
        shape = logs.pop("batch_shape", None)
        # The count restarts when an evaluation resets the metrics.
        seen = scalar(logs["target_tokens"])
        self._tokens += seen - self._seen if seen >= self._seen else seen
        self._seen = seen
        step = step_of(self.model)
        loss = scalar(logs["loss"])
        if not math.isfinite(loss):
            if shape is not None:
                sentences, source, target = np.ravel(shape).astype(int)
                batch = (f", on a batch of {sentences} sentences x {source} source x {target} "
                         f"target tokens (per replica; a mean over replicas)")
            raise TrainingError(
                f"the loss became {loss} at step {step}{batch if shape is not None else ''}. "
                f"Lower the learning rate (--hparams_override learning_rate_multiplier=0.5), "
                f"check the data (python -m keras_transformer.data.inspect), or use float32 "
                f"(--mixed_precision none); training resumes from the last checkpoint")
        if step % self.every:
            return
        tokens = self._tokens - self._tokens_at_log
        tokens_per_second = tokens / max(self._busy - self._busy_at_log, 1e-9)
        self._busy_at_log, self._tokens_at_log = self._busy, self._tokens
        scalars = {"learning_rate": float(self.model.optimizer.learning_rate),
                   "target_tokens": tokens, "target_tokens_per_second": tokens_per_second,
                   "loss": loss,
                   "token_accuracy": scalar(logs["token_accuracy"])}
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in scalars.items():
                    tf.summary.scalar(name, value)
        if self.print_lines:
            print(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in scalars.items()),
                  flush=True)
        # Keras's logs are running means since the last reset: resetting here makes each line
        # (and each point of the TensorBoard curve) the mean of its own `every` steps.
        self.model.reset_metrics()
        self._seen = 0.0


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Saves every `every_steps` steps and every `every_minutes` minutes, and at the end.

    Args:
        checkpoints: a CheckpointDirectory, or None on multi-worker workers that are not the
            chief (they write nothing).
        every_steps: 0 disables step-based saves.
        every_minutes: 0 disables time-based saves.
    """

    def __init__(self, checkpoints, every_steps, every_minutes):
        super().__init__()
        self.checkpoints = checkpoints
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60
        self._last_save = time.monotonic()
        self._saved_step = None
        self.last_saved = None

    def _save(self):
        step = step_of(self.model)
        if self.checkpoints is not None and step != self._saved_step:
            self.last_saved = self.checkpoints.save(self.model, step)
        self._saved_step = step
        self._last_save = time.monotonic()

    def on_train_begin(self, logs=None):
        self._saved_step = step_of(self.model)  # restored from there, or nothing trained yet

    def on_train_batch_end(self, batch, logs=None):
        step = step_of(self.model)
        due_by_steps = self.every_steps and step % self.every_steps == 0
        due_by_time = (self.every_seconds
                       and time.monotonic() - self._last_save >= self.every_seconds)
        if due_by_steps or due_by_time:
            self._save()

    def on_train_end(self, logs=None):
        self._save()


def inner_optimizer(optimizer):
    """The optimizer that updates the weights (the one inside a LossScaleOptimizer)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


class KeepTrainedWeights(keras.callbacks.Callback):
    """Keeps the trained weights in the model at the end of `fit` when the optimizer keeps a
    moving average of them (--ema_decay).

    Keras's `fit` ends by copying the averages into the model (`finalize_variable_values`),
    before `on_train_end`, where the last checkpoint is written: that checkpoint would hold the
    averages as its weights, and a resumed run would go on from them. kt-train goes on from the
    trained weights, and evaluation, kt-translate and kt-export read the averages from the
    optimizer's state. Between the last epoch's end and the copy nothing trains, so the copy is
    skipped there and the optimizer restored after.
    """

    def on_epoch_end(self, epoch, logs=None):
        self._optimizer = inner_optimizer(self.model.optimizer)
        self._use_ema, self._optimizer.use_ema = self._optimizer.use_ema, False

    def on_train_end(self, logs=None):
        if hasattr(self, "_optimizer"):
            self._optimizer.use_ema = self._use_ema


class TimeLimit(keras.callbacks.Callback):
    """Ends training after `minutes` (PeriodicCheckpoint still saves at the end), and fits the
    learning rate's warmup and cooldown into the updates that time affords.

    Neither fits without the run's number of updates, which a time budget does not give, so
    this measures the steps per second (from the end of the first step: tracing left out) and
    estimates the step at which the time runs out, twice:
    - Early (`WARMUP_PLAN_STEPS` steps and `WARMUP_PLAN_SHARE` of the minutes after the first
      step), with `max_warmup_fraction`: if the run will end before eq. 3's warmup would, the
      schedule's rate peaks within that fraction of the run instead (`set_peak_step`; a step
      budget that ends first keeps the warmup `build_optimizer` fitted to it, silently). A
      line says where the rate peaks.
    - After (1 - cooldown_fraction) of the minutes, with a cooldown fraction (checkpoints and
      evaluations now in the rate, as they recur): if the time ends before `train_steps`, the
      schedule's cooldown moves to the last fraction of this command's steps up to there,
      training stops there (`planned_steps`), and a line says so.
    The time limit still holds if the machine slows down. The budget is this process's: a
    resumed run gets its own, whose cooldown starts from eq. 3's rate again.

    Args:
        minutes: the budget.
        cooldown_fraction: 0 for none.
        schedule: the `TransformerSchedule` whose cooldown and peak to place (with a fraction).
        train_steps: the run's step budget.
        max_warmup_fraction: 0 for eq. 3's warmup whatever the budget.
    """

    WARMUP_PLAN_STEPS = 20
    WARMUP_PLAN_SHARE = 0.02

    def __init__(self, minutes, cooldown_fraction=0.0, schedule=None, train_steps=None,
                 max_warmup_fraction=0.0):
        super().__init__()
        self.seconds = minutes * 60
        self.cooldown_fraction = cooldown_fraction
        self.max_warmup_fraction = max_warmup_fraction
        self.schedule = schedule
        self.train_steps = train_steps
        self.planned_steps = None

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()
        self._start_step = step_of(self.model)
        self._first = None  # (step, time) at the end of the first step
        self._warmup_plan_due = bool(self.max_warmup_fraction and self.schedule is not None)
        self._plan_due = bool(self.cooldown_fraction)

    def on_train_batch_end(self, batch, logs=None):
        # The step counter is read only when needed: a device read on every step otherwise.
        now = time.monotonic()
        if self._first is None:
            self._first = step_of(self.model), now
            self._steps_seen = 0
        else:
            self._steps_seen += 1
        if (self._warmup_plan_due and self._steps_seen >= self.WARMUP_PLAN_STEPS
                and now - self._first[1] >= self.WARMUP_PLAN_SHARE * self.seconds):
            self._warmup_plan_due = False
            self._plan_warmup(step_of(self.model), now)
        if self._plan_due and now - self._start >= (1 - self.cooldown_fraction) * self.seconds:
            self._plan_due = False
            self._plan_cooldown(step_of(self.model), now)
        if now - self._start >= self.seconds or (self.planned_steps and
                                                 step_of(self.model) >= self.planned_steps):
            self.model.stop_training = True

    def expected_end(self):
        """The step training is expected to end at: the step budget, or the plan's if sooner
        (None before either is known)."""
        ends = [steps for steps in (self.planned_steps, self.train_steps) if steps]
        return min(ends) if ends else None

    def _affordable_steps(self, step, now):
        """(the step at which the time runs out at the pace since the first step, that pace in
        steps per second)."""
        first_step, first_time = self._first
        steps_per_second = (step - first_step) / max(now - first_time, 1e-9)
        return step + int(steps_per_second * (self.seconds - (now - self._start))), \
            steps_per_second

    def _plan_warmup(self, step, now):
        steps, steps_per_second = self._affordable_steps(step, now)
        # Nothing to plan when the time is up already, or when the step budget ends first
        # (build_optimizer fitted the peak to it).
        if steps <= step or steps >= self.train_steps:
            return
        # Never behind this step (a resumed run): the rate then rises from here, not jumps.
        peak_step = min(self.schedule.peak_step, max(step + 1, fitted_peak_step(
            self.schedule.warmup_steps, steps, self.max_warmup_fraction)))
        warmup = self.schedule.warmup_steps
        if peak_step < self.schedule.peak_step:
            self.schedule.set_peak_step(peak_step)
            why = (f"the first {self.max_warmup_fraction:g} of them, sooner than eq. 3's "
                   f"warmup_steps {warmup} (max_warmup_fraction)")
        else:
            why = f"eq. 3's warmup_steps, within max_warmup_fraction {self.max_warmup_fraction:g}"
        print(f"step {step}: the time limit affords about {steps} updates ({steps_per_second:.3g} "
              f"steps/s); the learning rate peaks at step {peak_step}, "
              f"{float(self.schedule(peak_step - 1)):.3g}: {why}", flush=True)

    def _plan_cooldown(self, step, now):
        steps, steps_per_second = self._affordable_steps(step, now)
        current = self.schedule.cooldown
        # Nothing to plan when the time is up (an evaluation ran past it); a step budget that
        # ends first keeps its own cooldown, and so does one under way.
        if steps <= step or steps >= self.train_steps or current and step >= current[0]:
            return
        self.planned_steps = steps
        # The last fraction of this command's steps (a resumed run's count from its resume);
        # never before this step, so the rate slopes down instead of dropping.
        cooling = max(1, round(self.cooldown_fraction * (steps - self._start_step)))
        start = max(step, steps - cooling)
        self.schedule.set_cooldown(start, steps)
        # The warmup's plan, from fewer steps' pace, may have put the peak later than this;
        # it is not made after this one.
        planned_peak, self._warmup_plan_due = self.schedule.peak_step, False
        moved = bool(self.max_warmup_fraction) and planned_peak > start + 1
        if moved:
            self.schedule.set_peak_step(start + 1)
        print(f"step {step}: the time limit ends near step {steps} ({steps_per_second:.3g} "
              f"steps/s); the learning rate falls to zero from step {start} on "
              f"(cooldown_fraction {self.cooldown_fraction:g})"
              f"{f', peaking there instead of at step {planned_peak}' if moved else ''}",
              flush=True)


class StopOnSignal(keras.callbacks.Callback):
    """Preemption: on SIGTERM (or Ctrl-C, SIGINT) training stops after the current step.

    The other callbacks' `on_train_end` then run (PeriodicCheckpoint writes the final checkpoint);
    `received` names the signal. The first signal puts the previous handlers back, so a second
    one acts as it would without this callback (the default: stop at once). Call `install()`
    before `fit` and `uninstall()` after it (also when it raises); it does nothing outside the
    main thread (Python delivers signals there) or for a signal the process ignores. Not for
    multi-worker runs: workers stopping at different steps would wait for each other forever.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        super().__init__()
        self.received = None
        self._previous = {}

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return
        for number in self.SIGNALS:
            previous = signal.getsignal(number)
            if previous is not signal.SIG_IGN:
                self._previous[number] = signal.signal(number, self._handle)

    def uninstall(self):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def _handle(self, number, frame):
        self.uninstall()
        self.received = signal.Signals(number).name
        if self.model is not None:
            self.model.stop_training = True
        # os.write: print could re-enter a write to stderr that the signal interrupted.
        os.write(2, f"\n{self.received} received: stopping after this step and writing a "
                    f"checkpoint (send it again to stop at once)\n".encode())

    def on_train_batch_end(self, batch, logs=None):
        if self.received is not None:
            self.model.stop_training = True
