"""Loss curves of two kt-train setups that should learn alike, from the same start.

`--compare precision` (the default): float32 against mixed_bfloat16. `--compare accumulation`:
batches of --batch_tokens against micro-batches of a quarter of them, 4 to an update
(`--accumulate_steps 4`), the same number of updates. Both runs train --hparams on the bundled
corpus with the same seed and kt-train's --deterministic, so from the same initial weights on the
same sentences in the same order; only the compared setting differs. The table gives each run's
training loss (label-smoothed, the mean over each --log_every interval) and its dev loss at
every evaluation, read from the runs' TensorBoard scalars, their differences, and each run's
median target tokens/s.

    python -m bench.loss_curves
    python -m bench.loss_curves --compare accumulation
"""

import argparse
import pathlib
import statistics
import tempfile

from bench.common import append_results, markdown_table
from bench.end_to_end import kt_train
from bench.plot_training import scalars
from keras_transformer import data

# --compare: (title, [(column name, extra kt-train flags given args)] for the two runs)
COMPARISONS = {
    "precision": ("Loss curves, float32 vs mixed_bfloat16", [
        ("float32", lambda args: ["--mixed_precision", "none"]),
        ("mixed_bfloat16", lambda args: ["--mixed_precision", "mixed_bfloat16"])]),
    "accumulation": ("Loss curves, one batch vs 4 accumulated micro-batches", [
        ("one batch", lambda args: []),
        ("4 micro-batches", lambda args: ["--batch_tokens", str(args.batch_tokens // 4),
                                          "--accumulate_steps", "4"])]),
}


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.loss_curves",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="precision")
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log_every", type=int, default=25)
    parser.add_argument("--eval_every", type=int, default=50)
    args = parser.parse_args()

    title, runs = COMPARISONS[args.compare]
    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        vocab = pathlib.Path(tmp) / "vocab.model"
        data.build_vocabulary(data.corpus_texts(data.get_source("bible_en_es")),
                              args.vocab_size, vocab)
        for index, (name, flags) in enumerate(runs):
            run = argparse.Namespace(**vars(args), mixed_precision="none", checkpoint_every=0)
            model_dir = pathlib.Path(tmp) / f"run{index}"
            kt_train(run, vocab, model_dir, "--eval_every", str(args.eval_every),
                     "--deterministic", *flags(args))
            curves[name] = scalars(model_dir / "logs")

    (first, _), (second, _) = runs
    rows, differences = [], {"loss": [], "dev_loss": []}
    for scalar in differences:
        a, b = (dict(curves[name].get(scalar, [])) for name in (first, second))
        for step in sorted(a.keys() & b.keys()):
            difference = b[step] - a[step]
            differences[scalar].append(abs(difference) / a[step])
            rows.append([scalar, step, f"{a[step]:.4f}", f"{b[step]:.4f}",
                         f"{difference:+.4f} ({difference / a[step]:+.1%})"])
    speeds = {name: statistics.median(value for step, value in
                                      curves[name].get("target_tokens_per_second", [])[1:])
              for name, _ in runs}  # the first interval includes tracing
    table = (
        f"{args.hparams}, {args.vocab_size}-id vocabulary, bundled corpus, {args.batch_tokens} "
        f"tokens a batch side ({' / '.join(' '.join(flags(args)) or name for name, flags in runs)}"
        f"), {args.steps} updates, the same seed, --deterministic; training loss = mean of "
        f"each {args.log_every}-update interval, dev loss every {args.eval_every} updates.\n\n"
        + markdown_table(["scalar", "step", first, second, "difference"], rows)
        + "\n\nLargest relative difference: "
        + "; ".join(f"{name} {max(values):.1%}" for name, values in differences.items()
                    if values)
        + ". Target tokens/s (median of the intervals after the first): "
        + "; ".join(f"{name} {speed:,.0f}" for name, speed in speeds.items()))
    append_results(title, table)


if __name__ == "__main__":
    main()
