"""Translating many lines: length-sorted batches, results in input order, and their scores."""

import sys
import time

import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer import data


def print_scores(translations, references, file):
    """sacrebleu's corpus BLEU and chrF, each with its signature, one line each."""
    for metric in (sacrebleu.BLEU(), sacrebleu.CHRF()):
        score = metric.corpus_score(translations, [references])
        print(f"{score} {metric.get_signature()}", file=file)


def translate_lines(translator, lines, batch_size, progress_every=None):
    """Translations (str) and scores of `lines` (bytes or str), in input order.

    Lines are tokenized, sorted by length and translated `batch_size` at a time; with
    `progress_every` (seconds), a progress line goes to stderr that often.
    """
    if not lines:
        return [], np.zeros([0], np.float32)
    ids = np.concatenate([
        _padded(translator.tokenize(tf.constant(lines[start:start + batch_size]))["source_ids"],
                translator.max_input_length)
        for start in range(0, len(lines), batch_size)])
    translations, scores = [None] * len(lines), np.zeros(len(lines), np.float32)
    began = reported = time.perf_counter()
    done = 0
    for rows, batch in data.length_sorted_batches(ids, batch_size):
        if progress_every and time.perf_counter() - reported > progress_every:
            reported = time.perf_counter()
            print(f"translated {done}/{len(lines)} sentences "
                  f"({done / (reported - began):.1f}/s)", file=sys.stderr, flush=True)
        done += len(rows)
        result = translator.translate_ids(tf.constant(batch))
        texts = translator.detokenize(result["ids"]).numpy()
        for row, text, score in zip(rows, texts, result["scores"].numpy()):
            translations[row], scores[row] = text.decode("utf-8"), score
    return translations, scores


def _padded(ids, width):
    return np.pad(ids, [(0, 0), (0, width - ids.shape[1])])
