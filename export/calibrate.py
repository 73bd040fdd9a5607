"""kt-calibrate: fit the confidence kt-translate and the SavedModel give each translation.

    kt-calibrate --model_dir runs/demo                  # the run's own corpus, dev split
    kt-calibrate --model_dir runs/demo --input dev.en --reference dev.es

Translates the sentences as kt-translate would (same flags, same search), computes each
translation's score and signs of trouble (`keras_transformer.search.confidence`: stopped at the
length limit, a repeated n-gram loop, uncovered source words) and its sentence chrF against the
reference, and fits a logistic map from the first to the second (chrF / 100). It is written to
model_dir/calibration.json, replacing an older one; kt-translate and kt-export read it from
there. Fit on sentences the model was not trained on (the dev split), with the checkpoint and
search you translate with: the fit records both, and kt-translate warns when they differ.
"""

import argparse
import sys
import time

import numpy as np
import sacrebleu

from keras_transformer import cli, data
from keras_transformer.errors import UserError
from keras_transformer.export.checks import check_lines
from keras_transformer.export.flags import (
    add_batch_size_flag,
    add_decoding_flags,
    checkpoints,
    translator_from_flags,
    with_batch_size,
)
from keras_transformer.export.lines import InputError, n_best_lines, read_lines
from keras_transformer.model_dir import CALIBRATION_FILE, ConfigError
from keras_transformer.search.confidence import Calibration, spearman

PROG = "kt-calibrate"
MIN_SENTENCES = 50  # fewer cannot tell a score's scale from noise


def measured(translator, lines, references, batch_size):
    """(features float [n, len(FEATURES)], sentence chrF float [n], translations) of `lines`
    (bytes or str) translated by `translator`'s beam search, against `references` (str)."""
    best = [hypotheses[0] for hypotheses in n_best_lines(translator, lines, 1, batch_size)]
    checked = check_lines(translator, lines, best, batch_size)
    translations = [hypothesis.text for hypothesis in best]
    chrf = [sacrebleu.sentence_chrf(translation, [reference]).score
            for translation, reference in zip(translations, references)]
    return (np.array([check.features for check in checked], np.float64),
            np.array(chrf, np.float64), translations)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0],
        epilog="Example: kt-calibrate --model_dir runs/demo --input dev.en --reference dev.es")
    add_decoding_flags(parser, dtype="float32")
    parser.add_argument("--input", help="sentences, one a line (with --reference)")
    parser.add_argument("--reference", help="their reference translations, one a line")
    parser.add_argument("--split", choices=data.sources.SPLITS, default="dev",
                        help="without --input: this split of the run's own corpus (default dev)")
    parser.add_argument("--max_sentences", type=cli.at_least(MIN_SENTENCES), default=2000,
                        help="use the first N sentences (default 2000)")
    add_batch_size_flag(parser, "sentences translated")
    args = parser.parse_args(argv)
    if bool(args.input) != bool(args.reference):
        parser.error("--input and --reference go together")
    return with_batch_size(args)


def read_pairs(args, run):
    """(source lines, references) the flags name, at most --max_sentences of them.

    Raises:
        InputError: the files do not pair up, or there are fewer than MIN_SENTENCES.
    """
    if args.input:
        lines = read_lines(args.input, "--input", PROG)
        references = [line.decode("utf-8", "replace")
                      for line in read_lines(args.reference, "--reference", PROG)]
        name = args.input
        if len(lines) != len(references):
            raise InputError(f"--reference {args.reference} has {len(references)} lines but "
                             f"--input {args.input} has {len(lines)}")
    else:
        source = run.data.open()  # several corpora: their splits one after the other
        pairs = list(source.pairs(args.split).take(args.max_sentences).as_numpy_iterator())
        lines = [s for s, _ in pairs]
        references = [t.decode("utf-8", "replace") for _, t in pairs]
        name = f"the {args.split} split of {' + '.join(run.data.corpora)}"
    lines, references = lines[:args.max_sentences], references[:args.max_sentences]
    if len(lines) < MIN_SENTENCES:
        raise InputError(f"{name}: {len(lines)} sentence pair(s); a calibration needs at least "
                         f"{MIN_SENTENCES}")
    return lines, references


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        translator, members = translator_from_flags(args, args.batch_size)
        if len(members) > 1:
            raise ConfigError("a calibration belongs to one model_dir and checkpoint; drop "
                              "--ensemble and repeated --checkpoint")
        lines, references = read_pairs(args, members[0].run)
    except (UserError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    inputs, chrf, _ = measured(translator, lines, references, args.batch_size)
    about = {"checkpoint": checkpoints(members), "beam_size": translator.decoding.beam_size,
             "alpha": translator.decoding.alpha, "sentences": len(lines),
             "data": args.input or f"{' + '.join(members[0].run.data.corpora)} {args.split}",
             "mean_chrf": round(float(chrf.mean()), 2)}
    calibration = Calibration.fit(inputs, chrf / 100, about=about)
    confidence = calibration.confidence(inputs).numpy()
    calibration.about["spearman_on_its_own_sentences"] = round(spearman(confidence, chrf), 4)
    path = f"{args.model_dir}/{CALIBRATION_FILE}"
    cli.write_text(path, calibration.to_json() + "\n")
    print(f"{PROG}: fitted on {len(lines)} sentences in {time.perf_counter() - start:.0f} s "
          f"(mean sentence chrF {chrf.mean():.1f}; Spearman of confidence and chrF on these "
          f"same sentences {calibration.about['spearman_on_its_own_sentences']:.3f}); wrote "
          f"{path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
