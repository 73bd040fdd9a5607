"""What one request costs at the serving signatures' documented limits: seconds and peak memory,
each case in a fresh process, on transformer_tiny with random weights (an untrained model
writes every translation to its output limit, so the searches cost their most) and a
2,000-id vocabulary that keeps markup's tokens whole.

    python -m reliability.request_cost               # every case; its section of RESULTS.md
    python -m reliability.request_cost --case NAME   # one case, one JSON line

The signatures' graph functions run in the process, as kt-export saves them: the Translator's
defaults (beam 4, inputs cut at 256 tokens and 4,096 bytes, 64 sentences a request),
`DocumentTranslator`'s (64 KiB a document, 1,024 sentence parts a request),
`MarkupTranslator`'s (64 KiB a text), `GlossaryTranslator`'s (256 terms of 256 bytes); and
serving_default under a `max_search_positions` ceiling (CEILING): refused, or answered for
fewer or shorter texts.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"
# kt-export --max_search_positions for the bounded cases: a fifth of what 64 inputs of 256 tokens
# at beam 4 may take (64 x 4 x (256 + 50) = 78,336 positions).
CEILING = 16_384
# The ids of each case's vocabulary (built on the same corpus), where not the markup cases'
# 2,000: scoring's logits and the glossary's search grow with it.
VOCABULARY_IDS = {
    "score: 64 pairs of 4 KiB, 8,000 ids": 8_000,
    "score: 64 pairs of 4 KiB, 32,000 ids": 32_000,
    "translate_with_glossary: 64 sentences, 256 terms, 32,000 ids": 32_000,
    "serving_default: the glossary case's 64 sentences, 32,000 ids": 32_000,
}
WORDS = ("In the beginning God created the heaven and the earth. And the earth was without form, "
         "and void; and darkness was upon the face of the deep.").split()


def _text(size, *, sentences=True, tags=0):
    """About `size` bytes of the bundled corpus's words; without `sentences`, no full stop;
    with `tags`, that many <b>...</b> pairs spread through it."""
    words = [w.rstrip(".;,") if not sentences else w for w in WORDS]
    out, length, index = [], 0, 0
    while length < size:
        word = words[index % len(words)]
        out.append(word)
        length += len(word) + 1
        index += 1
    step = max(1, len(out) // max(tags, 1))
    for pair in range(tags):
        out[pair * step] = f"<b>{out[pair * step]}</b>"
    return " ".join(out)[:size]


def _cases():
    """name -> a function of the translator: (the module whose graph function serves the
    signature, the function's name, its arguments as lists of str)."""

    from keras_transformer.export.documents import DocumentTranslator
    from keras_transformer.export.glossary import GlossaryTranslator
    from keras_transformer.export.markup_translator import MarkupTranslator
    from keras_transformer.export.translator import Translator

    def documents(count, size, sentences):
        return lambda t: (DocumentTranslator(t), "translate_documents", [
            [_text(size, sentences=sentences)] * count])

    def tagged(count, size, tags):
        return lambda t: (MarkupTranslator(t), "translate_with_markup", [
            [_text(size, tags=tags)] * count])

    def glossary(sentences, terms):
        words = sorted(set(w.strip(".;,") for w in WORDS))
        sources = [f"{words[i % len(words)]} {i}" if i >= len(words) else words[i]
                   for i in range(terms)]
        return lambda t: (GlossaryTranslator(t), "translate_with_glossary", [
            [_text(300)] * sentences, sources, [f"término {i}" for i in range(terms)]])

    def bounded(count, size):
        return lambda t: (Translator(t.model, t.vocabulary, max_search_positions=CEILING),
                          "translate", [[_text(size)] * count])

    full = [_text(4096)] * 64
    return {
        "serving_default: 64 texts of 4 KiB": lambda t: (t, "translate", [full]),
        f"serving_default, max_search_positions {CEILING}: 64 texts of 4 KiB": bounded(64, 4096),
        f"serving_default, max_search_positions {CEILING}: 13 texts of 4 KiB": bounded(13, 4096),
        f"serving_default, max_search_positions {CEILING}: 64 texts of 32 bytes":
            bounded(64, 32),
        "translate_n_best: 64 texts of 4 KiB": lambda t: (t, "translate_n_best", [full]),
        "score: 64 pairs of 4 KiB": lambda t: (t, "score", [full, full]),
        "score: 64 pairs of 4 KiB, 8,000 ids": lambda t: (t, "score", [full, full]),
        "score: 64 pairs of 4 KiB, 32,000 ids": lambda t: (t, "score", [full, full]),
        "translate_document: 1 one-line document of 64 KiB, no full stop":
            documents(1, 65_536, False),
        "translate_document: 64 documents of 64 KiB, sentences": documents(64, 65_536, True),
        "translate_document: 64 one-line documents of 64 KiB, no full stop":
            documents(64, 65_536, False),
        "translate_with_markup: 64 texts of 64 KiB, 50 tag pairs each": tagged(64, 65_536, 50),
        "translate_with_markup: 64 texts of 1 MiB": tagged(64, 1 << 20, 0),
        "translate_with_glossary: 64 sentences, 256 terms": glossary(64, 256),
        "serving_default: the glossary case's 64 sentences":
            lambda t: (t, "translate", [[_text(300)] * 64]),
        "translate_with_glossary: 64 sentences, 256 terms, 32,000 ids": glossary(64, 256),
        "serving_default: the glossary case's 64 sentences, 32,000 ids":
            lambda t: (t, "translate", [[_text(300)] * 64]),
    }


def _reason(message):
    """The line of a graph's error message that says which check failed."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = [line for line in lines if "assertion failed" in line or "limit" in line]
    return (said or lines)[0].removeprefix("assertion failed: ").split("] [")[0].strip("[]")


def _memory_mb(field):
    """/proc/self/status's VmRSS (now) or VmHWM (the peak), MB. Not ru_maxrss: Linux keeps it
    across exec, so a child's would start at its parent's peak."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def run_case(name, vocabulary_path):
    """One case in this process: {"seconds", "rss_before", "peak" (MB), "outcome"}."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer import data
    from keras_transformer.export.translator import Translator

    keras.utils.set_random_seed(0)
    vocabulary = data.Vocabulary.load(vocabulary_path)
    model = kt.build_model(kt.hparams.get("transformer_tiny"), vocabulary.vocab_size)
    translator = Translator(model, vocabulary)
    # The module kept by a name while it runs: its graph functions hold it weakly.
    module, function, arguments = _cases()[name](translator)
    arguments = [tf.constant(texts, tf.string) for texts in arguments]
    before = _memory_mb("VmRSS")
    start = time.perf_counter()
    try:
        reply = getattr(module, function)(*arguments)
        outcome = "answered: " + ", ".join(f"{key} {list(value.shape)}"
                                           for key, value in sorted(reply.items())[:1])
    except tf.errors.InvalidArgumentError as error:
        outcome = "refused: " + _reason(error.message)[:110]
    seconds = time.perf_counter() - start
    peak = _memory_mb("VmHWM")
    return {"seconds": seconds, "rss_before": before, "peak": peak, "outcome": outcome}


def markup_vocabulary(path, size=2000):
    from keras_transformer import data
    from keras_transformer.data import markup

    data.build_vocabulary(data.corpus_texts(data.get_source("bible_en_es")), size, path,
                          whole_tokens=markup.TOKENS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", help="run this case in this process; print its JSON")
    parser.add_argument("--vocab", help="(with --case) the vocabulary to use")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a case may take")
    parser.add_argument("--only", action="append",
                        help="run only the cases whose name starts with this (repeatable)")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case, args.vocab)))
        return 0
    import tensorflow as tf

    from bench.common import append_results, markdown_table, peaks_sentence
    from bench.train_step import matmul_peak

    rows, peaks = [], [matmul_peak(tf.float32) / 1e9]
    with tempfile.TemporaryDirectory() as scratch:
        vocabularies = {}
        for name in _cases():
            if args.only and not name.startswith(tuple(args.only)):
                continue
            size = VOCABULARY_IDS.get(name, 2000)
            if size not in vocabularies:
                vocabularies[size] = os.path.join(scratch, f"markup{size}.model")
                markup_vocabulary(vocabularies[size], size)
            vocabulary = vocabularies[size]
            try:
                child = subprocess.run([sys.executable, "-m", "reliability.request_cost",
                                        "--case", name, "--vocab", vocabulary],
                                       capture_output=True, text=True, timeout=args.timeout)
                result = json.loads(child.stdout.strip().splitlines()[-1])
                rows.append([name, result["outcome"], f"{result['seconds']:.1f}",
                             f"{result['rss_before']:.0f}", f"{result['peak']:.0f}"])
            except subprocess.TimeoutExpired:
                rows.append([name, f"still running after {args.timeout:.0f} s", "", "", ""])
            except (IndexError, ValueError):
                rows.append([name, "failed: " + child.stderr.strip().splitlines()[-1][:110],
                             "", "", ""])
            print(rows[-1], flush=True)
    peaks.append(matmul_peak(tf.float32) / 1e9)
    append_results("Request cost at the documented limits", markdown_table(
        ["Request (one call)", "Outcome", "Seconds", "RSS before (MB)", "Peak RSS (MB)"],
        rows) + f"\n\nEach case in a fresh process; seconds include tracing the signature's "
        f"graph (the first request's cost). {peaks_sentence(peaks)}", results=RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
