"""Labelled sentences for CoVe's downstream tasks (McCann et al. 2017, Table 2).

Three tasks travel with the package (data/corpora/*/README.md say where they come from):

    trec6     TREC question classification, 6 coarse classes; train 5,452, test 500
    trec50    the same questions, 50 fine classes ("NUM:dist")
    polarity  Rotten Tomatoes sentence polarity (the sentences SST was built from), positive or
              negative; train 8,530, dev 1,028

`task:DIR` reads the same files from a directory of one's own (train.tsv, and test.tsv or
dev.tsv; .gz allowed). Each example is (text, label); a malformed line, an empty sentence or an
evaluation label the training split never had is refused, naming the file and line.
"""

import gzip
import pathlib

from keras_transformer.errors import UserError

CORPORA = pathlib.Path(__file__).parent / "corpora"
TASKS = {
    # name: (bundled directory, evaluation split, fields a line, label from the fields)
    "trec6": ("trec", "test", 2, lambda fields: fields[0].split(":", 1)[0]),
    "trec50": ("trec", "test", 2, lambda fields: fields[0]),
    "polarity": ("movie_review_polarity", "dev", 3, lambda fields: fields[0]),
}


class ClassificationError(UserError):
    """A task spec or labelled file that cannot be used; the message names the file and line."""


class ClassificationTask:
    """One task's splits as lists of (text, label).

    Example:
    >>> task = ClassificationTask("trec6")
    >>> texts, labels = task.examples("train")
    >>> task.labels  # sorted training labels: ['ABBR', 'DESC', 'ENTY', 'HUM', 'LOC', 'NUM']
    """

    def __init__(self, spec):
        name, _, directory = spec.partition(":")
        if name not in TASKS:
            raise ClassificationError(f"unknown task {name!r}; valid: {', '.join(TASKS)} "
                                      f"(or name:DIR for the same files in DIR)")
        bundled, self.evaluation_split, self._fields, self._label = TASKS[name]
        self.name, self.spec = name, spec
        self.directory = pathlib.Path(directory) if directory else CORPORA / bundled
        self.labels = sorted(set(self.examples("train")[1]))

    def path(self, split):
        for candidate in (self.directory / f"{split}.tsv", self.directory / f"{split}.tsv.gz"):
            if candidate.is_file():
                return candidate
        raise ClassificationError(f"{self.directory}: no {split}.tsv or {split}.tsv.gz for task "
                                  f"{self.name}")

    def examples(self, split):
        """(texts, labels) of `split` ("train" or the task's evaluation split), in file order.

        Raises:
            ClassificationError: a line without its tab-separated fields, an empty sentence, or
                (outside train) a label the training split does not have.
        """
        path = self.path(split)
        opener = gzip.open if path.suffix == ".gz" else open
        texts, labels = [], []
        with opener(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                fields = line.rstrip("\n").split("\t")
                if len(fields) != self._fields:
                    raise ClassificationError(
                        f"{path}, line {number}: expected {self._fields} tab-separated fields "
                        f"({'label, rating, sentence' if self._fields == 3 else 'label, text'})"
                        f", got {len(fields)}")
                if not fields[-1].strip():
                    raise ClassificationError(f"{path}, line {number}: the sentence is empty")
                label = self._label(fields)
                if split != "train" and label not in self.labels:
                    raise ClassificationError(
                        f"{path}, line {number}: label {label!r} never occurs in training "
                        f"({len(self.labels)} labels there); a classifier cannot predict it")
                texts.append(fields[-1])
                labels.append(label)
        if not texts:
            raise ClassificationError(f"{path}: no examples in it")
        return texts, labels

    def label_ids(self, labels):
        """Labels -> int ids in `self.labels`' order."""
        index = {label: i for i, label in enumerate(self.labels)}
        return [index[label] for label in labels]

    def __repr__(self):
        return f"ClassificationTask({self.spec!r})"
