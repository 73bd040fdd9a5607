"""A vocabulary shortlist (Marian's lexical shortlist, CTranslate2's vmap): for each source
piece, the target pieces it translates to most often, and the target pieces every sentence may
need; a search then computes its output projection and softmax over the union of a batch's
candidates instead of the whole vocabulary.

The candidates of a source piece are its most probable translations under IBM Model 1 (Brown et
al. 1993; `word_alignment.Translations`, trained by EM over the pairs' pieces), t(target piece |
source piece), as Marian's shortlists rank fast_align's lexical table. Model 1 rather than
co-occurrence counts: a count ranks the target pieces that are everywhere (",", "▁de", "▁la")
first for every source piece, where Model 1 explains them by the pieces that do translate to
them, so a source piece's places go to its own translations; the pieces that are everywhere
are the `frequent` ones, always candidates.

Stored as CTranslate2's vocabulary map (`write_vmap`): a text file of lines `source
piece<TAB>target pieces, space-separated`, the first line's source empty (the pieces always
candidates). kt-shortlist writes it into a model_dir (shortlist.vmap); the `Translator` reads
it (`read_vmap`), and the CTranslate2 export hands the same file to its converter.
"""

import dataclasses
import pathlib

import numpy as np

from keras_transformer.data import word_alignment
from keras_transformer.errors import UserError
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID

PER_SOURCE = 100  # candidates of each source piece (Marian's documented example: 100)
FREQUENT = 500  # the target pieces most frequent in the corpus, always candidates
MAX_PAIRS = 200_000  # pairs Model 1 is trained on: enough for piece statistics, bounded in time
# EM reads the pairs this many (source piece, target piece) links at a time, so that its memory
# is the distinct links' table and one chunk's (~100 bytes a link), whatever the corpus's size.
CHUNK_LINKS = 5_000_000
ITERATIONS = 5
FILE_NAME = "shortlist.vmap"


class ShortlistError(UserError):
    """A shortlist file that cannot be read with this vocabulary, naming the file and line."""


@dataclasses.dataclass(frozen=True)
class Shortlist:
    """Candidate target ids.

    Attributes:
        always: int32 [n]: the ids every search may write (the frequent pieces, end of sentence,
            unknown).
        by_source: {source id: int32 [m]}: each source piece's candidates, most probable
            first.
    """

    always: np.ndarray
    by_source: dict

    def table(self, source_vocab_size):
        """int32 [source_vocab_size, width]: row s holds source id s's candidates, padded with
        end of sentence (a candidate anyway); a row of end of sentence for a source id without
        any (padding, and pieces the corpus never held). For the graph: a batch's candidates
        are the union of its source ids' rows and `always`."""
        width = max([len(ids) for ids in self.by_source.values()] + [1])
        table = np.full([source_vocab_size, width], EOS_ID, np.int32)
        for source_id, ids in self.by_source.items():
            table[source_id, :len(ids)] = ids
        return table

    def candidates(self, source_ids):
        """The sorted ids a search of `source_ids` (int [n]) computes logits for: `always` and
        each source id's candidates."""
        found = [self.always] + [self.by_source.get(int(s), np.zeros(0, np.int32))
                                 for s in np.unique(source_ids)]
        return np.unique(np.concatenate(found)).astype(np.int32)


def build(pairs, *, per_source=PER_SOURCE, frequent=FREQUENT, iterations=ITERATIONS):
    """A `Shortlist` from pairs of (source ids, target ids), int arrays without end of sentence
    (a corpus's pieces).

    Args:
        pairs: iterable of (int [source length], int [target length]).
        per_source: candidates kept for each source piece, most probable under Model 1 first
            (ties: the lower id).
        frequent: the most frequent target pieces in `pairs`, always candidates.
    """
    sentences, counts = [], {}
    for source, target in pairs:
        source, target = np.asarray(source, np.int64), np.asarray(target, np.int64)
        # word_alignment's NULL is id 0, padding's: no piece of a text.
        sentences.append((np.concatenate([[word_alignment.NULL], source]), target))
        for piece, count in zip(*np.unique(target, return_counts=True)):
            counts[piece] = counts.get(piece, 0) + count
    if not sentences:
        raise ValueError("a shortlist needs at least one sentence pair")
    target_size = max(int(t.max(initial=0)) for _, t in sentences) + 1
    keys, probs = translation_probabilities(sentences, target_size, iterations)
    sources, targets = np.divmod(keys, target_size)
    # Each source's keys are consecutive (sorted keys); order them by probability within it.
    order = np.lexsort((targets, -probs, sources))
    sources, targets = sources[order], targets[order]
    starts = np.flatnonzero(np.diff(sources, prepend=-1))
    by_source = {int(sources[start]): targets[start:end][:per_source].astype(np.int32)
                 for start, end in zip(starts, list(starts[1:]) + [len(sources)])
                 if sources[start] != word_alignment.NULL}
    ranked = sorted(counts, key=lambda piece: (-counts[piece], piece))[:frequent]
    always = np.unique(np.array(ranked + [EOS_ID, UNK_ID], np.int32))
    return Shortlist(always=always, by_source=by_source)


def translation_probabilities(sentences, target_size, iterations=ITERATIONS,
                              chunk_links=CHUNK_LINKS):
    """IBM Model 1's t(target | source) by EM, as `word_alignment.Translations.fit` computes
    it, over chunks of `sentences` ((source ids with NULL first, target ids) int64 arrays) of
    about `chunk_links` links each.

    Returns:
        (keys int64 [n]: source id * target_size + target id, sorted; probs float64 [n]).
    """
    chunks, start, links = [], 0, 0
    for end, (source, target) in enumerate(sentences, 1):
        links += len(source) * len(target)
        if links >= chunk_links or end == len(sentences):
            chunks.append(sentences[start:end])
            start, links = end, 0

    def entries(chunk):
        """(keys of every link, the (sentence, target position) group of each)."""
        keys = [(s[:, None] * target_size + t[None]).ravel() for s, t in chunk]
        groups = [np.tile(np.arange(len(t)), len(s)) for s, t in chunk]
        offsets = np.cumsum([0] + [len(t) for _, t in chunk[:-1]])
        return np.concatenate(keys), np.concatenate([g + o for g, o in zip(groups, offsets)])

    keys = np.zeros(0, np.int64)
    for chunk in chunks:
        keys = np.union1d(keys, entries(chunk)[0])
    probs, source_of_key = np.ones(len(keys)), keys // target_size
    for _ in range(iterations):
        counts = np.zeros(len(keys))
        for chunk in chunks:
            chunk_keys, groups = entries(chunk)
            where = np.searchsorted(keys, chunk_keys)
            weights = probs[where]
            counts += np.bincount(where, weights / np.bincount(groups, weights)[groups],
                                  minlength=len(keys))
        probs = counts / np.bincount(source_of_key, counts)[source_of_key]
    return keys, probs


def pieces_of(vocabulary):
    """(source pieces, target pieces): the str of each id of `vocabulary` and its target
    vocabulary (one for a vocabulary both sides share)."""
    return tuple(side.pieces(list(range(side.vocab_size)))
                 for side in (vocabulary, vocabulary.target))


def write_vmap(path, shortlist, source_pieces, target_pieces):
    """Writes `shortlist` to `path` in CTranslate2's vocabulary-map format, with the pieces'
    strings (`source_pieces[id]`, `target_pieces[id]`)."""
    def joined(ids):
        return " ".join(target_pieces[i] for i in ids)

    for piece in list(source_pieces) + list(target_pieces):
        if not piece or any(character.isspace() for character in piece):
            raise ValueError(f"a vocabulary map cannot hold the piece {piece!r}")
    lines = [f"\t{joined(shortlist.always)}"] + [
        f"{source_pieces[source]}\t{joined(ids)}"
        for source, ids in sorted(shortlist.by_source.items())]
    pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_vmap(path, source_pieces, target_pieces):
    """The `Shortlist` of a vocabulary-map file (`write_vmap`'s format, CTranslate2's: source
    n-grams other than single pieces are refused), for the vocabularies whose pieces are
    `source_pieces` and `target_pieces` (lists of str, by id).

    Raises:
        ShortlistError: the file cannot be read, or holds a line or piece these vocabularies
            cannot use, naming the file and line.
    """
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ShortlistError(f"cannot read the shortlist {path}: {error}") from None
    source_ids = {piece: i for i, piece in enumerate(source_pieces)}
    target_ids = {piece: i for i, piece in enumerate(target_pieces)}
    always, by_source = [EOS_ID, UNK_ID], {}
    for number, line in enumerate(text.splitlines(), 1):
        key, tab, values = line.partition("\t")
        if not tab:
            raise ShortlistError(f"{path}:{number}: no tab between the source piece and its "
                                 f"candidates")
        ids = []
        for piece in values.split():
            if piece not in target_ids:
                raise ShortlistError(f"{path}:{number}: {piece!r} is not a piece of the "
                                     f"target vocabulary (a shortlist of another vocabulary?)")
            ids.append(target_ids[piece])
        if not key:
            always += ids
        elif key in source_ids and " " not in key:
            by_source[source_ids[key]] = np.array(ids, np.int32)
        else:
            raise ShortlistError(f"{path}:{number}: {key!r} is not a piece of the source "
                                 f"vocabulary (a shortlist of another vocabulary?)")
    always = np.setdiff1d(np.array(always, np.int32), [PAD_ID])
    return Shortlist(always=always.astype(np.int32), by_source=by_source)
