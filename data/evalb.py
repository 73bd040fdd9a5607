"""Labeled bracket scoring as EVALB does it with COLLINS.prm (Sekine & Collins 1997).

Constituency parsers are compared by EVALB's labeled precision, recall and F1 over brackets. With
COLLINS.prm, the parameter file every WSJ result since Collins (1997) uses:

- a word whose part-of-speech tag is punctuation (`,` `:` ```` `''` `.`) or `-NONE-` is deleted,
  in each tree by its own tags, before spans are counted;
- a bracket is (label, first word, last word) over the words left; brackets of `TOP` (and of the
  unlabelled or `ROOT` wrapper some treebanks write) are not counted, nor brackets left empty by
  the deletions, nor preterminals (a tag over its word is not a bracket);
- function tags and indices are stripped from labels (`NP-SBJ-1` -> `NP`), and `ADVP` equals `PRT`;
- brackets match as multisets: n gold and m test brackets of one label and span match min(n, m);
- a sentence's length counts every word but `-NONE-`; the summary is given for all sentences and
  for those of at most 40 words;
- tagging accuracy is the share of the remaining words whose tags agree; a test bracket crosses
  if it overlaps a gold bracket without either containing the other.

EVALB's repair of quote tags that one tree deletes and the other does not (its "fix_quote") is
not reproduced: a pair whose remaining words differ counts as an error sentence, as EVALB counts
any other length or word mismatch.
"""

import collections
import dataclasses
import re

from keras_transformer.data import trees

DELETE_LABELS = frozenset({"TOP", "ROOT", "", "-NONE-", ",", ":", "``", "''", "."})
DELETE_FOR_LENGTH = frozenset({"-NONE-"})
EQUAL_LABELS = {"PRT": "ADVP"}
CUTOFF_LENGTH = 40


def _label(label):
    """EVALB's label for comparison: function tags and indices off, equivalent labels merged."""
    plain = re.split(r"(?<=.)[-=]", label, maxsplit=1)[0]
    return EQUAL_LABELS.get(plain, plain)


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence's counts, as the lines of EVALB's per-sentence table."""

    length: int  # words but -NONE-
    words: int  # words left after deletions
    gold_brackets: int
    test_brackets: int
    matched: int
    crossing: int
    correct_tags: int
    error: str = ""  # why the pair could not be scored ("" if it was)


def _brackets(tree):
    """(words [(word, tag)] left after deletions, length, brackets [(label, start, end)])."""
    words, brackets = [], []
    length = 0
    starts = []  # of the open phrases: how many words came before each
    for event, node in trees.walk(tree):
        if event == "open":
            starts.append(len(words))
        elif event == "close":
            start = starts.pop()
            if len(words) > start and node.label not in DELETE_LABELS:
                brackets.append((_label(node.label), start, len(words)))
        else:
            if node.label not in DELETE_FOR_LENGTH:
                length += 1
            if node.label not in DELETE_LABELS:
                words.append((node.children[0], node.label))
    return words, length, brackets


def score_sentence(gold, test):
    """A `Sentence` comparing a test tree with the gold tree (both `trees.Tree`)."""
    gold_words, length, gold_brackets = _brackets(gold)
    test_words, _, test_brackets = _brackets(test)
    if [w for w, _ in gold_words] != [w for w, _ in test_words]:
        error = (f"length mismatch ({len(gold_words)} gold words, {len(test_words)} test)"
                 if len(gold_words) != len(test_words) else "words mismatch")
        return Sentence(length, len(gold_words), len(gold_brackets), len(test_brackets), 0, 0, 0,
                        error)
    matched = sum((collections.Counter(gold_brackets) & collections.Counter(test_brackets))
                  .values())
    crossing = sum(any(g_start < t_start < g_end < t_end or t_start < g_start < t_end < g_end
                       for _, g_start, g_end in gold_brackets)
                   for _, t_start, t_end in test_brackets)
    correct_tags = sum(_label(g) == _label(t) for (_, g), (_, t) in zip(gold_words, test_words))
    return Sentence(length, len(gold_words), len(gold_brackets), len(test_brackets), matched,
                    crossing, correct_tags)


@dataclasses.dataclass(frozen=True)
class Summary:
    """EVALB's summary over a set of sentences (percentages, as it prints them)."""

    sentences: int
    errors: int
    recall: float
    precision: float
    f1: float
    complete_match: float
    average_crossing: float
    no_crossing: float
    two_or_less_crossing: float
    tagging_accuracy: float

    @classmethod
    def of(cls, results):
        valid = [r for r in results if not r.error]
        gold = sum(r.gold_brackets for r in valid)
        test = sum(r.test_brackets for r in valid)
        matched = sum(r.matched for r in valid)
        recall = 100.0 * matched / gold if gold else 0.0
        precision = 100.0 * matched / test if test else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        words = sum(r.words for r in valid)

        def share(condition):
            return 100.0 * sum(map(condition, valid)) / len(valid) if valid else 0.0

        return cls(
            len(results), len(results) - len(valid), recall, precision, f1,
            share(lambda r: r.matched == r.gold_brackets == r.test_brackets),
            sum(r.crossing for r in valid) / len(valid) if valid else 0.0,
            share(lambda r: r.crossing == 0), share(lambda r: r.crossing <= 2),
            100.0 * sum(r.correct_tags for r in valid) / words if words else 0.0)

    def format(self, title):
        return "\n".join([
            f"-- {title} --",
            f"Number of sentence        = {self.sentences:6d}",
            f"Number of Error sentence  = {self.errors:6d}",
            f"Number of Valid sentence  = {self.sentences - self.errors:6d}",
            f"Bracketing Recall         = {self.recall:6.2f}",
            f"Bracketing Precision      = {self.precision:6.2f}",
            f"Bracketing FMeasure       = {self.f1:6.2f}",
            f"Complete match            = {self.complete_match:6.2f}",
            f"Average crossing          = {self.average_crossing:6.2f}",
            f"No crossing               = {self.no_crossing:6.2f}",
            f"2 or less crossing        = {self.two_or_less_crossing:6.2f}",
            f"Tagging accuracy          = {self.tagging_accuracy:6.2f}"])


def evaluate(gold_trees, test_trees):
    """(Summary of all sentences, Summary of those of <= 40 words, [Sentence]).

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees")
    results = [score_sentence(gold, test) for gold, test in zip(gold_trees, test_trees)]
    return (Summary.of(results), Summary.of([r for r in results if r.length <= CUTOFF_LENGTH]),
            results)
