"""What one request to a `Translator` may cost, bounded: how many sentences, how many bytes of
each are read, how many beam positions one search holds. Checked in the graph, so TF Serving
answers a request past a bound with an INVALID_ARGUMENT error naming it instead of running it.
"""

import dataclasses
import functools

import tensorflow as tf

from keras_transformer import cli
from keras_transformer.model_dir import ConfigError
from keras_transformer.search.settings import DecodingConfig

# The least value of each bound: the one place they are stated (kt-export's flags parse with
# `flag_type`, as RequestBounds checks itself).
MINIMUMS = {"max_batch_size": 1, "max_input_bytes": 1, "max_search_positions": 1}
# Bytes of a text read at most for each input token by default: far more than real text needs,
# so that tokenizing a huge string costs no more than a long one.
BYTES_PER_TOKEN = 16


def bound_problem(name, value):
    """What is wrong with `value` for the bound `name` ("must be at least 1, got 0"), or
    None."""
    if not MINIMUMS[name] <= value < float("inf"):
        return f"must be at least {MINIMUMS[name]}, got {value}"
    return None


def flag_type(name):
    """The argparse type of the bound `name`: an int within `MINIMUMS`' bound."""
    return cli.checked(int, functools.partial(bound_problem, name))


def input_bytes(max_input_length):
    """The default max_input_bytes of inputs of at most `max_input_length` tokens."""
    return BYTES_PER_TOKEN * max_input_length


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestBounds:
    """The bounds of one request to a translator decoding as `decoding` says (its beam size, and
    its max_output_length, the longest output).

    Attributes:
        max_batch_size: most sentences a call may carry.
        max_input_bytes: bytes of a text read at most.
        max_search_positions: most positions one search may hold: sentences x beam size x the
            longest output limit among them (their memory and time grow with it), checked
            before the search; more is an INVALID_ARGUMENT error naming it. So a server takes
            64 short sentences or 8 long ones and refuses 64 long ones. At least beam_size x
            longest_output (one sentence always fits). It counts the request as sent: under
            jit_compile the padded shapes hold more. Scoring (`score`, `score_ids`) is held to
            it too, as a search of one hypothesis a sentence: sentences x the longest target
            scored. None: no bound beyond max_batch_size and the decoding's input and output
            lengths.
        decoding: the translator's `DecodingConfig`, every field a search reads set
            (`DecodingConfig.for_model`).

    Raises:
        ConfigError: a bound out of its range, by name.
    """

    max_batch_size: int
    max_input_bytes: int
    max_search_positions: int | None
    decoding: DecodingConfig

    def __post_init__(self):
        for name in MINIMUMS:
            value = getattr(self, name)
            problem = None if value is None else bound_problem(name, value)
            if problem:
                raise ConfigError(f"{name} {problem}")
        # One sentence at its longest always fits.
        one_sentence = self.decoding.beam_size * self.decoding.max_output_length
        if self.max_search_positions is not None and self.max_search_positions < one_sentence:
            raise ConfigError(f"max_search_positions must be at least {one_sentence}, got "
                              f"{self.max_search_positions}")

    def check_batch(self, batch_size):
        """An assertion that `batch_size` sentences are within max_batch_size."""
        return tf.debugging.assert_less_equal(
            batch_size, tf.cast(self.max_batch_size, batch_size.dtype),
            message=f"too many sentences in one request: the limit (max_batch_size) is "
                    f"{self.max_batch_size}; split the batch")

    def _check_search(self, limits, beams):
        """An assertion that a search of `beams` hypotheses a sentence under `limits` (int32
        [batch]) holds at most max_search_positions positions; None where there is no bound."""
        if self.max_search_positions is None:
            return None
        longest = tf.reduce_max(tf.concat([limits, [0]], 0))
        positions = (tf.cast(tf.size(limits), tf.int64) * beams) * tf.cast(longest, tf.int64)
        return tf.debugging.assert_less_equal(
            positions, tf.constant(self.max_search_positions, tf.int64),
            message=f"a search past the limit (max_search_positions) of "
                    f"{self.max_search_positions} positions: sentences x beam size ({beams}) x "
                    f"the longest output limit; send fewer or shorter sentences")

    def rows_within_bound(self, longest_limit):
        """int32: the most sentences one beam search may take when the longest output limit
        among them is `longest_limit` (int32): max_batch_size, or fewer under
        max_search_positions (never fewer than 1: one sentence always fits)."""
        if self.max_search_positions is None:
            return tf.constant(self.max_batch_size, tf.int32)
        fit = self.max_search_positions // (
            self.decoding.beam_size * tf.maximum(tf.cast(longest_limit, tf.int64), 1))
        return tf.cast(tf.clip_by_value(fit, 1, self.max_batch_size), tf.int32)

    def checked_search(self, source_ids, limits, beams):
        """`source_ids` (int32 [batch, length]), to be read only after the check that a search
        of `beams` hypotheses a sentence under `limits` (int32 [batch]) stays within
        max_search_positions has passed (an INVALID_ARGUMENT error naming the limit if not)."""
        check = self._check_search(limits, beams)
        if check is None:
            return source_ids
        with tf.control_dependencies([check]):
            return tf.identity(source_ids)

    def checked_scoring(self, target_ids):
        """`target_ids` (int32 [batch, length], cut to the output limits), to be read only
        after the check that scoring them (sentences x length positions) stays within
        max_search_positions."""
        if self.max_search_positions is None:
            return target_ids
        positions = tf.cast(tf.size(target_ids), tf.int64)
        with tf.control_dependencies([tf.debugging.assert_less_equal(
                positions, tf.constant(self.max_search_positions, tf.int64),
                message=f"scoring past the limit (max_search_positions) of "
                        f"{self.max_search_positions} positions: sentences x the longest target "
                        f"scored; send fewer or shorter pairs")]):
            return tf.identity(target_ids)

    def settings(self):
        """The bounds, as a JSON-able dict (for export.json)."""
        return {name: getattr(self, name) for name in MINIMUMS}
