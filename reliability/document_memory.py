"""kt-translate --documents' peak memory on long documents: documents of 1, 20 and 50 MB (the
bundled corpus's English verses, repeated; and one of 1 MB on a single line) translated by the
bundled tiny model for a fixed time, then stopped with SIGTERM, which kt-translate takes as it
takes Ctrl-C (SIGINT: ignored by a process started in the background by a shell). The
peak resident memory of each run goes to reliability/RESULTS.md, beside that of plain
kt-translate on 20 lines: streamed, it stays flat in the document's size past the first piece.

    python -m reliability.document_memory [--seconds 120] [--sizes 1 20 50]
"""

import argparse
import gzip
import itertools
import pathlib
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "data" / "trained_tiny"
CORPUS = ROOT / "data" / "corpora" / "bible_en_es" / "train.en.gz"
RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"


def write_document(path, megabytes, *, one_line=False):
    """The corpus's English verses, repeated to `megabytes` MB (10^6 bytes), as paragraphs of
    20 verses (or all on one line)."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        verses = [line.strip() for line in lines if line.strip()]
    size, parts = 0, []
    for number, verse in enumerate(itertools.cycle(verses)):
        if size >= megabytes * 1_000_000:
            break
        separator = " " if one_line or (number + 1) % 20 else "\n\n"
        parts.append(verse + separator)
        size += len(verse.encode()) + len(separator)
    path.write_text("".join(parts), encoding="utf-8")


def run_interrupted(flags, seconds):
    """kt-translate with `flags`, sent SIGTERM after `seconds` (if still running): (its peak
    RSS in MB, its stderr's last line, its exit status). Run from a process without
    TensorFlow, so the children's ru_maxrss is the translation's own."""
    child = subprocess.Popen([sys.executable, "-m", "keras_transformer.export.translate",
                              "--model_dir", str(MODEL), "--batch_size", "32", *flags],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    said = [line for line in stderr.splitlines() if line.startswith(("kt-translate", "translated"))]
    return peak, (said or ["(nothing said)"])[-1], child.returncode


def measure(name, megabytes, seconds, one_line, scratch):
    """One case in a child process of its own (ru_maxrss of children is a maximum over all)."""
    if name == "lines":
        source = scratch / "lines.en"
        with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
            source.write_text("".join(itertools.islice(lines, 20)), encoding="utf-8")
        flags = ["--input", str(source)]
    else:
        source = scratch / f"{name}.en"
        write_document(source, megabytes, one_line=one_line)
        flags = ["--documents", "--input", str(source), "--output", str(scratch / "out"),
                 "--overwrite"]
    start = time.perf_counter()
    peak, said, status = run_interrupted(flags, seconds)
    said = re.sub(r"/\S+/", "", said)  # the scratch directory
    return [name, f"{peak:.0f}", f"{time.perf_counter() - start:.0f}", str(status), said]


def _matmul_peak():
    """The float32 matmul peak, GFLOP/s, measured in a process of its own (TensorFlow in this
    one would count in its children's peak memory)."""
    return float(subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; from bench.train_step import "
         "matmul_peak; print(matmul_peak(tf.float32) / 1e9)"], capture_output=True, text=True,
        cwd=ROOT, check=True).stdout.split()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120,
                        help="seconds each document is translated before SIGTERM")
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 20, 50],
                        help="document sizes, MB")
    parser.add_argument("--case", nargs=3, metavar=("NAME", "MB", "ONE_LINE"),
                        help=argparse.SUPPRESS)  # one case, in this process
    args = parser.parse_args(argv)
    if args.case:
        name, megabytes, one_line = args.case
        with tempfile.TemporaryDirectory() as scratch:
            print("\t".join(measure(name, float(megabytes), args.seconds, one_line == "1",
                                    pathlib.Path(scratch))))
        return 0
    cases = [("lines", 0, 0)] + [(f"{size:g} MB document", size, 0) for size in args.sizes] + [
        (f"{args.sizes[0]:g} MB document on one line", args.sizes[0], 1)]
    peaks, rows = [_matmul_peak()], []
    for name, megabytes, one_line in cases:
        child = subprocess.run([sys.executable, "-m", "reliability.document_memory", "--case",
                                name, str(megabytes), str(one_line), "--seconds",
                                str(args.seconds)], capture_output=True, text=True, cwd=ROOT)
        rows.append(child.stdout.strip().split("\t") if child.returncode == 0 else
                    [name, "", "", "", "failed: " + child.stderr.strip()[-200:]])
        print(rows[-1], flush=True)
    peaks.append(_matmul_peak())

    from bench.common import append_results, markdown_table, peaks_sentence

    append_results("kt-translate --documents: peak memory by document size", markdown_table(
        ["Input", "Peak RSS (MB)", "Seconds", "Exit status", "Its last line on stderr"], rows)
        + f"\n\nEach run kt-translate --model_dir tests/data/trained_tiny --batch_size 32, "
        f"stopped by SIGTERM after {args.seconds:g} s (exit status 130) unless it ended "
        f"first; `lines` is 20 corpus lines without --documents. {peaks_sentence(peaks)}",
        results=RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
