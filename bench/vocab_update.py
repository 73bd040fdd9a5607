"""Fine-tuning on a new corpus with the base run's vocabulary kept, or with one built for the new
corpus (`kt-train --init_from BASE --update_vocab`): equal steps, the dev BLEU of both before and
after, each run alone (issue 83).

    python -m bench.vocab_update --init_from runs/bible --data tatoeba_en_es --steps 1000 \\
        --vocab_size 8000
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

from bench.common import append_results, markdown_table, peaks_sentence
from bench.train_step import matmul_peak
from keras_transformer.trainer import vocab_update

BLEU = re.compile(r"evaluation at step (\d+): .*?dev BLEU ([0-9.]+)")


def fine_tune(model_dir, args, *flags):
    """kt-train --init_from in a fresh process: ({step: dev BLEU}, minutes)."""
    command = [sys.executable, "-m", "keras_transformer.trainer.task", "--model_dir",
               str(model_dir), "--init_from", args.init_from, "--data", args.data,
               "--train_steps", str(args.steps), "--eval_every", str(args.steps),
               "--eval_sentences", str(args.eval_sentences), "--batch_tokens",
               str(args.batch_tokens), "--seed", "1", "--hparams_override",
               args.hparams_override, *flags]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    bleu = {int(step): float(score) for step, score in BLEU.findall(result.stdout)}
    return bleu, (time.perf_counter() - start) / 60


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--init_from", required=True, help="the base run's model_dir")
    parser.add_argument("--data", required=True, help="the new corpus (with a dev split)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--vocab_size", type=int, default=8000,
                        help="ids of the vocabulary built for the new corpus")
    parser.add_argument("--batch_tokens", type=int, default=3000)
    parser.add_argument("--eval_sentences", type=int, default=500)
    parser.add_argument("--hparams_override", default="warmup_steps=100")
    args = parser.parse_args(argv)
    peaks = [matmul_peak(tf.float32) / 1e9]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, flags in (("kept", ()), ("updated", ("--update_vocab", "--vocab_size",
                                                        str(args.vocab_size)))):
            run = pathlib.Path(scratch) / name
            bleu, minutes = fine_tune(run, args, *flags)
            record = run / vocab_update.RECORD_FILE
            pieces = ("the base's" if not record.exists() else
                      "{new_vocab_size} ids: {kept} kept, {new} new, {dropped} dropped".format(
                          **json.loads(record.read_text())))
            rows.append([name, pieces, f"{bleu[0]:.2f}", f"{bleu[args.steps]:.2f}",
                         f"{minutes:.1f}"])
    peaks.append(matmul_peak(tf.float32) / 1e9)
    table = markdown_table(["vocabulary", "pieces", "dev BLEU at step 0",
                            f"dev BLEU at step {args.steps}", "minutes"], rows)
    append_results(f"Fine-tuning {args.init_from} on {args.data}: vocabulary kept or updated",
                   f"Greedy dev BLEU (sacrebleu) of {args.eval_sentences} spread dev sentences; "
                   f"batch_tokens {args.batch_tokens}, --hparams_override "
                   f"{args.hparams_override}, seed 1, one run each. "
                   f"{peaks_sentence(peaks)}\n\n{table}")


if __name__ == "__main__":
    main()
