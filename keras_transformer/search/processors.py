"""Decoding processors: what a search may write next, besides what the model prefers.

A processor adjusts each step's logits from the hypotheses so far, and keeps whatever state it
needs in the search's own loop state. Every search (`beam_search`, `sampling_search`) and every
decode function (`beam_decode`, `greedy_decode`, `sample_decode`, the `Translator`) takes a list
of them, `processors=[...]`, and applies them in order; the searches never learn what a
constraint means (as Hugging Face's `LogitsProcessor` and keras-hub's samplers' `next` keep the
model's and the constraint's business out of the search). Forcing a target prefix
(`PrefixForcing`, here), a parser's tree constraint (`constraints.tree.TreeConstraint`),
markup placeholders (`constraints.markup.MarkupConstraint`) and glossary terms
(`constraints.glossary.GlossaryConstraint`) are four.

The protocol: a processor is any object with a method

    start(layout) -> (adjust, state)

called once as the search begins, with the search's `Layout`. `state` is a nest of tensors
whose leading dimension is rows = batch x layout.copies, one row a hypothesis (`()`: none);
beam search reorders it with the hypotheses, as it reorders the step function's cache, so a row
always holds its own hypothesis's state. Then, at every step,

    adjust(logits, ids, step, state) -> (logits, state)

    logits: float32 [rows, vocab], what the model gives the next token (earlier processors'
        adjustments included).
    ids: int32 [rows, buffer_length], each hypothesis's tokens; positions before `step` are
        written (so ids[:, step - 1] is the token it chose last), the rest are 0.
    step: int32 scalar, the position being chosen (0 first).

and returns the logits to choose from (a token set to -inf is never chosen) and the rows' next
state, with the same structure, dtypes and leading dimension (under XLA, the same shapes).
The searches still score each chosen token as its adjusted logit minus the model's log-
normalizer, so a processor that only masks leaves every allowed token's score its model
log-probability. A row left with no finite logit ends there without a hypothesis.

Everything runs inside `tf.function` (and with `jit_compile=True`), so `start` and `adjust` must
be graph code: TensorFlow ops, no Python branch on a tensor's value. A processor is an argument
of the decode functions' `tf.function`s: one that is a NamedTuple of tensors (as the two here)
traces once for all its values; any other object is traced as a constant, once per object.

Example, a processor that never lets a hypothesis write one token id:

    class NeverEmit(NamedTuple):
        token_id: int

        def start(self, layout):
            def adjust(logits, ids, step, state):
                banned = tf.range(tf.shape(logits)[-1]) == self.token_id
                return tf.where(banned, float("-inf"), logits), state
            return adjust, ()

    kt.beam_decode(model, source_ids, processors=[NeverEmit(7)])
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.search.contract import NEG_INF
from keras_transformer.token_ids import EOS_ID, PAD_ID


class Layout(NamedTuple):
    """What a processor learns of the search it joins.

    Fields:
        max_lengths: int32 [batch], the most tokens each sentence's hypotheses may have.
        copies: int, the hypotheses (rows) a sentence has, consecutive: rows = batch x copies
            (beam search: beam_size; greedy decoding and sampling: 1).
    """
    max_lengths: tf.Tensor
    copies: int

    def rows(self, values):
        """int32 [rows, ...]: each sentence's `values` (int [batch, ...]) once per hypothesis,
        as the rows of the search's logits come."""
        return tf.repeat(tf.cast(values, tf.int32), self.copies, axis=0)


def start_processors(processors, layout):
    """The processors started as one: (adjust, states), adjust(logits, ids, step, states) ->
    (logits, states) applying each in order, states a tuple of their states."""
    started = [processor.start(layout) for processor in processors]

    def adjust(logits, ids, step, states):
        next_states = []
        for (own_adjust, _), state in zip(started, states):
            logits, state = own_adjust(logits, ids, step, state)
            next_states.append(state)
        return logits, tuple(next_states)

    return adjust, tuple(state for _, state in started)


class PrefixForcing(NamedTuple):
    """Every hypothesis of a sentence starts with the sentence's target prefix: at each step
    inside the prefix, every token but the prefix's is set to -inf, so its tokens are chosen and
    still scored by the model's log-probabilities; the search goes on from there (CTranslate2's
    `target_prefix`, fairseq's `--prefix-size`). A prefix as long as the length limit leaves
    nothing to search.

    Fields:
        prefix_ids: int [batch, prefix_length], target subwords without end of sentence,
            0-padded (a row of 0s: no prefix).
    """
    prefix_ids: tf.Tensor
    ROW_PADDING = {"prefix_ids": PAD_ID}

    def with_width(self, width):
        """The prefixes cut or 0-padded to `width` columns, a static width: under XLA, one
        program for prefixes of every length."""
        prefix_ids = tf.convert_to_tensor(self.prefix_ids)[:, :width]
        prefix_ids = tf.pad(prefix_ids, [[0, 0], [0, width - tf.shape(prefix_ids)[1]]])
        return self._replace(prefix_ids=tf.ensure_shape(prefix_ids, [None, width]))

    def forced_ids(self):
        """int [n]: the ids it makes hypotheses write (`forced_ids`)."""
        return tf.reshape(self.prefix_ids, [-1])

    def start(self, layout):
        prefix_ids = tf.cast(self.prefix_ids, tf.int32)
        check = tf.debugging.assert_equal(
            tf.shape(prefix_ids)[0], tf.shape(layout.max_lengths)[0],
            message="prefix_ids needs one row per sentence")
        with tf.control_dependencies([check]):
            prefix_ids = layout.rows(prefix_ids)
        # A column of padding stands for an empty prefix, so a step can always read one.
        prefix_ids = tf.pad(prefix_ids, [[0, 0], [0, 1]])
        last = tf.shape(prefix_ids)[1] - 1

        def adjust(logits, ids, step, state):
            forced = tf.gather(prefix_ids, tf.minimum(step, last), axis=1)
            other = tf.range(tf.shape(logits)[-1])[None, :] != forced[:, None]
            return tf.where((forced != PAD_ID)[:, None] & other, NEG_INF, logits), state

        return adjust, ()


def forced_ids(processors):
    """int32 [n]: the ids `processors` may make a hypothesis write whatever the model prefers
    (a prefix, glossary phrases, markup items, a tree's brackets and leaves), each processor's
    `forced_ids()` where it has one, which a vocabulary shortlist keeps among its candidates
    (the `Translator`); 0 (padding) and negative values are left out."""
    found = [tf.cast(tf.reshape(p.forced_ids(), [-1]), tf.int32) for p in processors
             if hasattr(p, "forced_ids")]
    ids = tf.concat(found + [tf.zeros([0], tf.int32)], axis=0)
    return tf.boolean_mask(ids, ids > PAD_ID)


def rows_added(processor, count):
    """`processor` for its batch with `count` more sentences at the end, each held to nothing
    (the `Translator` pads batches to a few shapes under XLA). A processor that holds each
    sentence to its own inputs is a NamedTuple naming them in its class's ROW_PADDING,
    {field: the value that constrains nothing}; those fields (int [batch, ...]) are padded with
    it. Any other processor is returned as it is."""
    return _per_sentence(processor, lambda value, padding: tf.pad(
        value, [[0, count]] + [[0, 0]] * (value.shape.rank - 1), constant_values=padding))


def rows_repeated(processor, times):
    """`processor` for its batch with each sentence `times` times in a row (sampling draws
    `times` translations of each); as `rows_added` for which processors change."""
    return _per_sentence(processor, lambda value, _: tf.repeat(value, times, axis=0))


def rows_gathered(processor, rows):
    """`processor` for the sentences `rows` (int32 [n]) of its batch, in that order (a search
    of a request's rows in length-sorted batches); as `rows_added` for which processors
    change."""
    return _per_sentence(processor, lambda value, _: tf.gather(value, rows))


def _per_sentence(processor, change):
    fields = getattr(type(processor), "ROW_PADDING", {})
    return processor._replace(**{
        field: change(tf.convert_to_tensor(getattr(processor, field)), padding)
        for field, padding in fields.items()}) if fields else processor


def give_the_end_to(owed, logits):
    """`logits` with the end of sentence's probability shared equally among the `owed` tokens
    (bool [rows, vocab]) of each row that has any. For a constraint that forbids ending while a
    hypothesis still owes something: where the model would stop, it writes what it owes instead
    of going on (banned from ending, a model rambles on until the length limit forces the owed
    tokens in). An owed token an earlier processor banned (logit NEG_INF) stays banned."""
    owed &= logits > NEG_INF
    count = tf.reduce_sum(tf.cast(owed, logits.dtype), axis=1, keepdims=True)
    share = logits[:, EOS_ID:EOS_ID + 1] - tf.math.log(tf.maximum(count, 1.0))
    return tf.where(owed, tf.math.reduce_logsumexp(
        tf.stack([logits, tf.broadcast_to(share, tf.shape(logits))]), axis=0), logits)
