"""The `Translator`'s sampling: `n` translations of each sentence drawn instead of searched (for
back-translation, or variety), with the beam search's bounds, constraints and shortlist. A mixin:
`Translator` supplies `model`, `decoding`, `bounds`, `_cut_sources`, `output_limits_of`,
`constraints`, `_processors`, `_tree_constraint`, `_candidates` and `_length_penalty`."""

import tensorflow as tf

from keras_transformer.search import scoring
from keras_transformer.search.decode import sample_decode
from keras_transformer.search.processors import rows_repeated
from keras_transformer.search.settings import members
from keras_transformer.token_ids import PAD_ID


class SampledSearches:
    """`sample_n_best_ids`, for the `Translator`."""

    def sample_n_best_ids(self, source_ids, n, temperature, top_k=0, seed=(0, 0),
                          prefix_ids=None, markup=None, glossary=None):
        """`n` translations of each sentence drawn by sampling instead of beam search (e.g. for
        back-translation), in the shape of `translate_n_best_ids`' results: ids [batch, n,
        output_length], scores and log_probs [batch, n], in the order drawn. Bounds, empty rows
        and prefixes as for the beam search; `temperature` (> 0), `top_k` (0: every token) and
        `seed` (int [2]: the same seed, the same samples) as for `keras_transformer.sample_decode`;
        `markup`: (item_ids, opening) of masked texts, as for `translate_n_best_ids_with_markup`;
        `glossary`: phrase ids, as for `translate_n_best_ids_with_glossary`.
        """
        if not 0 < temperature < float("inf"):
            raise ValueError(f"the sampling temperature must be a finite number > 0, got "
                             f"{temperature}")
        vocab_size = members(self.model)[0].vocab_size
        if not 0 <= top_k <= vocab_size:
            raise ValueError(f"top_k must be between 0 (every token) and the vocabulary's "
                             f"{vocab_size}, got {top_k}")
        source_ids, empty, _ = self._cut_sources(tf.constant(source_ids))
        limits = tf.where(empty, 1, self.output_limits_of(source_ids))
        source_ids = self.bounds.checked_search(source_ids, limits, n)
        source_ids, empty = tf.repeat(source_ids, n, axis=0), tf.repeat(empty, n)
        constraints = self.constraints(
            prefix_ids=None if prefix_ids is None else tf.constant(prefix_ids),
            markup=None if markup is None else tuple(tf.constant(values) for values in markup),
            glossary=None if glossary is None else tf.constant(glossary))
        processors = self._processors([rows_repeated(constraint, n) for constraint in constraints],
                                      self._tree_constraint(source_ids))
        ids, log_probs = sample_decode(
            self.model, source_ids, self.decoding,
            max_output_length=tf.repeat(limits, n), temperature=temperature, top_k=top_k,
            seed=tf.constant(seed, tf.int32),  # a tensor: a new seed must not retrace the search
            processors=processors, candidates=self._candidates(source_ids, processors))
        ids = tf.where(empty[:, None], PAD_ID, ids)
        log_probs = tf.where(empty, 0.0, log_probs)
        lengths = tf.reduce_sum(tf.cast(scoring.target_mask(ids), tf.int32), axis=-1)
        shape = [-1, n]
        return {"ids": tf.reshape(ids, [-1, n, tf.shape(ids)[1]]),
                "scores": tf.reshape(log_probs / self._length_penalty(lengths), shape),
                "log_probs": tf.reshape(log_probs, shape)}
