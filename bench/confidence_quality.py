"""How well the calibrated confidence tells good translations from bad, on sentences its fit
did not see; and what the checks cost.

    python -m bench.confidence_quality --model_dir runs/markup/plain --data runs/markup/corpus

The dev split is translated once (beam 4 at the model's alpha, kt-translate's bounds) and
measured as kt-calibrate measures it (`export.calibrate.measured`: the score, the signs of
trouble, sentence chrF); so is the held-out split (--test_split). For each of --splits random
halvings of dev, a `Calibration` is fitted on one half and read on the other: Spearman's rank
correlation of the confidence with sentence chrF, beside that of the score alone (the
length-normalized log-probability, the usual proxy), and the corpus chrF of the 80% of the
half with the highest confidence against the whole half's (what --min_confidence keeping 80%
would give). Medians over the halvings. Then one fit on all of dev, read on the held-out split.
How often each sign fires, and the sentence chrF where it does, on dev and held-out together.
Cost: the seconds of the beam search and of `Translator.check_ids` over the dev split, medians
of three, beside the 2048^3 matmul peak.
"""

import argparse
import random
import statistics
import time

import numpy as np
import sacrebleu

from bench.common import (
    add_model_and_corpus_flags,
    append_results,
    markdown_table,
    peaks_sentence,
)
from bench.train_step import matmul_peak
from keras_transformer import data, model_dir
from keras_transformer.export import Translator
from keras_transformer.export.calibrate import measured
from keras_transformer.export.checks import check_lines
from keras_transformer.export.lines import n_best_lines
from keras_transformer.search.confidence import FEATURES, Calibration, spearman

KEPT = 0.8  # the share --min_confidence would keep in the table's "top 80%" columns


def top_share_chrf(ranking, translations, references, share=KEPT):
    """Corpus chrF of the `share` of sentences ranked highest by `ranking`."""
    order = np.argsort(-np.asarray(ranking), kind="stable")[:int(round(share * len(ranking)))]
    return sacrebleu.CHRF().corpus_score([translations[i] for i in order],
                                         [[references[i] for i in order]]).score


def read_out(fit, inputs, chrf, translations, references):
    """(Spearman of confidence, of score; chrF of the top 80% by confidence, by score; chrF of
    all) for sentences the fit may not have seen."""
    confidence = fit.confidence(inputs).numpy()
    scores = inputs[:, FEATURES.index("score")]
    return (spearman(confidence, chrf), spearman(scores, chrf),
            top_share_chrf(confidence, translations, references),
            top_share_chrf(scores, translations, references),
            sacrebleu.CHRF().corpus_score(translations, [references]).score)


def halvings(inputs, chrf, translations, references, count):
    """read_out's figures for `count` random halvings of the sentences (fit on one half, read on
    the other): a list of tuples."""
    results = []
    for seed in range(count):
        order = list(range(len(chrf)))
        random.Random(seed).shuffle(order)
        fit_rows, read_rows = order[:len(order) // 2], order[len(order) // 2:]
        fit = Calibration.fit(inputs[fit_rows], chrf[fit_rows] / 100)
        results.append(read_out(fit, inputs[read_rows], chrf[read_rows],
                                [translations[i] for i in read_rows],
                                [references[i] for i in read_rows]))
    return results


def cost(translator, sources, repeats=3):
    """(median seconds of the beam search over `sources`, of the checks of its outputs)."""
    searches, checks = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        best = [hypotheses[0] for hypotheses in n_best_lines(translator, sources, 1, 32)]
        searches.append(time.perf_counter() - start)
        start = time.perf_counter()
        check_lines(translator, sources, best, 32)
        checks.append(time.perf_counter() - start)
    return statistics.median(searches), statistics.median(checks)


def sign_rows(inputs, chrf):
    """A table row per sign: how often it fires and the mean sentence chrF with and without."""
    rows = []
    for name, fired in (("stopped_at_limit", inputs[:, 1] > 0),
                        ("repeated_ngrams", inputs[:, 2] > 0),
                        ("uncovered > 0.3", inputs[:, 3] > 0.3)):
        rows.append([name, f"{fired.sum()} of {len(fired)}",
                     f"{chrf[fired].mean():.1f}" if fired.any() else "-",
                     f"{chrf[~fired].mean():.1f}"])
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.confidence_quality",
                                     description=__doc__.split("\n\n")[0])
    add_model_and_corpus_flags(parser)
    parser.add_argument("--test_split", default="test")
    parser.add_argument("--splits", type=int, default=5, help="random halvings of dev")
    args = parser.parse_args(argv)
    loaded = model_dir.load(args.model_dir)
    translator = Translator.from_loaded(loaded)  # kt-translate's settings
    source = data.get_source(args.data, args.source_lang, args.target_lang)
    peaks, measures = [matmul_peak("float32") / 1e9], {}
    for split in ("dev", args.test_split):
        pairs = [(s.decode(), t.decode()) for s, t in source.pairs(split).as_numpy_iterator()]
        sources, references = map(list, zip(*pairs))
        measures[split] = (*measured(translator, sources, references, 32), references, sources)
    inputs, chrf, translations, references, sources = measures["dev"]
    halves = halvings(inputs, chrf, translations, references, args.splits)
    medians = [statistics.median(column) for column in zip(*halves)]
    held_out = read_out(Calibration.fit(inputs, chrf / 100), *measures[args.test_split][:4])
    search_seconds, check_seconds = cost(translator, sources)
    peaks.append(matmul_peak("float32") / 1e9)
    rows = [[f"dev, fit on the other half (median of {args.splits} halvings, "
             f"{len(chrf) - len(chrf) // 2} sentences)", *(f"{v:.3f}" for v in medians[:2]),
             *(f"{v:.1f}" for v in medians[2:])],
            [f"{args.test_split} (held-out books), fit on all of dev "
             f"({len(measures[args.test_split][1])} sentences)",
             *(f"{v:.3f}" for v in held_out[:2]), *(f"{v:.1f}" for v in held_out[2:])]]
    both = np.concatenate([measures[s][0] for s in measures])
    both_chrf = np.concatenate([measures[s][1] for s in measures])
    table = (f"{args.model_dir} ({loaded.checkpoint}) on {args.data}, beam "
             f"{translator.decoding.beam_size}, alpha {translator.decoding.alpha}. "
             f"{peaks_sentence(peaks)}\n\n"
             + markdown_table(COLUMNS, rows) + "\n\n"
             + markdown_table(["sign (dev + held-out)", "fires", "mean sentence chrF where it "
                               "fires", "... where it does not"], sign_rows(both, both_chrf))
             + f"\n\nCost over the dev split ({len(sources)} sentences, batches of 32, median "
               f"of 3): beam search {search_seconds:.1f} s, the checks of its outputs "
               f"{check_seconds:.1f} s ({100 * check_seconds / search_seconds:.0f}%).")
    print(table)
    append_results("Confidence against sentence chrF, unseen sentences", table)


COLUMNS = ["read on", "Spearman: confidence", "Spearman: score alone",
           f"chrF of the top {KEPT:.0%} by confidence", "... by score alone", "chrF of all"]

if __name__ == "__main__":
    main()
