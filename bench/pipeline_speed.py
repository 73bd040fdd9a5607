"""Input pipeline throughput against what the base model consumes on this machine.

Both sides count real (non-padding) source + target tokens per second. The pipeline runs alone
(tokenizing, bucketing, shifting, prefetching, no model); the model side is one Adam step of
transformer_base on a batch from the same pipeline. Runs alternate: pipeline, model, pipeline, ...

    python -m bench.pipeline_speed --repeats 5
"""

import argparse
import pathlib
import tempfile
import time

import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench.common import append_results, markdown_table, peaks_sentence, summary
from bench.train_step import matmul_peak
from keras_transformer import data


def real_tokens(batch):
    (source, _), target = batch
    return np.count_nonzero(source) + np.count_nonzero(target)


def pipeline_rate(vocabulary, batch_tokens, batches, subword_alpha=0.0):
    iterator = iter(data.pipeline("bible_en_es", vocabulary, "train", batch_tokens=batch_tokens,
                                  seed=1, subword_alpha=subword_alpha))
    next(iterator)  # fills the shuffle buffer
    start, tokens = time.perf_counter(), 0
    for _ in range(batches):
        tokens += real_tokens(next(iterator))
    return tokens / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--pipeline_batches", type=int, default=200)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--subword_alphas", default="0",
                        help="comma-separated --subword_alpha values, a pipeline row each (0: "
                             "one segmentation; e.g. 0,0.1 beside BPE-dropout)")
    args = parser.parse_args()
    alphas = [float(alpha) for alpha in args.subword_alphas.split(",")]
    peaks = [matmul_peak(tf.float32) / 1e9]

    with tempfile.TemporaryDirectory() as tmp:
        vocabulary = data.build_vocabulary(
            data.corpus_texts(data.get_source("bible_en_es")), args.vocab_size,
            pathlib.Path(tmp) / "vocab.model")
    hp = kt.hparams.get("transformer_base")
    model = kt.build_model(hp, vocabulary.vocab_size)
    model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp))
    batch = next(iter(data.pipeline("bible_en_es", vocabulary, "train",
                                    batch_tokens=args.batch_tokens, seed=2)))
    model.train_on_batch(*batch)  # traces and warms up

    pipeline_rates, model_rates = {alpha: [] for alpha in alphas}, []
    for _ in range(args.repeats):
        for alpha in alphas:
            pipeline_rates[alpha].append(pipeline_rate(vocabulary, args.batch_tokens,
                                                       args.pipeline_batches, alpha))
        start = time.perf_counter()
        model.train_on_batch(*batch)
        model_rates.append(real_tokens(batch) / (time.perf_counter() - start))
    peaks.append(matmul_peak(tf.float32) / 1e9)
    rows = []
    for alpha, rates in pipeline_rates.items():
        sampled = f", --subword_alpha {alpha:g} (BPE-dropout)" if alpha else ""
        rows.append([f"input pipeline alone ({args.pipeline_batches} batches a run{sampled})",
                     summary(rates)])
    rows.append([f"transformer_base training step (float32, batch shape "
                 f"{tuple(batch[1].shape)})", summary(model_rates)])
    for alpha, rates in pipeline_rates.items():
        rows.append([f"ratio of medians (pipeline{f' at alpha {alpha:g}' if alpha else ''} / "
                     f"model)", f"{np.median(rates) / np.median(model_rates):,.0f}x"])
    table = (
        f"Real source + target tokens per second, batches of {args.batch_tokens} padded tokens "
        f"a side, bundled corpus, {args.vocab_size}-id vocabulary; median (min-max). "
        f"{peaks_sentence(peaks)}\n\n" + markdown_table(["what", "tokens/s"], rows))
    append_results("Input pipeline vs the base model", table)


if __name__ == "__main__":
    main()
