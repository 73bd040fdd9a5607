"""A document in and out: kt-translate --documents against its sentences one a line, and the
SavedModel's translate_document in a fresh process that imports only tensorflow and
tensorflow_text.

    python -m bench.document_translation --model_dir runs/markup/plain --words 2000

The document: dev verses of the bundled corpus joined five to a paragraph (paragraphs apart by
a blank line, every third paragraph's verses one a line) until it has `--words` words, with
three overlong sentences (eight verses joined by ", and ", longer than the model reads at
once). Measured: the same output both ways (the export's and kt-translate's), every line and
paragraph break in place, the counts of sentences split; the seconds of kt-translate
--documents and of kt-translate on the document's sentences one a line, each the median of
`--runs` runs in fresh processes, alternating, beside the 2048^3 float32 matmul peak.
"""

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

from bench.common import append_results, markdown_table, peaks_sentence, summary
from bench.train_step import matmul_peak
from keras_transformer.data import bundled_source

CLIENT = ("import json, sys, time, tensorflow as tf, tensorflow_text\n"
          "serve = tf.saved_model.load(sys.argv[1]).signatures['translate_document']\n"
          "text = open(sys.argv[2], encoding='utf-8').read()\n"
          "start = time.perf_counter()\n"
          "out = serve(documents=tf.constant([text]))\n"
          "print(json.dumps({'seconds': time.perf_counter() - start, 'translation': "
          "out['translations'].numpy()[0].decode(), 'counts': [int(out[k][0]) for k in "
          "('sentences', 'split_at_clauses', 'split_into_windows')]}))\n")


def document(words):
    """The bench's document (str) of about `words` words."""
    verses = [source.decode() for source, _ in bundled_source().pairs("dev").as_numpy_iterator()]
    paragraphs, used, count = [], 0, 0
    while count < words:
        if len(paragraphs) % 4 == 1:  # an overlong sentence: eight verses, one sentence
            sentence = ", and ".join(re.sub(r"[.;:!?]+(\s|$)", r",\1", verse).rstrip(",")
                                     for verse in verses[used:used + 8])
            paragraphs.append(sentence + ".")
            used += 8
        else:
            joiner = "\n" if len(paragraphs) % 3 == 2 else " "
            paragraphs.append(joiner.join(verses[used:used + 5]))
            used += 5
        count = sum(len(paragraph.split()) for paragraph in paragraphs)
    return "\n\n".join(paragraphs) + "\n"


def timed(command):
    """(seconds the command took by its own summary line, its stdout)."""
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = float(re.search(r"translated \d+ sentence\(s\) in ([0-9.]+) s", result.stderr)
                    .group(1))
    return seconds, result.stdout, result.stderr


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.document_translation",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    peaks = [matmul_peak("float32") / 1e9]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        text = document(args.words)
        (scratch / "doc.en").write_text(text, encoding="utf-8")
        translate = [sys.executable, "-m", "keras_transformer.export.translate", "--model_dir",
                     args.model_dir]
        subprocess.run([sys.executable, "-m", "keras_transformer.export.export_command",
                        "--model_dir", args.model_dir, "--output", str(scratch / "export"),
                        "--documents"], check=True, capture_output=True)
        served = json.loads(subprocess.run(
            [sys.executable, "-c", CLIENT, str(scratch / "export" / "1"), str(scratch /
                                                                            "doc.en")],
            check=True, capture_output=True, text=True).stdout)
        (scratch / "lines.en").write_text("\n".join(sentence_lines(args.model_dir, text)) + "\n",
                                          encoding="utf-8")
        seconds = {"documents": [], "lines": []}
        for _ in range(args.runs):
            took, translated, stderr = timed([*translate, "--documents", "--input",
                                              str(scratch / "doc.en")])
            seconds["documents"].append(took)
            seconds["lines"].append(timed([*translate, "--input", str(scratch / "lines.en")])[0])
    peaks.append(matmul_peak("float32") / 1e9)
    same = served["translation"] == translated
    breaks = [line == "" for line in translated.split("\n")] == [
        line == "" for line in text.split("\n")]
    ratio = statistics.median(seconds["documents"]) / statistics.median(seconds["lines"])
    rows = [[f"{len(text.split()):,}", text.count("\n\n") + 1, *served["counts"],
             "yes" if same else "NO", "yes" if breaks else "NO",
             summary(seconds["documents"]), summary(seconds["lines"]), f"{ratio:.2f}"]]
    table = (f"{args.model_dir}, kt-translate's defaults (beam 4); seconds: each command's own "
             f"summary line (translation, not start-up), in fresh processes, alternating. "
             f"{peaks_sentence(peaks)} kt-translate --documents: "
             f"{stderr.strip().splitlines()[-1]}\n\n" + markdown_table(COLUMNS, rows))
    print(table)
    append_results("A document through kt-translate and the SavedModel", table)


def sentence_lines(model_dir, text):
    """The document's sentence parts as kt-translate --documents cuts them, one a line."""
    import tensorflow as tf

    from keras_transformer import model_dir as model_dirs
    from keras_transformer.export.documents import parts

    loaded = model_dirs.load(model_dir)  # kt-translate's default --max_input_length
    split = parts(loaded.vocabulary, tf.constant([text]), loaded.run.data.max_pair_length)
    return [piece.decode() for piece in tf.boolean_mask(
        split.pieces.flat_values, split.is_sentence.flat_values).numpy()]


COLUMNS = ["words", "paragraphs", "sentences", "split at clauses", "clauses split into windows",
           "SavedModel = kt-translate", "line breaks kept", "--documents seconds",
           "one a line seconds", "ratio"]

if __name__ == "__main__":
    sys.exit(main())
