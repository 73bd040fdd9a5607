"""GloVe vectors and the word vocabulary over them: CoVe's input side (McCann et al. 2017).

CoVe's MT-LSTM reads an English sentence as fixed GloVe vectors of its words, not as subwords:
"CoVe(w) = MT-LSTM(GloVe(w))". This module reads a GloVe text file (`word v1 ... vd` a line, as
Stanford distributes them; plain, .gz or .bz2) and turns texts into word ids over its words, in
the TF graph, so the same object serves tf.data pipelines and exported models.

Words are found as GloVe's corpora were tokenized, approximately: lower-cased, punctuation split
off, English clitics split as the Penn Treebank does ("don't" -> "do n't", "it's" -> "it 's").

Ids follow the package's convention: 0 pads, 1 ends a sentence, 2 is a word GloVe does not have;
GloVe's words follow from 3 in the file's order (most frequent first, as GloVe writes them). The
embedding matrix has zero rows for the three.
"""

import bz2
import gzip
import pathlib
import re

import numpy as np
import tensorflow as tf

from keras_transformer.data.vocab import encoded, normalize_texts
from keras_transformer.errors import UserError
from keras_transformer.token_ids import EOS_ID, PAD_ID

UNK_ID = 2
FIRST_WORD_ID = 3
WORDS_FILE = "words.txt"


class GloveError(UserError):
    """A vectors file or words file that cannot be read; the message names the file and line."""


def _open_text(path):
    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
    return opener(path, "rt", encoding="utf-8", newline="\n")


def read_glove(path, max_words=None):
    """Reads a GloVe text file: (words: list of str, vectors: float32 [words, dimensions]).

    Args:
        path: a `word v1 ... vd` file; .gz and .bz2 are decompressed as they are read.
        max_words: keep the first this many words (GloVe files list the most frequent first).

    Raises:
        GloveError: an empty file, or a line whose numbers are not the first line's count of
            numbers (naming the file and line).
    """
    path = pathlib.Path(path)
    words, numbers, seen, dimensions = [], [], set(), None
    try:
        with _open_text(path) as lines:
            for number, line in enumerate(lines, 1):
                if max_words is not None and len(words) >= max_words:
                    break
                # Split from the right: a few GloVe words (840B's) contain spaces themselves.
                fields = line.rstrip("\n").rstrip(" ").split(" ")
                if dimensions is None:
                    dimensions = len(fields) - 1
                    if dimensions < 1:
                        raise GloveError(f"{path}, line {number}: expected a word and its "
                                         f"vector, got {line[:80]!r}")
                word, values = " ".join(fields[:-dimensions]), fields[-dimensions:]
                if not word or len(fields) <= dimensions:
                    raise GloveError(f"{path}, line {number}: expected a word and {dimensions} "
                                     f"numbers (as line 1 has), got {len(fields) - 1} field(s) "
                                     f"after the first")
                try:
                    vector = np.asarray(values, dtype=np.float32)
                except ValueError:
                    raise GloveError(f"{path}, line {number}: the {dimensions} fields after "
                                     f"{word!r} are not all numbers") from None
                if word in seen:  # keep the first (the more frequent) of a repeated word
                    continue
                seen.add(word)
                words.append(word)
                numbers.append(vector)
    except (UnicodeDecodeError, OSError, EOFError) as error:
        raise GloveError(f"{path}: cannot read it as GloVe text: {error}") from None
    if not words:
        raise GloveError(f"{path}: no vectors in it")
    return words, np.stack(numbers)


# Private-use stand-ins for the characters punctuation splitting must leave alone.
_KEPT = {"\ue000": ".", "\ue001": ",", "\ue002": "'"}


def tokenize_words(texts, lowercase=True):
    """tf.string [batch] -> the words of each, lower-cased: tf.string RaggedTensor [batch, (n)].

    "Don't stop, it's 5.30!" -> [do, n't, stop, ",", it, 's, 5.30, !]: punctuation is its own
    word unless it is a number's "." or ",", and clitics split as in the Penn Treebank. Texts are
    normalized as a subword `Vocabulary` reads them (`vocab.normalize_texts`). `lowercase=False`
    keeps the case: the same words, split before lower-casing.
    """
    texts = tf.strings.regex_replace(normalize_texts(tf.convert_to_tensor(texts, tf.string)),
                                     "[\ue000-\ue002]", " ")  # the stand-ins below
    texts = tf.strings.regex_replace(texts, "[\u2019`]", "'")
    texts = tf.strings.regex_replace(texts, r"(?i)(n)'(t)\b", " \\1\ue002\\2")
    texts = tf.strings.regex_replace(texts, r"(?i)'(s|re|ve|ll|d|m)\b", " \ue002\\1")
    texts = tf.strings.regex_replace(texts, r"(\d)\.(\d)", "\\1\ue000\\2")
    texts = tf.strings.regex_replace(texts, r"(\d),(\d)", "\\1\ue001\\2")
    texts = tf.strings.regex_replace(texts, "([^\\p{L}\\p{N}\\p{M}_\\s\ue000-\ue002])", " \\1 ")
    for stand_in, character in _KEPT.items():
        texts = tf.strings.regex_replace(texts, stand_in, character)
    words = tf.strings.split(texts)
    if lowercase:
        words = tf.ragged.map_flat_values(tf.strings.lower, words, encoding="utf-8")
    return words


# What an apostrophe of `tokenize_words`' words was in the text, as a bytes pattern.
_APOSTROPHES = "(?:'|\u2019|`)".encode()


def word_pieces(vocabulary, texts, max_length=None):
    """How a subword model reads each text, and which of its pieces make each of
    `tokenize_words`' words.

    The text is encoded whole, as the model was trained to read it (`Vocabulary.encode`); a
    word's pieces are those that share a byte with it, found by looking the words up in the
    text in order (they are its substrings, up to the apostrophes `tokenize_words` unifies). A
    piece may belong to two words (`."` to "." and to the quote).

    Args:
        vocabulary: a subword `Vocabulary` (data/vocab.py).
        texts: str sentences.
        max_length: at most this many pieces a text, end of sentence included (a model's
            learned position table); the words after the cut have no pieces.

    Returns:
        (piece_ids, word_spans): int32 [len(texts), longest] each text's subword ids and end of
        sentence, 0-padded; and int32 [len(texts), most words, 2] each word's pieces as
        [first, last + 1), [0, 0) for padding (`keras_transformer.TransformerCoVe`'s inputs).
    """
    ids, starts, ends, normalized = vocabulary.tokenize_with_offsets(tf.constant(list(texts)))
    words = tokenize_words(normalized, lowercase=False).to_list()
    rows_ids, rows_spans = [], []
    for text, row_words, row_ids, row_starts, row_ends in zip(
            normalized.numpy(), words, ids.to_list(), starts.to_list(), ends.to_list()):
        if max_length is not None:
            row_ids = row_ids[:max_length - 1]
        row_starts = np.array(row_starts[:len(row_ids)])
        row_ends = np.array(row_ends[:len(row_ids)])
        spans, cursor = [], 0
        for word in row_words:
            found = re.compile(re.escape(word).replace(b"'", _APOSTROPHES)).search(text, cursor)
            cursor = found.end()
            shared = np.flatnonzero((row_starts < found.end()) & (row_ends > found.start()))
            spans.append([int(shared[0]), int(shared[-1]) + 1] if len(shared) else [0, 0])
        rows_ids.append(row_ids + [EOS_ID])
        rows_spans.append(spans)
    longest = max(map(len, rows_ids), default=0)
    most = max(map(len, rows_spans), default=0)
    return (np.array([row + [PAD_ID] * (longest - len(row)) for row in rows_ids], np.int32),
            np.array([row + [[0, 0]] * (most - len(row)) for row in rows_spans],
                     np.int32).reshape(len(rows_spans), most, 2))


class WordVocabulary(tf.Module):
    """GloVe's words as ids, in the graph: `encode` is the one text -> ids path.

    Example:
    >>> vocabulary = WordVocabulary(*read_glove("glove.6B.50d.txt.bz2", max_words=100_000))
    >>> vocabulary.encode(tf.constant(["The cat sat."]))  # [[the, cat, sat, ., </s>]]
    >>> matrix = vocabulary.embedding_matrix()  # [100_003, 50]: rows 0-2 zero
    """

    def __init__(self, words, vectors=None):
        super().__init__(name="word_vocabulary")
        self.words = list(words)
        if vectors is not None and len(vectors) != len(self.words):
            raise GloveError(f"{len(self.words)} words but {len(vectors)} vectors")
        self.vectors = vectors
        self.vocab_size = len(self.words) + FIRST_WORD_ID
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.words, tf.string),
                tf.range(FIRST_WORD_ID, self.vocab_size, dtype=tf.int32)),
            default_value=UNK_ID)

    def encode(self, texts, max_length=None):
        """tf.string [batch] -> int32 RaggedTensor [batch, (length)]: each text's word ids, cut
        to `max_length - 1` if longer, then end of sentence; an empty text stays an empty row
        (the contract of `Vocabulary.encode`, so the pipelines take either)."""
        ids = tf.ragged.map_flat_values(self._table.lookup, tokenize_words(texts))
        return encoded(ids, max_length)

    def embedding_matrix(self):
        """float32 [vocab_size, dimensions]: zero rows for padding, end and unknown words."""
        if self.vectors is None:
            raise GloveError("this vocabulary was loaded without vectors (a words file)")
        special = np.zeros((FIRST_WORD_ID, self.vectors.shape[1]), np.float32)
        return np.concatenate([special, self.vectors.astype(np.float32)])

    def save(self, path):
        """Writes the words, one a line (the vectors live in the model that uses them)."""
        pathlib.Path(path).write_text("".join(word + "\n" for word in self.words),
                                      encoding="utf-8")

    @classmethod
    def load(cls, path):
        """A vocabulary from `save`'s words file (without vectors)."""
        path = pathlib.Path(path)
        try:
            words = path.read_text(encoding="utf-8").split("\n")[:-1]
        except (UnicodeDecodeError, OSError) as error:
            raise GloveError(f"{path}: cannot read the words file: {error}") from None
        for number, word in enumerate(words, 1):
            if not word or word != word.strip():
                raise GloveError(f"{path}, line {number}: a word cannot be empty or start or end "
                                 f"with white space: {word!r}")
        return cls(words)


__all__ = ["FIRST_WORD_ID", "GloveError", "PAD_ID", "UNK_ID", "WORDS_FILE", "WordVocabulary",
           "read_glove", "tokenize_words", "word_pieces"]
