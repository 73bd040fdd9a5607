"""Soak and hostile-input campaign at the serving boundary, on a trained model_dir.

1. Exports the model (kt-export) to a temporary directory and loads the SavedModel as a server
   would: `tf.saved_model.load` with tensorflow and tensorflow_text only.
2. Sends every fixed hostile case of tests/hostile_inputs.py alone, an empty batch and a batch of
   10,000 strings: outcome, seconds and resident memory after each.
3. Translates --sentences dev sentences one at a time: the expected answers.
4. Soak: --threads threads call the serving signature for --minutes with batches of 1-8 texts,
   a mix of those dev sentences and random hostile texts, plus now and then an empty batch or one
   over the batch limit. Every valid sentence's translation is compared with its expected one;
   resident memory (VmRSS) is sampled every second.
5. kt-translate on a file of 10,000 lines (valid and hostile mixed) in a fresh process: exit
   status, line count, seconds and its peak memory.

    python -m reliability.soak --model_dir runs/demo --minutes 10 --threads 8
    python -m reliability.soak --model_dir runs/demo --minutes 10 --threads 8 --no-onednn
"""

import argparse
import collections
import gzip
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from bench.common import append_results, markdown_table
from tests import hostile_inputs

DEV = pathlib.Path(__file__).resolve().parent.parent / "data/corpora/bible_en_es/dev.en.gz"
RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"


def rss_mb():
    """This process's resident memory in MB (Linux)."""
    with open("/proc/self/status", encoding="ascii") as status:
        kilobytes = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kilobytes / 1024


def export_model(model_dir, output):
    subprocess.run([sys.executable, "-m", "keras_transformer.export", "--model_dir",
                    str(model_dir), "--output", str(output)],
                   check=True, capture_output=True, text=True)
    return next(p for p in sorted(pathlib.Path(output).iterdir()) if p.name.isdigit())


class Server:
    """The loaded SavedModel's serving signature: texts (bytes) -> (translations, scores)."""

    def __init__(self, path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  registers the SentencePiece ops

        self.tf = tf
        self.loaded = tf.saved_model.load(str(path))
        self.serve = self.loaded.signatures["serving_default"]
        self.max_batch_size = json.loads(pathlib.Path(path, "assets", "export.json")
                                         .read_text())["max_batch_size"]

    def __call__(self, texts):
        out = self.serve(inputs=self.tf.constant(texts, self.tf.string))
        return [t.decode("utf-8") for t in out["translations"].numpy()], out["scores"].numpy()


def fixed_cases(server):
    tf = server.tf
    cases = [(name, [text]) for name, text in hostile_inputs.TEXTS.items()]
    cases += [("empty batch", hostile_inputs.EMPTY_BATCH),
              (f"batch of {hostile_inputs.HUGE_BATCH_SIZE:,} strings",
               [hostile_inputs.TEXTS["sentence"]] * hostile_inputs.HUGE_BATCH_SIZE)]
    rows = []
    for name, texts in cases:
        start = time.perf_counter()
        try:
            translations, _ = server(texts)
            first = translations[0][:40] if translations else ""
            outcome = f"{len(translations)} translation(s): {json.dumps(first, ensure_ascii=False)}"
        except tf.errors.InvalidArgumentError as error:
            found = re.search(r"too many sentences[^\]]*", error.message)
            outcome = "error: " + (found.group(0) if found else error.message.splitlines()[0])
        rows.append([name, outcome, f"{time.perf_counter() - start:.2f}", f"{rss_mb():.0f}"])
    return rows


class Soak:
    def __init__(self, server, expected, seconds, threads, seed):
        self.server, self.expected = server, expected
        self.valid = list(expected)
        self.deadline = time.monotonic() + seconds
        self.threads, self.seed = threads, seed
        self.counts = collections.Counter()
        self.mismatches = []
        self.escaped = []
        self.latencies = []
        self.rss = []
        self.lock = threading.Lock()

    def request(self, rng):
        kind = rng.random()
        if kind < 0.02:
            return "empty batch", []
        if kind < 0.04:
            return "over the limit", [b"x"] * (self.server.max_batch_size + 1)
        texts = [self.valid[rng.randrange(len(self.valid))] if rng.random() < 0.5 else
                 hostile_inputs.random_text(np.random.default_rng(rng.randrange(2**32)))
                 for _ in range(rng.randint(1, 8))]
        return "mixed", texts

    def worker(self, index):
        rng = random.Random(self.seed + index)
        while time.monotonic() < self.deadline:
            kind, texts = self.request(rng)
            start = time.perf_counter()
            try:
                translations, _ = self.server(texts)
            except self.server.tf.errors.InvalidArgumentError as error:
                with self.lock:
                    self.counts[f"{kind}: refused"] += 1
                    if kind != "over the limit":
                        self.escaped.append(f"{kind}: {error.message[:200]}")
                continue
            except Exception as error:  # noqa: BLE001  anything else is a failure to report
                with self.lock:
                    self.escaped.append(f"{kind}: {type(error).__name__}: {error}"[:300])
                continue
            with self.lock:
                self.latencies.append(time.perf_counter() - start)
                self.counts[f"{kind}: answered"] += 1
                for text, translation in zip(texts, translations):
                    if text in self.expected:
                        self.counts["valid sentences checked"] += 1
                        if translation != self.expected[text]:
                            self.mismatches.append((text, translation, self.expected[text]))
                    else:
                        self.counts["hostile texts answered"] += 1

    def sample_memory(self):
        start = time.monotonic()
        while time.monotonic() < self.deadline:
            self.rss.append((time.monotonic() - start, rss_mb()))
            time.sleep(1)

    def run(self):
        threads = [threading.Thread(target=self.worker, args=(i,)) for i in range(self.threads)]
        threads.append(threading.Thread(target=self.sample_memory))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def kt_translate_10k(model_dir, directory, valid, seed):
    rng = np.random.default_rng(seed)
    lines = [valid[i % len(valid)] if i % 2 else hostile_inputs.random_text(rng)
             for i in range(10_000)]
    lines = [line.replace(b"\n", b" ") for line in lines]
    source = pathlib.Path(directory) / "input.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "keras_transformer.export.translate",
                                "--model_dir", str(model_dir), "--input", str(source), "--output",
                                str(pathlib.Path(directory) / "output.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)  # this child's own peak, not kt-export's
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    peak = usage.ru_maxrss / 1024
    output = (pathlib.Path(directory) / "output.txt")
    count = len(output.read_bytes().split(b"\n")) - 1 if output.exists() else 0
    return process.returncode, count, seconds, peak, stderr.strip().splitlines()[-1:]


def main():
    parser = argparse.ArgumentParser(prog="python -m reliability.soak",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a kt-train model_dir")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=40,
                        help="dev sentences in the valid mix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip_kt_translate", action="store_true")
    parser.add_argument("--onednn", action=argparse.BooleanOptionalAction, default=True,
                        help="--no-onednn sets TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow loads: "
                             "its kernels' per-shape caches are what grows resident memory")
    args = parser.parse_args()
    if not args.onednn:
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"

    with tempfile.TemporaryDirectory() as directory:
        server = Server(export_model(args.model_dir, directory))
        loaded_rss = rss_mb()
        fixed = fixed_cases(server)
        with gzip.open(DEV, "rt", encoding="utf-8") as lines:
            valid = [line.rstrip("\n").encode() for _, line in zip(range(args.sentences), lines)]
        expected = {text: server([text])[0][0] for text in valid}
        soak = Soak(server, expected, args.minutes * 60, args.threads, args.seed)
        began = time.monotonic()
        soak.run()
        elapsed = time.monotonic() - began
        after = server([valid[0]])[0][0] == expected[valid[0]]
        cli = None if args.skip_kt_translate else kt_translate_10k(args.model_dir, directory,
                                                                   valid, args.seed)

    rss = [mb for _, mb in soak.rss]
    half = [(t, mb) for t, mb in soak.rss if t >= soak.rss[-1][0] / 2]
    slope = np.polyfit(*zip(*half), 1)[0] * 60 if len(half) > 2 else float("nan")
    answered = sum(v for k, v in soak.counts.items() if k.endswith("answered")
                   and not k.startswith("hostile"))
    table = markdown_table(["Fixed case (alone)", "Outcome", "Seconds", "RSS after (MB)"], fixed)
    table += (
        f"\n\nSoak: {args.threads} threads for {elapsed / 60:.1f} min on the exported SavedModel "
        f"(loaded: {loaded_rss:.0f} MB resident). Requests answered: {answered:,} "
        f"({answered / elapsed:.1f}/s); latency median {statistics.median(soak.latencies):.2f} s, "
        f"p99 {np.percentile(soak.latencies, 99):.2f} s, max {max(soak.latencies):.2f} s. "
        + ", ".join(f"{k}: {v:,}" for k, v in sorted(soak.counts.items()))
        + f". Valid sentences translated differently from alone: {len(soak.mismatches)}. "
        f"Errors other than the batch limit's refusal: {len(soak.escaped)}. Still translates "
        f"after: {after}.\n\nResident memory: start {rss[0]:.0f} MB, end {rss[-1]:.0f} MB, peak "
        f"{max(rss):.0f} MB; slope over the second half {slope:+.2f} MB/min. Each minute: "
        + ", ".join(f"{next(mb for t, mb in soak.rss if t >= minute * 60):.0f}"
                    for minute in range(int(soak.rss[-1][0] // 60) + 1)) + " MB.")
    if soak.mismatches or soak.escaped:
        table += "\n\nFirst problems: " + json.dumps(
            [m[:3] for m in soak.mismatches[:3]] + soak.escaped[:3], default=repr,
            ensure_ascii=False)[:1500]
    if cli:
        status, count, seconds, peak, last = cli
        table += (f"\n\nkt-translate on 10,000 lines (half dev sentences, half random hostile "
                  f"texts): exit {status}, {count:,} output lines, {seconds:.0f} s, peak RSS "
                  f"{peak:.0f} MB. {' '.join(last)}")
    append_results("Soak and hostile input at the serving boundary", table, RESULTS)
    return 0 if not soak.escaped and not soak.mismatches and after else 1


if __name__ == "__main__":
    sys.exit(main())
