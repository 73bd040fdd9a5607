"""Decoding speed: beam 4 and greedy on the base model shape, through the Python API and the
exported SavedModel, with the key/value cache and without it.

Random weights and a fixed output length: every source has 32 tokens and every hypothesis runs
to 40: the Python API's beam searches pass `eos_id=-1`; greedy decoding and the SavedModel stop
at end of sentence, so its embedding row is zeroed (its logit is 0 among 32,000 random ones) and
the script checks that none of their outputs chose it. Variants alternate within each
repetition; figures are sentences per second, median (min-max) of --repeats runs.

    python bench/decode_speed.py --repeats 5
"""

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import data  # noqa: E402
import export  # noqa: E402
import keras_transformer as kt  # noqa: E402
from bench.common import append_results, markdown_table  # noqa: E402
from keras_transformer.decoding import recomputing_step  # noqa: E402


def long_sentences(vocabulary, count, length):
    """`count` bundled-corpus sentences with at least `length` tokens (cut to length later)."""
    found = []
    for english, _ in data.get_source("bible_en_es").pairs("train").as_numpy_iterator():
        if int(vocabulary.tokenize(tf.constant([english])).row_lengths()[0]) >= length:
            found.append(english)
            if len(found) == count:
                return found
    raise SystemExit(f"the corpus has fewer than {count} sentences of {length} tokens")


def variants(model, saved, source_ids, texts, new_tokens, uncached):
    """name -> a function decoding the batch once and returning output ids [batch, ..., length]."""
    batch, source_length = source_ids.shape
    extra = new_tokens - source_length

    @tf.function
    def uncached_beam(source):
        step_fn, cache = recomputing_step(model, source, new_tokens)
        return kt.beam_search(step_fn, cache, new_tokens, beam_size=4, eos_id=-1)[0]

    found = {
        "beam 4, cached": lambda: kt.beam_decode(model, source_ids, extra_length=extra,
                                                 eos_id=-1)[0],
        "beam 4, cached, XLA": lambda: kt.beam_decode(model, source_ids, extra_length=extra,
                                                      eos_id=-1, jit_compile=True)[0],
        "beam 4, SavedModel translate_ids": lambda: saved.signatures["translate_ids"](
            source_ids=source_ids)["ids"],
        "beam 4, SavedModel serving_default (strings)": lambda: saved.signatures[
            "serving_default"](inputs=tf.constant(texts))["translations"],
        "greedy, cached": lambda: kt.sample_decode(model, source_ids, extra_length=extra,
                                                   temperature=0.0)[0],
    }
    if uncached:
        found["beam 4, uncached (prefix recomputed)"] = lambda: uncached_beam(source_ids)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch_sizes", default="1,32")
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=40)
    parser.add_argument("--vocab_size", type=int, default=32000)
    parser.add_argument("--hparams", default="transformer_base")
    parser.add_argument("--uncached_repeats", type=int, default=3,
                        help="runs of the slow uncached decode (0: skip it)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        vocabulary = data.build_vocabulary(
            data.corpus_texts(data.get_source("bible_en_es")), args.vocab_size,
            pathlib.Path(tmp) / "vocab.model")
        model = kt.build_model(args.hparams, vocabulary.vocab_size)
        table = np.asarray(model.embedding.embeddings)
        table[kt.EOS_ID] = 0.0
        model.embedding.embeddings.assign(table)
        translator = export.Translator(
            model, vocabulary, extra_length=args.new_tokens - args.source_length,
            max_input_length=args.source_length, max_batch_size=max(
                int(b) for b in args.batch_sizes.split(",")))
        saved = tf.saved_model.load(str(export.export(translator, pathlib.Path(tmp) / "saved")))
        texts = long_sentences(vocabulary, max(int(b) for b in args.batch_sizes.split(",")),
                               args.source_length)

        rows = []
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            source_ids = translator.tokenize(tf.constant(texts[:batch]))["source_ids"]
            assert source_ids.shape == (batch, args.source_length), source_ids.shape
            runs = variants(model, saved, source_ids, texts[:batch],
                            args.new_tokens, args.uncached_repeats > 0)
            times = {name: [] for name in runs}
            for name, decode in runs.items():  # warm-up: traces and compiles
                output = decode()
                if output.dtype == tf.int32:  # every hypothesis has new_tokens tokens
                    assert output.shape[-1] == args.new_tokens, (name, output.shape)
                    if "SavedModel" in name or "greedy" in name:  # these stop at end of
                        # sentence (the others pass eos_id=-1): check that none was chosen
                        assert not np.any(output.numpy() == kt.EOS_ID), name
            for repeat in range(args.repeats):
                for name, decode in runs.items():
                    if "uncached" in name and repeat >= args.uncached_repeats:
                        continue
                    start = time.perf_counter()
                    decode()
                    times[name].append(time.perf_counter() - start)
                    print(f"batch {batch}, {name}: {times[name][-1]:.2f} s", flush=True)
            cached = statistics.median(times["beam 4, cached"])
            for name, seconds in times.items():
                rates = [batch / s for s in seconds]
                rows.append([batch, name, f"{statistics.median(rates):.2f} ({min(rates):.2f}-"
                             f"{max(rates):.2f}, n={len(rates)})",
                             f"{statistics.median(seconds):.2f}",
                             f"{statistics.median(seconds) / cached:.2f}x"])

    table = (f"{args.hparams} shape, {vocabulary.vocab_size}-id shared vocabulary, random "
             f"weights, float32; {args.source_length} source tokens, {args.new_tokens} output "
             f"tokens every hypothesis, beam 4 / alpha 0.6.\n\n" + markdown_table(
                 ["batch", "decode", "sentences/s", "s/batch (median)", "time vs cached beam"],
                 rows))
    append_results("Decoding speed, beam 4 and greedy", table)


if __name__ == "__main__":
    main()
