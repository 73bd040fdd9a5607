"""End-to-end `kt-train` throughput against the same model's bare training step.

kt-train runs on the bundled corpus with length bucketing (input pipeline, a retrace for each new
bucket shape, checkpoints every --checkpoint_every steps); its rate is the real target tokens
its log lines report over the wall-clock time between them (the first interval, which holds
start-up and the first traces, is left out). The bare step runs in this process before and after:
`train_on_batch` on the first --batches batches of the same pipeline, each traced and warmed up
first, timed in turn; its rate is their real target tokens over the time of their steps.

    python -m bench.end_to_end
"""

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

import keras_transformer as kt
from bench.common import append_results, markdown_table
from keras_transformer import data

LINE = re.compile(r"step (\d+): .*target_tokens (\S+),")


def kt_train(args, vocab, model_dir, *flags):
    """(steps, real target tokens, seconds) over kt-train's log lines after the first.

    `flags` go last on kt-train's command line, so they override the ones set here.
    """
    command = [sys.executable, "-m", "keras_transformer.trainer.task",
               "--model_dir", str(model_dir), "--hparams", args.hparams,
               "--data", "bible_en_es", "--vocab", str(vocab),
               "--batch_tokens", str(args.batch_tokens), "--train_steps", str(args.steps),
               "--checkpoint_every_steps", str(args.checkpoint_every),
               "--eval_every", str(10 * args.steps), "--eval_sentences", "0",
               "--log_every", str(args.log_every), "--mixed_precision", args.mixed_precision,
               *flags]
    print(" ".join(command), flush=True)
    marks = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=pathlib.Path(__file__).resolve().parent.parent) as run:
        for line in run.stdout:
            found = LINE.search(line)
            if found:
                marks.append((time.perf_counter(), int(found[1]), float(found[2])))
                print(line.rstrip(), flush=True)
    if run.returncode:
        raise SystemExit(f"kt-train failed with exit code {run.returncode}")
    (start, first_step, _), (end, last_step, _) = marks[0], marks[-1]
    return last_step - first_step, sum(tokens for _, _, tokens in marks[1:]), end - start


class BareSteps:
    """`train_on_batch` over the pipeline's first batches, each traced and warmed up once."""

    def __init__(self, args, vocabulary):
        hp = kt.hparams.get(args.hparams)
        policy = {"none": "float32"}.get(args.mixed_precision, args.mixed_precision)
        self.model = kt.build_model(hp, vocabulary.vocab_size, dtype=policy)
        self.model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp))
        iterator = iter(data.pipeline("bible_en_es", vocabulary, "train",
                                      batch_tokens=args.batch_tokens, seed=3))
        self.batches = [next(iterator) for _ in range(args.batches)]
        for batch in self.batches:  # one trace per shape, then a warm step
            self.model.train_on_batch(*batch)
            self.model.train_on_batch(*batch)
        self.shapes = sorted({tuple(batch[0][0].shape) + (batch[1].shape[1],)
                              for batch in self.batches})

    def rates(self, repeats):
        """Real target tokens/s of one pass over the batches, per repeat."""
        rates = []
        for _ in range(repeats):
            tokens, seconds = 0, 0.0
            for batch in self.batches:
                start = time.perf_counter()
                self.model.train_on_batch(*batch)
                seconds += time.perf_counter() - start
                tokens += int(np.count_nonzero(batch[1]))
            rates.append(tokens / seconds)
        return rates


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.end_to_end",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--log_every", type=int, default=10)
    parser.add_argument("--checkpoint_every", type=int, default=40)
    parser.add_argument("--mixed_precision", default="none",
                        choices=("none", "mixed_bfloat16"))
    parser.add_argument("--batches", type=int, default=6,
                        help="pipeline batches the bare step cycles through")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        vocab = pathlib.Path(tmp) / "vocab.model"
        vocabulary = data.build_vocabulary(
            data.corpus_texts(data.get_source("bible_en_es")), args.vocab_size, vocab)
        bare_steps = BareSteps(args, vocabulary)
        before = bare_steps.rates(args.repeats)
        steps, tokens, seconds = kt_train(args, vocab, pathlib.Path(tmp) / "run")
        after = bare_steps.rates(args.repeats)
        shapes = bare_steps.shapes
    bare = float(np.median(before + after))
    end_to_end = tokens / seconds
    table = (
        f"{args.hparams}, {args.vocab_size}-id vocabulary, bundled corpus, {args.batch_tokens} "
        f"tokens a batch side, --mixed_precision {args.mixed_precision}; real (non-padding) target "
        f"tokens per second. kt-train: steps {args.log_every}-{args.steps} ({steps} steps, "
        f"{tokens:,.0f} target tokens, {seconds:.1f} s wall, a checkpoint every "
        f"{args.checkpoint_every} steps). Bare step: {args.batches} pipeline batches of shapes "
        f"(sentences, source, target) {shapes}, {args.repeats} passes before and after "
        f"kt-train.\n\n"
        + markdown_table(["what", "target tokens/s"], [
            ["kt-train end to end", f"{end_to_end:,.0f}"],
            ["bare train_on_batch (median; before, after)",
             f"{bare:,.0f} ({', '.join(f'{r:,.0f}' for r in before + after)})"],
            ["end to end / bare", f"{end_to_end / bare:.2f}"]]))
    append_results("End-to-end kt-train vs the bare training step", table)


if __name__ == "__main__":
    main()
