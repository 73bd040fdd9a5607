"""Decoding a `Transformer`: its step functions, and beam search, greedy decoding and sampling.

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

The searches themselves are in `beam_search.py` and `sampling.py`.
"""

import functools

import numpy as np
import tensorflow as tf

from keras_transformer.layers.masks import padding_mask
from keras_transformer.search.beam import beam_search
from keras_transformer.search.contract import NEG_INF, longest, write_position
from keras_transformer.search.processors import PrefixForcing
from keras_transformer.search.sampling import check_temperature, sampling_search
from keras_transformer.token_ids import EOS_ID, PAD_ID

# tf.function without autograph, for every decoding function (here, in scoring, the MT-LSTM and
# the Translator): the searches are written as tf.while_loop, and autograph's conversion of the
# model's code (Keras does not convert it either) was 1.6 s of a 2.4 s first trace of greedy
# decoding on transformer_tiny, in every process. So the code these reach (the searches, the
# step functions, Transformer.encode / init_cache / decode_cached) must not branch on tensors in
# Python: such an `if` fails at trace time.
graph_function = functools.partial(tf.function, autograph=False)

# Section 6.1: "maximum output length to input length + 50".
EXTRA_LENGTH = 50


def source_lengths(source_ids):
    """int [batch, source_length], 0-padded -> int32 [batch]: each source's real length."""
    return tf.reduce_sum(tf.cast(padding_mask(source_ids), tf.int32), axis=1)


def output_limits(input_lengths, *, extra_length=EXTRA_LENGTH, max_output_length=None,
                  model=None, max_positions=None):
    """The most tokens (end of sentence included) a translation may have: the paper's input
    length + `extra_length` (6.1), at most `max_output_length`, and at most a position table:
    `model`'s (one or several, `members`) where learned, or one of `max_positions` rows. The
    one place the limit is computed.

    Args:
        input_lengths: real input lengths: an int, a numpy array or an int32 tensor.
        extra_length: tokens allowed beyond the input's (the paper: 50; parsing: 300).
        max_output_length: None, or a cap of the same kinds.
        model: None, or the model(s) that decode (their learned position tables cap the limit).
        max_positions: None, or the rows of the position table that decodes (an int; e.g. a
            CTranslate2 export's).

    Returns:
        `input_lengths`' kind and shape (a tensor if any argument is one; a Python int for
        ints).
    """
    caps = [cap for cap in (max_output_length, max_positions) if cap is not None]
    if model is not None:
        caps += [m.max_positions for m in members(model) if m.position_encoding == "learned"]
    limits = input_lengths + extra_length
    for cap in caps:
        if tf.is_tensor(limits) or tf.is_tensor(cap):
            limits = tf.minimum(limits, tf.cast(cap, tf.int32))
        else:
            limits = np.minimum(limits, cap)
    return int(limits) if np.ndim(limits) == 0 and not tf.is_tensor(limits) else limits


def longest_output(max_input_length, *, extra_length=EXTRA_LENGTH, max_output_length=None,
                   model=None, max_positions=None):
    """The longest any translation may be, an int: the cap `max_output_length` where given
    (it also cuts the targets a Translator scores), else the longest input's limit; under the
    position tables (`output_limits`' `model` and `max_positions`)."""
    if max_output_length is None:
        return output_limits(max_input_length, extra_length=extra_length, model=model,
                             max_positions=max_positions)
    return output_limits(max_output_length, extra_length=0, model=model,
                         max_positions=max_positions)


def without_padding(logits):
    """logits [..., vocab] with padding's at -inf. Padding is never part of a translation (a 0
    marks where a hypothesis ended), so the searches and scoring use the distribution over the
    other tokens, as fairseq's generator does; a model trained with label smoothing gives
    padding a little probability, which an untrained one could otherwise pick."""
    return tf.where(tf.range(tf.shape(logits)[-1]) == PAD_ID, NEG_INF, logits)


def cached_step(model, source_ids, cache_length=None):
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

    Returns:
        (step_fn, cache): step_fn(ids [rows], step, cache) -> (float32 logits [rows, vocab],
        padding's -inf (`without_padding`), cache), rows = batch * the hypotheses a sentence
        has, consecutive (the search's beam, 1 for greedy decoding and sampling); the cache a list
        (one per decoder layer) of "self_keys" and "self_values" buffers [batch, h, cache_length
        or 0, d].
    """
    cache = model.init_cache(model.encode(source_ids), padding_mask(source_ids), cache_length)
    output_kernel = model.output_kernel()
    buffers = [{name: layer[name] for name in _SELF_ATTENTION} for layer in cache["layers"]]
    fixed = {"memory_mask": cache["memory_mask"],
             "layers": [{name: layer[name] for name in layer if name not in _SELF_ATTENTION}
                        for layer in cache["layers"]]}

    def step_fn(ids, step, buffers):
        layers = [dict(layer, **own) for layer, own in zip(fixed["layers"], buffers)]
        logits, cache = model.decode_cached(ids[:, None], dict(fixed, layers=layers), step,
                                            grow_cache=cache_length is None,
                                            output_kernel=output_kernel)
        return without_padding(logits[:, 0]), [{name: layer[name] for name in _SELF_ATTENTION}
                              for layer in cache["layers"]]

    return step_fn, buffers


_SELF_ATTENTION = ("self_keys", "self_values")


def members(model):
    """The models of `model`: a `Transformer`, or a list or tuple of them (an ensemble)."""
    return list(model) if isinstance(model, (list, tuple)) else [model]


def ensemble_step(models, source_ids, cache_length=None):
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
        return cached_step(models[0], source_ids, cache_length)
    steps, caches = zip(*(cached_step(m, source_ids, cache_length) for m in models))
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


def _output_limits(model, source_ids, max_output_length, extra_length, *, fixed_shapes):
    """Each sentence's limit, int32 [batch] (`beam_decode`'s `max_output_length`), and the
    output length (the searches' buffer_length, and the cache's under XLA): a Python int if
    `fixed_shapes` (XLA), else an int32 scalar. `model` is one or several (`members`)."""
    if max_output_length is None:
        limits = output_limits(source_lengths(source_ids), extra_length=extra_length,
                               model=model)
    else:
        limits = output_limits(  # the caller's limits, under the position tables
            tf.broadcast_to(tf.cast(max_output_length, tf.int32), tf.shape(source_ids)[:1]),
            extra_length=0, model=model)
    if not fixed_shapes:
        return limits, longest(limits)
    if isinstance(max_output_length, int):
        output_length = output_limits(max_output_length, extra_length=0, model=model)
    elif source_ids.shape[1] is None:
        raise ValueError("with jit_compile, source_ids need a static length, or max_output_length "
                         "a Python int (XLA needs the output length when it compiles)")
    else:  # a tensor max_output_length is capped, as the paper's limits are, at the buffer
        output_length = output_limits(source_ids.shape[1], extra_length=extra_length, model=model)
    return tf.minimum(limits, output_length), output_length


def _with_conveniences(processors, prefix_ids, tree_constraint):
    """The processors that `prefix_ids` and `tree_constraint` stand for, then `processors`."""
    return ([PrefixForcing(prefix_ids)] if prefix_ids is not None else []) + (
        [tree_constraint] if tree_constraint is not None else []) + list(processors)


def _beam_decode(model, source_ids, max_output_length, extra_length, beam_size, alpha, eos_id,
                 processors, length_normalization, *, fixed_shapes):
    source_ids = tf.cast(source_ids, tf.int32)
    limits, output_length = _output_limits(model, source_ids, max_output_length, extra_length,
                                           fixed_shapes=fixed_shapes)
    # XLA needs fixed shapes: a cache preallocated to the output length, written in place.
    step_fn, cache = ensemble_step(model, source_ids,
                                   cache_length=output_length if fixed_shapes else None)
    return beam_search(step_fn, cache, limits, beam_size=beam_size, alpha=alpha,
                       buffer_length=output_length, eos_id=eos_id, processors=processors,
                       length_normalization=length_normalization)


_beam_decode_graph = graph_function(functools.partial(_beam_decode, fixed_shapes=False),
                                    reduce_retracing=True)
# XLA compiles once per [batch, source_length]; the buffers' length follows from that shape.
_beam_decode_xla = graph_function(functools.partial(_beam_decode, fixed_shapes=True),
                                  jit_compile=True)


def beam_decode(model, source_ids, *, max_output_length=None, extra_length=EXTRA_LENGTH,
                beam_size=4, alpha=0.6, eos_id=EOS_ID, jit_compile=False, processors=(),
                prefix_ids=None, tree_constraint=None, length_normalization="gnmt"):
    """Beam search through the key/value cache, compiled into one TensorFlow graph.

    Args:
        model: a `Transformer`, or a list of them sharing a vocabulary: an ensemble, whose
            distribution at each step is the average of theirs (`ensemble_step`).
        source_ids: int [batch, source_length], 0-padded, each ending with end of sentence.
        max_output_length: the most tokens to produce: a scalar or int [batch]; None (the
            paper) for each sentence's real length + `extra_length`. Learned positions cap it
            at the model's `max_positions` (its position table).
        extra_length: see `max_output_length`.
        beam_size, alpha, eos_id: see `beam_search.beam_search` (the paper: 4 and 0.6).
        jit_compile: compile with XLA; the output length is then `max_output_length` if it is
            a Python int, else source_length + extra_length (capping a tensor
            `max_output_length`), capped as above (one compilation per input shape: pad to a
            few fixed shapes, as `Translator(jit_compile=True)` does).
        processors: a list of decoding processors (`keras_transformer.search.processors`), applied
            to every step's logits in order, after the two below.
        prefix_ids: int [batch, prefix_length], 0-padded target subwords every hypothesis of
            a sentence starts with; None: no prefix. A convenience for
            `processors.PrefixForcing(prefix_ids)`.
        tree_constraint: a `tree_constraint.TreeConstraint`: only well-formed trees over each
            sentence's leaves (a parser); None: any output. A convenience for putting it in
            `processors`.
        length_normalization: "gnmt" (the paper's) or "hf" (Hugging Face generate's); see
            `beam_search.beam_search`.

    Returns:
        (ids int32 [batch, beam_size, length], best first, 0 after end of sentence;
        scores float32 [batch, beam_size]: log-probability / length penalty).
    """
    decode = _beam_decode_xla if jit_compile else _beam_decode_graph
    return decode(model, source_ids, max_output_length, extra_length, beam_size, alpha, eos_id,
                  _with_conveniences(processors, prefix_ids, tree_constraint),
                  length_normalization)


@graph_function(reduce_retracing=True)
def _sample_decode(model, source_ids, max_output_length, extra_length, temperature, top_k, seed,
                   processors):
    source_ids = tf.cast(source_ids, tf.int32)
    limits, output_length = _output_limits(model, source_ids, max_output_length, extra_length,
                                           fixed_shapes=False)
    step_fn, cache = ensemble_step(model, source_ids)
    return sampling_search(step_fn, cache, limits, temperature=temperature, top_k=top_k,
                           seed=seed, buffer_length=output_length, processors=processors)


def sample_decode(model, source_ids, *, max_output_length=None, extra_length=EXTRA_LENGTH,
                  temperature=1.0, top_k=0, seed=None, processors=(), prefix_ids=None,
                  tree_constraint=None):
    """Sampling (temperature, top-k) or, at temperature 0, greedy decoding, through the cache.

    Args:
        model, source_ids, max_output_length, extra_length: as for `beam_decode`.
        temperature, top_k, seed: see `sampling.sampling_search`.
        processors, prefix_ids, tree_constraint: as for `beam_decode` (the last two
            conveniences).

    Returns:
        (ids int32 [batch, length], 0 after each sentence's end of sentence; scores float32
        [batch], the sum of the chosen tokens' log-probabilities).
    """
    if not tf.is_tensor(temperature):
        check_temperature(temperature)
        # Tensors, not Python values, for what only sets numbers in the search: a new
        # temperature or seed must not trace it again (greedy or sampling, and top_k, choose
        # the graph).
        temperature = 0.0 if temperature == 0 else tf.constant(temperature, tf.float32)
    if seed is not None:
        seed = tf.cast(seed, tf.int32)
    return _sample_decode(model, source_ids, max_output_length, extra_length, temperature,
                          top_k, seed,
                          _with_conveniences(processors, prefix_ids, tree_constraint))


def greedy_decode(model, source_ids, *, max_output_length=None, extra_length=EXTRA_LENGTH,
                  processors=(), prefix_ids=None, tree_constraint=None):
    """The most probable next token at every step: `sample_decode` at temperature 0."""
    return sample_decode(model, source_ids, max_output_length=max_output_length,
                         extra_length=extra_length, temperature=0.0, processors=processors,
                         prefix_ids=prefix_ids, tree_constraint=tree_constraint)
