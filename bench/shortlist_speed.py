"""Beam search over a vocabulary shortlist's candidates against the whole vocabulary, on the
base model shape (32,000 ids) and an OPUS-MT-shaped one (58,101 ids, d_model 512), random
weights, float32 and bfloat16 weights.

Every source has 32 tokens and every hypothesis runs to 40 (end of sentence's embedding row is
zeroed, so no random search picks it, and the script checks none did); batch 32, beam 4. The
candidates are k random ids (with end of sentence), the size a batch of 32 sentences gets from
kt-shortlist (3,395 of 8,000 on the Bible run; Marian's 100 a source piece and 100 frequent ones
give a few thousand). Variants alternate within each repetition; seconds a batch, median
(min-max) of --repeats runs, with this machine's matmul peaks beside them.

    python -m bench.shortlist_speed --repeats 5
"""

import argparse
import statistics
import time

import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench.common import append_results, markdown_table
from bench.train_step import matmul_peak
from keras_transformer.search.decode import beam_decode

SHAPES = {"base (32,000 ids)": 32000, "OPUS-MT-shaped (58,101 ids)": 58101}
SOURCE_LENGTH, NEW_TOKENS, BATCH = 32, 40, 32


def model_of(vocab_size, dtype):
    hp = kt.hparams.get("transformer_base", max_positions=256)
    model = kt.build_model(hp, vocab_size, dtype=dtype)
    model.embedding.embeddings.assign(tf.tensor_scatter_nd_update(
        model.embedding.embeddings, [[kt.EOS_ID]], tf.zeros([1, hp.d_model], dtype)))
    return model


def timed(decode, repeats):
    ids = decode()  # traced once
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ids = decode()
        times.append(time.perf_counter() - start)
    assert not np.any(ids.numpy()[:, 0, :NEW_TOKENS - 1] == kt.EOS_ID), "a search ended early"
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--candidates", default="2000,4000",
                        help="shortlist sizes, comma-separated")
    args = parser.parse_args(argv)
    peaks = {dtype: matmul_peak(dtype) / 1e9 for dtype in ("float32", "bfloat16")}
    rng = np.random.default_rng(0)
    rows = []
    for shape, vocab_size in SHAPES.items():
        source_ids = tf.constant(rng.integers(3, vocab_size, [BATCH, SOURCE_LENGTH - 1]),
                                 tf.int32)
        source_ids = tf.concat([source_ids, tf.fill([BATCH, 1], kt.EOS_ID)], axis=1)
        for dtype in ("float32", "bfloat16"):
            model = model_of(vocab_size, dtype)
            searches = {"whole vocabulary": None}
            for count in [int(c) for c in args.candidates.split(",")]:
                searches[f"{count:,} candidates"] = tf.constant(np.union1d(
                    rng.choice(np.arange(3, vocab_size), count - 1, replace=False), [1]),
                    tf.int32)
            times = {name: [] for name in searches}
            for _ in range(args.repeats):
                for name, candidates in searches.items():
                    times[name] += timed(lambda: beam_decode(
                        model, source_ids, beam_size=4, extra_length=NEW_TOKENS - SOURCE_LENGTH,
                        candidates=candidates)[0], 1)
            whole = statistics.median(times["whole vocabulary"])
            for name, seconds in times.items():
                median = statistics.median(seconds)
                rows.append([shape, dtype, name, f"{median:.2f} ({min(seconds):.2f}-"
                             f"{max(seconds):.2f})", f"{whole / median:.2f}x"])
                print(rows[-1], flush=True)
    table = markdown_table(["shape", "weights", "search over", "s a batch (32 x beam 4, 40 "
                            "tokens)", "vs the whole vocabulary"], rows)
    append_results("Beam search over a shortlist's candidates", table + (
        f"\n\nmatmul peak (2048^3): float32 {peaks['float32']:.0f}, bfloat16 "
        f"{peaks['bfloat16']:.0f} GFLOP/s"))
    print(table)


if __name__ == "__main__":
    main()
