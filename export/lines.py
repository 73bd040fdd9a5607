"""Translating many lines: length-sorted batches, results in input order, their scores and
n-best lists."""

import pathlib
import sys
import time
import typing

import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer import data


class InputError(ValueError):
    """Input or reference text that cannot be used, naming the file."""


def read_lines(path, what, prog):
    """Lines of a file (or stdin for None) as bytes without their newline, warning on stderr
    about lines that are not UTF-8 (their bad bytes are translated as U+FFFD)."""
    name = "<stdin>" if path is None else str(path)
    try:
        raw = sys.stdin.buffer.read() if path is None else pathlib.Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {what} {name}: {error.strerror}") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    for number, line in enumerate(lines, 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            print(f"{prog}: warning: {name}:{number}: not UTF-8 at byte {error.start}; "
                  f"undecodable bytes are read as U+FFFD", file=sys.stderr)
    return lines


def print_scores(translations, references, file):
    """sacrebleu's corpus BLEU and chrF, each with its signature, one line each."""
    for metric in (sacrebleu.BLEU(), sacrebleu.CHRF()):
        score = metric.corpus_score(translations, [references])
        print(f"{score} {metric.get_signature()}", file=file)


def sorted_batches(translator, lines, batch_size, progress_every=None):
    """Yields (rows, source ids) of `lines` (bytes or str) tokenized by `translator`, in batches
    of similar length, the longest first; callers put results back in order with `rows`. With
    `progress_every` (seconds), a progress line goes to stderr that often."""
    if not lines:
        return
    ids = np.concatenate([
        _padded(translator.tokenize(tf.constant(lines[start:start + batch_size]))["source_ids"],
                translator.max_input_length)
        for start in range(0, len(lines), batch_size)])
    began = reported = time.perf_counter()
    done = 0
    for rows, batch in data.length_sorted_batches(ids, batch_size):
        if progress_every and time.perf_counter() - reported > progress_every:
            reported = time.perf_counter()
            print(f"{done}/{len(lines)} sentences done "
                  f"({done / (reported - began):.1f}/s)", file=sys.stderr, flush=True)
        done += len(rows)
        yield rows, batch


def translate_lines(translator, lines, batch_size, progress_every=None):
    """Translations (str) and scores of `lines` (bytes or str), in input order, translated
    `batch_size` at a time in length-sorted batches (`sorted_batches`)."""
    translations, scores = [None] * len(lines), np.zeros(len(lines), np.float32)
    for rows, batch in sorted_batches(translator, lines, batch_size, progress_every):
        result = translator.translate_ids(tf.constant(batch))
        texts = translator.detokenize(result["ids"]).numpy()
        for row, text, score in zip(rows, texts, result["scores"].numpy()):
            translations[row], scores[row] = text.decode("utf-8"), score
    return translations, scores


class Hypothesis(typing.NamedTuple):
    text: str
    score: float  # log_prob / length penalty: what beam search ranks by
    log_prob: float


def n_best_lines(translator, lines, n_best, batch_size, progress_every=None):
    """The `n_best` best hypotheses of the beam for each of `lines`, in input order: a list of
    `Hypothesis` per line, best first (fewer where the beam found fewer)."""
    if not 1 <= n_best <= translator.beam_size:
        raise ValueError(f"n_best must be between 1 and the beam size {translator.beam_size}, "
                         f"got {n_best}")
    hypotheses = [None] * len(lines)
    for rows, batch in sorted_batches(translator, lines, batch_size, progress_every):
        result = translator.translate_n_best_ids(tf.constant(batch))
        ids = result["ids"][:, :n_best]
        texts = translator.detokenize(tf.reshape(ids, [-1, tf.shape(ids)[2]])).numpy()
        texts = texts.reshape(len(rows), n_best)
        scores = result["scores"][:, :n_best].numpy()
        log_probs = result["log_probs"][:, :n_best].numpy()
        for row, *columns in zip(rows, texts, scores, log_probs):
            hypotheses[row] = [Hypothesis(text.decode("utf-8"), float(score), float(log_prob))
                               for text, score, log_prob in zip(*columns)
                               if np.isfinite(score)]
    return hypotheses


def _padded(ids, width):
    return np.pad(ids, [(0, 0), (0, width - ids.shape[1])])
