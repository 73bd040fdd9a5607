"""A search over a vocabulary shortlist's candidates instead of the whole vocabulary.

With `candidates` (int32 [k] target ids: a batch's shortlist, `data.shortlist`), the step
function's output projection reads only their k columns (`steps.cached_step`), and the search
itself runs over k: its softmax, its top-k and its hypotheses hold positions among the
candidates, mapped to the vocabulary's ids where the model reads them back (`over_candidates`)
and in the results (`vocabulary_ids`). Padding and end of sentence are always the first two
candidates, so positions 0 and 1 keep their meanings (padding after an end, end of sentence)
and the searches need no change. Processors, written for the whole vocabulary, see it
(`InCandidates`): their logits spread back over it, -inf outside the candidates.
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.search.contract import NEG_INF
from keras_transformer.search.processors import start_processors
from keras_transformer.token_ids import EOS_ID, PAD_ID


def with_special_ids(candidates):
    """int32 [k'] ascending, distinct: `candidates` with padding and end of sentence, which are
    then at positions 0 and 1."""
    ids = tf.concat([[PAD_ID, EOS_ID], tf.reshape(tf.cast(candidates, tf.int32), [-1])], 0)
    return tf.sort(tf.unique(ids).y)


def over_candidates(step_fn, candidates):
    """`step_fn` (ids [rows] -> logits [rows, k] over `candidates`, cache) taking positions
    among the candidates, as a search over them chooses: a step function of the candidates'
    space."""
    def step(positions, step_index, cache):
        return step_fn(tf.gather(candidates, positions), step_index, cache)
    return step


def vocabulary_ids(positions, candidates):
    """The vocabulary ids of positions among `candidates` (int32, any shape): a search's
    results over the candidates as its callers read them (0 stays padding)."""
    return tf.gather(candidates, positions)


def in_vocabulary(candidates, vocab_size):
    """A function from logits [rows, k] of `candidates` (int32 [k], distinct ids) to logits
    [rows, vocab_size]: each candidate's at its id, -inf elsewhere (never chosen)."""
    count = tf.shape(candidates)[0]
    # Each id's column among the candidates; the others read the -inf column after them.
    column = tf.tensor_scatter_nd_update(tf.fill([vocab_size], count), candidates[:, None],
                                         tf.range(count))

    def spread(logits):
        never = tf.fill([tf.shape(logits)[0], 1], NEG_INF)
        return tf.gather(tf.concat([logits, never], axis=1), column, axis=1)
    return spread


class InCandidates(NamedTuple):
    """`processors` (written for the whole vocabulary) in a search over `candidates`: each
    step their logits are spread over the `vocab_size` ids (-inf outside the candidates) and
    the hypotheses read as vocabulary ids, and what they return is read back at the
    candidates. The candidates must hold every id they force (`processors.forced_ids`)."""
    processors: tuple
    candidates: tf.Tensor
    vocab_size: int

    def start(self, layout):
        adjust, states = start_processors(self.processors, layout)
        spread = in_vocabulary(self.candidates, self.vocab_size)

        def adjust_candidates(logits, positions, step, states):
            logits, states = adjust(spread(logits), vocabulary_ids(positions, self.candidates),
                                    step, states)
            return tf.gather(logits, self.candidates, axis=1), states
        return adjust_candidates, states
