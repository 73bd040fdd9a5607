"""What a glossary does to translations: a trained model_dir's translations of a corpus split
with and without `kt-translate --glossary`, BLEU and chrF, and the share of required target
terms the outputs hold.

    python -m bench.glossary_quality --model_dir runs/markup/plain \\
        --data runs/markup/corpus --split test

The glossary (default bench/data/glossary_en_es.tsv) is drawn from the references: term pairs
whose target term the references hold wherever the source term occurs (see its .md). Beam 4 at
the model's alpha, `translate_lines`' batches of 32 (as kt-translate); the seconds each way are
printed beside the 2048^3 float32 matmul peak of the run.
"""

import argparse
import pathlib
import time

import sacrebleu

from bench.common import (
    add_model_and_corpus_flags,
    append_results,
    markdown_table,
    peaks_sentence,
)
from bench.train_step import matmul_peak
from keras_transformer import data, model_dir
from keras_transformer.data import glossary
from keras_transformer.export import Translator
from keras_transformer.export.lines import n_best_lines

GLOSSARY = pathlib.Path(__file__).parent / "data" / "glossary_en_es.tsv"


def held(outputs, required):
    """(required terms the outputs hold, required terms)."""
    pairs = [(term, output) for terms, output in zip(required, outputs) for term in terms]
    return sum(term in output for term, output in pairs), len(pairs)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.glossary_quality",
                                     description=__doc__.split("\n\n")[0])
    add_model_and_corpus_flags(parser)
    parser.add_argument("--split", default="test")
    parser.add_argument("--glossary", default=str(GLOSSARY))
    args = parser.parse_args(argv)
    loaded = model_dir.load(args.model_dir)
    pairs = [(s.decode(), t.decode()) for s, t in data.get_source(
        args.data, args.source_lang, args.target_lang).pairs(args.split).as_numpy_iterator()]
    sources, references = zip(*pairs)
    terms = glossary.Glossary.load(args.glossary)
    required = [terms.targets_in(source) for source in sources]
    translator = Translator.from_loaded(loaded)  # kt-translate's settings
    peaks, rows = [matmul_peak("float32") / 1e9], []
    for name, terms_of_lines in (("without", None), ("with the glossary", required)):
        start = time.perf_counter()
        best = n_best_lines(translator, list(sources), 1, 32, glossary_terms=terms_of_lines)
        seconds = time.perf_counter() - start
        outputs = [hypotheses[0].text for hypotheses in best]
        kept, total = held(outputs, required)
        in_references = held(references, required)[0]
        rows.append([name, f"{sacrebleu.BLEU().corpus_score(outputs, [references]).score:.2f}",
                     f"{sacrebleu.CHRF().corpus_score(outputs, [references]).score:.1f}",
                     f"{kept}/{total} ({100 * kept / max(total, 1):.1f}%)",
                     f"{in_references}/{total}", f"{seconds:.0f}"])
        print(markdown_table(COLUMNS, rows[-1:]), flush=True)
    peaks.append(matmul_peak("float32") / 1e9)
    lines_with_terms = sum(bool(terms_of_line) for terms_of_line in required)
    table = (f"{args.model_dir} on {args.data} {args.split} ({len(sources)} sentences, "
             f"{lines_with_terms} with a glossary term), glossary {args.glossary} "
             f"({len(terms)} pairs), beam {translator.decoding.beam_size}, alpha "
             f"{translator.decoding.alpha}. "
             f"{peaks_sentence(peaks)}\n\n" + markdown_table(COLUMNS, rows))
    print(table)
    append_results(f"Glossary terms placed, {args.split} split", table)


COLUMNS = ["translation", "BLEU", "chrF", "required target terms held",
           "... held by the references", "seconds"]

if __name__ == "__main__":
    main()
