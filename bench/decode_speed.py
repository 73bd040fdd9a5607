"""Decoding speed: beam 4 and greedy on the base model shape, through the Python API and the
exported SavedModel, with the key/value cache and without it, and through CTranslate2 (the
same weights exported by kt-export --format ctranslate2, float32 and int8).

Random weights and a fixed output length: every source has 32 tokens and every hypothesis runs
to 40: the Python API's beam searches pass `eos_id=-1`; greedy decoding and the SavedModel stop
at end of sentence, so its embedding row is zeroed (its logit is 0 among 32,000 random ones) and
the script checks that none of their outputs chose it. Variants alternate within each
repetition; figures are sentences per second, median (min-max) of --repeats runs. "Its matrix
products alone" is no decode: the dense projections a cached beam-4 decode issues, on the same
weights, step after step, with nothing else (bench/gemm_floor.py): the floor under the beam
searches of the table.

"shortlist" rows decode over a vocabulary shortlist (kt-shortlist's form, `data.shortlist`):
each source piece's 100 candidates and 500 always kept, drawn from a pool of --shortlist_pool
ids, so that a batch's union is about that many, the size kt-shortlist gives a batch of 32 real
sentences (3,395 of 8,000 on the Bible run); the SavedModel holds it (kt-export --shortlist)
and CTranslate2 reads the same list as its vmap ("int8 + vmap").

    python -m bench.decode_speed --repeats 5
"""

import argparse
import functools
import itertools
import os
import pathlib
import statistics
import tempfile
import time
import types

import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench import peers
from bench.common import append_results, markdown_table
from bench.gemm_floor import products_alone
from bench.train_step import matmul_peak
from keras_transformer import data, export
from keras_transformer.data import shortlist as shortlists
from keras_transformer.export import ctranslate2, ctranslate2_engine
from keras_transformer.export.candidates import CandidateTable
from keras_transformer.search.steps import cached_step, recomputing_step


def long_sentences(vocabulary, count, length):
    """`count` bundled-corpus sentences with at least `length` tokens (cut to length later)."""
    found = []
    for english, _ in data.get_source("bible_en_es").pairs("train").as_numpy_iterator():
        if int(vocabulary.tokenize(tf.constant([english])).row_lengths()[0]) >= length:
            found.append(english)
            if len(found) == count:
                return found
    raise SystemExit(f"the corpus has fewer than {count} sentences of {length} tokens")


def random_shortlist(vocab_size, pool, per_source=100, always=500, seed=0):
    """A `data.shortlist.Shortlist` of random candidates for every source piece (`per_source`
    each, `always` kept), all drawn from `pool` ids: a batch's union is about `pool`."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(np.arange(3, vocab_size), pool, replace=False)
    return shortlists.Shortlist(
        always=np.union1d(rng.choice(ids, always, replace=False), [kt.EOS_ID]).astype(np.int32),
        by_source={source: np.sort(rng.choice(ids, per_source, replace=False)).astype(np.int32)
                   for source in range(3, vocab_size)})


def ctranslate2_decode(engine, source_ids, new_tokens, beam_size):
    """The best hypotheses of `engine` (a `Ctranslate2Translator`) for int [batch, length]
    source ids, each run to `new_tokens` tokens (end of sentence disabled until then), as int32
    ids [batch, new_tokens]."""
    rows = [[engine.pieces[i] for i in row if i] for row in source_ids]
    results = engine.engine.translate_batch(
        rows, beam_size=beam_size, length_penalty=0.6, max_decoding_length=new_tokens,
        min_decoding_length=new_tokens, max_input_length=0, use_vmap=engine.shortlist)
    return tf.constant([[engine.ids[t] for t in r.hypotheses[0]] for r in results], tf.int32)


def variants(models, saved_models, source_ids, texts, new_tokens, uncached, peers_by_name,
             ctranslate2_engines, shortlisted=None):
    """name -> a function decoding the batch once and returning output ids [batch, ..., length].

    `models` and `saved_models` map a name suffix (e.g. ", mixed_bfloat16") to a model and to
    a loaded SavedModel; the suffix "" is the float32 one. `ctranslate2_engines` maps a
    quantization to a `Ctranslate2Translator` of the same weights. `shortlisted`: int32 [k],
    the candidates the shortlist gives this batch (the products alone over them).
    """
    model = models[""]
    batch, source_length = source_ids.shape
    extra = new_tokens - source_length
    source_numpy = source_ids.numpy()

    @tf.function
    def preallocated_cache(source):
        # Before the growing cache: buffers of the output's length, written at each step.
        step_fn, cache = cached_step(model, source, new_tokens)
        return kt.beam_search(step_fn, cache, new_tokens, beam_size=4, eos_id=-1)[0]

    @tf.function
    def uncached_beam(source):
        step_fn, cache = recomputing_step(model, source, new_tokens)
        return kt.beam_search(step_fn, cache, new_tokens, beam_size=4, eos_id=-1)[0]

    found = {}
    for suffix, each in models.items():
        found[f"beam 4, cached{suffix}"] = functools.partial(
            lambda each: kt.beam_decode(each, source_ids, extra_length=extra, eos_id=-1)[0],
            each)
    found["beam 4, cached, preallocated cache (before)"] = lambda: preallocated_cache(
        source_ids)
    found["beam 4, cached, XLA"] = lambda: kt.beam_decode(
        model, source_ids, extra_length=extra, eos_id=-1, jit_compile=True)[0]
    for suffix in ("", ", bfloat16 weights"):
        found[f"beam 4, its matrix products alone{suffix}"] = products_alone(
            models[suffix], batch, 4, source_length, new_tokens)
        if shortlisted is not None:
            found[f"beam 4, its matrix products alone{suffix}, shortlist"] = products_alone(
                models[suffix], batch, 4, source_length, new_tokens, shortlisted)
    for suffix, saved in saved_models.items():
        found[f"beam 4, SavedModel translate_ids{suffix}"] = functools.partial(
            lambda saved: saved.signatures["translate_ids"](source_ids=source_ids)["ids"],
            saved)
    for suffix, saved in saved_models.items():
        found[f"beam 4, SavedModel serving_default (strings){suffix}"] = functools.partial(
            lambda saved: saved.signatures["serving_default"](
                inputs=tf.constant(texts))["translations"], saved)
    for suffix, each in models.items():
        found[f"greedy, cached{suffix}"] = functools.partial(
            lambda each: kt.sample_decode(each, source_ids, extra_length=extra,
                                          temperature=0.0)[0], each)
    if uncached:
        found["beam 4, uncached (prefix recomputed)"] = lambda: uncached_beam(source_ids)
    for (quantization, engine), search in itertools.product(ctranslate2_engines.items(),
                                                            ("beam 4", "greedy")):
        found[f"{search}, CTranslate2 {quantization}"] = functools.partial(
            ctranslate2_decode, engine, source_numpy, new_tokens, 4 if search == "beam 4" else 1)
    for name, (kind, peer) in peers_by_name.items():
        if kind == "hf":
            found[name] = functools.partial(
                peers.hf_generate, peer, source_numpy, new_tokens, 4 if "beam" in name else 1)
        else:
            found[name] = functools.partial(peers.keras_hub_generate, peer, source_numpy,
                                            new_tokens)
    return found


def peer_models(hp, vocab_size):
    """name -> (kind, model) of the peers' decoders, same shape, random weights."""
    import torch

    shape = (vocab_size, hp.num_layers, hp.d_model, hp.d_ff, hp.num_heads)
    hf = peers.hf_marian(*shape, eos_id=kt.EOS_ID)
    hf_bf16 = peers.hf_marian(*shape, eos_id=kt.EOS_ID).to(torch.bfloat16)
    hf_bf16.load_state_dict(hf.state_dict())
    return {
        "beam 4, HF generate": ("hf", hf),
        "greedy, HF generate": ("hf", hf),
        "beam 4, HF generate, bfloat16": ("hf", hf_bf16),
        "greedy, HF generate, bfloat16": ("hf", hf_bf16),
        "beam 4, keras-hub BeamSampler": ("keras-hub", peers.keras_hub_bart(*shape, 4)),
        "greedy, keras-hub GreedySampler": ("keras-hub",
                                                  peers.keras_hub_bart(*shape, 1)),
    }


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.decode_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch_sizes", default="1,32")
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=40)
    parser.add_argument("--vocab_size", type=int, default=32000)
    parser.add_argument("--hparams", default="transformer_base")
    parser.add_argument("--uncached_repeats", type=int, default=3,
                        help="runs of the slow uncached decode (0: skip it)")
    parser.add_argument("--variants", default="",
                        help="semicolon-separated variant names (the table's 'decode' column) to "
                             "run; default: all. 'beam 4, cached' always runs: ratios use it")
    parser.add_argument("--ctranslate2", action=argparse.BooleanOptionalAction, default=True,
                        help="also CTranslate2, float32 and int8 (needs pip install -e "
                             ".[ctranslate2])")
    parser.add_argument("--shortlist_pool", type=int, default=3500,
                        help="the ids a random shortlist's candidates are drawn from")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                        help="also Hugging Face generate and keras-hub's samplers (needs "
                             "pip install -e .[bench])")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        vocabulary = data.build_vocabulary(
            data.corpus_texts(data.get_source("bible_en_es")), args.vocab_size,
            pathlib.Path(tmp) / "vocab.model")
        model = kt.build_model(args.hparams, vocabulary.vocab_size)
        table = np.asarray(model.output_projection.embeddings)
        table[kt.EOS_ID] = 0.0
        model.output_projection.embeddings.assign(table)
        models = {"": model}
        for policy, suffix in (("mixed_bfloat16", ", mixed_bfloat16"),
                               ("bfloat16", ", bfloat16 weights")):
            models[suffix] = kt.build_model(args.hparams, vocabulary.vocab_size, dtype=policy)
            models[suffix].set_weights(model.get_weights())
        listed = random_shortlist(vocabulary.vocab_size, args.shortlist_pool)
        saved_models = {}
        for suffix, shortlisted in itertools.product(("", ", bfloat16 weights"), (False, True)):
            translator = export.Translator(
                models[suffix], vocabulary, extra_length=args.new_tokens - args.source_length,
                max_input_length=args.source_length, max_batch_size=max(
                    int(b) for b in args.batch_sizes.split(",")),
                shortlist=listed if shortlisted else None)
            saved_models[suffix + (", shortlist" if shortlisted else "")] = tf.saved_model.load(
                str(export.export(translator, pathlib.Path(tmp) / f"saved{len(saved_models)}")))
        peers_by_name = (peer_models(kt.hparams.get(args.hparams), vocabulary.vocab_size)
                         if args.peers else {})
        ctranslate2_engines = {}
        if args.ctranslate2:
            loaded = types.SimpleNamespace(model=model, vocabulary=vocabulary)
            vmap = pathlib.Path(tmp) / "shortlist.vmap"
            shortlists.write_vmap(vmap, listed, *shortlists.pieces_of(vocabulary))
            for quantization, with_vmap in (("float32", False), ("int8", False), ("int8", True)):
                name = quantization + (" + vmap" if with_vmap else "")
                path = ctranslate2.export_ctranslate2(
                    loaded, pathlib.Path(tmp) / f"ct2-{len(ctranslate2_engines)}", quantization,
                    settings=dict(translator.settings(), shortlist=with_vmap),
                    vmap=vmap if with_vmap else None)
                ctranslate2_engines[name] = ctranslate2_engine.Ctranslate2Translator(
                    path, intra_threads=os.cpu_count())
        texts = long_sentences(vocabulary, max(int(b) for b in args.batch_sizes.split(",")),
                               args.source_length)

        rows = []
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            source_ids = translator.tokenize(tf.constant(texts[:batch]))["source_ids"]
            assert source_ids.shape == (batch, args.source_length), source_ids.shape
            shortlisted = CandidateTable(listed, vocabulary.vocab_size).of(source_ids)
            runs = variants(models, saved_models, source_ids, texts[:batch],
                            args.new_tokens, args.uncached_repeats > 0, peers_by_name,
                            ctranslate2_engines, shortlisted)
            if args.variants:
                chosen = {"beam 4, cached", *args.variants.split(";")}
                if chosen - runs.keys():
                    parser.error(f"unknown variants {sorted(chosen - runs.keys())}; choose from "
                                 f"{list(runs)}")
                runs = {name: decode for name, decode in runs.items() if name in chosen}
            times = {name: [] for name in runs}
            for name, decode in runs.items():  # warm-up: traces and compiles
                output = decode()
                if name in peers_by_name:  # the decoder's start token, then new_tokens
                    assert output.shape[-1] == args.new_tokens + 1, (name, output.shape)
                elif output.dtype == tf.int32:  # every hypothesis has new_tokens tokens
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
                search = name.split(",")[0]  # HF generate with the same search
                against_hf = [
                    f"{statistics.median(hf) / statistics.median(seconds):.2f}x" if hf else "-"
                    for hf in (times.get(f"{search}, HF generate{dtype}")
                               for dtype in ("", ", bfloat16"))]
                rows.append([batch, name, f"{statistics.median(rates):.2f} ({min(rates):.2f}-"
                             f"{max(rates):.2f}, n={len(rates)})",
                             f"{statistics.median(seconds):.2f}",
                             f"{statistics.median(seconds) / cached:.2f}x", *against_hf])

    peer_note = ""
    if args.peers:
        import keras_hub
        import torch
        import transformers
        peer_note = (f" Peers, same shape, random weights, float32 unless named: Hugging Face "
                     f"transformers {transformers.__version__} MarianMTModel.generate (torch "
                     f"{torch.__version__}, min_new_tokens = max_new_tokens; also with its "
                     f"weights in bfloat16), keras-hub "
                     f"{keras_hub.__version__} BartSeq2SeqLM.generate with its samplers (no stop "
                     f"token).")
    if args.ctranslate2:
        import ctranslate2 as ct2_package
        peer_note += (f" CTranslate2 {ct2_package.__version__}: the same weights exported by "
                      f"kt-export --format ctranslate2 (float32, and int8 weights), "
                      f"translate_batch with min and max decoding length {args.new_tokens}, "
                      f"{os.cpu_count()} threads.")
    peaks = {dtype: matmul_peak(dtype) / 1e9 for dtype in ("float32", "bfloat16")}
    peer_note += (f" The machine's 2048^3 matmul peak, measured after the runs: float32 "
                  f"{peaks['float32']:.0f} GFLOP/s, bfloat16 {peaks['bfloat16']:.0f}.")
    table = (f"{args.hparams} shape, {vocabulary.vocab_size}-id shared vocabulary, random "
             f"weights, float32 unless named; {args.source_length} source tokens, "
             f"{args.new_tokens} output tokens every hypothesis, beam 4 / alpha 0.6.{peer_note}"
             f"\n\n" + markdown_table(
                 ["batch", "decode", "sentences/s", "s/batch (median)", "time vs cached beam",
                  "speed vs HF generate (same search)",
                  "speed vs HF generate in bfloat16 (same search)"], rows))
    append_results("Decoding speed, beam 4 and greedy", table)


if __name__ == "__main__":
    main()
