"""One beam-4 decode timed for the keras_transformer on the path, to compare commits.

bench.decode_speed's workload (transformer_base shape, a 32000-id vocabulary, random weights, 32
sources of 32 tokens, 40 tokens every hypothesis): the median of --runs decodes after one that
traces, with the package's path printed so each arm shows which code it ran. Two commits side by
side, alternating processes, from git worktrees of each:

    for i in 1 2 3; do for tree in ../before ../after; do
        PYTHONPATH=$tree python bench/decode_ab.py --runs 3 [--dtype bfloat16]
    done; done

(Run from a worktree's directory without PYTHONPATH, Python imports the installed checkout, not
that worktree.)
"""

import argparse
import json
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt

BEAM, NEW_TOKENS = 4, 40


def workload(dtype):
    """transformer_base with random weights (seed 0), a 32000-id vocabulary and `dtype` weights,
    and bench.decode_speed's batch: (model, source_ids int32 [32, 32], decode), decode() running
    one beam-4 decode of NEW_TOKENS tokens every hypothesis and returning numpy (ids, scores)."""
    keras.utils.set_random_seed(0)
    model = kt.build_model("transformer_base", 32000, dtype=dtype)
    source = np.random.default_rng(0).integers(2, 32000, size=(32, 32)).astype("int32")
    source[:, -1] = kt.EOS_ID
    source = tf.constant(source)

    def decode():
        ids, scores = kt.beam_decode(model, source, max_output_length=NEW_TOKENS, beam_size=BEAM,
                                     alpha=0.6, eos_id=-1)
        return ids.numpy(), scores.numpy()

    return model, source, decode


def main():
    parser = argparse.ArgumentParser(prog="python bench/decode_ab.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dtype", default="float32", help="float32 or bfloat16 (weights)")
    args = parser.parse_args()
    _, _, decode = workload(args.dtype)
    _, scores = decode()
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        decode()
        times.append(time.perf_counter() - start)
    print(json.dumps({"package": kt.__file__, "dtype": args.dtype,
                      "median_s": round(statistics.median(times), 3),
                      "runs_s": [round(t, 2) for t in times],
                      "first_score": float(scores[0, 0])}))


if __name__ == "__main__":
    main()
