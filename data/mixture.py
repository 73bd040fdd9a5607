"""Several corpora mixed by weight, as OpenNMT-tf's `train_files_weights` and Marian's
`--data-weighting` mix them: `kt-train --data general --data in_domain --data_weights 1,3`.

Training draws each sentence pair from corpus i with probability w_i / sum(w), from that corpus's
own endless, shuffled stream (`input_pipeline.pipeline` builds one a corpus and draws with
`tf.data.Dataset.sample_from_datasets`), so a small in-domain corpus is seen as often as its
weight says, not as its size says; batching by length is unchanged. A vocabulary built for the
mixture reads its sentences drawn the same way (`weighted_pairs`). Every other split is the
corpora's splits one after the other, and the dev evaluation also scores each corpus apart
(`with_split`).
"""

import math

import tensorflow as tf

from keras_transformer.data import sources, treebank

WEIGHTS_FLAG = "--data_weights"


class WeightedCorpora:
    """Two or more sources read as one, their training pairs drawn by weight.

    Args:
        corpora: the sources (`sources.get_source` resolves each spec), one language pair.
        weights: one positive number a corpus (only their ratios matter); None: equal.
        names: the corpora's names in messages and per-corpus results (default: their specs
            or reprs).

    Raises:
        sources.CorpusError: fewer than two corpora, a treebank among them, weights that are
            not one positive finite number a corpus, or corpora of different languages.
    """

    def __init__(self, corpora, weights=None, names=None):
        corpora = list(corpora)
        if len(corpora) < 2:
            raise sources.CorpusError(f"WeightedCorpora mixes two or more corpora, got "
                                      f"{len(corpora)}")
        names = [str(name) for name in (names or [repr(c) if not isinstance(c, str) else c
                                                  for c in corpora])]
        for name in names:
            if treebank.is_treebank(name):
                raise sources.CorpusError(f"--data {name}: a parser learns from one treebank; "
                                          f"treebanks are not mixed with other corpora")
        weights = [1.0] * len(corpora) if weights is None else list(weights)
        check_weights(weights, len(corpora))
        self.corpora = tuple(sources.get_source(corpus) for corpus in corpora)
        self.weights = tuple(float(weight) for weight in weights)
        self.names = tuple(names)
        languages = {(c.source_lang, c.target_lang) for c in self.corpora}
        if len(languages) > 1:
            raise sources.CorpusError(
                "the corpora translate different language pairs: " + ", ".join(
                    f"{name} {c.source_lang}->{c.target_lang}"
                    for name, c in zip(self.names, self.corpora)))
        self.source_lang, self.target_lang = languages.pop()

    def probabilities(self):
        """Each corpus's share of the training pairs drawn: w_i / sum(w)."""
        total = sum(self.weights)
        return [weight / total for weight in self.weights]

    def splits(self):
        """"train" when every corpus has one; the other splits any corpus has."""
        splits = [split for c in self.corpora for split in c.splits() if split != "train"]
        train = ["train"] if all("train" in c.splits() for c in self.corpora) else []
        return train + list(dict.fromkeys(splits))

    def with_split(self, split):
        """[(name, source)] of the corpora that have `split`, in order."""
        return [(name, c) for name, c in zip(self.names, self.corpora) if split in c.splits()]

    def pairs(self, split, shuffle_files=False, seed=None):
        """The split's pairs of every corpus that has it, one corpus after the other (no
        weights: training draws by weight in `input_pipeline.pipeline`)."""
        having = self.with_split(split)
        if not having:
            raise sources.CorpusError(f"none of {self!r} has a split {split!r}")
        pairs = [c.pairs(split, shuffle_files=shuffle_files, seed=seed) for _, c in having]
        for more in pairs[1:]:
            pairs[0] = pairs[0].concatenate(more)
        return pairs[0]

    def weighted_pairs(self, count, seed=0):
        """`count` training pairs drawn by weight from the corpora's repeated training splits
        (for a vocabulary: a corpus weighted 3 counts three times as much as its size says)."""
        streams = [c.pairs("train").repeat() for c in self.corpora]
        return tf.data.Dataset.sample_from_datasets(
            streams, weights=self.probabilities(), seed=seed).take(count)

    def whole_tokens(self):
        """The tokens any corpus keeps whole (markup placeholders)."""
        tokens = [getattr(c, "whole_tokens", lambda: ())() for c in self.corpora]
        return tuple(dict.fromkeys(token for kept in tokens for token in kept))

    def __repr__(self):
        shares = ", ".join(f"{name} x{weight:g}" for name, weight in zip(self.names, self.weights))
        return f"WeightedCorpora({shares})"


def check_weights(weights, count, what=WEIGHTS_FLAG):
    """Refuses weights that are not `count` positive finite numbers, naming `what`."""
    if len(weights) != count:
        raise sources.CorpusError(f"{what}: {len(weights)} weight(s) for {count} corpora; give "
                                  f"one a --data, in the same order")
    for weight in weights:
        if (isinstance(weight, bool) or not isinstance(weight, (int, float))
                or not math.isfinite(weight) or weight <= 0):
            raise sources.CorpusError(f"{what}: {weight!r} is not a positive number")


def parse_weights(text, count):
    """`--data_weights 1,3` -> [1.0, 3.0], checked against `count` corpora."""
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise sources.CorpusError(f"{WEIGHTS_FLAG} {text!r}: expected numbers separated by "
                                  f"commas, one a --data, e.g. 1,3") from None
    check_weights(weights, count)
    return weights


__all__ = ["WEIGHTS_FLAG", "WeightedCorpora", "check_weights", "parse_weights"]
