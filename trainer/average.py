"""Checkpoint averaging (paper section 6.1): `kt-average --model_dir D --last 5`.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints [...]
For the big models, we averaged the last 20 checkpoints." Writes model_dir/averaged/ckpt-<step>,
where <step> is the newest averaged checkpoint's step, in the same format as the run's own
checkpoints. An existing average of that step is replaced only with --overwrite.
"""

import argparse
import pathlib
import sys

import numpy as np

import keras_transformer as kt
from keras_transformer import cli
from keras_transformer.model_dir import checkpoints, config


def average(model, paths):
    """Sets `model`'s weights to the element-wise mean of the checkpoints at `paths`.

    Only the model's weights are averaged (section 6.1), in float64; `model` needs no optimizer.
    """
    if not paths:
        raise checkpoints.CheckpointError("no checkpoints to average")
    total = None
    for path in paths:
        checkpoints.verify(path)
        checkpoints.load_weights(model, pathlib.Path(path) / checkpoints.WEIGHTS_FILE)
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([t / len(paths) for t in total])


def average_last(model_dir, last, overwrite=False):
    """Averages the newest `last` checkpoints of model_dir; returns (output path, inputs)."""
    run = config.load(model_dir)
    if run is None:
        raise config.ConfigError(f"{model_dir}: no {config.CONFIG_FILE}; is it a kt-train "
                                 f"model_dir?")
    if last < 1:
        raise checkpoints.CheckpointError(f"--last must be at least 1, got {last}")
    paths = checkpoints.CheckpointDirectory(checkpoints.default_directory(model_dir)).paths()
    if len(paths) < last:
        raise checkpoints.CheckpointError(
            f"{checkpoints.default_directory(model_dir)} has {len(paths)} checkpoint(s), fewer "
            f"than --last {last}; train longer or keep more (--keep_checkpoints)")
    chosen = paths[-last:]
    step = checkpoints.step_in_name(chosen[-1])
    output = checkpoints.CheckpointDirectory(pathlib.Path(model_dir) / config.AVERAGED_DIR,
                                             keep=0)
    if not overwrite and (output.directory / chosen[-1].name).exists():
        raise checkpoints.CheckpointError(
            f"{output.directory / chosen[-1].name} exists (an earlier average); pass "
            f"--overwrite to replace it")
    model = kt.build_model(kt.HParams(**run.hparams), run.vocab_size)
    average(model, chosen)
    return output.save(model, step), chosen


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kt-average", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a kt-train model_dir")
    parser.add_argument("--last", type=int, default=5,
                        help="how many of the newest checkpoints (paper: 5 base, 20 big)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing average of the same step")
    cli.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    try:
        output, chosen = average_last(args.model_dir, args.last, args.overwrite)
    except (config.ConfigError, checkpoints.CheckpointError, OSError, ValueError) as error:
        print(f"kt-average: error: {error}", file=sys.stderr)
        return 2
    print(f"averaged {', '.join(p.name for p in chosen)} into {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
