"""Checkpoints: periodic saves, resume after a crash, and averaging (paper section 6.1).

A checkpoint is a directory model_dir/checkpoints/ckpt-<step>/ holding
- `model.weights.h5`: Keras's own weights file (`model.save_weights`), with the optimizer's state
  and step counter, so the learning-rate schedule resumes where it stopped; `model.load_weights`
  reads it, with or without an optimizer;
- `rng.npz`: the states of the model's dropout seed generators, which Keras's weights file leaves
  out, so a resumed deterministic run draws the same dropout masks as an uninterrupted one.

It is written into a hidden temporary directory and renamed into place when complete (a rename is
atomic), so a process killed at any moment leaves only complete checkpoints, and the temporary
leftovers are swept away by the next save.

(tf.train.Checkpoint is not used: it does not follow layers that Keras 3 keeps in Python lists,
and saved only the embedding of this model.)
"""

import os
import pathlib
import re
import shutil
import sys
import time

import keras
import numpy as np

from trainer.config import CHECKPOINT_DIR

WEIGHTS_FILE = "model.weights.h5"
RNG_FILE = "rng.npz"
AVERAGED_DIR = "averaged"
_NAME = re.compile(r"^ckpt-(\d+)$")


class CheckpointError(RuntimeError):
    """No checkpoint in a directory could be read; the message names each one."""


def step_of(model):
    """The optimizer's step counter as an int (also for a distributed variable)."""
    return int(model.optimizer.iterations.numpy())


def step_in_name(path):
    """The step a checkpoint directory's name gives (ckpt-<step>), or None for another name."""
    match = _NAME.match(pathlib.Path(path).name)
    return int(match.group(1)) if match else None


def _seed_states(model):
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


class CheckpointDirectory:
    """The checkpoints of one run, oldest first.

    Args:
        directory: where the ckpt-<step> directories live.
        keep: how many to keep; older ones are deleted after each save.
    """

    def __init__(self, directory, keep=5):
        self.directory = pathlib.Path(directory)
        self.keep = keep

    def paths(self):
        """Complete checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [(step_in_name(p), p) for p in self.directory.iterdir()
                 if _NAME.match(p.name) and p.is_dir()]
        return [path for _, path in sorted(found)]

    def save(self, model, step):
        """Writes ckpt-<step> for `model` (compiled or not) and prunes old ones; returns it."""
        final = self.directory / f"ckpt-{step}"
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(".ckpt-*.partial*"):  # from a killed process
            shutil.rmtree(leftover, ignore_errors=True)
        partial = self.directory / f".ckpt-{step}.partial{os.getpid()}"
        partial.mkdir()
        model.save_weights(str(partial / WEIGHTS_FILE))
        np.savez(partial / RNG_FILE, *[np.asarray(v) for v in _seed_states(model)])
        if final.exists():  # e.g. an unreadable one from before a crash: move it aside first
            replaced = partial.with_name(partial.name + ".replaced")
            os.replace(final, replaced)
            os.replace(partial, final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.replace(partial, final)
        for old in self.paths()[:-self.keep] if self.keep else []:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def restore_latest(self, model):
        """Loads the newest readable checkpoint into `model`; returns its path, or None.

        A checkpoint that cannot be read (truncated, corrupted) is reported on stderr and the
        one before it is tried.

        Raises:
            CheckpointError: there are checkpoints but none could be read.
        """
        failures = []
        for path in reversed(self.paths()):
            try:
                restore(model, path)
                return path
            except (OSError, ValueError, KeyError) as error:
                failures.append(f"{path}: {error}")
                print(f"checkpoint {path} is unreadable ({error}); trying the one before it",
                      file=sys.stderr)
        if failures:
            raise CheckpointError("no checkpoint could be read:\n" + "\n".join(failures))
        return None


def restore(model, path):
    """Loads checkpoint directory `path` into `model` (and its optimizer, if compiled)."""
    path = pathlib.Path(path)
    optimizer = getattr(model, "optimizer", None)  # absent before compile
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)  # its variables must exist to load
    model.load_weights(str(path / WEIGHTS_FILE))
    with np.load(path / RNG_FILE) as saved:
        states = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    variables = _seed_states(model)
    if len(states) != len(variables):
        raise ValueError(f"{path / RNG_FILE} holds {len(states)} seed states, the model has "
                         f"{len(variables)}")
    for variable, state in zip(variables, states):
        variable.assign(state)
    if optimizer is not None and step_of(model) != step_in_name(path):
        # Keras skips optimizer variables it cannot match (with a warning) instead of failing.
        raise ValueError(
            f"{path / WEIGHTS_FILE} restored the optimizer at step {step_of(model)}, not "
            f"{step_in_name(path)}: it was saved with another optimizer setup (a different "
            f"--mixed_precision, whose float16 loss scaling adds optimizer state?)")


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

    def _save(self):
        if self.checkpoints is not None:
            self.checkpoints.save(self.model, step_of(self.model))
        self._last_save = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        step = step_of(self.model)
        due_by_steps = self.every_steps and step % self.every_steps == 0
        due_by_time = (self.every_seconds
                       and time.monotonic() - self._last_save >= self.every_seconds)
        if due_by_steps or due_by_time:
            self._save()

    def on_train_end(self, logs=None):
        self._save()


def average(model, paths):
    """Sets `model`'s weights to the element-wise mean of the checkpoints at `paths`.

    Only the model's weights are averaged (section 6.1), in float64; `model` needs no optimizer.
    """
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total = None
    for path in paths:
        model.load_weights(str(pathlib.Path(path) / WEIGHTS_FILE))
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([t / len(paths) for t in total])


def default_directory(model_dir):
    return pathlib.Path(model_dir) / CHECKPOINT_DIR
