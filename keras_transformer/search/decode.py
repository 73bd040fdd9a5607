"""The searches over a `Transformer` (or an ensemble): `beam_decode`, `greedy_decode` and
`sample_decode`, each compiled into one TensorFlow graph, each taking its settings whole as a
`DecodingConfig` (search/settings.py; keyword arguments build one).

The model becomes the searches' step function in steps.py; the searches themselves are beam.py
and sampling.py.
"""

import functools
import typing

import tensorflow as tf

from keras_transformer.search.beam import beam_search
from keras_transformer.search.candidates import (
    InCandidates,
    over_candidates,
    vocabulary_ids,
    with_special_ids,
)
from keras_transformer.search.contract import graph_function, longest
from keras_transformer.search.processors import PrefixForcing
from keras_transformer.search.sampling import check_temperature, sampling_search
from keras_transformer.search.settings import DecodingConfig, capped, members, position_caps
from keras_transformer.search.steps import ensemble_step, source_lengths
from keras_transformer.token_ids import EOS_ID


class _Search(typing.NamedTuple):
    """The fields of a `DecodingConfig` a traced search reads, as Python values: tf.function
    traces a tuple by its values (a dataclass instance by its identity, once per object)."""
    beam_size: int
    alpha: float
    length_normalization: str
    extra_length: int
    max_output_length: int | None


def search_config(decoding=None, **settings):
    """The `DecodingConfig` a search runs with: `decoding` (None: `DecodingConfig()`) with the
    keyword `settings` given, then the paper's for every field still unset
    (`DecodingConfig.with_paper_defaults`)."""
    decoding = decoding or DecodingConfig()
    given = {name: value for name, value in settings.items() if value is not None}
    return (decoding.replace(**given) if given else decoding).with_paper_defaults()


def _search_of(decoding):
    return _Search(decoding.beam_size, decoding.alpha, decoding.length_normalization,
                   decoding.extra_length, decoding.max_output_length)


def _output_limits(model, source_ids, max_output_length, search, *, fixed_shapes):
    """Each sentence's limit, int32 [batch], and the output length (the searches'
    buffer_length, and the cache's under XLA): a Python int if `fixed_shapes` (XLA), else an
    int32 scalar. `max_output_length`: the call's own limits (a scalar or int [batch]) or None
    (`DecodingConfig.output_limits` of each source's length); `model` one or several."""
    rule = DecodingConfig(extra_length=search.extra_length,
                          max_output_length=search.max_output_length)
    caps = position_caps(model)
    if max_output_length is None:
        limits = rule.output_limits(source_lengths(source_ids), model=model)
        cap = search.max_output_length
    else:  # the caller's limits, under the position tables
        limits = capped(tf.broadcast_to(tf.cast(max_output_length, tf.int32),
                                        tf.shape(source_ids)[:1]), *caps)
        cap = max_output_length
    if not fixed_shapes:
        return limits, longest(limits)
    if isinstance(cap, int):
        output_length = capped(cap, *caps)
    elif source_ids.shape[1] is None:
        raise ValueError("with jit_compile, source_ids need a static length, or max_output_length "
                         "a Python int (XLA needs the output length when it compiles)")
    else:  # a tensor max_output_length is capped, as the paper's limits are, at the buffer
        output_length = DecodingConfig(extra_length=search.extra_length).output_limits(
            source_ids.shape[1], model=model)
    return tf.minimum(limits, output_length), output_length


def _with_conveniences(processors, prefix_ids, tree_constraint):
    """The processors that `prefix_ids` and `tree_constraint` stand for, then `processors`."""
    return ([PrefixForcing(prefix_ids)] if prefix_ids is not None else []) + (
        [tree_constraint] if tree_constraint is not None else []) + list(processors)


def _beam_decode(model, source_ids, max_output_length, search, eos_id, processors, candidates,
                 *, fixed_shapes):
    source_ids = tf.cast(source_ids, tf.int32)
    limits, output_length = _output_limits(model, source_ids, max_output_length, search,
                                           fixed_shapes=fixed_shapes)
    # XLA needs fixed shapes: a cache preallocated to the output length, written in place.
    step_fn, cache = ensemble_step(model, source_ids,
                                   cache_length=output_length if fixed_shapes else None,
                                   candidates=candidates)
    step_fn, processors = _over(candidates, step_fn, processors, model)
    ids, scores = beam_search(step_fn, cache, limits, beam_size=search.beam_size,
                              alpha=search.alpha, buffer_length=output_length, eos_id=eos_id,
                              processors=processors,
                              length_normalization=search.length_normalization)
    return _ids_of(ids, candidates), scores


def _over(candidates, step_fn, processors, model):
    """The step function and processors of a search over `candidates` (positions among them
    in, search/candidates.py), or as given for None."""
    if candidates is None:
        return step_fn, processors
    return (over_candidates(step_fn, candidates),
            [InCandidates(tuple(processors), candidates, members(model)[0].vocab_size)]
            if processors else [])


def _ids_of(ids, candidates):
    return ids if candidates is None else vocabulary_ids(ids, candidates)


def _candidates(candidates, eos_id):
    """`candidates` as the searches take them (`with_special_ids`), or None."""
    if candidates is None:
        return None
    if eos_id != EOS_ID:
        raise ValueError(f"a search over candidates ends sentences with id {EOS_ID}, not "
                         f"{eos_id}")
    return with_special_ids(candidates)


_beam_decode_graph = graph_function(functools.partial(_beam_decode, fixed_shapes=False),
                                    reduce_retracing=True)
# XLA compiles once per [batch, source_length]; the buffers' length follows from that shape.
_beam_decode_xla = graph_function(functools.partial(_beam_decode, fixed_shapes=True),
                                  jit_compile=True)


def beam_decode(model, source_ids, decoding=None, *, max_output_length=None, processors=(),
                prefix_ids=None, tree_constraint=None, eos_id=EOS_ID, candidates=None,
                beam_size=None, alpha=None, extra_length=None, length_normalization=None,
                jit_compile=None):
    """Beam search through the key/value cache, compiled into one TensorFlow graph.

    Args:
        model: a `Transformer`, or a list of them sharing a vocabulary: an ensemble, whose
            distribution at each step is the average of theirs (`steps.ensemble_step`).
        source_ids: int [batch, source_length], 0-padded, each ending with end of sentence.
        decoding: a `DecodingConfig`: beam_size, alpha, length_normalization, extra_length,
            max_output_length (each sentence's limit is `DecodingConfig.output_limits` of its
            length) and jit_compile; fields it leaves None are the paper's (beam 4, alpha
            0.6, "gnmt", input + 50). None: all the paper's.
        max_output_length: this call's own limits instead of `decoding`'s rule: a scalar or
            int [batch] (e.g. a Translator's, computed once for several searches). Learned
            positions cap either at the model's `max_positions` (its position table).
        processors: a list of decoding processors (search/processors.py), applied to every
            step's logits in order, after the two below.
        prefix_ids: int [batch, prefix_length], 0-padded target subwords every hypothesis of
            a sentence starts with; None: no prefix. A convenience for
            `processors.PrefixForcing(prefix_ids)`.
        tree_constraint: a `constraints.tree.TreeConstraint`: only well-formed trees over each
            sentence's leaves (a parser); None: any output. A convenience for putting it in
            `processors`.
        eos_id: see `beam.beam_search`.
        candidates: int32 [k], distinct target ids, the only ones the search may write: a
            vocabulary shortlist (`data.shortlist`); each step's output projection and softmax
            cover these k alone, so a candidate's log-probability is the model's full softmax
            restricted to them and renormalized (as Marian's and CTranslate2's shortlists
            compute it); the search itself runs over the k (search/candidates.py), so its
            softmax and top-k cost k, not the vocabulary. End of sentence is always one; the
            caller keeps what its processors force among them (the `Translator` does). None:
            every id.
        beam_size, alpha, extra_length, length_normalization, jit_compile: conveniences that
            set these fields of `decoding` (`search_config`). Under jit_compile (XLA), the
            output length is `max_output_length` if it is a Python int, else source_length +
            extra_length (capping a tensor `max_output_length`), capped as above: one
            compilation per input shape (pad to a few fixed shapes, as
            `Translator(jit_compile=True)` does).

    Returns:
        (ids int32 [batch, beam_size, length], best first, 0 after end of sentence;
        scores float32 [batch, beam_size]: log-probability / length penalty).
    """
    decoding = search_config(decoding, beam_size=beam_size, alpha=alpha,
                             extra_length=extra_length, length_normalization=length_normalization,
                             jit_compile=jit_compile)
    decode = _beam_decode_xla if decoding.jit_compile else _beam_decode_graph
    return decode(model, source_ids, max_output_length, _search_of(decoding), eos_id,
                  _with_conveniences(processors, prefix_ids, tree_constraint),
                  _candidates(candidates, eos_id))


@graph_function(reduce_retracing=True)
def _sample_decode(model, source_ids, max_output_length, search, temperature, top_k, seed,
                   processors, candidates):
    source_ids = tf.cast(source_ids, tf.int32)
    limits, output_length = _output_limits(model, source_ids, max_output_length, search,
                                           fixed_shapes=False)
    step_fn, cache = ensemble_step(model, source_ids, candidates=candidates)
    step_fn, processors = _over(candidates, step_fn, processors, model)
    ids, scores = sampling_search(step_fn, cache, limits, temperature=temperature, top_k=top_k,
                                  seed=seed, buffer_length=output_length, processors=processors)
    return _ids_of(ids, candidates), scores


def sample_decode(model, source_ids, decoding=None, *, max_output_length=None, temperature=1.0,
                  top_k=0, seed=None, processors=(), prefix_ids=None, tree_constraint=None,
                  candidates=None, extra_length=None):
    """Sampling (temperature, top-k) or, at temperature 0, greedy decoding, through the cache.

    Args:
        model, source_ids, decoding, max_output_length: as for `beam_decode` (of `decoding`,
            only extra_length and max_output_length: the output limit).
        temperature, top_k, seed: see `sampling.sampling_search`.
        processors, prefix_ids, tree_constraint, candidates: as for `beam_decode` (prefix_ids
            and tree_constraint conveniences).
        extra_length: a convenience that sets `decoding`'s.

    Returns:
        (ids int32 [batch, length], 0 after each sentence's end of sentence; scores float32
        [batch], the sum of the chosen tokens' log-probabilities).
    """
    decoding = search_config(decoding, extra_length=extra_length)
    if not tf.is_tensor(temperature):
        check_temperature(temperature)
        # Tensors, not Python values, for what only sets numbers in the search: a new
        # temperature or seed must not trace it again (greedy or sampling, and top_k, choose
        # the graph).
        temperature = 0.0 if temperature == 0 else tf.constant(temperature, tf.float32)
    if seed is not None:
        seed = tf.cast(seed, tf.int32)
    # Beam settings do not change a sample: the same trace whatever they are.
    search = _Search(1, 0.0, "gnmt", decoding.extra_length, decoding.max_output_length)
    return _sample_decode(model, source_ids, max_output_length, search, temperature, top_k,
                          seed, _with_conveniences(processors, prefix_ids, tree_constraint),
                          _candidates(candidates, EOS_ID))


def greedy_decode(model, source_ids, decoding=None, *, max_output_length=None, processors=(),
                  prefix_ids=None, tree_constraint=None, candidates=None, extra_length=None):
    """The most probable next token at every step: `sample_decode` at temperature 0."""
    return sample_decode(model, source_ids, decoding, max_output_length=max_output_length,
                         temperature=0.0, processors=processors, prefix_ids=prefix_ids,
                         tree_constraint=tree_constraint, candidates=candidates,
                         extra_length=extra_length)
