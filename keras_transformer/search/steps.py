"""A `Transformer` (or an ensemble of them) as the step function the searches take
(search/contract.py): one token a step through the key/value cache.

`cached_step` feeds one token a step through the key/value cache: the encoder runs once, the
encoder-decoder keys and values are computed once (`Transformer.init_cache`), and each step adds
one position to the self-attention buffers, so a sentence of n tokens costs n one-position decoder
passes. The buffers grow a position a step, except under XLA, which needs fixed shapes: there
they are preallocated and written at each step (which XLA does in place; TensorFlow's graph
executor would copy the whole buffer, and beam search's reordering copies it again).

`ensemble_step` runs several models' cached steps side by side and averages their
probabilities: the searches take it as they take one model's.

`recomputing_step` runs the decoder over the whole prefix every step instead (n(n+1)/2
positions): the reference the cache must agree with, and the baseline it beats.
"""

import tensorflow as tf

from keras_transformer.layers.masks import padding_mask
from keras_transformer.search.contract import NEG_INF, write_position
from keras_transformer.search.settings import members
from keras_transformer.token_ids import PAD_ID


def source_lengths(source_ids):
    """int [batch, source_length], 0-padded -> int32 [batch]: each source's real length."""
    return tf.reduce_sum(tf.cast(padding_mask(source_ids), tf.int32), axis=1)


def without_padding(logits):
    """logits [..., vocab] with padding's at -inf. Padding is never part of a translation (a 0
    marks where a hypothesis ended), so the searches and scoring use the distribution over the
    other tokens, as fairseq's generator does; a model trained with label smoothing gives
    padding a little probability, which an untrained one could otherwise pick."""
    return tf.where(tf.range(tf.shape(logits)[-1]) == PAD_ID, NEG_INF, logits)


def cached_step(model, source_ids, cache_length=None, candidates=None):
    """A step function and its initial cache for the searches (`beam_search`, `sampling_search`).

    The encoder-decoder keys and values and the source mask are the same for every hypothesis of
    a sentence, so the step function captures them, one row per sentence (the decoder attends
    to them with all of a sentence's hypotheses at once, `DecoderLayer.call_cached`): the cache
    the search carries, and beam search repeats and reorders, holds only the self-attention
    buffers. It captures the output projection too, made once
    (`Transformer.output_kernel`), not at every step.

    Args:
        model: a `Transformer`.
        source_ids: int32 [batch, source_length], 0-padded.
        cache_length: positions the preallocated cache holds (int or int32 scalar: the most
            output tokens), for `jit_compile`; None: the cache grows a position a step.
        candidates: int32 [k], ascending from padding (`candidates.with_special_ids`), distinct:
            the only target ids the step computes logits for (a
            vocabulary shortlist, `data.shortlist`): the output projection reads their k
            columns, and the logits are theirs alone, [rows, k] in their order, so that a
            candidate's probability is the full softmax restricted to the candidates and
            renormalized (search/candidates.py runs a search over them). None: every id.

    Returns:
        (step_fn, cache): step_fn(ids [rows], step, cache) -> (float32 logits [rows, vocab],
        padding's -inf (`without_padding`), cache), rows = batch * the hypotheses a sentence
        has, consecutive (the search's beam, 1 for greedy decoding and sampling); the cache a list
        (one per decoder layer) of "self_keys" and "self_values" buffers [batch, h, cache_length
        or 0, d].
    """
    cache = model.init_cache(model.encode(source_ids), padding_mask(source_ids), cache_length)
    output_kernel = model.output_kernel(candidates)
    buffers = [{name: layer[name] for name in _SELF_ATTENTION} for layer in cache["layers"]]
    fixed = {"memory_mask": cache["memory_mask"],
             "layers": [{name: layer[name] for name in layer if name not in _SELF_ATTENTION}
                        for layer in cache["layers"]]}

    def step_fn(ids, step, buffers):
        layers = [dict(layer, **own) for layer, own in zip(fixed["layers"], buffers)]
        logits, cache = model.decode_cached(ids[:, None], dict(fixed, layers=layers), step,
                                            grow_cache=cache_length is None,
                                            output_kernel=output_kernel,
                                            output_ids=candidates)
        buffers = [{name: layer[name] for name in _SELF_ATTENTION} for layer in cache["layers"]]
        return without_padding(logits[:, 0]), buffers

    return step_fn, buffers


_SELF_ATTENTION = ("self_keys", "self_values")


def ensemble_step(models, source_ids, cache_length=None, candidates=None):
    """`cached_step` for several models sharing a vocabulary: each step's distribution is the
    average of the members' probabilities (fairseq's rule): log((1/M) sum_m P_m(y | ...)).

    The linear average is a mixture, a distribution in its own right whose scores stay
    log-probabilities; a token any member finds likely stays likely. (Marian's alternative, a
    weighted sum of log-probabilities, is a product of experts that any one member can veto.)
    One model is `cached_step` itself.

    Returns:
        (step_fn, cache): step_fn returns float32 log-probabilities [rows, vocab] (the searches
        take them as logits: a log-softmax leaves them unchanged); the cache is the list of
        the members' caches.
    """
    models = members(models)
    if len(models) == 1:
        return cached_step(models[0], source_ids, cache_length, candidates)
    steps, caches = zip(*(cached_step(m, source_ids, cache_length, candidates)
                          for m in models))
    log_members = tf.math.log(float(len(models)))

    def step_fn(ids, step, caches):
        log_probs, caches_out = [], []
        for member_step, cache in zip(steps, caches):
            logits, cache = member_step(ids, step, cache)
            log_probs.append(tf.nn.log_softmax(logits))
            caches_out.append(cache)
        return tf.reduce_logsumexp(tf.stack(log_probs), axis=0) - log_members, caches_out

    return step_fn, list(caches)


def recomputing_step(model, source_ids, cache_length):
    """Like `cached_step`, but every step runs the decoder over all positions up to `step`.

    The cache holds only the encoder output and the decoder inputs so far (`cache_length` of
    them, the most output tokens). Not for `jit_compile` (the prefix grows each step).
    """
    cache = {"memory": model.encode(source_ids), "source_mask": padding_mask(source_ids),
             "inputs": tf.zeros([tf.shape(source_ids)[0], cache_length], tf.int32)}

    def step_fn(ids, step, cache):
        inputs = write_position(cache["inputs"], step, ids)
        logits = model.decode(inputs[:, :step + 1], cache["memory"], cache["source_mask"])
        return without_padding(logits[:, -1]), dict(cache, inputs=inputs)

    return step_fn, cache
