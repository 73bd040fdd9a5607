"""How long dropping a tf.data iterator takes after it has run a while, with and without
tf.data's autotuning (why data.pipeline turns it off).

While the test suite ran (2026-11-29, two workers on 2 cores), collections that dropped a
finished kt-train run's iterator waited 5-29 s in `RootDataset::Iterator::~Iterator`, for a
thread of its own (`py-spy dump --native`): with autotuning on, it starts its optimizer,
which sleeps between rounds for a period that doubles. This script's variant, run beside the
suite then: held 45 s, dropped in 36.9 s (held 20 s: 0.46; 90 s: 0.00), and a process
holding one exited 33-38 s after its last line. Not reproduced on demand since: quiet, beside
`--busy` spinning processes, beside pytest, and beside the whole suite, every drop took 0.00-
0.03 s with autotuning on or off. Each variant runs in a fresh process:

    python -m bench.iterator_teardown --hold 45 --busy 2
"""

import argparse
import subprocess
import sys
import time

VARIANT = """
import sys, time
import tensorflow as tf
autotune, hold = sys.argv[1] == "on", float(sys.argv[2])
batches = (tf.data.Dataset.range(10**9).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
           .batch(8).prefetch(tf.data.AUTOTUNE))
options = tf.data.Options()
options.autotune.enabled = autotune
iterator = iter(batches.with_options(options))
for _ in range(5):
    next(iterator)
time.sleep(hold)
next(iterator)
start = time.perf_counter()
del iterator
print(time.perf_counter() - start)
"""


def seconds_to_drop(autotune, hold):
    result = subprocess.run([sys.executable, "-c", VARIANT, autotune, str(hold)],
                            capture_output=True, text=True, check=True)
    return float(result.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", type=float, default=45.0,
                        help="seconds the iterator lives before it is dropped")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--busy", type=int, default=2, help="busy-loop processes beside it")
    args = parser.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(args.busy)]
    try:
        for _ in range(args.repeats):
            for autotune in ("on", "off"):
                start = time.perf_counter()
                took = seconds_to_drop(autotune, args.hold)
                print(f"autotune {autotune}: held {args.hold:.0f} s beside {args.busy} busy "
                      f"processes, dropped in {took:.2f} s (process "
                      f"{time.perf_counter() - start:.0f} s)", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()


if __name__ == "__main__":
    main()
