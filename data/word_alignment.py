"""Word alignments of a parallel corpus without a neural model: IBM Model 1 (Brown et al. 1993)
trained by EM in both directions, the two alignments intersected (Och & Ney 2003), and the
spans such links make consistent (Och & Ney 2004's phrase-pair rule).

Used to put made-up tag pairs around words that translate each other in training pairs
(`data.markup_pairs`), so that a model learns to place a source tag around the translation of
what it wraps. Rough but cheap: five EM iterations over 29k pairs take a few seconds (numpy,
every sentence at once); the intersection keeps links both directions agree on, few but mostly
right, which is what a span wrapped in tags needs.
"""

import re
import string

import numpy as np

PUNCTUATION = string.punctuation + "“”‘’¿¡«»—–…"
MAX_PAIRS = 30_000  # pairs counted: enough for word statistics, and bounded for a huge corpus
ITERATIONS = 5
NULL = 0  # the id of the empty word every target word may align to instead


class Word:
    """A whitespace-separated token of a text without the punctuation around it: `start` and
    `end` are character offsets of that core, `key` its lower-cased text."""

    __slots__ = ("start", "end", "key")

    def __init__(self, start, end, key):
        self.start, self.end, self.key = start, end, key


def words(text):
    """The `Word`s of `text`, in order; tokens that are all punctuation are left out."""
    found = []
    for match in re.finditer(r"\S+", text):
        token = match.group(0)
        core = token.strip(PUNCTUATION)
        if core:
            start = match.start() + token.index(core)
            found.append(Word(start, start + len(core), core.lower()))
    return found


class Translations:
    """IBM Model 1's word translation probabilities t(target word | source word), one
    direction: `keys` (sorted source id * target vocabulary size + target id) and `probs`."""

    def __init__(self, source_index, target_index, keys, probs):
        self.source_index, self.target_index = source_index, target_index
        self.keys, self.probs = keys, probs

    @classmethod
    def fit(cls, sentences, source_index, target_index, iterations=ITERATIONS):
        """From `sentences`, (source ids, target ids) int arrays (source ids holding NULL)."""
        width = len(target_index)
        entries = [(s[:, None] * width + t[None]).ravel() for s, t in sentences]
        # Each entry's (sentence, target word): its source words share one posterior.
        groups = [np.repeat(np.arange(len(t))[None], len(s), 0).ravel() for s, t in sentences]
        offsets = np.cumsum([0] + [len(t) for _, t in sentences[:-1]])
        groups = np.concatenate([g + o for g, o in zip(groups, offsets)]) if groups else (
            np.zeros(0, np.int64))
        keys, where = np.unique(np.concatenate(entries) if entries else np.zeros(0, np.int64),
                                return_inverse=True)
        probs, source_of_key = np.ones(len(keys)), keys // max(width, 1)
        for _ in range(iterations):
            weights = probs[where]
            posterior = weights / np.bincount(groups, weights)[groups]
            counts = np.bincount(where, posterior, minlength=len(keys))
            probs = counts / np.bincount(source_of_key, counts)[source_of_key]
        return cls(source_index, target_index, keys, probs)

    def table(self, source_ids, target_ids):
        """float [len(source_ids), len(target_ids)]: t(target | source), 0 where unseen."""
        keys = source_ids[:, None] * len(self.target_index) + target_ids[None]
        if not len(self.keys):
            return np.zeros(keys.shape)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        known = (self.keys[at] == keys) & (source_ids[:, None] >= 0) & (target_ids[None] >= 0)
        return np.where(known, self.probs[at], 0.0)


class Ibm1Aligner:
    """Links a sentence pair's words where both directions' Model 1 alignments agree: target
    word j's most probable source word is i, and source word i's most probable target word is
    j (neither the empty word)."""

    def __init__(self, forward, backward):
        self.forward, self.backward = forward, backward

    @classmethod
    def fit(cls, pairs, max_pairs=MAX_PAIRS, iterations=ITERATIONS):
        """An aligner from (source, target) str pairs, the first `max_pairs` of them."""
        indexes, sentences = ({"": NULL}, {"": NULL}), []
        for number, pair in enumerate(pairs):
            if number == max_pairs:
                break
            sentences.append([np.array([NULL] + [index.setdefault(word.key, len(index))
                                                 for word in words(text)], np.int64)
                              for index, text in zip(indexes, pair)])
        source_index, target_index = indexes
        return cls(Translations.fit([(s, t[1:]) for s, t in sentences], source_index,
                                    target_index, iterations),
                   Translations.fit([(t, s[1:]) for s, t in sentences], target_index,
                                    source_index, iterations))

    def links(self, source_words, target_words):
        """Sorted (source index, target index) word links; each word in one link at most."""
        source_ids = np.array([NULL] + [self.forward.source_index.get(w.key, -1)
                                        for w in source_words], np.int64)
        target_ids = np.array([NULL] + [self.forward.target_index.get(w.key, -1)
                                        for w in target_words], np.int64)
        forward = self.forward.table(source_ids, target_ids[1:])  # [1 + source, target]
        backward = self.backward.table(target_ids, source_ids[1:])  # [1 + target, source]
        if not forward.size or not backward.size:
            return []
        best_source = np.argmax(forward, axis=0)  # per target word, 0 = the empty word
        best_target = np.argmax(backward, axis=0)
        return [(i - 1, j) for j, i in enumerate(best_source)
                if i > 0 and best_target[i - 1] == j + 1 and forward[i, j] > 0]


def consistent_spans(links, max_words=5):
    """((source start, source end), (target start, target end)) word spans (ends inclusive)
    that translate each other by `links`: the source span starts and ends on linked words, at
    most `max_words` long, the target span runs from its first to its last linked word, and no
    link joins a word inside either span to one outside the other."""
    spans = []
    linked = dict(links)
    for start in sorted(linked):
        for end in sorted(i for i in linked if start <= i < start + max_words):
            targets = [j for i, j in links if start <= i <= end]
            low, high = min(targets), max(targets)
            if high - low + 1 <= 2 * (end - start + 1) + 1 and all(
                    start <= i <= end for i, j in links if low <= j <= high):
                spans.append(((start, end), (low, high)))
    return spans
