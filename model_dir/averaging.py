"""Checkpoint averaging (paper section 6.1), for `kt-train --average_last` and `kt-average`.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints [...]
For the big models, we averaged the last 20 checkpoints." The average goes to
model_dir/averaged/ckpt-<step>, where <step> is the newest averaged checkpoint's step, in the same
format as the run's own checkpoints.
"""

import pathlib

import numpy as np

from keras_transformer.model_dir import checkpoints, config, config_file, layout, loading


def average(model, paths):
    """Sets `model`'s weights to the element-wise mean of the checkpoints at `paths`.

    Only the model's weights are averaged (section 6.1), in float64; `model` needs no optimizer.
    """
    if not paths:
        raise checkpoints.CheckpointError("no checkpoints to average")
    total = None
    for path in paths:
        checkpoints.verify(path)
        try:
            checkpoints.load_weights(model, pathlib.Path(path) / checkpoints.WEIGHTS_FILE)
        except (ValueError, KeyError) as error:  # another model's weights
            raise checkpoints.CheckpointError(f"{path}: {error}") from None
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([t / len(paths) for t in total])


def _run(model_dir):
    run = config_file.load(model_dir)
    if run is None:
        raise config.ConfigError(f"{model_dir}: no {layout.CONFIG_FILE}; is it a kt-train "
                                 f"model_dir?")
    return run


def average_last(model_dir, last, overwrite=False):
    """Averages the newest `last` checkpoints of model_dir; returns (output path, inputs)."""
    run = _run(model_dir)
    if last < 1:
        raise checkpoints.CheckpointError(f"--last must be at least 1, got {last}")
    paths = checkpoints.CheckpointDirectory(checkpoints.default_directory(model_dir)).paths()
    if len(paths) < last:
        raise checkpoints.CheckpointError(
            f"{checkpoints.default_directory(model_dir)} has {len(paths)} checkpoint(s), fewer "
            f"than --last {last}; train longer or keep more (--keep_checkpoints)")
    return _average_into(model_dir, run, paths[-last:], overwrite)


def average_named(model_dir, names, overwrite=False):
    """Averages the checkpoints `names` of model_dir (directories, or "best": the one
    `kt-train --keep_best` kept); returns (output path, inputs). The output is named after the
    newest input's step."""
    run = _run(model_dir)
    chosen = []
    for name in names:
        path = loading.named_checkpoint(model_dir, name)
        if checkpoints.step_in_name(path) is None:
            raise checkpoints.CheckpointError(f"--checkpoint {name} is not a ckpt-<step> "
                                              f"checkpoint directory")
        chosen.append(path)
    return _average_into(model_dir, run, sorted(chosen, key=checkpoints.step_in_name),
                         overwrite)


def _average_into(model_dir, run, chosen, overwrite):
    step = checkpoints.step_in_name(chosen[-1])
    output = checkpoints.CheckpointDirectory(pathlib.Path(model_dir) / layout.AVERAGED_DIR,
                                             keep=0)
    if not overwrite and (output.directory / chosen[-1].name).exists():
        raise checkpoints.CheckpointError(
            f"{output.directory / chosen[-1].name} exists (an earlier average); pass "
            f"--overwrite to replace it")
    model = loading.build(run)
    average(model, chosen)
    return output.save(model, step), chosen
