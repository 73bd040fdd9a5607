"""Plots a kt-train run's TensorBoard scalars (loss, learning rate, dev BLEU) into one PNG.

    python -m bench.plot_training --model_dir runs/small --output docs/training_small.png
"""

import argparse
import collections
import pathlib

import matplotlib
import tensorflow as tf

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("loss", "train loss (label-smoothed)"), ("dev_loss", "dev loss"),
          ("learning_rate", "learning rate"), ("dev_bleu", "dev BLEU (greedy)"))


def scalars(log_dir):
    """name -> sorted [(step, value)] from every event file under log_dir."""
    series = collections.defaultdict(dict)
    for path in sorted(pathlib.Path(log_dir).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                series[value.tag][event.step] = float(tf.make_ndarray(value.tensor))
    return {name: sorted(points.items()) for name, points in series.items()}


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.plot_training",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    series = scalars(pathlib.Path(args.model_dir) / "logs")
    figure, axes = plt.subplots(2, 2, figsize=(10, 7))
    for axis, (name, label) in zip(axes.flat, PANELS):
        points = series.get(name, [])
        if points:
            axis.plot(*zip(*points), marker="." if len(points) < 30 else None)
        axis.set_title(label)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.suptitle(args.title or f"kt-train {args.model_dir}")
    figure.tight_layout()
    figure.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
