"""Scoring given translations: the model's log P(target | source), token by token.

The reverse of a search: the output is given, so one decoder pass over the whole target (teacher
forcing, as in training) yields the probability the model gave each of its tokens. Beam search
ranks a finished hypothesis by the same sum over the same tokens divided by the GNMT length
penalty, so `score` of a beam's own output gives back the beam's score (section 6.1). Uses:
reranking n-best lists, filtering noisy corpora, quality estimation.
"""

import tensorflow as tf

from keras_transformer.layers.masks import padding_mask
from keras_transformer.search.beam import length_penalty
from keras_transformer.search.contract import graph_function
from keras_transformer.search.settings import members
from keras_transformer.search.steps import without_padding
from keras_transformer.token_ids import EOS_ID, PAD_ID


def target_mask(target_ids, eos_id=EOS_ID):
    """bool [..., length]: the tokens a hypothesis consists of, its first end of sentence
    included; padding and anything after the end of sentence excluded."""
    before_end = tf.cumsum(tf.cast(target_ids == eos_id, tf.int32), axis=-1, exclusive=True) == 0
    return before_end & (target_ids != PAD_ID)


@graph_function(reduce_retracing=True)
def score(model, source_ids, target_ids, alpha=0.6, start_id=PAD_ID, length_normalization="gnmt"):
    """The log-probability a `Transformer` gives each target given its source.

    Each row is scored on its own: padding never reaches a real position (the masks), so a
    sentence's score does not depend on its batch mates.

    Args:
        model: a `Transformer`, or a list of them (an ensemble, as `beam_decode` takes).
        source_ids: int [batch, source_length], 0-padded, each ending with end of sentence.
        target_ids: int [batch, target_length], the target's subwords and its end of sentence
            (a hypothesis cut at a length limit has none), 0-padded: `beam_decode`'s ids as they
            come ([batch, beam, length] reshaped to rows).
        alpha: the length penalty exponent of `scores` (the paper: 0.6).
        start_id: the token the decoder is fed first, as in the searches.
        length_normalization: the length penalty's form, as beam search's ("gnmt" or "hf").

    Returns:
        A dict of "token_log_probs" float32 [batch, target_length], log P(y_t | y_<t, x) for
        each token of the target and 0 elsewhere; "log_probs" float32 [batch], their sum;
        "lengths" int32 [batch], the tokens scored; and "scores" float32 [batch], log_probs /
        length_penalty(lengths, alpha, length_normalization), the number beam search ranks
        finished hypotheses by.
    """
    source_ids = tf.cast(source_ids, tf.int32)
    target_ids = tf.cast(target_ids, tf.int32)
    # An empty batch of targets still gets a (padding) column for the decoder to read.
    target_ids = tf.pad(target_ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(target_ids)[1])]])
    mask = target_mask(target_ids)
    decoder_input = tf.concat(
        [tf.fill([tf.shape(target_ids)[0], 1], start_id), target_ids[:, :-1]], axis=1)
    models = members(model)
    states = [m.decode_states(decoder_input, m.encode(source_ids, training=False),
                              padding_mask(source_ids), training=False) for m in models]
    token_log_probs = tf.where(mask, _in_blocks(models, states, target_ids), 0.0)
    log_probs = tf.reduce_sum(token_log_probs, axis=1)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    return {"token_log_probs": token_log_probs, "log_probs": log_probs, "lengths": lengths,
            "scores": log_probs / length_penalty(lengths, alpha, length_normalization)}


# The most logits (floats) scoring holds at once: a batch's targets are projected onto the
# vocabulary a few positions at a time, so that memory does not grow with targets x vocabulary
# (64 pairs of 1,024 tokens over 32,000 ids would be 8 GB of logits, and as much again for
# their softmax).
BLOCK_LOGITS = 2**23


def _in_blocks(models, states, target_ids):
    """float32 [batch, length]: log P(target_ids[:, t] | ...) under the average of the models'
    distributions without padding (as the searches use them: `without_padding`,
    `ensemble_step`), from each model's decoder states [batch, length, d_model], projected a
    block of positions at a time (`BLOCK_LOGITS`)."""
    batch, length = tf.shape(target_ids)[0], tf.shape(target_ids)[1]
    vocab = models[0].vocab_size
    block = tf.maximum(1, BLOCK_LOGITS // tf.maximum(1, batch * vocab))
    blocks = (length + block - 1) // block
    padded = blocks * block - length

    def in_blocks(values):  # [batch, length, ...] -> [blocks, batch, block, ...]
        values = tf.pad(values, [[0, 0], [0, padded]] + [[0, 0]] * (len(values.shape) - 2))
        values = tf.reshape(values, tf.concat([[batch, blocks, block], tf.shape(values)[2:]], 0))
        return tf.transpose(values, tf.concat([[1, 0, 2], tf.range(3, tf.rank(values))], 0))

    def block_log_probs(inputs):
        ids, *block_states = inputs
        per_model = []
        for m, states_of_block in zip(models, block_states):
            logits = without_padding(tf.cast(m.output_projection(states_of_block, reverse=True),
                                             tf.float32))
            per_model.append(tf.gather(logits, ids, batch_dims=2) -
                             tf.reduce_logsumexp(logits, axis=-1))
        # An ensemble's distribution is the average of its members': log of the mean.
        return tf.reduce_logsumexp(tf.stack(per_model), axis=0) - tf.math.log(
            float(len(per_model)))

    log_probs = tf.map_fn(block_log_probs, [in_blocks(target_ids)] + [
        in_blocks(member_states) for member_states in states], parallel_iterations=1,
        fn_output_signature=tf.float32)  # [blocks, batch, block]
    log_probs = tf.reshape(tf.transpose(log_probs, [1, 0, 2]), [batch, -1])
    return log_probs[:, :length]


def with_forced_end(result, limits, alpha):
    """`score`'s result (with length normalization "hf") where the token at each target's
    limit (int32 [batch]) costs nothing, for the rows that reach it: the end of sentence "hf"
    beam search writes there at no cost (generate's forced_eos_token_id), so that scoring a
    search's output gives its score back."""
    positions = tf.range(tf.shape(result["token_log_probs"])[1])[None, :]
    at_limit = (positions == limits[:, None] - 1) & (result["lengths"] >= limits)[:, None]
    token_log_probs = tf.where(at_limit, 0.0, result["token_log_probs"])
    log_probs = tf.reduce_sum(token_log_probs, axis=1)
    return dict(result, token_log_probs=token_log_probs, log_probs=log_probs,
                scores=log_probs / length_penalty(result["lengths"], alpha, "hf"))
