"""A search held to a glossary: each required target phrase appears in every hypothesis (the
production-translation issue; data/glossary.py finds which a sentence requires).

`GlossaryConstraint` is a decoding processor (processors.py). For each sentence it knows the
token ids of its required target phrases. At each step a hypothesis may write:
- end of sentence only once every phrase has appeared in it (as consecutive tokens); until then
  the end's probability goes to the tokens that continue or start a lacking phrase (shared
  equally, `processors.give_the_end_to`), so where the model would stop it writes the phrase;
- any other token that leaves room, before its length limit, for the phrases it still lacks:
  the rest of the phrase it is furthest into if the token continues it, else every lacking
  phrase in full (one token less if the token starts one). Once they only just fit, that
  leaves the next token of the phrase it is furthest into.
So every finished hypothesis holds every phrase, whatever the search; for one phrase a
sentence the rule is exact (no hypothesis that could still hold it is refused), for more it
counts conservatively (a token that continues another phrase than the furthest is counted as
starting over). Where a phrase lands is
the model's choice while there is room: a hypothesis that writes it where the model expects it
scores well and stays in the beam; one that leaves it to the end is forced to add it there, at
its model probability. This is simpler than Post & Vilar (2018)'s dynamic beam allocation, which
reserves beam slots for hypotheses by how many constraint tokens they have met: here the beam
keeps the best hypotheses whatever their progress, and the deadline rule guarantees the phrases
to each. Phrase matching restarts at a phrase's first token after a mismatch (no overlap search:
"a a b" is not found in "a a a b"), enough for terms.
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.search.contract import NEG_INF
from keras_transformer.search.processors import give_the_end_to
from keras_transformer.token_ids import EOS_ID


class GlossaryConstraint(NamedTuple):
    """Fields:
        phrase_ids: int [batch, phrases, length], each sentence's required target phrases as
            token ids, 0-padded; a row of zeros is no phrase.
    """

    phrase_ids: tf.Tensor
    ROW_PADDING = {"phrase_ids": 0}  # processors.rows_added: no phrases

    def forced_ids(self):
        """int [n]: the ids of the phrases (`processors.forced_ids`)."""
        return tf.reshape(self.phrase_ids, [-1])

    def start(self, layout):
        phrases = layout.rows(self.phrase_ids)
        lengths = tf.reduce_sum(tf.cast(phrases != 0, tf.int32), axis=2)  # [rows, phrases]
        limits = layout.rows(layout.max_lengths)
        width = tf.shape(phrases)[2]

        def adjust(logits, ids, step, state):
            matched, done = state  # int32 and bool [rows, phrases]
            last = tf.gather(ids, tf.maximum(step - 1, 0), axis=1)[:, None]
            expected = tf.gather(phrases, tf.minimum(matched, width - 1), axis=2, batch_dims=2)
            matched = tf.where(step == 0, matched, tf.where(
                expected == last, matched + 1,
                tf.cast(phrases[:, :, 0] == last, tf.int32)))
            done |= (matched == lengths) & (lengths > 0)
            left = (lengths > 0) & ~done
            whole = tf.reduce_sum(tf.where(left, lengths, 0), axis=1)  # the lacking, in full
            furthest = tf.argmax(tf.where(left, matched, -1), axis=1, output_type=tf.int32)
            progress = tf.where(tf.reduce_any(left, axis=1),
                                tf.gather(matched, furthest, axis=1, batch_dims=1), 0)
            next_token = tf.gather_nd(phrases, tf.stack([
                tf.range(tf.shape(phrases)[0]), furthest, tf.minimum(progress, width - 1)],
                axis=1))
            vocab = tf.shape(logits)[-1]
            starts_one = _starts_one(phrases[:, :, 0], left, vocab)
            # Tokens still to write after each candidate, at most: the furthest phrase's rest
            # if it continues it, else every lacking phrase in full (less the one it starts).
            after = tf.where(tf.range(vocab)[None, :] == next_token[:, None],
                             (whole - progress - 1)[:, None],
                             whole[:, None] - tf.cast(starts_one, tf.int32))
            allowed = after <= (limits - step - 1)[:, None]
            allowed &= (tf.range(vocab)[None, :] != EOS_ID) | (whole == 0)[:, None]
            owed = allowed & (starts_one | (tf.range(vocab)[None, :] == next_token[:, None])) & \
                (whole > 0)[:, None]
            return tf.where(allowed, give_the_end_to(owed, logits), NEG_INF), (matched, done)

        return adjust, (tf.zeros_like(lengths), tf.zeros_like(lengths, tf.bool))


def _starts_one(first_ids, left, vocab):
    """bool [rows, vocab]: which tokens start a phrase still lacking (`left`, bool [rows,
    phrases]; `first_ids`, int [rows, phrases], the phrases' first tokens). A scatter of the
    phrases into the vocabulary, never a [rows, phrases, vocab] tensor: at 256 phrases, 4 beams
    of 64 sentences and 32,000 ids that would be 2 GB a step."""
    rows = tf.shape(first_ids)[0]
    segments = tf.range(rows)[:, None] * vocab + tf.cast(first_ids, tf.int32)
    marks = tf.math.unsorted_segment_max(tf.reshape(tf.cast(left, tf.int32), [-1]),
                                         tf.reshape(segments, [-1]), rows * vocab)
    return tf.reshape(marks > 0, [rows, vocab])  # segments without a phrase: int32's minimum
