"""The kinds of vocabulary a model_dir may hold, told apart by their file names.

`data.Vocabulary` (vocab.model: one SentencePiece model for both sides, what kt-train builds)
and `data.MarianVocabulary` (vocab.marian: an imported Marian model's, kt-import) keep one
contract, so whatever reads a model_dir takes either.
"""

import pathlib

from keras_transformer.data.marian_vocab import MarianVocabulary
from keras_transformer.data.vocab import Vocabulary, VocabularyError

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
