"""What CTranslate2's int8 costs in quality: a trained model_dir's dev split translated by each
engine, BLEU and how many best hypotheses differ from TensorFlow's.

The engines kt-translate runs (docs/serving.md): the model_dir's checkpoint in float32
(`Translator`), and `kt-export --format ctranslate2 --quantization Q` read by
`Ctranslate2Translator` (`kt-translate --engine ctranslate2`) for Q in float32 and int8, each with
CTranslate2's default patience and with patience 2. Beam 4 and the model's alpha
(kt-translate's defaults), 32 sentences a batch sorted by length (`translate_lines`, as
kt-translate). CTranslate2 runs with one thread: beside TensorFlow in one process its default
threads ran ~100x slower here (8 sentences: 6.4 s after a TensorFlow op, 0.21 s with one thread,
0.17 s without TensorFlow imported), and kt-translate --engine ctranslate2 has no flag for it.
sacrebleu BLEU of each engine's translations against the split's references, and the seconds
each took beside the run's 2048^3 float32 matmul peak.

    python -m bench.int8_quality --model_dir runs/small
"""

import argparse
import pathlib
import tempfile
import time

import sacrebleu
import tensorflow as tf

from bench.common import append_results, markdown_table
from bench.train_step import matmul_peak
from keras_transformer import model_dir
from keras_transformer.export import Translator, ctranslate2, ctranslate2_engine
from keras_transformer.export.flags import beam_description
from keras_transformer.export.lines import translate_lines


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.int8_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--split", default="dev")
    args = parser.parse_args()

    loaded = model_dir.load(args.model_dir)
    source = loaded.run.data.open()
    references = [es.decode("utf-8") for _, es in source.pairs(args.split).as_numpy_iterator()]
    sources = [en for en, _ in source.pairs(args.split).as_numpy_iterator()]
    peak = matmul_peak(tf.float32) / 1e9
    engines = [("`--engine tensorflow` (float32)", None, None)]
    for quantization in ("float32", "int8"):
        engines += [(f"CTranslate2 {quantization}", quantization, None),
                    (f"CTranslate2 {quantization}, `--ctranslate2_patience 2`", quantization,
                     2)]
    rows = []  # (name, quantization, patience, texts, BLEU, seconds)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for quantization in ("float32", "int8"):
            ctranslate2.export_ctranslate2(loaded, tmp / f"ct2-{quantization}" / "1",
                                           quantization)
        translator = Translator.from_loaded(loaded)  # as kt-translate decodes the model
        for name, quantization, patience in engines:
            if quantization is None:
                engine = translator
            else:  # as the export recorded: the same settings
                engine = ctranslate2_engine.Ctranslate2Translator(
                    tmp / f"ct2-{quantization}", intra_threads=1, patience=patience)
            start = time.perf_counter()
            texts, _ = translate_lines(engine, sources, 32)
            seconds = time.perf_counter() - start
            bleu = sacrebleu.corpus_bleu(texts, [references]).score
            rows.append((name, quantization, patience, texts, bleu, seconds))
            print(name, f"{bleu:.2f}", f"{seconds:.0f} s", flush=True)
    tensorflow = rows[0][3]
    bleu_of = {(quantization, patience): bleu for _, quantization, patience, _, bleu, _ in rows}
    table_rows = []
    for name, quantization, patience, texts, bleu, seconds in rows:
        against = (f" ({bleu - bleu_of['float32', patience]:+.2f} against float32)"
                   if quantization == "int8" else "")
        differ = sum(a != b for a, b in zip(texts, tensorflow)) if quantization else "-"
        table_rows.append([name, f"{bleu:.2f}{against}", differ, f"{seconds:.0f}"])
    table = (f"{args.model_dir} ({loaded.run.model.hparams_name}, {loaded.checkpoint.name}), "
             f"its {args.split} split of {loaded.run.data.corpus} ({len(references)} sentences), "
             f"{beam_description(translator)} (the model's). Seconds: "
             f"translating the split, 2048^3 float32 matmul peak "
             f"{peak:.0f} GFLOP/s.\n\n" + markdown_table(
                 ["engine", f"{args.split} BLEU", "best hypothesis differs from TensorFlow's",
                  "seconds"], table_rows))
    append_results("CTranslate2 int8 against float32, translation quality", table)


if __name__ == "__main__":
    tf.get_logger().setLevel("ERROR")
    main()
