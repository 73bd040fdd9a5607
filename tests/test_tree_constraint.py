"""Decoding only trees (keras_transformer/search/constraints/tree.py): the tokens it allows at
hand-worked prefixes, and the searches' outputs under it always well-formed trees over the given
leaves."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.search.beam import beam_search
from keras_transformer.search.constraints.tree import (
    ANY_LEAF,
    MAX_OPENING_RUN,
    TreeConstraint,
    bracket_tables,
    tree_masker,
)
from keras_transformer.search.processors import PrefixForcing
from keras_transformer.search.sampling import sampling_search

PIECES = ["<pad>", "</s>", "<unk>", "▁(S", "▁)S", "▁(NP", "▁)NP", "▁(VP", "▁)VP", "▁the",
          "▁dog", "▁bark", "s", "▁.", "▁(X", "▁("]  # "▁(X" has no closing bracket
ID = {piece: index for index, piece in enumerate(PIECES)}
OPENS = {ID["▁(S"], ID["▁(NP"], ID["▁(VP"]}
CLOSING = {ID["▁(S"]: ID["▁)S"], ID["▁(NP"]: ID["▁)NP"], ID["▁(VP"]: ID["▁)VP"]}
LEAVES = [ID[piece] for piece in ["▁the", "▁dog", "▁bark", "s", "▁."]]


def constraint(leaf_ids):
    return TreeConstraint(tf.constant(leaf_ids, tf.int32), *bracket_tables(PIECES))


def allowed_after(prefix, leaves=LEAVES, limit=100):
    """The token ids the constraint allows after `prefix` (piece strings or ids)."""
    ids = [ID[token] if isinstance(token, str) else token for token in prefix]
    mask = tree_masker(constraint([leaves]), tf.constant([limit]))
    buffer = tf.constant([ids + [0] * 3], tf.int32)
    logits = mask(tf.zeros([1, len(PIECES)]), tf.constant(len(ids)), buffer)
    return set(np.flatnonzero(np.isfinite(logits.numpy()[0])).tolist())


def test_the_tables_read_brackets_off_the_pieces():
    closing_of, is_bracket, starts_word, free_leaf = (
        t.numpy().tolist() for t in bracket_tables(PIECES))
    assert {i: c for i, c in enumerate(closing_of) if c != -1} == {**CLOSING, ID["▁(X"]: -2}
    # "▁(" alone is no leaf: one beginning with it would read back as a bracket.
    assert [PIECES[i] for i, b in enumerate(is_bracket) if b] == [
        "▁(S", "▁)S", "▁(NP", "▁)NP", "▁(VP", "▁)VP", "▁(X", "▁("]
    assert [PIECES[i] for i, s in enumerate(starts_word) if not s] == [
        "<pad>", "</s>", "<unk>", "s"]
    # A leaf the model chooses is text: no special piece, bracket or bare word mark.
    free = ["▁the", "▁dog", "▁bark", "s", "▁."]
    assert [PIECES[i] for i, f in enumerate(free_leaf) if f] == free
    tables = bracket_tables(["<pad>", "</s>", "▁", "<0x29>", "▁x", "y"])
    assert tables[3].numpy().tolist() == [False, False, False, False, True, True]


@pytest.mark.parametrize("prefix, expected", [
    # The first leaf or an opening bracket (never "▁(X", which could not be closed).
    ([], {ID["▁the"]} | OPENS),
    # A constituent just opened cannot close before it holds a leaf.
    (["▁(S", "▁(NP"], {ID["▁the"]} | OPENS),
    # Between words: the next word, an opening, or the innermost constituent's closing.
    (["▁(S", "▁(NP", "▁the"], {ID["▁dog"], ID["▁)NP"]} | OPENS),
    # Inside a word ("bark" + "s"): only its next piece.
    (["▁(S", "▁(NP", "▁the", "▁dog", "▁)NP", "▁(VP", "▁bark"], {ID["s"]}),
    (["▁(S", "▁(NP", "▁the", "▁dog", "▁)NP", "▁(VP", "▁bark", "s"],
     {ID["▁."], ID["▁)VP"]} | OPENS),
    # Every leaf written: close what is open, innermost first, then end.
    (["▁(S", "▁(NP", "▁the", "▁dog", "▁)NP", "▁(VP", "▁bark", "s", "▁."], {ID["▁)VP"]}),
    (["▁(S", "▁(NP", "▁the", "▁dog", "▁)NP", "▁(VP", "▁bark", "s", "▁)VP", "▁."],
     {ID["▁)S"]}),
    (["▁(S", "▁(NP", "▁the", "▁dog", "▁)NP", "▁(VP", "▁bark", "s", "▁)VP", "▁.", "▁)S"], {1}),
    # A leaf outside every constituent is a tree too (the root holds it).
    (["▁the", "▁dog", "▁bark", "s", "▁."], {1}),
])
def test_allowed_tokens_at_hand_worked_prefixes(prefix, expected):
    assert allowed_after(prefix) == expected


def test_brackets_opened_one_after_another_are_bounded():
    assert allowed_after(["▁(NP"] * (MAX_OPENING_RUN - 1)) == {ID["▁the"]} | OPENS
    assert allowed_after(["▁(NP"] * MAX_OPENING_RUN) == {ID["▁the"]}
    # The run counts from the last leaf or closing bracket.
    assert allowed_after(["▁(NP"] * MAX_OPENING_RUN + ["▁the"]) == {ID["▁dog"], ID["▁)NP"]} | OPENS


WORD_STARTS = {ID[piece] for piece in ["▁the", "▁dog", "▁bark", "▁."]}
CONTINUATIONS = {ID["s"]}


@pytest.mark.parametrize("prefix, expected", [
    ([], WORD_STARTS | OPENS),
    # After a leaf's first piece: another leaf, a piece continuing this one, a bracket.
    (["▁(S", "▁bark"], WORD_STARTS | CONTINUATIONS | OPENS | {ID["▁)S"]}),
    # Two leaves written: only continuing the last, or closing.
    (["▁(S", "▁bark", "s", "▁dog"], CONTINUATIONS | {ID["▁)S"]}),
    (["▁(S", "▁bark", "s", "▁dog", "▁)S"], {1}),
])
def test_leaves_the_sentence_does_not_name_are_any_pieces_of_a_word(prefix, expected):
    """ANY_LEAF (part-of-speech tags): only the number of leaves is held, one a word."""
    assert allowed_after(prefix, leaves=[ANY_LEAF, ANY_LEAF]) == expected


def test_no_leaves_allows_only_the_end():
    assert allowed_after([], leaves=[]) == {1}


def well_formed(tokens, leaves):
    """Whether tokens (ids, up to end of sentence) are a tree whose leaves are `leaves`: checked
    independently of the constraint, with a stack."""
    stack, written = [], []
    for token in tokens:
        if token in CLOSING:
            stack.append(CLOSING[token])
        elif token in CLOSING.values():
            if not stack or stack.pop() != token:
                return False
        else:
            written.append(token)
    if leaves and leaves[0] == ANY_LEAF:  # one leaf a word-beginning piece and its continuation
        return (not stack and bool(written) and written[0] in WORD_STARTS
                and set(written) <= WORD_STARTS | CONTINUATIONS
                and sum(token in WORD_STARTS for token in written) == len(leaves))
    return not stack and written == leaves


def constituents_hold_leaves(tokens):
    """Whether every constituent of tokens holds a leaf (none is opened and closed at once)."""
    return all(not (token in CLOSING and following in CLOSING.values())
               for token, following in zip(tokens, tokens[1:]))


def random_step(rng, batch, length):
    """A step function with random logits a (sentence, step, previous token), as a model that
    knows nothing of trees; each row's sentence travels in the cache."""
    table = tf.constant(rng.normal(scale=3.0, size=(batch, length, len(PIECES), len(PIECES))),
                        tf.float32)

    def step_fn(ids, step, cache):
        index = tf.stack([cache["sentence"], tf.fill(tf.shape(ids), step), ids], axis=1)
        return tf.gather_nd(table, index), cache

    return step_fn, {"sentence": tf.range(batch)}


SENTENCES = [LEAVES, [ID["▁the"], ID["▁dog"]], [ID["▁bark"], ID["s"]], [ANY_LEAF] * 3, []]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_search_writes_only_trees_over_the_leaves(seed):
    rng = np.random.default_rng(seed)
    limit = 40
    step_fn, cache = random_step(rng, len(SENTENCES), limit)
    leaf_ids = [leaves + [0] * (5 - len(leaves)) for leaves in SENTENCES]
    tree = constraint(leaf_ids)

    def outputs(ids):
        rows = ids.numpy().tolist()
        return [row[:row.index(1)] for row in rows]  # each ended: none reached the limit

    ids, scores = beam_search(step_fn, cache, limit, beam_size=3, alpha=0.6, processors=[tree])
    # Three trees over each sentence's leaves; without leaves, one: the end alone.
    assert np.isfinite(scores.numpy()).sum(axis=1).tolist() == [3, 3, 3, 3, 1]
    for sentence, leaves in enumerate(SENTENCES):
        found = np.isfinite(scores.numpy()[sentence]).sum()
        for hypothesis in outputs(ids[sentence][:found]):
            assert well_formed(hypothesis, leaves), hypothesis
            assert constituents_hold_leaves(hypothesis), hypothesis
    for temperature in (0.0, 1.0):
        ids, _ = sampling_search(step_fn, cache, limit, temperature=temperature,
                                 seed=[seed, 0], processors=[tree])
        for hypothesis, leaves in zip(outputs(ids), SENTENCES):
            assert well_formed(hypothesis, leaves), hypothesis
            assert constituents_hold_leaves(hypothesis), hypothesis


def test_the_leaves_need_a_row_per_sentence():
    step_fn, cache = random_step(np.random.default_rng(0), 2, 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="leaves for every sentence"):
        beam_search(step_fn, cache, 5, beam_size=2, processors=[constraint([LEAVES])])


def test_a_tight_limit_still_ends_in_a_tree():
    """Brackets are opened only where the limit leaves room to close them: with room for the
    leaves and the end alone, the tree is the flat one."""
    step_fn, cache = random_step(np.random.default_rng(5), 1, 8)
    ids, scores = beam_search(step_fn, cache, len(LEAVES) + 1, beam_size=4,
                              processors=[constraint([LEAVES])])
    assert ids[0, 0].numpy().tolist() == LEAVES + [1]
    assert np.isfinite(scores.numpy()[0]).sum() == 1


@pytest.mark.parametrize("limit, opens", [(len(LEAVES) + 1, False), (len(LEAVES) + 2, False),
                                          (len(LEAVES) + 3, True)])
def test_a_bracket_opens_only_where_the_limit_leaves_room_to_close_it(limit, opens):
    """At step 0, an opening bracket needs itself, the leaves, its closing bracket and the end."""
    assert bool(allowed_after([], limit=limit) & OPENS) == opens


def test_a_chosen_leaf_continues_only_where_the_limit_leaves_room():
    # "▁bark" written at step 1 of 2 ANY_LEAF leaves: still needed, a leaf and the end (2).
    assert ID["s"] in allowed_after(["▁bark"], leaves=[ANY_LEAF, ANY_LEAF], limit=4)
    assert ID["s"] not in allowed_after(["▁bark"], leaves=[ANY_LEAF, ANY_LEAF], limit=3)


def test_a_prefix_no_tree_starts_with_ends_every_search_without_a_hypothesis():
    step_fn, cache = random_step(np.random.default_rng(6), 1, 10)
    tree, prefix = constraint([LEAVES]), [[ID["▁)S"]]]  # nothing is open to close
    for temperature in (0.0, 1.0):
        ids, scores = sampling_search(step_fn, cache, 10, temperature=temperature, seed=[1, 2],
                                      processors=[PrefixForcing(prefix), tree])
        assert ids.numpy().tolist() == [[0] * 10] and np.isneginf(scores.numpy()[0])
    _, scores = beam_search(step_fn, cache, 10, beam_size=2,
                            processors=[PrefixForcing(prefix), tree])
    assert np.all(np.isneginf(scores.numpy()))
