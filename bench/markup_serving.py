"""Tagged text served: the SavedModel's `translate_with_markup` (kt-export --markup) beside
kt-translate --markup's two passes, on generated tagged inputs.

    python -m bench.markup_serving --model_dir runs/markup/markup --data runs/markup/corpus

`--inputs` tagged inputs are made from the corpus's test pairs as bench/markup_quality.py makes
them (tags around word spans, nested pairs, self-closing tags, placeholders, numbers, URLs,
e-mail addresses; half of them tags only). The model_dir's model is exported with --markup
(beam 4, the hparams set's alpha, at most `--batch_size` sentences a request) and loaded in this
process. Measured: the share of served translations equal to kt-translate's
(`export.markup_lines.markup_n_best_lines`, batches of `--batch_size`), the share holding every
item of their input exactly once (masked again, the same items), and seconds per sentence
(median of `--repeats`) of the signature, of kt-translate's passes, and of serving_default on
the same sentences without their markup, all in batches of `--batch_size`, shortest inputs
first. The 2048^3 matmul peak before and after is printed beside the times.
"""

import argparse
import statistics
import sys
import tempfile
import time

import tensorflow as tf

from bench.common import (
    add_model_and_corpus_flags,
    append_results,
    markdown_table,
    peaks_sentence,
)
from bench.markup_quality import generated_inputs
from bench.train_step import matmul_peak
from keras_transformer import data, model_dir
from keras_transformer.data import markup
from keras_transformer.export import Translator, saved_model
from keras_transformer.export.markup_lines import markup_n_best_lines, unmasked

COLUMNS = ["translated by", "seconds per sentence (median)", "runs (s)",
           "equal to kt-translate --markup", "every item kept once"]


def batched(function, lines, batch_size):
    """function(tf.string batch)["translations"] over `lines`, in batches: a list of str."""
    outputs = []
    for start in range(0, len(lines), batch_size):
        out = function(inputs=tf.constant(lines[start:start + batch_size], tf.string))
        outputs += [text.decode("utf-8") for text in out["translations"].numpy()]
    return outputs


def kept_once(source, output):
    """Whether `output` holds the items of `source` (masked alike) exactly once each."""
    return sorted(i.text for i in markup.mask(source).items) == sorted(
        i.text for i in markup.mask(output).items)


def timed(function, repeats):
    """(median seconds, every run's seconds, the last run's result) of function()."""
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), seconds, result


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.markup_serving",
                                     description=__doc__.split("\n\n")[0])
    add_model_and_corpus_flags(parser)
    parser.add_argument("--inputs", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    peaks = [matmul_peak("float32") / 1e9]
    loaded = model_dir.load(args.model_dir)
    translator = Translator.from_loaded(loaded, max_batch_size=args.batch_size)  # kt-translate's
    source = data.get_source(args.data, args.source_lang, args.target_lang)
    inputs = generated_inputs([(s.decode(), t.decode()) for s, t in
                               source.pairs("test").as_numpy_iterator()], args.inputs)
    # Shortest first, so that every way batches alike (kt-translate sorts its lines by length).
    inputs.sort(key=lambda entry: len(entry[0]))
    tagged = [text for text, *_ in inputs]
    masked = [markup.mask(text) for text in tagged]

    def kt_translate():
        best = unmasked(markup_n_best_lines(translator, masked, 1, args.batch_size), masked)
        return [hypotheses[0].text for hypotheses in best]

    with tempfile.TemporaryDirectory() as scratch:
        signatures = tf.saved_model.load(str(saved_model.export(
            translator, scratch, markup=True))).signatures
        runs = {"SavedModel translate_with_markup": lambda: batched(
                    signatures["translate_with_markup"], tagged, args.batch_size),
                "kt-translate --markup (two passes, Python)": kt_translate,
                "SavedModel serving_default, the sentences without markup": lambda: batched(
                    signatures["serving_default"], [s for _, s, *_ in inputs],
                    args.batch_size)}
        measured = {name: timed(run, args.repeats) for name, run in runs.items()}
    expected = measured["kt-translate --markup (two passes, Python)"][2]
    for text, output in zip(tagged, expected):
        if not kept_once(text, output):
            print(f"items not found again: {text!r} -> {output!r}")
    rows = []
    for name, (median, seconds, outputs) in measured.items():
        tagged_in = "without" not in name
        rows.append([name, f"{median / len(inputs):.3f}", " ".join(f"{s:.1f}" for s in seconds),
                     f"{100 * sum(a == b for a, b in zip(outputs, expected)) / len(inputs):.1f}%"
                     if tagged_in else "-",
                     f"{100 * sum(map(kept_once, tagged, outputs)) / len(inputs):.1f}%"
                     if tagged_in else "-"])
    peaks.append(matmul_peak("float32") / 1e9)
    table = (f"{args.model_dir} ({loaded.checkpoint}), {args.inputs} generated tagged inputs "
             f"from {args.data}'s test pairs, beam {translator.decoding.beam_size}, alpha "
             f"{translator.decoding.alpha}, batches of {args.batch_size}. "
             f"{peaks_sentence(peaks)}\n\n" +
             markdown_table(COLUMNS, rows))
    print(table)
    append_results("Tagged text served (translate_with_markup)", table)


if __name__ == "__main__":
    sys.exit(main())
