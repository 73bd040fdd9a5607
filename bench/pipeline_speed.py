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

import keras_transformer as kt
from bench.common import append_results, markdown_table, summary
from keras_transformer import data


def real_tokens(batch):
    (source, _), target = batch
    return np.count_nonzero(source) + np.count_nonzero(target)


def pipeline_rate(vocabulary, batch_tokens, batches):
    iterator = iter(data.pipeline("bible_en_es", vocabulary, "train", batch_tokens=batch_tokens,
                                  seed=1))
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
    args = parser.parse_args()

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

    pipeline_rates, model_rates = [], []
    for _ in range(args.repeats):
        pipeline_rates.append(pipeline_rate(vocabulary, args.batch_tokens, args.pipeline_batches))
        start = time.perf_counter()
        model.train_on_batch(*batch)
        model_rates.append(real_tokens(batch) / (time.perf_counter() - start))
    ratio = np.median(pipeline_rates) / np.median(model_rates)
    table = (
        f"Real source + target tokens per second, batches of {args.batch_tokens} padded tokens "
        f"a side, bundled corpus, {args.vocab_size}-id vocabulary; median (min-max).\n\n"
        + markdown_table(["what", "tokens/s"], [
            [f"input pipeline alone ({args.pipeline_batches} batches a run)",
             summary(pipeline_rates)],
            [f"transformer_base training step (float32, batch shape {tuple(batch[1].shape)})",
             summary(model_rates)],
            ["ratio of medians (pipeline / model)", f"{ratio:,.0f}x"]]))
    append_results("Input pipeline vs the base model", table)


if __name__ == "__main__":
    main()
