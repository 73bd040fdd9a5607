"""Shared subword vocabularies: SentencePiece models trained here, applied in the TF graph.

The paper used one shared BPE vocabulary for source and target (about 37,000 tokens for
English-German). `Vocabulary` tokenizes and detokenizes with tensorflow-text's
`SentencepieceTokenizer`, so the same object runs inside tf.data and inside an exported
SavedModel; data/vocabulary_training.py trains one (`build_vocabulary`; the kt-vocab command runs
it).

Ids follow keras_transformer's convention: 0 pads, 1 ends a sentence, 2 is unknown. Byte fallback
is on, so any UTF-8 text round-trips through its bytes instead of becoming <unk>; normalization is
the identity (but for SentencePiece's own space symbol U+2581, read as a space), so
`detokenize(tokenize(s)) == normalize_whitespace(s)`: a leading byte order mark dropped, U+2581
read as a space, leading and trailing whitespace dropped, and runs of spaces collapsed to one.
"""

import os
import pathlib
import re

import sentencepiece
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the tokenizer needs)

from keras_transformer.data import markup
from keras_transformer.errors import UserError
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID


class VocabularyError(UserError):
    """A vocabulary file that cannot serve; the message names the file."""


_ASCII_WHITESPACE = " \t\n\r\v\f"
_SPACE_SYMBOL = "\u2581"  # SentencePiece's stand-in for a space; as text it would become one.
_BYTE_ORDER_MARK = "\ufeff"
# SentencePiece's normalization rules (code points, tab-separated): its space symbol read as a
# space, as `normalize_texts` does before it; nothing else changes. A model trained with the rule
# "identity" has an empty character map instead, and each tensorflow-text tokenizer that loads it
# prints "precompiled_charsmap is empty" to stderr (SentencePiece's own INFO log, which no log
# level reaches from Python).
NORMALIZATION_RULES = "2581\t20\n"


# What Python's str.isspace() calls white space: ASCII's, the information separators, NEL and
# Unicode's separators (no-break and ideographic spaces among them). SentencePiece's identity
# normalization would turn a text of them into tokens, and the model would "translate" it.
_BLANK = r"[\t\n\x0b\x0c\r\x1c-\x1f \x{85}\p{Z}]*"


def normalize_whitespace(text):
    """What tokenize-then-detokenize gives back for `text` (str)."""
    text = text.removeprefix(_BYTE_ORDER_MARK).replace(_SPACE_SYMBOL, " ")
    if text.isspace():
        return ""
    return re.sub(" +", " ", text.strip(_ASCII_WHITESPACE)).strip(" ")


def normalize_texts(texts):
    """The in-graph part of `normalize_whitespace`; SentencePiece does the rest."""
    texts = tf.strings.regex_replace(texts, "^" + _BYTE_ORDER_MARK, "")
    texts = tf.strings.regex_replace(texts, _SPACE_SYMBOL, " ")
    texts = tf.where(tf.strings.regex_full_match(texts, _BLANK), "", texts)
    return tf.strings.strip(texts)


class SizeChecked:
    """`check_size`, for a vocabulary with `path`, `vocab_size` and `MADE_WITH` (how a model
    came to use it: "trained" or "imported")."""

    MADE_WITH = "trained"

    def check_size(self, vocab_size, what="the model"):
        """Raises VocabularyError unless this vocabulary has `vocab_size` ids."""
        if vocab_size != self.vocab_size:
            raise VocabularyError(
                f"{self.path} has {self.vocab_size} ids but {what} expects {vocab_size}; "
                f"use the vocabulary the model was {self.MADE_WITH} with")


class Vocabulary(SizeChecked, tf.Module):
    """A SentencePiece model with in-graph tokenization.

    Setting a random seed (`keras.utils.set_random_seed`, `tf.random.set_seed`) clears
    TensorFlow's eager kernel cache, which owns tensorflow-text's SentencePiece model: graphs and
    pipelines built before that fail with "Resource ... SentencepieceOp ... does not exist". This
    class notices and rebuilds its tokenizer for later uses, so set seeds before building
    pipelines, or build them again.

    Args:
        model_proto: the serialized SentencePiece model (the bytes of a `.model` file).
        path: where it came from, for messages.

    Raises:
        VocabularyError: the bytes are not a SentencePiece model, or it does not reserve 0 for
            padding and 1 for end of sentence.
    """

    def __init__(self, model_proto, path=None):
        super().__init__(name="vocabulary")
        self.path = os.fspath(path) if path else "<in-memory vocabulary>"
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_proto)
        except (RuntimeError, TypeError) as error:
            raise VocabularyError(f"{self.path}: not a SentencePiece model ({error}); build one "
                                  f"with kt-vocab") from None
        if (processor.pad_id(), processor.eos_id()) != (PAD_ID, EOS_ID):
            raise VocabularyError(
                f"{self.path}: the vocabulary must reserve id {PAD_ID} for padding and {EOS_ID} "
                f"for end of sentence, but has pad={processor.pad_id()}, "
                f"eos={processor.eos_id()}; build it with kt-vocab")
        self.model_proto = model_proto
        self.vocab_size = processor.get_piece_size()
        # After a space, as markup.mask leaves each token; None: not all held as one piece.
        ids = [processor.piece_to_id(_SPACE_SYMBOL + token) for token in markup.TOKENS]
        self._markup_ids = None if UNK_ID in ids else ids
        self.tokenizer = self._new_tokenizer()

    FILE_NAME = "vocab.model"  # its name in a model_dir and a SavedModel's assets

    def _new_tokenizer(self):
        return tensorflow_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32)

    def _live_tokenizer(self):
        """The tokenizer, rebuilt if a seed was set since it was made (see the class docstring)."""
        self.tokenizer = live_tokenizer(self.tokenizer, self._new_tokenizer)
        return self.tokenizer

    @property
    def serialized(self):
        """The bytes of its file (`FILE_NAME`): the SentencePiece model."""
        return self.model_proto

    @property
    def target(self):
        """The vocabulary that reads target text: this one (source and target share it)."""
        return self

    @classmethod
    def load(cls, path):
        path = pathlib.Path(path)
        if not path.is_file():
            raise VocabularyError(f"{path}: no such vocabulary file; build one with kt-vocab")
        return cls(path.read_bytes(), path)

    def tokenize(self, texts):
        """tf.string [batch] -> int32 RaggedTensor [batch, (tokens)], without end of sentence.

        Texts are normalized first as `normalize_whitespace` describes.
        """
        return self._live_tokenizer().tokenize(normalize_texts(texts))

    def tokenize_with_offsets(self, texts):
        """(ids, starts, ends, normalized): `tokenize`'s ids, int64 RaggedTensors [batch,
        (tokens)] of each token's byte span in its normalized text, and those texts
        (tf.string [batch]) themselves."""
        normalized = normalize_texts(texts)
        return (*self._live_tokenizer().tokenize_with_offsets(normalized), normalized)

    def encode(self, texts, max_length=None):
        """tf.string [batch] -> the model's input: int32 RaggedTensor [batch, (length)].

        Each text's subwords (`tokenize`), cut to `max_length - 1` if longer, then end of
        sentence: at most `max_length` ids. An empty or blank text (white space only, as
        `str.isspace` has it) stays an empty row, without end of sentence. The one text -> ids
        path: the training pipeline, in-training evaluation and the `Translator` (kt-translate,
        the SavedModel) all encode through it.
        """
        return encoded(self.tokenize(texts), max_length)

    def detokenize(self, ids):
        """int ids [batch, length] (dense or ragged) or [length] -> tf.string [batch] or scalar.

        Reads each row up to its first end-of-sentence id and skips padding.
        """
        rows, one_row = ids_to_read(ids, (EOS_ID, PAD_ID))
        texts = self._live_tokenizer().detokenize(rows)
        return texts[0] if one_row else texts

    def pieces(self, ids):
        """The subword of each id in int ids [length], as str: e.g. ['▁In', '▁the', '</s>']."""
        pieces = self._live_tokenizer().id_to_string(tf.constant(ids, tf.int32)).numpy()
        return [piece.decode("utf-8") for piece in pieces]

    @property
    def holds_markup(self):
        """Whether the vocabulary holds each of `markup.TOKENS` as one piece."""
        return self._markup_ids is not None

    def markup_ids(self):
        """The ids of `markup.TOKENS`, in its order: int list [200].

        Raises:
            VocabularyError: the vocabulary does not hold each token as one piece.
        """
        if self._markup_ids is None:
            raise VocabularyError(
                f"{self.path} does not keep markup's placeholder tokens (｟1｠, ｟t1｠, ...) "
                f"whole; markup needs a vocabulary built with kt-vocab --markup or by kt-train "
                f"--markup_rate, and a model trained with it")
        return list(self._markup_ids)

    def before_tag_ok(self):
        """bool [vocab_size]: the ids a tag may be placed before without splitting a word:
        pieces that begin a word (SentencePiece's "▁"), punctuation, and end of sentence."""
        processor = sentencepiece.SentencePieceProcessor()  # Python: callable while tracing
        processor.LoadFromSerializedProto(self.model_proto)
        pieces = [processor.id_to_piece(i) for i in range(self.vocab_size)]
        ok = [piece.startswith(_SPACE_SYMBOL) or not any(c.isalnum() for c in piece)
              for piece in pieces]
        ok[EOS_ID] = True
        return ok


def live_tokenizer(tokenizer, make):
    """`tokenizer` (tensorflow-text's), or `make()`'s new one if a random seed was set since it
    was made: setting one drops the SentencePiece model it owns (see `Vocabulary`)."""
    with tf.init_scope():  # Eagerly, also while a graph is being traced.
        try:
            tokenizer.tokenize(tf.constant([""]))
        except tf.errors.NotFoundError:
            return make()
    return tokenizer


def ids_to_read(ids, left_out):
    """Output ids to detokenize: int ids [batch, length] (dense or ragged) or [length] ->
    (int32 RaggedTensor [batch, (kept)]: each row up to its first end of sentence, without the
    ids in `left_out`; whether `ids` was one row)."""
    if isinstance(ids, tf.RaggedTensor):
        ids = ids.to_tensor(default_value=PAD_ID)
    ids = tf.cast(ids, tf.int32)
    one_row = ids.shape.rank == 1
    if one_row:
        ids = ids[None]
    keep = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1, exclusive=True) == 0
    for left in left_out:
        keep &= ids != left
    return tf.ragged.boolean_mask(ids, keep), one_row


def encoded(tokens, max_length=None):
    """A text's tokens (int RaggedTensor [batch, (length)]) as the model's input: cut to
    `max_length - 1` (None: not cut), then end of sentence; an empty row stays empty."""
    if max_length is not None:
        tokens = tokens[:, :max_length - 1]
    return append_end_of_sentence(tokens)


def append_end_of_sentence(tokens, *, empty_rows=False):
    """int RaggedTensor [batch, (length)] -> the same with EOS_ID after each non-empty row (after
    every row with `empty_rows`: a target's ids, where an empty text is an end of sentence).

    Written as a scatter rather than `tf.concat([tokens, eos], axis=1)`: a ragged concatenation
    transposes a matrix of row indices, and oneDNN has no integer Transpose, so it logs an E line
    on stderr ("oneDNN supports DT_INT64 only on platforms with AVX-512") that is no error.
    """
    lengths = tokens.row_lengths()
    ends = tf.cast(lengths > 0, lengths.dtype) if not empty_rows else tf.ones_like(lengths)
    # Not validated: the lengths add up to the values by construction, and validating them
    # traced assertion branches into every graph that encodes text.
    with_eos = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(lengths + ends)], tf.constant(EOS_ID, tokens.dtype)),
        lengths + ends, validate=False)
    # A token moves right by one for each end of sentence added to the rows before its own.
    shift = tf.gather(tf.cumsum(ends, exclusive=True), tokens.value_rowids())
    positions = tf.range(tf.size(tokens.values, out_type=lengths.dtype)) + shift
    return with_eos.with_values(
        tf.tensor_scatter_nd_update(with_eos.values, positions[:, None], tokens.values))
