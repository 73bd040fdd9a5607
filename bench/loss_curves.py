"""Loss curves of kt-train in float32 and in mixed_bfloat16, from the same start.

Both runs train --hparams on the bundled corpus with the same seed and kt-train's
--deterministic, so from the same initial weights on the same batches in the same order; the
compute dtype is what differs. The table gives each run's training
loss (label-smoothed, the mean over each --log_every interval) and its dev loss at every
evaluation, read from the runs' TensorBoard scalars, and the bfloat16 - float32 differences.

    python -m bench.loss_curves
"""

import argparse
import pathlib
import tempfile

from bench.common import append_results, markdown_table
from bench.end_to_end import kt_train
from bench.plot_training import scalars
from keras_transformer import data

PRECISIONS = ("none", "mixed_bfloat16")


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.loss_curves",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log_every", type=int, default=25)
    parser.add_argument("--eval_every", type=int, default=50)
    args = parser.parse_args()

    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        vocab = pathlib.Path(tmp) / "vocab.model"
        data.build_vocabulary(data.corpus_texts(data.get_source("bible_en_es")),
                              args.vocab_size, vocab)
        for precision in PRECISIONS:
            run = argparse.Namespace(**vars(args), mixed_precision=precision,
                                     checkpoint_every=0)
            model_dir = pathlib.Path(tmp) / precision
            kt_train(run, vocab, model_dir, "--eval_every", str(args.eval_every),
                     "--deterministic")
            curves[precision] = scalars(model_dir / "logs")

    rows, differences = [], {"loss": [], "dev_loss": []}
    for name in differences:
        fp32, bf16 = (dict(curves[p].get(name, [])) for p in PRECISIONS)
        for step in sorted(fp32.keys() & bf16.keys()):
            difference = bf16[step] - fp32[step]
            differences[name].append(abs(difference) / fp32[step])
            rows.append([name, step, f"{fp32[step]:.4f}", f"{bf16[step]:.4f}",
                         f"{difference:+.4f} ({difference / fp32[step]:+.1%})"])
    table = (
        f"{args.hparams}, {args.vocab_size}-id vocabulary, bundled corpus, {args.batch_tokens} "
        f"tokens a batch side, {args.steps} steps, the same seed, --deterministic; training "
        f"loss = mean of each {args.log_every}-step interval, dev loss every "
        f"{args.eval_every} steps.\n\n"
        + markdown_table(["scalar", "step", "float32", "mixed_bfloat16", "bf16 - fp32"], rows)
        + "\n\nLargest relative difference: "
        + "; ".join(f"{name} {max(values):.1%}" for name, values in differences.items()
                    if values))
    append_results("Loss curves, float32 vs mixed_bfloat16", table)


if __name__ == "__main__":
    main()
