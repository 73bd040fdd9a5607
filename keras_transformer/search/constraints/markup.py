"""A search held to its sentence's markup: every item token exactly once, tag pairs well nested
(the production-translation issue; data/markup.py takes the items out of the text and puts them
back).

`MarkupConstraint` is a decoding processor (processors.py). For each sentence it knows the
vocabulary ids of the tokens standing for its items (`item_ids`) and which of them closes which
(`opening`); for the whole vocabulary, which ids are item tokens at all (`marker_ids`). At each
step a hypothesis may write:
- an item token of its sentence not written yet: an opening or lone one at any time, a closing
  one only when its opening is the innermost pair still open;
- no other item token (a model may not invent `｟7｠` where the source has six);
- end of sentence only once every item is written; until then the end's probability goes to
  the item tokens it may write (shared equally), so that where the model would stop it writes
  what it owes instead of going on (measured: bench/RESULTS.md, "Markup kept and placed");
- any other token unless the items left need every step to the length limit; right after an
  item token, only one that begins a word, punctuation or end of sentence (`after_item_ok`): a
  masked text has a space after every token, so a piece that continues a word there
  ("｟1｠amente") is never what the model was shown, and it would glue text to the item.
So every finished hypothesis holds each item exactly once, well nested, whatever the search
(beam, greedy, sampling). Where they land is the model's choice: one trained on pairs whose items
became the same tokens on both sides puts them where they belong.

`TextKept`, before it, places tags in a translation already made (of the text without its tags):
each hypothesis writes that translation's tokens in order, with tag tokens in between only where
a word, punctuation or the end of sentence comes next, so the text is the untagged translation's
to the letter and only the tags' places are searched (kt-translate --markup translates a tagged
line so, in two passes).
"""

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.search.contract import NEG_INF
from keras_transformer.search.processors import give_the_end_to
from keras_transformer.token_ids import EOS_ID


class MarkupConstraint(NamedTuple):
    """Fields:
        item_ids: int [batch, items], each sentence's item token ids, 0-padded.
        opening: int [batch, items], for an entry that closes a tag pair, the index of its
            opening entry; -1 for every other entry.
        marker_ids: int [markers], the vocabulary ids of all item tokens.
        after_item_ok: bool [vocab], the tokens that may come right after an item token
            (`Vocabulary.before_tag_ok`); None: any.
    """

    item_ids: tf.Tensor
    opening: tf.Tensor
    marker_ids: tf.Tensor
    after_item_ok: tf.Tensor = None
    ROW_PADDING = {"item_ids": 0, "opening": -1}  # processors.rows_added: no items

    def forced_ids(self):
        """int [n]: the item tokens (`processors.forced_ids`)."""
        return tf.reshape(self.item_ids, [-1])

    def start(self, layout):
        item_ids = layout.rows(self.item_ids)
        opening = layout.rows(self.opening)
        limits = layout.rows(layout.max_lengths)
        required = item_ids != 0
        entries = tf.range(tf.shape(item_ids)[1])
        # closes[r, i, j]: entry j closes entry i's pair.
        closes = opening[:, None, :] == entries[None, :, None]
        has_closing = tf.reduce_any(closes, axis=2)

        def adjust(logits, ids, step, written_at):
            last = tf.gather(ids, tf.maximum(step - 1, 0), axis=1)
            just = required & (item_ids == last[:, None]) & (written_at < 0) & (step > 0)
            written_at = tf.where(just, step - 1, written_at)
            written = written_at >= 0
            closed = tf.reduce_any(closes & written[:, None, :], axis=2)
            open_pairs = written & has_closing & ~closed
            innermost = tf.argmax(tf.where(open_pairs, written_at, -1), axis=1,
                                  output_type=tf.int32)
            may_close = tf.reduce_any(open_pairs, axis=1, keepdims=True) & \
                (opening == innermost[:, None])
            allowed_entries = required & ~written & ((opening < 0) | may_close)
            items, others = self._allowed(logits, item_ids, allowed_entries,
                                          required & ~written, limits - step)
            if self.after_item_ok is not None:
                after_item = tf.reduce_any(just, axis=1, keepdims=True)
                others &= ~after_item | self.after_item_ok[None, :]
            return tf.where(items | others, give_the_end_to(items, logits), NEG_INF), written_at

        return adjust, tf.fill(tf.shape(item_ids), -1)

    def _allowed(self, logits, item_ids, allowed_entries, left, steps_left):
        """(items, others), bool [rows, vocab]: the item tokens and the other tokens a row may
        write next."""
        vocab = tf.shape(logits)[-1]
        items = tf.reduce_any(tf.one_hot(item_ids, vocab, on_value=True, off_value=False) &
                              allowed_entries[:, :, None], axis=1)
        markers = tf.reduce_any(tf.one_hot(tf.cast(self.marker_ids, tf.int32), vocab,
                                           on_value=True, off_value=False), axis=0)
        remaining = tf.reduce_sum(tf.cast(left, tf.int32), axis=1)
        others = ~markers[None, :] & (remaining < steps_left)[:, None]
        end = tf.range(vocab)[None, :] == EOS_ID
        others = tf.where(end, (remaining == 0)[:, None], others)
        return items, others


class NoMarkup(NamedTuple):
    """A processor for plain text under a vocabulary that holds markup's tokens: none may be
    written (a model trained with markup would otherwise write a `｟t1｠` now and then).

    Fields:
        marker_ids: int [markers], the vocabulary ids of all item tokens.
    """

    marker_ids: tf.Tensor

    def start(self, layout):
        def adjust(logits, ids, step, state):
            vocab = tf.shape(logits)[-1]
            markers = tf.reduce_any(tf.one_hot(tf.cast(self.marker_ids, tf.int32), vocab,
                                               on_value=True, off_value=False), axis=0)
            return tf.where(markers[None, :], NEG_INF, logits), state

        return adjust, ()


class TextKept(NamedTuple):
    """A processor that holds every hypothesis to a given text, letting it insert tag tokens
    (which ones, and how often, left to a `MarkupConstraint` after it) before a token that
    begins a word, punctuation or the end of sentence.

    Fields:
        text_ids: int [batch, length], each sentence's text as tokens, ending with end of
            sentence, 0-padded.
        tag_ids: int [batch, tags], the tag tokens each sentence may insert, 0-padded.
        before_tag_ok: bool [vocab], the tokens a tag may stand before.
    """

    text_ids: tf.Tensor
    tag_ids: tf.Tensor
    before_tag_ok: tf.Tensor
    ROW_PADDING = {"text_ids": 0, "tag_ids": 0}  # processors.rows_added: an empty text

    def forced_ids(self):
        """int [n]: the text's tokens and its tags (`processors.forced_ids`)."""
        return tf.concat([tf.reshape(self.text_ids, [-1]), tf.reshape(self.tag_ids, [-1])], 0)

    def start(self, layout):
        text = layout.rows(self.text_ids)
        tags = layout.rows(self.tag_ids)
        width = tf.shape(text)[1]

        def adjust(logits, ids, step, position):  # position: the text's tokens written
            last = tf.gather(ids, tf.maximum(step - 1, 0), axis=1)
            expected = tf.gather(text, tf.minimum(position, width - 1), batch_dims=1)
            position = tf.where((step > 0) & (last == expected), position + 1, position)
            next_token = tf.gather(text, tf.minimum(position, width - 1), batch_dims=1)
            vocab = tf.shape(logits)[-1]
            next_ok = tf.one_hot(next_token, vocab, on_value=True, off_value=False)
            tags_ok = tf.reduce_any(tf.one_hot(tags, vocab, on_value=True, off_value=False) &
                                    (tags != 0)[:, :, None], axis=1)
            tags_ok &= tf.gather(self.before_tag_ok, next_token)[:, None]
            return tf.where(next_ok | tags_ok, logits, NEG_INF), position

        return adjust, tf.zeros([tf.shape(text)[0]], tf.int32)
