"""An OPUS-MT-shaped Marian model imported (kt-import) beside `transformers`: exactness and speed.

    pip install -e ".[bench]"
    python -m bench.marian_import --work_dir /tmp/marian_bench

bench/marian_checkpoint.py makes a random MarianMTModel of OPUS-MT's shape (6+6 layers, d_model
512, 8 heads, d_ff 2048, 58,101 ids; 300 MB) with its SentencePiece models, and what
transformers computes with it: teacher-forced logits on a padded batch, greedy and beam-4
`generate` outputs for 50 held-out sentences (one at a time, at most 63 tokens). The import must
give the same (logits within 1e-4, the same ids).

Speed on bench/decode_speed's workload: every source cut to 32 tokens, every output 40 (end of
sentence's logit pushed down in both models, so that each runs to the limit, where both write end
of sentence), 64 sentences in batches of 32, greedy and beam 4, float32, two threads each;
kt-translate's path (`Translator.translate`: strings in and out, Hugging Face's normalization)
beside tokenizer + `generate` + `batch_decode`. Both write the same strings (checked).
Sentences per second, median (min-max) of --repeats runs, the two alternating.
"""

import argparse
import pathlib
import time

import numpy as np
import tensorflow as tf

from bench import marian_checkpoint
from bench.common import append_results, markdown_table, peaks_sentence, summary
from bench.train_step import matmul_peak
from keras_transformer.export import DecodingConfig
from keras_transformer.export.translator import Translator
from keras_transformer.model_dir import loading, marian
from keras_transformer.token_ids import EOS_ID

SPEED_SENTENCES = 64
BATCH = 32
SOURCE_TOKENS = 32
OUTPUT_TOKENS = 40


def exactness(model_dir, checkpoint):
    """(max |logit difference|, greedy ids equal, beam-4 ids equal, sentences) against the
    references bench.marian_checkpoint wrote into `checkpoint`."""
    import json

    reference = json.loads((checkpoint / "reference.json").read_text(encoding="utf-8"))
    arrays = np.load(checkpoint / "reference.npz")
    marian_ids = json.loads((checkpoint / "vocab.json").read_text(encoding="utf-8"))
    loaded = loading.load(model_dir)
    vocabulary = loaded.vocabulary
    order = [marian_ids[p] for p in vocabulary.pieces(range(vocabulary.vocab_size))]
    ours = np.zeros(len(order), np.int64)
    ours[order] = np.arange(len(order))
    pad = marian_ids["<pad>"]
    labels = arrays["labels"]
    source, target = ours[arrays["input_ids"]], ours[labels]  # <pad> -> 0
    logits = loaded.model((source, np.pad(target[:, :-1], [[0, 0], [1, 0]])),
                          training=False).numpy()
    real = labels != pad
    difference = float(np.abs(logits[real] - arrays["logits"][:, :, order][real]).max())
    equal = []
    for name, beam in (("greedy", "1"), ("beam4", "4")):
        translator = Translator.from_model_dir(model_dir, DecodingConfig(beam_size=int(beam)))
        ids = translator.translate_ids(translator.tokenize(
            tf.constant(reference["sources"]))["source_ids"])["ids"].numpy()
        equal.append(sum([int(i) for i in row if i] == [int(ours[i]) for i in theirs if i != pad]
                         for row, theirs in zip(ids, arrays[name])))
    return difference, *equal, len(reference["sources"])


def hf_translate(model, tokenizer, sentences, beams, pad):
    import torch

    texts = []
    for start in range(0, len(sentences), BATCH):
        batch = tokenizer(sentences[start:start + BATCH], padding=True, truncation=True,
                          max_length=SOURCE_TOKENS, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**batch, **dict(marian_checkpoint.generation_settings(pad),
                                                 num_beams=beams,
                                                 max_length=OUTPUT_TOKENS + 1))
        texts += tokenizer.batch_decode(out, skip_special_tokens=True)
    return texts


def ours_translate(translator, sentences):
    texts = []
    for start in range(0, len(sentences), BATCH):
        result = translator.translate(tf.constant(sentences[start:start + BATCH]))
        texts += [t.decode("utf-8") for t in result["translations"].numpy()]
    return texts


def speed(model, tokenizer, pad, loaded, repeats):
    """{(engine, beams): [sentences/s]}, and whether every run's strings agreed."""
    import torch

    torch.set_num_threads(2)
    with torch.no_grad():
        model.final_logits_bias[0, 0] = -1e4  # every output runs to the limit
    bias = next(w for w in loaded.model.weights if w.path.endswith("/embedding/bias"))
    bias.assign(tf.tensor_scatter_nd_update(bias, [[EOS_ID]], [-1e4]))
    sentences = marian_checkpoint.corpus_lines("dev.en.gz", 200)[-SPEED_SENTENCES:]
    rates, agree = {}, True
    for beams in (1, 4):
        translator = Translator(loaded.model, loaded.vocabulary, beam_size=beams, alpha=1.0,
                                length_normalization="hf", max_input_length=SOURCE_TOKENS,
                                extra_length=OUTPUT_TOKENS, max_output_length=OUTPUT_TOKENS,
                                max_batch_size=BATCH)
        ours_translate(translator, sentences[:BATCH])  # traced once, outside the timing
        for _ in range(repeats):
            for engine, run in (("keras-transformer", lambda: ours_translate(translator,
                                                                              sentences)),
                                ("transformers", lambda: hf_translate(model, tokenizer,
                                                                      sentences, beams, pad))):
                start = time.perf_counter()
                texts = run()
                rates.setdefault((engine, beams), []).append(
                    len(sentences) / (time.perf_counter() - start))
                rates.setdefault(("texts", beams, engine), texts)
        agree &= rates.pop(("texts", beams, "keras-transformer")) == rates.pop(
            ("texts", beams, "transformers"))
    return rates, agree


def checkpoint_and_references(checkpoint):
    """(MarianMTModel, MarianTokenizer, pad id) of the OPUS-MT-shaped checkpoint in
    `checkpoint`, made there with its references unless a run before made them."""
    if not (checkpoint / "reference.json").exists():
        made = marian_checkpoint.write_checkpoint(
            checkpoint, marian_checkpoint.SHAPES["opus-mt"], pytorch_file=False)
        marian_checkpoint.references(*made, checkpoint)
        return made
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer(*(str(checkpoint / name) for name in (
        "source.spm", "target.spm", "vocab.json")))
    return (MarianMTModel.from_pretrained(checkpoint).eval(), tokenizer,
            tokenizer.pad_token_id)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = pathlib.Path(args.work_dir)
    peaks = [matmul_peak(tf.float32) / 1e9]
    checkpoint = work / "opus-mt"
    model, tokenizer, pad = checkpoint_and_references(checkpoint)
    start = time.perf_counter()
    model_dir = work / f"model_dir-{time.strftime('%Y%m%d-%H%M%S')}"
    marian.import_marian(checkpoint, model_dir)
    import_seconds = time.perf_counter() - start
    difference, greedy, beam4, count = exactness(model_dir, checkpoint)
    rates, agree = speed(model, tokenizer, pad, loading.load(model_dir), args.repeats)
    peaks.append(matmul_peak(tf.float32) / 1e9)
    rows = [[f"{engine}, {'greedy' if beams == 1 else 'beam 4'}", summary(values)]
            for (engine, beams), values in sorted(rates.items(), key=lambda kv: kv[0][1])]
    table = (f"OPUS-MT's shape (6+6 layers, d_model 512, d_ff 2048, 58,101 ids), random "
             f"weights; kt-import took {import_seconds:.1f} s. Against transformers: "
             f"teacher-forced logits at most {difference:.2e} apart (6 padded sentences); the "
             f"same ids as generate for {greedy}/{count} sentences greedy and {beam4}/{count} "
             f"beam 4 (Hugging Face's length normalization, alpha 1.0, 63 tokens at most).\n\n"
             f"Speed, {SPEED_SENTENCES} sentences of {SOURCE_TOKENS} tokens, {OUTPUT_TOKENS} "
             f"out, batches of {BATCH}, float32, sentences/s (the same strings from both: "
             f"{'yes' if agree else 'NO'}):\n\n"
             + markdown_table(["engine, search", "sentences/s"], rows)
             + f"\n\n{peaks_sentence(peaks)}")
    append_results("Imported OPUS-MT-shaped model against transformers", table)


if __name__ == "__main__":
    main()
