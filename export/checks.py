"""kt-translate's checks of its translations: signs of a translation gone wrong, a calibrated
confidence, word alignments, and leaving low-confidence lines untranslated
(`keras_transformer.search.confidence`; `Translator.check_ids` computes them in the graph)."""

import json
import sys
import typing

import numpy as np

from keras_transformer.cli import at_least
from keras_transformer.export.lines import sorted_batches, token_ids
from keras_transformer.token_ids import EOS_ID

UNTRANSLATED_MARK = "[untranslated] "  # a line under --min_confidence: the mark, then its source
WORD_START = "▁"  # SentencePiece's mark of a piece that begins a word


class Checked(typing.NamedTuple):
    """What `check_lines` found about one line's translation."""
    stopped_at_limit: bool
    repeated_ngrams: bool
    uncovered: float
    confidence: float  # None without a calibration
    features: tuple  # keras_transformer.search.confidence.FEATURES' values
    alignment: str  # Pharaoh "i-j" word pairs, source word i with target word j, from 0


def add_flags(parser):
    group = parser.add_argument_group(
        "which translations to trust (a model_dir calibrated by kt-calibrate adds a "
        "confidence in [0, 1], about the chrF to expect / 100)")
    group.add_argument("--checks", action="store_true",
                       help="write a JSON object a line: {\"line\", \"translation\", \"score\", "
                            "\"stopped_at_limit\" (never ended: cut at the length limit), "
                            "\"repeated_ngrams\" (a 1-4-gram three times in a row), "
                            "\"uncovered\" (share of source subwords the translation hardly "
                            "attended to), \"confidence\" (calibrated models)}")
    group.add_argument("--alignments", action="store_true",
                       help="word alignments from the cross-attention, Pharaoh 'i-j' pairs "
                            "(source word i, translation word j, from 0, words as spaces cut "
                            "them): 'translation ||| 0-0 1-2 ...' lines, or an \"alignment\" "
                            "field with --checks")
    group.add_argument("--min_confidence", type=at_least(0.0, float),
                       help="leave lines whose confidence is below this untranslated: their "
                            f"source, after the mark '{UNTRANSLATED_MARK.strip()}' (with "
                            "--checks: \"translation\": null, \"untranslated\": true); needs a "
                            "calibrated model_dir")


def check_lines(translator, lines, best, batch_size):
    """A `Checked` per line of `lines` (bytes or str) for its translation `best` (an
    `export.lines.Hypothesis` with ids, or None for a line with none)."""
    source_ids = token_ids(translator.tokenize, lines, batch_size,
                           translator.decoding.max_input_length)
    width = max([1] + [len(h.ids) for h in best if h is not None])
    target_ids = np.zeros([len(lines), width], np.int32)
    scores = np.zeros([len(lines)], np.float32)
    for row, hypothesis in enumerate(best):
        if hypothesis is not None:
            target_ids[row, :len(hypothesis.ids)] = hypothesis.ids
            scores[row] = hypothesis.score
    checked = [None] * len(lines)
    for rows, batch in sorted_batches(source_ids, batch_size):
        targets = target_ids[rows][:, :max(1, np.count_nonzero(target_ids[rows], axis=1).max())]
        result = {name: value.numpy() for name, value in translator.check_ids(
            batch, targets, scores[rows]).items()}
        for position, row in enumerate(rows):
            checked[row] = Checked(
                bool(result["stopped_at_limit"][position]),
                bool(result["repeated_ngrams"][position]),
                float(result["uncovered"][position]),
                float(result["confidence"][position]) if "confidence" in result else None,
                tuple(float(v) for v in result["features"][position]),
                word_alignment(translator.vocabulary, batch[position], targets[position],
                               result["alignment"][position]))
    return checked


def word_alignment(vocabulary, source_ids, target_ids, subword_alignment):
    """Pharaoh "i-j" pairs of words from a subword alignment (int [target length]: a source
    position per target subword, -1 for none), sorted: a word pair wherever one of their
    subwords align."""
    source_words, target_words = (_word_numbers(vocabulary, ids) for ids in (source_ids,
                                                                             target_ids))
    pairs = {(source_words[i], target_words[j]) for j, i in enumerate(subword_alignment)
             if i >= 0 and j < len(target_words) and i < len(source_words)}
    return " ".join(f"{i}-{j}" for i, j in sorted(pairs))


def _word_numbers(vocabulary, ids):
    """The word (counted from 0) each of `ids`' subwords belongs to, up to the end of
    sentence."""
    ids = [int(i) for i in ids if i != 0]
    ids = ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids
    starts = np.array([piece.startswith(WORD_START) for piece in vocabulary.pieces(ids)]
                      if ids else [], bool)
    return np.maximum(np.cumsum(starts) - 1, 0) if len(starts) else np.zeros(0, int)


def checked_text(lines, translations, hypotheses, checked, *, as_json, alignments,
                 min_confidence, first_line=1):
    """(kt-translate's output for --checks/--alignments/--min_confidence, how many lines were
    left untranslated); `lines[0]` is line `first_line` of the input.

    Args:
        as_json: a JSON record a line (--checks), else text lines.
        alignments: word alignments with each translation (--alignments).
        min_confidence: lines whose confidence is below it are left untranslated, or None.
    """
    out, untranslated = [], 0
    for number, (line, translation, best, check) in enumerate(zip(
            lines, translations, hypotheses, checked), first_line):
        low = (min_confidence is not None and check.confidence is not None
               and check.confidence < min_confidence)
        untranslated += low
        source = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
        if as_json:
            record = {"line": number, "translation": None if low else translation,
                      "score": round(best[0].score, 6),
                      "stopped_at_limit": check.stopped_at_limit,
                      "repeated_ngrams": check.repeated_ngrams,
                      "uncovered": round(check.uncovered, 4)}
            if check.confidence is not None:
                record["confidence"] = round(check.confidence, 4)
            if min_confidence is not None:
                record["untranslated"] = bool(low)
            if alignments:
                record["alignment"] = check.alignment
            out.append(json.dumps(record, ensure_ascii=False) + "\n")
        elif low:
            out.append(f"{UNTRANSLATED_MARK}{' '.join(source.splitlines())}\n")
        else:
            out.append(f"{translation} ||| {check.alignment}\n" if alignments
                       else f"{translation}\n")
    return "".join(out), untranslated


def warn_if_stale(translator, checkpoint, prog="kt-translate"):
    """A warning on stderr when the calibration was fitted for another checkpoint or search:
    its confidence then reads scores on another scale."""
    about = translator.calibration.about if translator.calibration else {}
    fitted = {key: about.get(key) for key in ("checkpoint", "beam_size", "alpha")}
    now = {"checkpoint": checkpoint, "beam_size": translator.decoding.beam_size,
           "alpha": translator.decoding.alpha}
    changed = [key for key in fitted if fitted[key] is not None and fitted[key] != now[key]]
    if changed:
        print(f"{prog}: warning: the calibration was fitted with "
              + ", ".join(f"{key} {fitted[key]}" for key in changed) + "; now "
              + ", ".join(f"{key} {now[key]}" for key in changed)
              + ": the confidence may be off (run kt-calibrate again)", file=sys.stderr)
