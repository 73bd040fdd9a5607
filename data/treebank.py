"""Treebanks as a data source: sentences -> linearized trees, for kt-train --data ptb:DIR.

`ptb:DIR` names either

- the Wall Street Journal part of LDC's Penn Treebank 3 (`treebank_3/parsed/mrg/wsj`, or the
  `treebank_3` directory above it): section directories `00`..`24` of `wsj_SSNN.mrg` files, split
  the standard way, by the section in each file's path: 02-21 train (39,832 trees), 22 dev
  (1,700), 23 test (2,416); or
- a directory of `train.trees`, `dev.trees` and `test.trees` (optionally `.gz`; at least the
  first): bracketed trees, any number a line or one over several.

Each tree is normalized (`trees.normalize`) and linearized (`trees.linearize`): the pair is
(the words joined by spaces, the target tokens joined by spaces). A tree left empty by
normalization (only empty elements) is skipped. The prefix chooses the linearization's leaves:
`ptb:` the words (the default), `ptb-tags:` the part-of-speech tags (tensor2tensor's parsing
problems, which the paper used), `ptb-xx:` `XX` for every tag (Vinyals et al. 2015).
"""

import pathlib

import tensorflow as tf

from keras_transformer.data import trees
from keras_transformer.data.dataset_options import without_autotuning
from keras_transformer.data.errors import CorpusError
from keras_transformer.errors import check_one_of
from keras_transformer.search.constraints.tree import ANY_LEAF, TreeConstraint, bracket_tables
from keras_transformer.token_ids import PAD_ID

PREFIX = "ptb:"
PREFIXES = {PREFIX: "words", "ptb-tags:": "tags", "ptb-xx:": "XX"}  # -> trees.linearize leaves
WSJ_SECTIONS = {"train": tuple(range(2, 22)), "dev": (22,), "test": (23,)}
WSJ_UNDER_TREEBANK_3 = pathlib.Path("parsed", "mrg", "wsj")


def leaf_texts(sentences, leaves):
    """What the leaves of sentences' linearized trees spell (`trees.linearize`), for a parser
    that must write them (`keras_transformer.search.constraints.tree`).

    Args:
        sentences: tf.string [batch], words separated by spaces.
        leaves: "words" (each word, brackets in it written as the PTB writes a bracket word) or
            "XX" (XX for each word). Not "tags": a sentence does not say its tags.

    Returns:
        tf.string [batch], the leaves separated by spaces.
    """
    if leaves not in ("words", "XX"):
        raise ValueError(f"leaves={leaves!r}: a sentence gives its leaves for words or XX, "
                         f"not {leaves}")
    words = tf.strings.split(sentences)
    if leaves == "XX":
        words = tf.ragged.map_flat_values(lambda flat: tf.fill(tf.shape(flat), trees.TAG), words)
    for bracket, written in trees.ESCAPES.items():
        words = tf.ragged.map_flat_values(tf.strings.regex_replace, words, "\\" + bracket,
                                          written)
    return tf.strings.reduce_join(words, axis=1, separator=" ")


def tree_constraints(vocabulary, leaves):
    """For a parser trained with `vocabulary` on trees with `leaves` (`trees.LEAVES`): a
    function int32 source ids [batch, length] -> the `keras_transformer.search.constraints.tree.
    TreeConstraint` that holds its outputs to trees over those sentences. The leaves are the
    words the ids spell as the linearization writes them, or XX for each; part-of-speech tags,
    which a sentence does not give, are the model's to choose, one a word (`ANY_LEAF`). It runs
    in a graph; the vocabulary's bracket tables are made once, here."""
    check_one_of("leaves", leaves, trees.LEAVES, ValueError)
    tables = bracket_tables(vocabulary.pieces(list(range(vocabulary.vocab_size))))

    def constraint(source_ids):
        sentences = vocabulary.detokenize(source_ids)
        if leaves == "tags":
            words = tf.strings.split(sentences)
            leaf_ids = tf.ragged.map_flat_values(
                lambda flat: tf.fill(tf.shape(flat), ANY_LEAF), words)
        else:
            leaf_ids = tf.cast(vocabulary.tokenize(leaf_texts(sentences, leaves)), tf.int32)
        return TreeConstraint(leaf_ids.to_tensor(PAD_ID), *tables)

    return constraint


def is_treebank(spec):
    """Whether a --data value names a treebank (the run parses rather than translates)."""
    return isinstance(spec, str) and spec.startswith(tuple(PREFIXES))


def leaves_of(spec):
    """The `trees.linearize` leaves a treebank --data value writes ("words", "tags" or "XX")."""
    for prefix, leaves in PREFIXES.items():
        if spec.startswith(prefix):
            return leaves
    raise ValueError(f"{spec!r} is not a treebank: expected {', '.join(PREFIXES)}DIR")


def wsj_files(directory):
    """split -> sorted .mrg paths of a WSJ section tree, or None if `directory` is not one."""
    directory = pathlib.Path(directory)
    if (directory / WSJ_UNDER_TREEBANK_3).is_dir():
        directory = directory / WSJ_UNDER_TREEBANK_3
    sections = {int(path.name): path for path in directory.iterdir()
                if path.is_dir() and len(path.name) == 2 and path.name.isdigit()}
    if not sections:
        return None
    return {split: sorted(path for number in numbers if number in sections
                          for path in sections[number].glob("*.mrg"))
            for split, numbers in WSJ_SECTIONS.items()}


def split_files(directory):
    """split -> [path] of `{split}.trees[.gz]` files in `directory`."""
    found = {}
    for split in WSJ_SECTIONS:
        for name in (f"{split}.trees", f"{split}.trees.gz"):
            if (pathlib.Path(directory) / name).is_file():
                found[split] = [pathlib.Path(directory) / name]
                break
    return found


class TreebankSource:
    """Sentence -> linearized tree pairs of a treebank directory (see the module docstring).

    Args:
        directory: a WSJ section tree or a directory of {split}.trees files.
        leaves: what the targets write for each preterminal (`trees.LEAVES`).

    Raises:
        CorpusError: no such directory, or no training trees found in it.
    """

    source_lang = "words"
    target_lang = "trees"

    def __init__(self, directory, leaves="words"):
        self.directory = pathlib.Path(directory)
        self.leaves = leaves
        self.prefix = next(prefix for prefix, kind in PREFIXES.items() if kind == leaves)
        if not self.directory.is_dir():
            raise CorpusError(f"{self.prefix}{directory}: no such directory")
        files = wsj_files(self.directory) or split_files(self.directory)
        self.files = {split: paths for split, paths in files.items() if paths}
        if "train" not in self.files:
            raise CorpusError(
                f"{self.prefix}{directory}: found no training trees: expected WSJ section "
                f"directories 02-21 of .mrg files "
                f"(treebank_3/{WSJ_UNDER_TREEBANK_3.as_posix()}) or a train.trees file")
        self._trees = {}

    @property
    def name(self):
        return f"{self.prefix}{self.directory}"

    def splits(self):
        return list(self.files)

    def trees(self, split):
        """The split's normalized trees, [(path, line, Tree)], read once.

        Raises:
            CorpusError: the source has no such split; TreeError: a file holds malformed trees.
        """
        if split not in self.files:
            raise CorpusError(f"source {self.name!r} has no split {split!r}; it has "
                              f"{', '.join(self.files)}")
        if split not in self._trees:
            self._trees[split] = [
                (path, line, normalized) for path in self.files[split]
                for line, tree in trees.read_trees(path)
                for normalized in [trees.normalize(tree)] if normalized is not None]
        return self._trees[split]

    def whole_tokens(self):
        """The training targets' brackets, sorted: tokens a vocabulary should keep whole, which
        halves the pieces of a target. (Not the tags of ptb-tags: SentencePiece matches its
        whole tokens inside words too, so IN would split the source word INC as IN + C.)"""
        found = set()
        for _, _, tree in self.trees("train"):
            found.update(token for token in trees.linearize(tree, self.leaves)[1]
                         if token.startswith(("(", ")")))
        return sorted(found)

    def pairs(self, split, shuffle_files=False, seed=None):
        del shuffle_files, seed  # In memory: the pipeline's shuffle buffer does the shuffling.
        sources, targets = [], []
        for _, _, tree in self.trees(split):
            words, tokens = trees.linearize(tree, self.leaves)
            sources.append(" ".join(words))
            targets.append(" ".join(tokens))
        return without_autotuning(tf.data.Dataset.from_tensor_slices((
            tf.constant(sources, tf.string), tf.constant(targets, tf.string))))

    def __repr__(self):
        return f"TreebankSource({str(self.directory)!r}, leaves={self.leaves!r})"
