"""The kinds of vocabulary a model_dir may hold, told apart by their file names.

`data.Vocabulary` (vocab.model: one SentencePiece model for both sides, what kt-train builds)
and `data.MarianVocabulary` (vocab.marian: an imported Marian model's, kt-import) keep one
contract, `VocabularyProtocol`, so whatever reads a model_dir takes either
(tests/test_vocab.py checks both against it, signatures included).
"""

import pathlib
import typing

from keras_transformer.data.marian_vocab import MarianVocabulary
from keras_transformer.data.vocab import Vocabulary, VocabularyError


@typing.runtime_checkable
class VocabularyProtocol(typing.Protocol):
    """What the pipelines, the model_dir, the `Translator` and the exports ask of a vocabulary.
    Markup's further needs (`tokenize_with_offsets`, `before_tag_ok`) are a `Vocabulary`'s
    alone: `holds_markup` says whether they are there."""

    FILE_NAME: str  # its file's name in a model_dir and a SavedModel's assets
    path: str  # where it came from, for messages
    vocab_size: int

    @property
    def serialized(self) -> bytes:
        """The bytes of its file."""

    @property
    def target(self) -> "VocabularyProtocol":
        """The vocabulary that reads target text (itself where both sides share one)."""

    @property
    def holds_markup(self) -> bool:
        """Whether it holds markup's placeholder tokens (data.markup.TOKENS) whole."""

    @classmethod
    def load(cls, path):
        """It, read from file `path`; VocabularyError naming the file if it cannot be."""

    def tokenize(self, texts):
        """tf.string [batch] -> int32 RaggedTensor [batch, (tokens)], without end of sentence."""

    def encode(self, texts, max_length=None):
        """tf.string [batch] -> int32 RaggedTensor [batch, (length)]: `tokenize`'s ids cut to
        max_length - 1, then end of sentence; a blank text an empty row."""

    def detokenize(self, ids):
        """int ids [batch, length] or [length] -> tf.string [batch] or a scalar, each row read
        up to its end of sentence."""

    def pieces(self, ids):
        """The piece of each id in int ids [length], as str."""

    def markup_ids(self):
        """The ids of data.markup.TOKENS; VocabularyError where it does not hold them."""

    def check_size(self, vocab_size, what="the model"):
        """Raises VocabularyError unless it has `vocab_size` ids."""


KINDS = (Vocabulary, MarianVocabulary)
FILE_NAMES = tuple(kind.FILE_NAME for kind in KINDS)


def load_vocabulary(path):
    """The vocabulary in file `path`: a `MarianVocabulary` for a name ending in ".marian",
    else a `Vocabulary` (a SentencePiece model)."""
    kind = MarianVocabulary if pathlib.Path(path).suffix == ".marian" else Vocabulary
    return kind.load(path)


def vocabulary_file(directory):
    """The path of the vocabulary in `directory` (one of `FILE_NAMES`).

    Raises:
        VocabularyError: it holds none of them, or more than one.
    """
    found = [pathlib.Path(directory) / name for name in FILE_NAMES
             if (pathlib.Path(directory) / name).exists()]
    if not found:
        raise VocabularyError(f"{directory} holds no vocabulary ({' or '.join(FILE_NAMES)}); "
                              f"the model_dir is incomplete")
    if len(found) > 1:
        raise VocabularyError(f"{directory} holds two vocabularies "
                              f"({', '.join(path.name for path in found)}); a model_dir holds one")
    return found[0]


__all__ = ["FILE_NAMES", "KINDS", "load_vocabulary", "vocabulary_file"]
