"""How long dropping a tf.data iterator takes after it has run a while, with and without
tf.data's autotuning (why data.pipeline turns it off).

With autotuning on and AUTOTUNE values in the pipeline, TensorFlow 2.21 runs an optimization
thread that sleeps between rounds for a period that doubles up to about a minute, and the
iterator's destructor waits for that sleep to end. A run's training iterator lives as long as
the run, so it is dropped (at the process's exit, or whenever Python's collector finds it,
in the middle of anything) after a long sleep. It shows when every core is busy, as in a
test suite on two workers or beside other jobs (`--busy` processes spin while it runs); on
an idle machine the destructor was seen to return at once. Each variant runs in a fresh
process:

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
