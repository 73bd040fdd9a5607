"""Searching only among trees: decoding a parser (paper section 6.3) so that every output is a
well-formed linearized tree over the sentence's words.

A parser writes its tree as a bracket sequence (`(S (NP the dog )NP (VP barks )VP . )S`, see
data/trees.py), one subword at a time, and nothing in the model stops it from writing one that
is not a tree: a closing bracket of the wrong label, a leaf too many or too few, a word it did
not read. Reading such a sequence back repairs it, and the repair costs brackets; a wider beam
finds the sequences the model prefers, and a small model may prefer malformed ones. A
`TreeConstraint` sets every other token's logit to -inf at each step, so that a
hypothesis may write only

- the next subword of its leaves (the sentence's words, or `XX` for each, in order), or where
  the sentence does not say what its leaves are (part-of-speech tags, `ANY_LEAF`), any piece
  that begins a word for the next leaf and any that continues one for the current;
- at a boundary between leaves, an opening bracket while leaves remain (if fewer than
  `max_opening_run` were opened since the last leaf or closing bracket, and the length limit
  leaves room to close it), or the closing bracket of its innermost open constituent once that
  holds something;
- end of sentence once every leaf is written and every constituent closed.

The searches still rank hypotheses by the model's own log-probabilities, so among well-formed
trees the model's preference decides. (Vinyals et al. 2015 decoded without constraint and
repaired the 1.5% of malformed outputs of a model trained on far more trees.)

A `TreeConstraint` is a decoding processor (keras_transformer/search/processors.py): the searches
take it in their `processors` list. Its state (the leaves written, the open constituents) is read
off each hypothesis's tokens at every step, O(length) a row, so it carries none of its own. Every
hypothesis whose limit has room for its leaves and end of sentence ends as a tree within it.
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.token_ids import EOS_ID, PAD_ID

# Without a bound, a model that wants a token the tree forbids (a word it did not read, say) can
# open brackets until its length limit: greedy decoding did so on 9% of the tests' sentences.
# Ten brackets opened at one word is more than the tests' grammar writes (at most 4) or English
# needs.
MAX_OPENING_RUN = 10
# A leaf_ids entry any leaf matches: one word-beginning piece and any pieces continuing it.
ANY_LEAF = -1


class TreeConstraint(NamedTuple):
    """What a search needs to write only trees: the vocabulary's brackets and each sentence's
    leaves, all tensors (so that `tf.function` traces one graph for every batch).

    Fields:
        leaf_ids: int32 [batch, leaf_length]: the subwords the sentence's leaves spell, in
            order, 0-padded (the target vocabulary's tokenization of the words as the
            linearization writes them); or a row of `ANY_LEAF`, one a word, where the leaves
            are the model's to choose (part-of-speech tags).
        closing_of: int32 [vocab]: for an opening bracket token, its closing bracket's id (-2
            if the vocabulary has none); -1 for every other token.
        is_bracket: bool [vocab]: whether a token is a bracket, opening or closing (every other
            token but padding and end of sentence is a piece of a leaf).
        starts_word: bool [vocab]: whether a token begins a word (SentencePiece's `▁`).
        free_leaf: bool [vocab]: whether a token may be part of a leaf the model chooses
            (`ANY_LEAF`): text that reads back as itself.
        max_opening_run: int (or int32 scalar), the most brackets opened one after the other (the
            constituents that begin at one word).
    """
    leaf_ids: tf.Tensor
    closing_of: tf.Tensor
    is_bracket: tf.Tensor
    starts_word: tf.Tensor
    free_leaf: tf.Tensor
    max_opening_run: int = MAX_OPENING_RUN

    def forced_ids(self):
        """int32 [n]: the brackets and the sentences' leaves (`processors.forced_ids`); where
        the leaves are the model's to choose (`ANY_LEAF`), every token that may be one."""
        brackets = tf.where(self.is_bracket)[:, 0]
        free = tf.where(self.free_leaf & tf.reduce_any(self.leaf_ids == ANY_LEAF))[:, 0]
        return tf.concat([tf.cast(brackets, tf.int32), tf.cast(free, tf.int32),
                          tf.reshape(tf.cast(self.leaf_ids, tf.int32), [-1])], 0)

    def start(self, layout):
        """A decoding processor's start (keras_transformer/search/processors.py): every token a
        well-formed tree cannot take next set to -inf; no state."""
        mask = tree_masker(self, layout.max_lengths, layout.copies)

        def adjust(logits, ids, step, state):
            return mask(logits, step, ids), state

        return adjust, ()


def bracket_tables(pieces, word_mark="\u2581"):
    """(closing_of, is_bracket, starts_word, free_leaf) of a vocabulary, as `TreeConstraint`
    holds them.

    Args:
        pieces: list of str, each id's subword (e.g. '▁(NP', '▁)NP', '▁the', 'ing', '</s>').
        word_mark: the prefix of a piece that begins a word.

    A bracket is a whole piece, the word mark then `(` or `)` and a label; an opening bracket
    whose closing one is not in the vocabulary could not be closed, so it is never allowed
    (closing_of -2). A piece that is the word mark then `(` or `)` and nothing, or part of a
    label, counts as a bracket too, never allowed: a leaf that began with it would read back as
    one (`data.trees.delinearize`). A free leaf's pieces are text: neither padding, end of
    sentence nor any piece written `<...>` (unknown, byte fallback: `<0x29>` would read back as
    a bracket, `<0x20>` split the leaf), nor the word mark alone (which reads back as nothing).
    """
    ids = {piece: index for index, piece in enumerate(pieces)}
    opening = word_mark + "("
    closing = word_mark + ")"
    closing_of = [ids.get(closing + piece[len(opening):], -2) if piece.startswith(opening)
                  and len(piece) > len(opening) else -1 for piece in pieces]
    is_bracket = [piece.startswith((opening, closing)) for piece in pieces]
    starts_word = [piece.startswith(word_mark) for piece in pieces]
    free_leaf = [index not in (PAD_ID, EOS_ID) and not bracket and piece != word_mark
                 and not (piece.startswith("<") and piece.endswith(">"))
                 for index, (piece, bracket) in enumerate(zip(pieces, is_bracket))]
    return (tf.constant(closing_of, tf.int32), tf.constant(is_bracket),
            tf.constant(starts_word), tf.constant(free_leaf))


def tree_masker(constraint, max_lengths, copies=1):
    """A function (logits [rows, vocab], step, ids int32 [rows, length]) -> logits with
    every token a well-formed tree cannot take next set to -inf (the module docstring), where
    `ids` are the rows' tokens so far (positions before `step`).

    Args:
        constraint: a `TreeConstraint`.
        max_lengths: int32 [batch], the most tokens each sentence's hypotheses may have.
        copies: rows a sentence has (beam search: beam_size), consecutive.
    """
    leaf_ids = tf.cast(constraint.leaf_ids, tf.int32)
    check = tf.debugging.assert_equal(tf.shape(leaf_ids)[0], tf.shape(max_lengths)[0],
                                      message="the tree constraint needs leaves for every "
                                              "sentence")
    with tf.control_dependencies([check]):
        leaf_ids = tf.repeat(leaf_ids, copies, axis=0)
    max_lengths = tf.repeat(max_lengths, copies, axis=0)
    leaf_count = tf.reduce_sum(tf.cast(leaf_ids != PAD_ID, tf.int32), axis=1)
    any_leaf = tf.reduce_any(leaf_ids == ANY_LEAF, axis=1)
    # A padding column, so that a row with every leaf written still reads a "next" one.
    leaf_ids = tf.pad(tf.maximum(leaf_ids, PAD_ID), [[0, 0], [0, 1]])
    closing_of = constraint.closing_of
    opens = closing_of >= 0
    vocab = tf.range(tf.shape(closing_of)[0])
    # Pieces an ANY_LEAF leaf may begin with and continue with.
    leaf_start = constraint.free_leaf & constraint.starts_word
    leaf_more = constraint.free_leaf & ~constraint.starts_word

    def mask(logits, step, ids):
        written = tf.range(tf.shape(ids)[1])[None, :] < step
        closes_to = tf.where(written, tf.gather(closing_of, ids), -1)
        opened = closes_to != -1
        bracket = written & tf.gather(constraint.is_bracket, ids)
        piece = written & ~bracket
        # An ANY_LEAF row's leaf is one word-beginning piece and what continues it.
        leaves = tf.reduce_sum(tf.cast(
            piece & (tf.gather(constraint.starts_word, ids) | ~any_leaf[:, None]), tf.int32),
            axis=1)
        positions = tf.range(1, tf.shape(ids)[1] + 1)
        after_last_other = tf.reduce_max(tf.where(written & ~opened, positions, 0), axis=1)
        just_opened = after_last_other < step
        in_leaf = tf.reduce_any(piece & (positions[None, :] == step), axis=1)
        may_open = step - after_last_other < constraint.max_opening_run
        change = tf.cast(opened, tf.int32) - tf.cast(bracket & ~opened, tf.int32)
        depth_after = tf.cumsum(change, axis=1)
        depth = tf.reduce_sum(change, axis=1)
        # The innermost open constituent is the last opening bracket that left the depth where
        # it is now.
        innermost = tf.cast(opened & (depth_after == depth[:, None]), tf.int32)
        last = tf.argmax(innermost * positions, axis=1, output_type=tf.int32)
        closing = tf.where(depth > 0, tf.gather(closes_to, last, batch_dims=1), -1)

        next_leaf = tf.gather(leaf_ids, tf.minimum(leaves, leaf_count), batch_dims=1)
        remaining = leaves < leaf_count
        # Tokens a tree still needs: the leaves left, a closing bracket for each open
        # constituent, end of sentence.
        needed = leaf_count - leaves + depth + 1
        between = ~remaining | any_leaf | tf.gather(constraint.starts_word, next_leaf)
        named = (vocab[None, :] == next_leaf[:, None]) & (remaining & ~any_leaf)[:, None]
        chosen = (leaf_start[None, :] & (remaining & any_leaf)[:, None]
                  | leaf_more[None, :] & (any_leaf & in_leaf & (step + 1 + needed
                                                                <= max_lengths))[:, None])
        opening = opens[None, :] & (between & remaining & may_open
                                    & (step + 2 + needed <= max_lengths))[:, None]
        allowed = (named | chosen | opening
                   | (vocab[None, :] == closing[:, None]) & (between & ~just_opened)[:, None]
                   | (vocab[None, :] == EOS_ID) & (~remaining & (depth == 0))[:, None])
        return tf.where(allowed, logits, float("-inf"))

    return mask
