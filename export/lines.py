"""Translating many lines: length-sorted batches, results in input order, their scores and
n-best lists."""

import contextlib
import pathlib
import sys
import time
import typing

import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer import cli, data
from keras_transformer.data import markup
from keras_transformer.errors import UserError
from keras_transformer.export.constrained import combination_error


class InputError(UserError):
    """Input or reference text that cannot be used, naming the file."""


def read_lines(path, what, prog, *, keep_returns=False):
    """Lines of a file (or stdin for None) as bytes without their newline ("\n", and the
    "\r" of a "\r\n" unless `keep_returns`), warning on stderr about lines that are not UTF-8
    (their bad bytes are translated as U+FFFD)."""
    name = "<stdin>" if path is None else str(path)
    lines = read_bytes(path, what).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not keep_returns:
        lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    for number, line in enumerate(lines, 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            print(f"{prog}: warning: {name}:{number}: not UTF-8 at byte {error.start}; "
                  f"undecodable bytes are read as U+FFFD", file=sys.stderr)
    return lines


@contextlib.contextmanager
def open_input(path, what):
    """A binary stream of a file (or stdin for None), closed after (stdin stays open); an
    InputError naming `what` (a flag) and the file where it cannot be opened."""
    if path is None:
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")
    except OSError as error:
        raise InputError(f"cannot read {what} {path}: {error.strerror}") from None
    with stream:
        yield stream


def read_bytes(path, what):
    """The whole of a file (or stdin for None), bytes; an InputError naming `what` (a flag)
    and the file where it cannot be read."""
    try:
        return sys.stdin.buffer.read() if path is None else pathlib.Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {what} {'<stdin>' if path is None else path}: "
                         f"{error.strerror}") from None


def print_scores(translations, references, file):
    """sacrebleu's corpus BLEU and chrF, each with its signature, one line each."""
    for metric in (sacrebleu.BLEU(), sacrebleu.CHRF()):
        score = metric.corpus_score(translations, [references])
        print(f"{score} {metric.get_signature()}", file=file)


def token_ids(tokenize, texts, batch_size, width):
    """int32 [len(texts), width]: `tokenize` (a `Translator` method, texts -> a dict of one
    0-padded id matrix) of `texts` (bytes or str), `batch_size` at a time."""
    if not texts:
        return np.zeros([0, width], np.int32)
    return np.concatenate([
        _padded(next(iter(tokenize(tf.constant(texts[start:start + batch_size])).values())),
                width) for start in range(0, len(texts), batch_size)])


def sorted_batches(source_ids, batch_size, progress_every=None):
    """Yields (rows, source ids) of the rows of `source_ids` (int [n, width], 0-padded) in
    batches of similar length, the longest first; callers put results back in order with
    `rows`. With `progress_every` (seconds), a progress line goes to stderr that often."""
    began = reported = time.perf_counter()
    done = 0
    for rows, batch in data.length_sorted_batches(source_ids, batch_size):
        if progress_every and time.perf_counter() - reported > progress_every:
            reported = time.perf_counter()
            print(f"{done}/{len(source_ids)} sentences done "
                  f"({done / (reported - began):.1f}/s)", file=sys.stderr, flush=True)
        done += len(rows)
        yield rows, batch


def translate_lines(translator, lines, batch_size, progress_every=None, prefixes=None):
    """Translations (str) and scores of `lines` (bytes or str), in input order, translated
    `batch_size` at a time in length-sorted batches; `prefixes` as for `n_best_lines`."""
    best = n_best_lines(translator, lines, 1, batch_size, progress_every, prefixes)
    return ([hypotheses[0].text for hypotheses in best],
            np.array([hypotheses[0].score for hypotheses in best], np.float32))


class Hypothesis(typing.NamedTuple):
    text: str
    score: float  # log_prob / length penalty: what beam search ranks by
    log_prob: float
    ids: np.ndarray = None  # int32 subwords, with the end of sentence unless stopped at the limit


class Sampling(typing.NamedTuple):
    """Sampling instead of beam search: see `Translator.sample_n_best_ids`."""
    temperature: float
    top_k: int = 0
    seed: int = 0  # batch i of a call draws with the seed (seed, i)

    def drawing(self, batch):
        """`Translator.sample_n_best_ids`' temperature, top_k and seed for batch number
        `batch` of an input."""
        return self.temperature, self.top_k, (self.seed, batch)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, where kt-translate turns it into one) while translating lines:
    `hypotheses` holds each line's as far as translated, None for the lines not reached (the
    batches are sorted by length, so these need not be the last ones)."""

    def __init__(self, hypotheses):
        super().__init__()
        self.hypotheses = hypotheses


class PrefixError(UserError):
    """A target prefix that leaves a translation no room, naming its line."""


def n_best_lines(translator, lines, n_best, batch_size, progress_every=None, prefixes=None,
                 sampling=None, markup_items=None, glossary_terms=None, *, first_line=1):
    """The `n_best` best hypotheses of the beam for each of `lines` (bytes or str), in input
    order: a list of `Hypothesis` per line, best first (fewer where the beam found fewer).
    With `sampling` (a `Sampling`), `n_best` samples a line instead, in the order drawn.

    `prefixes`: a target prefix (bytes or str) per line, which every hypothesis of that line
    starts with ("" for none). An empty line translates to "" whatever its prefix.

    `markup_items`: each line's `data.markup.mask(...).items`, the lines being the masked texts:
    every hypothesis holds each of its line's item tokens once, tag pairs well nested, where
    the model puts them (the texts are returned masked; `data.markup.unmask` puts the items
    back). kt-translate --markup places the tags in a second pass instead
    (`export.markup_lines.markup_n_best_lines`).

    `glossary_terms`: each line's required target terms (str; `data.glossary.Glossary.
    targets_in`): every hypothesis holds each (as the target vocabulary's subwords).

    `first_line`: the number of `lines[0]` in its input (a part of a longer one): errors name
    lines by it, and sampling's batches draw with seeds of their own in each part.

    Raises:
        PrefixError: a prefix has as many tokens as its line's translation may have, or more
            (checked before translating anything).
    """
    refusal = combination_error({"target prefixes": prefixes is not None,
                                 "markup": markup_items is not None,
                                 "glossaries": glossary_terms is not None})
    if refusal:
        raise InputError(refusal)
    check_n_best(translator, n_best, sampling)
    source_ids = token_ids(translator.tokenize, lines, batch_size,
                           translator.decoding.max_input_length)
    if prefixes is not None:
        if len(prefixes) != len(lines):
            raise InputError(f"{len(prefixes)} prefixes for {len(lines)} lines")
        prefix_ids = token_ids(translator.tokenize_prefixes, prefixes, batch_size,
                               max(1, translator.decoding.max_output_length))
        check_prefixes(translator, source_ids, prefix_ids, first_line)
    if glossary_terms is not None:
        phrases = glossary_phrases(translator, source_ids, glossary_terms, batch_size,
                                   first_line)

    def search(rows, batch, number):
        prefix = items = None
        if prefixes is not None:
            prefix = prefix_ids[rows]
            prefix = prefix[:, :max(1, np.count_nonzero(prefix, axis=1).max())]
        if markup_items is not None:
            items = markup.constraint_inputs([markup_items[row] for row in rows],
                                             translator.vocabulary.markup_ids())
        glossary = None if glossary_terms is None else _stacked([phrases[row] for row in rows])
        if sampling:
            return translator.sample_n_best_ids(batch, n_best, *sampling.drawing(
                first_line - 1 + number), prefix, items, glossary)
        return _beam_search(translator, batch, prefix, items, glossary)

    return hypotheses_of(translator, source_ids, n_best, batch_size, search, progress_every)


def check_n_best(translator, n_best, sampling):
    """Raises InputError unless 1 <= n_best <= the beam size (any n >= 1 with `sampling`)."""
    if not 1 <= n_best <= (n_best if sampling else translator.decoding.beam_size):
        raise InputError(f"n_best must be between 1 and the beam size "
                         f"{translator.decoding.beam_size}, got {n_best}")


def hypotheses_of(translator, source_ids, n_best, batch_size, search, progress_every=None):
    """Each row's `n_best` hypotheses (a list of `Hypothesis`, those with a finite score), in
    input order, from `search(rows, batch, number)` -> an n-best result (ids int32 [batch, n,
    length], scores and log_probs float32 [batch, n]) of batch `number` of `source_ids` (int
    [lines, width]) in length-sorted batches (`sorted_batches`).

    Raises:
        Interrupted: Ctrl-C, with the hypotheses of the rows translated before it.
    """
    hypotheses = [None] * len(source_ids)
    try:
        for number, (rows, batch) in enumerate(sorted_batches(source_ids, batch_size,
                                                              progress_every)):
            cli.raise_if_stopped()
            _take_batch(translator, hypotheses, rows, search(rows, batch, number), n_best)
    except KeyboardInterrupt:
        raise Interrupted(hypotheses) from None
    return hypotheses


def _take_batch(translator, hypotheses, rows, result, n_best):
    """Puts each row's hypotheses of one batch's n-best `result` in `hypotheses`."""
    ids = result["ids"][:, :n_best]
    texts = translator.detokenize(tf.reshape(ids, [-1, tf.shape(ids)[2]])).numpy()
    texts = texts.reshape(len(rows), -1)
    scores = result["scores"][:, :n_best].numpy()
    log_probs = result["log_probs"][:, :n_best].numpy()
    ids = ids.numpy()
    for row, *columns in zip(rows, texts, scores, log_probs, ids):
        hypotheses[row] = [Hypothesis(text.decode("utf-8"), float(score), float(log_prob),
                                      np.trim_zeros(hypothesis_ids, "b"))
                           for text, score, log_prob, hypothesis_ids in zip(*columns)
                           if np.isfinite(score)]


def check_prefixes(translator, source_ids, prefix_ids, first_line=1):
    """Raises PrefixError for the first prefix (int [n, width]) with no room left after it in
    its line's translation (source tokens + extra_length, at most max_output_length), naming
    the line (row 0 is line `first_line`)."""
    limits = translator.decoding.output_limits(np.count_nonzero(source_ids, axis=1))
    lengths = np.count_nonzero(prefix_ids, axis=1)
    for row in np.flatnonzero((lengths >= limits) & (np.count_nonzero(source_ids, axis=1) > 0)):
        raise PrefixError(f"line {row + first_line}: the prefix has {lengths[row]} tokens, but a "
                          f"translation of that line may have at most {limits[row]} "
                          f"(--extra_length, --max_output_length); nothing is left to translate")


def _beam_search(translator, batch, prefix, items, glossary):
    """The translator's n-best search of a batch, held to the one constraint given (if any)."""
    if glossary is not None:
        return translator.translate_n_best_ids_with_glossary(tf.constant(batch),
                                                             tf.constant(glossary))
    if items is not None:
        return translator.translate_n_best_ids_with_markup(tf.constant(batch), *items)
    if prefix is not None:
        return translator.translate_n_best_ids_with_prefix(tf.constant(batch),
                                                           tf.constant(prefix))
    return translator.translate_n_best_ids(tf.constant(batch))


def glossary_phrases(translator, source_ids, terms_of_lines, batch_size, first_line=1):
    """Each line's required terms as subword id lists (a list per line; row 0 is line
    `first_line`).

    Raises:
        InputError: a line whose terms need more tokens than its translation may have (source
            tokens + extra_length, at most max_output_length, less the end of sentence).
    """
    terms = sorted({term for terms in terms_of_lines for term in terms})
    ids = token_ids(translator.tokenize_prefixes, terms, batch_size,
                    max(1, translator.decoding.max_output_length))
    subwords = {term: [int(i) for i in row if i] for term, row in zip(terms, ids)}
    limits = translator.decoding.output_limits(np.count_nonzero(source_ids, axis=1))
    phrases = []
    for row, line_terms in enumerate(terms_of_lines):
        phrases.append([subwords[term] for term in line_terms])
        needed = sum(map(len, phrases[-1]))
        if needed >= limits[row] and needed:
            raise InputError(f"line {row + first_line}: its glossary terms need {needed} tokens "
                             f"but its translation may have at most {limits[row]} with the "
                             f"end of sentence (--extra_length, --max_output_length)")
    return phrases


def _stacked(phrases_of_rows):
    """int32 [rows, most phrases, longest phrase], 0-padded, of a batch's phrase id lists."""
    count = max([1, *map(len, phrases_of_rows)])
    width = max([1, *(len(phrase) for phrases in phrases_of_rows for phrase in phrases)])
    stacked = np.zeros([len(phrases_of_rows), count, width], np.int32)
    for row, phrases in enumerate(phrases_of_rows):
        for column, phrase in enumerate(phrases):
            stacked[row, column, :len(phrase)] = phrase
    return stacked


def _padded(ids, width):
    return np.pad(ids, [(0, 0), (0, width - ids.shape[1])])
