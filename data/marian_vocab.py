"""Marian's vocabulary (the OPUS-MT models): two SentencePiece models, one id space.

A Marian model (Junczys-Dowmunt et al. 2018) published in Hugging Face's format cuts source text
into pieces with `source.spm`, target text with `target.spm`, and maps either side's pieces to
one shared list of ids with `vocab.json` (a piece unknown to it becomes `<unk>`), as
`transformers.MarianTokenizer` does. SentencePiece's own ids play no part.

`MarianVocabulary` does the same in the TF graph: tensorflow-text's `SentencepieceTokenizer`
gives the pieces (as strings, an unknown stretch as its own text, as SentencePiece's
`encode(out_type=str)` does), a static hash table their ids. It keeps `data.Vocabulary`'s
contract (`tokenize`, `encode`, `detokenize`, `pieces`, ...), so the pipelines, the
`Translator` and the SavedModel take either; `target` is the side that reads target text.

Its ids are the model_dir's, not Marian's: `import_marian_vocabulary` moves `<pad>` to
`PAD_ID`, `</s>` to `EOS_ID` and `<unk>` to `UNK_ID` and keeps the other pieces in Marian's
order after them, returning the order so that the importer moves the embedding rows alike.

Beside the pieces, a text that starts with a language code (">>spa<<", for the models with
several target languages) has it read as one piece, as MarianTokenizer does.

A model_dir keeps it in one file, `vocab.marian` (JSON: both SentencePiece models in base64 and
the pieces in id order).
"""

import base64
import hashlib
import json
import os
import pathlib

import sentencepiece
import tensorflow as tf
import tensorflow_text
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.data.vocab import (
    SizeChecked,
    VocabularyError,
    encoded,
    ids_to_read,
    live_tokenizer,
    normalize_texts,
)
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID

FORMAT = "keras_transformer.marian_vocabulary"
_SPACE_SYMBOL = "\u2581"
# Marian's names for the special pieces, and the model_dir id each one takes.
SPECIAL_PIECES = {"<pad>": PAD_ID, "</s>": EOS_ID, "<unk>": UNK_ID}
# A share of a SentencePiece model's pieces below which vocab.json is not its vocabulary.
_LEAST_SHARED = 0.9


class MarianVocabulary(SizeChecked, tf.Module):
    """One side of a Marian vocabulary (see the module docstring); `target` is the other.

    Args:
        source_proto, target_proto: the serialized SentencePiece models (bytes).
        pieces: the piece of each id, str list [vocab_size], `SPECIAL_PIECES` at their ids.
        path: where it came from, for messages.
        side: "source" or "target": which model cuts the text this object reads.

    Raises:
        VocabularyError: a model that is not SentencePiece's, or special pieces misplaced.
    """

    FILE_NAME = "vocab.marian"  # its name in a model_dir and a SavedModel's assets
    MADE_WITH = "imported"

    def __init__(self, source_proto, target_proto, pieces, *, path=None, side="source"):
        super().__init__(name=f"marian_{side}_vocabulary")
        self.path = os.fspath(path) if path else "<in-memory vocabulary>"
        for name, proto in (("source", source_proto), ("target", target_proto)):
            _check_sentencepiece(proto, f"{self.path}: the {name} model")
        misplaced = {piece: pieces.index(piece) if piece in pieces else None
                     for piece, wanted in SPECIAL_PIECES.items()
                     if piece not in pieces or pieces.index(piece) != wanted}
        if misplaced:
            raise VocabularyError(f"{self.path}: special pieces must have ids "
                                  f"{SPECIAL_PIECES}, but have {misplaced}")
        self.source_proto, self.target_proto = source_proto, target_proto
        self.side = side
        self._piece_list = list(pieces)
        self.vocab_size = len(pieces)
        self._pieces = tf.constant(self._piece_list)
        self._ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(self._pieces, tf.range(self.vocab_size)),
            default_value=UNK_ID)
        self.tokenizer = self._new_tokenizer()
        self._target = None

    @classmethod
    def load(cls, path):
        path = pathlib.Path(path)
        if not path.is_file():
            raise VocabularyError(f"{path}: no such vocabulary file; kt-import writes one")
        try:
            content = json.loads(path.read_bytes())
            if content.get("format") != FORMAT:
                raise ValueError(f"format {content.get('format')!r}, not {FORMAT!r}")
            source, target = (base64.b64decode(content[name], validate=True)
                              for name in ("source_spm", "target_spm"))
            pieces = content["pieces"]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise VocabularyError(f"{path}: not a Marian vocabulary ({error!r})") from None
        return cls(source, target, pieces, path=path)

    @property
    def serialized(self):
        """The bytes of its file (`FILE_NAME`)."""
        return (json.dumps({
            "format": FORMAT,
            "source_spm": base64.b64encode(self.source_proto).decode("ascii"),
            "target_spm": base64.b64encode(self.target_proto).decode("ascii"),
            "pieces": self._piece_list}, ensure_ascii=False) + "\n").encode("utf-8")

    @property
    def target(self):
        """The vocabulary that reads target text (its SentencePiece model is target.spm)."""
        if self.side == "target":
            return self
        if self._target is None:
            with tf.init_scope():  # its table is made once, eagerly, also while tracing
                self._target = MarianVocabulary(self.source_proto, self.target_proto,
                                                self._piece_list, path=self.path,
                                                side="target")
        return self._target

    def _new_tokenizer(self):
        proto = self.source_proto if self.side == "source" else self.target_proto
        # Named after its model: tensorflow-text's tokenizer owns the model through a kernel
        # whose resource is found by its node's name, and a SavedModel restored with both
        # sides' tokenizers under the default name read target text with source.spm (its
        # score signature, 2026-11-27). Two SavedModels in one process did not collide.
        name = f"sentencepiece_{hashlib.sha256(proto).hexdigest()[:16]}"
        return tensorflow_text.SentencepieceTokenizer(model=proto, out_type=tf.string,
                                                      name=name)

    def tokenize(self, texts):
        """tf.string [batch] -> int32 RaggedTensor [batch, (tokens)], without end of sentence:
        a leading language code (">>xx<<") as one piece, then the rest's pieces, each
        `vocab.json`'s id (`UNK_ID` if it has none). Texts are normalized first as
        `data.normalize_whitespace` describes."""
        texts = normalize_texts(texts)
        # MarianTokenizer.remove_language_code: from a leading ">>" to the first "<<".
        has_code = tf.strings.regex_full_match(texts, "(?s)>>.*?<<.*")
        code = tf.strings.regex_replace(texts, "(?s)^(>>.*?<<).*$", r"\1")
        rest = tf.where(has_code, tf.strings.regex_replace(texts, "(?s)^>>.*?<<", ""), texts)
        self.tokenizer = live_tokenizer(self.tokenizer, self._new_tokenizer)
        pieces = self.tokenizer.tokenize(rest)
        ids = pieces.with_values(self._ids.lookup(pieces.values))
        return _prepend(self._ids.lookup(code), has_code, ids)

    def encode(self, texts, max_length=None):
        """tf.string [batch] -> the model's input, as `data.Vocabulary.encode`: `tokenize`'s
        ids cut to `max_length - 1`, then end of sentence; a blank text an empty row."""
        return encoded(self.tokenize(texts), max_length)

    def detokenize(self, ids):
        """int ids [batch, length] (dense or ragged) or [length] -> tf.string [batch] or scalar.

        Reads each row up to its first end of sentence and leaves out the special pieces (as
        MarianTokenizer's `decode(skip_special_tokens=True)`); the others are joined, each "▁"
        read as a space, and the text stripped.
        """
        rows, one_row = ids_to_read(ids, SPECIAL_PIECES.values())
        texts = tf.strings.reduce_join(tf.gather(self._pieces, rows), axis=-1)
        texts = tf.strings.strip(tf.strings.regex_replace(texts, _SPACE_SYMBOL, " "))
        return texts[0] if one_row else texts

    def pieces(self, ids):
        """The piece of each id in int ids [length], as str: e.g. ['▁In', '▁the', '</s>']."""
        return [self._piece_list[int(i)] for i in ids]

    @property
    def holds_markup(self):
        return False

    def markup_ids(self):
        raise VocabularyError(f"{self.path} is an imported Marian vocabulary, without markup's "
                              f"placeholder tokens (｟1｠, ｟t1｠, ...); markup needs a model "
                              f"trained with kt-train --markup_rate")


def _prepend(heads, present, tokens):
    """int heads [batch] put before the tokens of the rows where bool present [batch] holds:
    int RaggedTensor [batch, (length)] -> the same with a token more in those rows. A scatter,
    as `append_end_of_sentence` (a ragged concatenation logs a oneDNN error line)."""
    lengths = tokens.row_lengths()
    extra = tf.cast(present, lengths.dtype)
    new_lengths = lengths + extra
    starts = tf.cumsum(new_lengths, exclusive=True)
    values = tf.zeros([tf.reduce_sum(new_lengths)], tokens.dtype)
    moved = (tf.range(tf.size(tokens.values, out_type=lengths.dtype))
             + tf.gather(tf.cumsum(extra), tokens.value_rowids()))
    values = tf.tensor_scatter_nd_update(values, moved[:, None], tokens.values)
    rows = tf.where(present)[:, 0]
    values = tf.tensor_scatter_nd_update(values, tf.gather(starts, rows)[:, None],
                                         tf.cast(tf.gather(heads, rows), tokens.dtype))
    return tf.RaggedTensor.from_row_lengths(values, new_lengths, validate=False)


def _check_sentencepiece(proto, what):
    """The `ModelProto` of serialized SentencePiece model `proto`; VocabularyError naming
    `what` if it is none, or one whose byte pieces MarianVocabulary would not join back."""
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(proto)
    except (RuntimeError, TypeError) as error:
        raise VocabularyError(f"{what} is not a SentencePiece model ({error})") from None
    model = sentencepiece_model_pb2.ModelProto.FromString(proto)
    if model.trainer_spec.byte_fallback:
        raise VocabularyError(f"{what} falls back to bytes (trainer_spec.byte_fallback), which "
                              f"Marian's vocabularies do not; not supported")
    return model


def _normal_pieces(model):
    normal = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    return [piece.piece for piece in model.pieces if piece.type == normal]


def import_marian_vocabulary(source_spm, target_spm, vocab_json):
    """Reads a Hugging Face Marian checkpoint's vocabulary files (paths).

    Returns:
        (a `MarianVocabulary`, order): order[i] is the Marian id (vocab.json's) of the piece
        that has id i here; the special pieces first (`SPECIAL_PIECES`), then the others in
        Marian's order.

    Raises:
        VocabularyError: a file that is missing or not what it should be (named), vocab.json
            without a special piece or with ids that are not 0..n-1, or one that holds too few
            of a SentencePiece model's pieces to be its vocabulary.
    """
    paths = [pathlib.Path(p) for p in (source_spm, target_spm, vocab_json)]
    for path in paths:
        if not path.is_file():
            raise VocabularyError(f"{path} is missing; a Marian checkpoint holds source.spm, "
                                  f"target.spm and vocab.json")
    protos = [path.read_bytes() for path in paths[:2]]
    models = [_check_sentencepiece(proto, str(path)) for proto, path in zip(protos, paths)]
    try:
        marian_ids = json.loads(paths[2].read_text(encoding="utf-8"))
        if not isinstance(marian_ids, dict):
            raise ValueError("not a JSON object of piece -> id")
    except (ValueError, UnicodeDecodeError) as error:
        raise VocabularyError(f"{paths[2]}: not a vocabulary ({error})") from None
    not_int = [(piece, id_) for piece, id_ in marian_ids.items() if type(id_) is not int]
    if not_int:
        piece, id_ = not_int[0]
        raise VocabularyError(f"{paths[2]}: the id of {piece!r} is {json.dumps(id_)}, not an "
                              f"integer ({len(not_int)} such id(s))")
    if sorted(marian_ids.values()) != list(range(len(marian_ids))):
        raise VocabularyError(f"{paths[2]}: its ids are not 0..{len(marian_ids) - 1}, each once")
    missing = [piece for piece in SPECIAL_PIECES if piece not in marian_ids]
    if missing:
        raise VocabularyError(f"{paths[2]} has no {', '.join(missing)}")
    for path, model in zip(paths, models):
        normal = _normal_pieces(model)
        absent = [piece for piece in normal if piece not in marian_ids]
        if len(absent) > (1 - _LEAST_SHARED) * len(normal):
            raise VocabularyError(
                f"{paths[2]} does not match {path}: {len(absent)} of its {len(normal)} pieces "
                f"are not in it (e.g. {absent[:5]}); are both from the same checkpoint?")
    by_id = sorted(marian_ids, key=marian_ids.get)
    specials = sorted(SPECIAL_PIECES, key=SPECIAL_PIECES.get)
    pieces = specials + [piece for piece in by_id if piece not in SPECIAL_PIECES]
    order = [marian_ids[piece] for piece in pieces]
    return MarianVocabulary(*protos, pieces, path=paths[2].parent), order


__all__ = ["FORMAT", "MarianVocabulary", "SPECIAL_PIECES", "import_marian_vocabulary"]
