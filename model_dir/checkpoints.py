"""The checkpoint format: complete-or-absent, verified, resumable checkpoints.

A checkpoint is a directory model_dir/checkpoints/ckpt-<step>/ holding
- `model.weights.h5`: Keras's own weights file (`model.save_weights`), with the optimizer's state
  and step counter, so the learning-rate schedule resumes where it stopped; `model.load_weights`
  reads it, with or without an optimizer;
- `rng.npz`: the states of the model's dropout seed generators, which Keras's weights file leaves
  out, so a resumed deterministic run draws the same dropout masks as an uninterrupted one;
- `manifest.json`: the size and SHA-256 of each of those files, written last. A checkpoint whose
  files do not match it (truncated or corrupted on disk) is refused by name, and the run resumes
  from the one before it; HDF5 alone would load silently corrupted weights. One without a
  manifest (from before manifests) loads with a warning that it is unverified.

It is written into a hidden temporary directory, flushed to disk, and renamed into place when
complete (a rename is atomic), so a process killed at any moment, or a write that fails (a full
disk), leaves only complete checkpoints; the temporary leftovers are swept away by the next save.

(tf.train.Checkpoint is not used: it does not follow layers that Keras 3 keeps in Python lists,
and saved only the embedding of this model.)

The weights file is written the way `model.save_weights` writes it, but through a Python file
object: when a write fails (a full disk), HDF5's own file driver crashes the process with a
segmentation fault in h5py's close (measured with Keras 3.15.1 / h5py on a full tmpfs), while
through a Python file the failure is an OSError that `save` reports. This uses two Keras
internals (`saving_lib.H5IOStore`, `saving_lib._save_state`): keras is pinned, and
tests/test_trainer.py fills a disk.
"""

import errno
import hashlib
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

import h5py
import numpy as np
from keras.src.saving import saving_lib

from keras_transformer.errors import UserError
from keras_transformer.model_dir.layout import CHECKPOINT_DIR

WEIGHTS_FILE = "model.weights.h5"
RNG_FILE = "rng.npz"
MANIFEST_FILE = "manifest.json"
_NAME = re.compile(r"^ckpt-(\d+)$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint could not be written or read; the message names it."""


class _PythonFileStore(saving_lib.H5IOStore):
    """Keras's HDF5 weights store, writing through a Python file object (see the module doc)."""

    def _get_h5_file(self, path_or_io, mode=None):
        self._file = open(path_or_io, "w+b")
        return h5py.File(self._file, mode="w")

    def close(self):
        try:
            super().close()
        finally:
            self._file.close()


def save_weights(model, path):
    """`model.save_weights(path)` (same file), raising OSError when a write fails."""
    if not model.built:
        raise ValueError("the model is not built yet: call it on a batch first")
    store = _PythonFileStore(path, mode="w")
    try:
        saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="",
                               visited_saveables=set())
    finally:
        store.close()


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
        """Writes ckpt-<step> for `model` (compiled or not) and prunes old ones; returns it.

        Raises:
            CheckpointError: the checkpoint could not be written (e.g. the disk is full); the
                partial files are removed and the checkpoints already there are untouched.
        """
        final = self.directory / f"ckpt-{step}"
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(".ckpt-*.partial*"):  # from a killed process
            shutil.rmtree(leftover, ignore_errors=True)
        partial = self.directory / f".ckpt-{step}.partial{os.getpid()}"
        try:
            partial.mkdir()
            save_weights(model, partial / WEIGHTS_FILE)
            np.savez(partial / RNG_FILE, *[np.asarray(v) for v in _seed_states(model)])
            _write_manifest(partial, step)
        except (OSError, RuntimeError) as error:  # h5py reports some write failures as either
            shutil.rmtree(partial, ignore_errors=True)
            previous = self.paths()
            raise CheckpointError(
                f"could not write checkpoint {final}: {error}. "
                + (f"The newest checkpoint, {previous[-1]}, is untouched"
                   if previous else "There is no earlier checkpoint")) from error
        try:
            if final.exists():  # e.g. an unreadable one from before a crash: move it aside
                replaced = partial.with_name(partial.name + ".replaced")
                os.replace(final, replaced)
                os.replace(partial, final)
                shutil.rmtree(replaced, ignore_errors=True)
            else:
                os.replace(partial, final)
            _fsync(self.directory)  # the rename itself survives a power cut
        except OSError as error:
            raise CheckpointError(f"could not put checkpoint {final} in place: {error}") \
                from error
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
            except (OSError, ValueError, KeyError, CheckpointError) as error:
                failures.append(f"{path}: {error}")
                print(f"checkpoint {path} is unreadable ({error}); trying the one before it",
                      file=sys.stderr)
        if failures:
            raise CheckpointError("no checkpoint could be read:\n" + "\n".join(failures))
        return None


def sha256_of(path):
    """The SHA-256 of file `path`, hex."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _fsync(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some network and FUSE file systems cannot fsync a directory; files they can.
        if not (os.path.isdir(path) and error.errno in (errno.EINVAL, errno.ENOTSUP,
                                                        errno.EBADF)):
            raise
    finally:
        os.close(descriptor)


def _write_manifest(directory, step):
    """Flushes the checkpoint's files to disk and records their sizes and hashes, last."""
    files = {}
    for name in (WEIGHTS_FILE, RNG_FILE):
        _fsync(directory / name)
        files[name] = {"bytes": (directory / name).stat().st_size,
                       "sha256": sha256_of(directory / name)}
    with open(directory / MANIFEST_FILE, "w", encoding="utf-8") as manifest:
        json.dump({"step": step, "files": files}, manifest, indent=1)
        manifest.flush()
        os.fsync(manifest.fileno())
    _fsync(directory)


def verify(path):
    """Checks the files of checkpoint directory `path` against its manifest (a checkpoint without
    one, from an earlier version, is only warned about).

    Raises:
        CheckpointError: naming the file that is missing, truncated or corrupted.
    """
    path = pathlib.Path(path)
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
        expected = {name: (entry["bytes"], entry["sha256"])
                    for name, entry in manifest["files"].items()}
    except FileNotFoundError:
        # Written before checkpoints had manifests (or copied without it): HDF5 and numpy
        # still refuse a truncated file, not a corrupted one.
        print(f"warning: {path / MANIFEST_FILE} is missing, so {path} cannot be verified; "
              f"loading it as it is", file=sys.stderr)
        return
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{path / MANIFEST_FILE} is damaged: {error!r}") from None
    for name in (WEIGHTS_FILE, RNG_FILE):
        file = path / name
        if name not in expected:
            raise CheckpointError(f"{path / MANIFEST_FILE} does not list {name}")
        size, digest = expected[name]
        if not file.is_file():
            raise CheckpointError(f"{file} is missing")
        if file.stat().st_size != size:
            raise CheckpointError(f"{file} is truncated or overwritten: "
                                  f"{file.stat().st_size} bytes, the manifest says {size}")
        if sha256_of(file) != digest:
            raise CheckpointError(f"{file} is corrupted: its SHA-256 differs from the "
                                  f"manifest's")


# Layer attributes renamed since the first checkpoints were written (Keras keys weights by
# attribute path): encoder-decoder attention got the paper's name, and Dropout layers end in
# _layer where `dropout` is a rate.
_RENAMED = {"memory_attention": "encoder_decoder_attention",
            "memory_attention_block": "encoder_decoder_attention_block",
            "dropout": "dropout_layer"}


def load_weights(model, weights_file):
    """`model.load_weights(weights_file)`, also for a file written before the renames above."""
    with h5py.File(weights_file, "r") as file:
        names = []
        file.visit(names.append)
    old = [name for name in names if name.rsplit("/", 1)[-1] in _RENAMED]
    if not old:
        model.load_weights(str(weights_file))
        return
    with tempfile.TemporaryDirectory() as scratch:
        upgraded = pathlib.Path(scratch) / pathlib.Path(weights_file).name
        shutil.copyfile(weights_file, upgraded)
        with h5py.File(upgraded, "r+") as file:
            for name in sorted(old, key=lambda name: -name.count("/")):  # children first
                parent, _, leaf = name.rpartition("/")
                file.move(name, f"{parent}/{_RENAMED[leaf]}" if parent else _RENAMED[leaf])
        model.load_weights(str(upgraded))


def restore(model, path):
    """Loads checkpoint directory `path` into `model` (and its optimizer, if compiled).

    Raises:
        CheckpointError: a file of the checkpoint is missing, truncated or corrupted.
    """
    path = pathlib.Path(path)
    verify(path)
    optimizer = getattr(model, "optimizer", None)  # absent before compile
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)  # its variables must exist to load
    load_weights(model, path / WEIGHTS_FILE)
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


def default_directory(model_dir):
    return pathlib.Path(model_dir) / CHECKPOINT_DIR
