"""A corpus of millions of lines through kt-vocab, the input pipeline and kt-train's first
updates, with a kill and a resume: what a user with WMT-sized data meets before the first hour.

    python -m bench.large_corpus --pairs 5000000 --work_dir /tmp/large

The corpus is generated here, not committed: pair n joins one to four pairs of tatoeba_en_es's
train split drawn at random (seeded), the English sides joined as the Spanish ones are, so every
line is a translation of its other side, most lines are new, and their lengths run like a news
corpus's rather than Tatoeba's short sentences. Train is plain text (train.en, train.es: what WMT
ships); dev is tatoeba_en_es's. Each stage is the command a user runs, in a process of its own,
timed on the wall clock, its peak resident memory read from `wait4`:

1. kt-vocab over the whole corpus (SentencePiece trains on `--max_sentences` of its sentences,
   drawn by reservoir sampling, so its memory is bounded by that, not by the corpus).
2. The input pipeline alone (in this process, as kt-train builds it): seconds to its first batch
   and real source + target tokens a second after that, beside what a transformer_base step
   consumes on an H200 (../shared/gpu-probe's figure, quoted).
3. kt-train (`--hparams`, one checkpoint every few steps, a line a step): seconds to the first
   update and peak memory; killed (SIGKILL) after a checkpoint, then the same command again:
   the step it resumed at and its seconds to the first update.
4. The same kill and resume with `--deterministic`, whose resume replays the batches already
   trained on (`skip`) to continue them exactly: its seconds to the first update, and the
   pipeline's skipping rate, which sets what a resume at a late step costs.
"""

import argparse
import gzip
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.common import append_results, markdown_table, peaks_sentence

SOURCE_CORPUS = "tatoeba_en_es"
# ../shared/gpu-probe/results/h200-transformer_base.md, this project's step under Keras-JAX,
# mixed_bfloat16: target tokens a second at 400x64->64 and 100x250->250; the source side is as
# long, so the pipeline must deliver twice that in source + target tokens.
H200_BASE_TARGET_TOKENS_PER_SECOND = (505_614, 618_394)
STEP_LINE = re.compile(r"^step (\d+): ")


def bundled_lines(name, split, lang):
    from keras_transformer import data

    path = pathlib.Path(data.__file__).parent / "corpora" / name / f"{split}.{lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return file.read().splitlines()


def write_corpus(directory, pairs, seed):
    """Writes `directory`/train.{en,es} (`pairs` generated lines) and dev.{en,es}.gz
    (tatoeba_en_es's); returns the mean number of words of an English line."""
    directory.mkdir(parents=True, exist_ok=True)
    english, spanish = (bundled_lines(SOURCE_CORPUS, "train", lang) for lang in ("en", "es"))
    draw = random.Random(seed)
    words = 0
    with open(directory / "train.en", "w", encoding="utf-8") as en, \
            open(directory / "train.es", "w", encoding="utf-8") as es:
        for _ in range(pairs):
            chosen = draw.choices(range(len(english)), k=draw.randint(1, 4))
            line = " ".join(english[i] for i in chosen)
            words += line.count(" ") + 1
            en.write(line + "\n")
            es.write(" ".join(spanish[i] for i in chosen) + "\n")
    for lang in ("en", "es"):
        with gzip.open(directory / f"dev.{lang}.gz", "wt", encoding="utf-8") as file:
            file.write("".join(line + "\n" for line in bundled_lines(SOURCE_CORPUS, "dev", lang)))
    return words / pairs


def timed(command, log):
    """Runs a command to its end; returns (seconds, peak resident GiB, output)."""
    print("$ " + " ".join(command), flush=True)
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - start
    log.write(output)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"failed:\n{output[-3000:]}")
    return seconds, usage.ru_maxrss / 2**20, output


def train_until(command, log, kill_after=None):
    """Runs kt-train, reading its step lines as they come. Returns a dict: seconds to the first
    step line (`first_update`), the step it started at (`start_step`), peak resident GiB
    (`peak`, to the kill); with `kill_after`, SIGKILLs it once that step's line is printed."""
    print("$ " + " ".join(command), flush=True)
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    result = {"first_update": None, "start_step": 0}
    for line in process.stdout:
        log.write(line)
        resumed = re.match(r"resuming from .* at step (\d+)", line)
        if resumed:
            result["start_step"] = int(resumed.group(1))
        step = STEP_LINE.match(line)
        if step and result["first_update"] is None:
            result["first_update"] = time.monotonic() - start
        if step and kill_after is not None and int(step.group(1)) >= kill_after:
            process.send_signal(signal.SIGKILL)
            break
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code and not (kill_after is not None and code == -signal.SIGKILL):
        sys.exit(f"kt-train failed ({code}); see the log")
    result["peak"] = usage.ru_maxrss / 2**20
    return result


def pipeline_figures(directory, vocab, batch_tokens, batches):
    """(seconds to the first training batch, real tokens/s over `batches` more, deterministic
    batches skipped a second) of the corpus's training pipeline as kt-train builds it."""
    import numpy as np

    from keras_transformer import data

    source = data.get_source(str(directory), "en", "es")

    def batches_of(deterministic):
        return iter(data.pipeline(source, vocab, "train", batch_tokens=batch_tokens, seed=1,
                                  deterministic=deterministic))

    start = time.perf_counter()
    iterator = batches_of(False)
    next(iterator)
    first = time.perf_counter() - start
    start, tokens = time.perf_counter(), 0
    for _ in range(batches):
        (source_ids, _), target_ids = next(iterator)
        tokens += np.count_nonzero(source_ids) + np.count_nonzero(target_ids)
    rate = tokens / (time.perf_counter() - start)
    del iterator  # its prefetching would share the cores with the skipping timed next
    iterator = batches_of(True)
    next(iterator)  # the shuffle buffer filled, as a resume's is before its skipping
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return first, rate, batches / (time.perf_counter() - start)


def kill_and_resume(train, model_dir, log, kill_after):
    """A fresh run killed after step `kill_after`, then resumed: (its first run, the resume)."""
    shutil.rmtree(model_dir, ignore_errors=True)
    first = train_until(train, log, kill_after=kill_after)
    return first, train_until(train, log)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.large_corpus",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5_000_000)
    parser.add_argument("--vocab_size", type=int, default=32_000)
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--pipeline_batches", type=int, default=500)
    parser.add_argument("--checkpoint_every_steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work_dir", help="keep the corpus and runs here (default: a temporary "
                                           "directory)")
    args = parser.parse_args(argv)
    import tensorflow as tf

    from bench.train_step import matmul_peak

    peaks = [matmul_peak(tf.float32) / 1e9]
    with tempfile.TemporaryDirectory() as scratch:
        work = pathlib.Path(args.work_dir or scratch)
        work.mkdir(parents=True, exist_ok=True)
        corpus, vocab = work / "corpus", work / "vocab.model"
        log = open(work / "log.txt", "a", encoding="utf-8")
        start = time.monotonic()
        words = write_corpus(corpus, args.pairs, args.seed)
        generated = time.monotonic() - start
        size = sum(f.stat().st_size for f in corpus.glob("train.*")) / 2**30
        data_flags = ["--data", str(corpus), "--source_lang", "en", "--target_lang", "es"]
        vocab.unlink(missing_ok=True)
        vocab_seconds, vocab_peak, _ = timed(
            [sys.executable, "-m", "keras_transformer.data.build_vocab", *data_flags,
             "--vocab_size", str(args.vocab_size), "--output", str(vocab)], log)
        first_batch, rate, skip_rate = pipeline_figures(corpus, str(vocab), args.batch_tokens,
                                                        args.pipeline_batches)
        every = args.checkpoint_every_steps
        train = [sys.executable, "-m", "keras_transformer.trainer", *data_flags,
                 "--vocab", str(vocab), "--hparams", args.hparams, "--batch_tokens",
                 str(args.batch_tokens), "--seed", str(args.seed), "--train_steps",
                 str(3 * every), "--checkpoint_every_steps", str(every), "--log_every", "1",
                 "--eval_every", str(10**9), "--eval_sentences", "0"]
        runs = {}
        for name, directory, flags in (("kt-train", "run", []),
                                       ("kt-train --deterministic", "deterministic_run",
                                        ["--deterministic"])):
            runs[name] = kill_and_resume(train + ["--model_dir", str(work / directory), *flags],
                                         work / directory, log, kill_after=every + 2)
        log.close()
    peaks.append(matmul_peak(tf.float32) / 1e9)
    low, high = (2 * t for t in H200_BASE_TARGET_TOKENS_PER_SECOND)
    rows = [["generate the corpus (the bench's, not a user's)", f"{generated:.1f} s", "-"],
            [f"kt-vocab --vocab_size {args.vocab_size}", f"{vocab_seconds:.1f} s",
             f"{vocab_peak:.2f} GiB"],
            ["input pipeline: first batch (file checks, shuffle buffer)", f"{first_batch:.1f} s",
             "-"],
            [f"input pipeline: real source + target tokens/s ({args.pipeline_batches} batches)",
             f"{rate:,.0f}", f"{rate / high:.2f}x-{rate / low:.2f}x an H200's base step"],
            ["input pipeline --deterministic: batches skipped a second (a resume's replay)",
             f"{skip_rate:,.0f}", f"a resume at step 100,000: {100_000 / skip_rate / 60:.0f} min"]]
    for name, (first, resumed) in runs.items():
        rows.append([f"{name}: first update of a fresh run", f"{first['first_update']:.1f} s",
                     f"{first['peak']:.2f} GiB"])
        rows.append([f"{name}: killed at step {every + 2}, resumed at step "
                     f"{resumed['start_step']}: its first update",
                     f"{resumed['first_update']:.1f} s", f"{resumed['peak']:.2f} GiB"])
    table = (
        f"A generated corpus of {args.pairs:,} pairs ({size:.2f} GiB of plain text, "
        f"{words:.1f} English words a line; pairs of {SOURCE_CORPUS} joined by 1-4), dev "
        f"{SOURCE_CORPUS}'s; kt-train {args.hparams}, --batch_tokens {args.batch_tokens}, "
        f"a checkpoint every {every} steps. Seconds on the wall clock, one run each; memory: "
        f"peak resident set of the command's process (wait4). The H200's need: twice "
        f"../shared/gpu-probe's transformer_base target tokens/s ({low:,}-{high:,}). "
        f"{peaks_sentence(peaks)}\n\n" + markdown_table(["what", "figure", "beside"], rows))
    append_results(f"A corpus of {args.pairs / 1e6:g}M pairs", table)


if __name__ == "__main__":
    main()
