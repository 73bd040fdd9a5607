"""How to decode, as one object from the command line (or Python, or an export's export.json) to
the search: `DecodingConfig`, its bounds checked once, here, and the one rule for how long an
output may be (`DecodingConfig.output_limits`).

    from keras_transformer.search.settings import DecodingConfig
    ids, scores = kt.beam_decode(model, source_ids, DecodingConfig(beam_size=8, alpha=1.0))

A field left None is the model's own setting: model_dir/decoding_config.py `resolved` fills it
from a trained model's run (its hparams' decode_* settings, the preset of what it was trained
on, its longest training input), and the searches called without a model_dir fill what is
still unset with the paper's (`with_paper_defaults`: beam 4, alpha 0.6, input + 50 tokens).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_transformer.errors import UserError, check_one_of
from keras_transformer.hparams import DECODING_MINIMUMS as MINIMUMS
from keras_transformer.hparams import LENGTH_NORMALIZATIONS
from keras_transformer.hparams import decoding_bound_problem as bound_problem

# Section 6.1: "maximum output length to input length + 50".
EXTRA_LENGTH = 50
# Section 6.3, parsing: "maximum output length to input length + 300".
PARSING_EXTRA_LENGTH = 300
# Section 6.1's translation settings and section 6.3's parsing ones; what a preset leaves out
# (translation's beam size and alpha) is the model's (the paper's 4 and 0.6 unless the run
# overrode them or the model was imported with its own).
PRESETS = {"translation": dict(extra_length=EXTRA_LENGTH),
           "parsing": dict(beam_size=21, alpha=0.3, extra_length=PARSING_EXTRA_LENGTH)}
# What the paper decodes with where nothing else says (section 6.1).
PAPER = dict(beam_size=4, alpha=0.6, length_normalization="gnmt", extra_length=EXTRA_LENGTH)
# What a model decodes in: "float32" (as trained), "mixed_bfloat16" (bfloat16 compute on float32
# weights) or "bfloat16" (the weights stored in bfloat16 too).
DTYPES = ("float32", "mixed_bfloat16", "bfloat16")
# What a DecodingConfig may ask for: one of DTYPES, or "auto", the one this machine decodes
# fastest in (`runtime.devices.choose_decoding_dtype`), chosen where a model is loaded.
DTYPE_CHOICES = ("auto", *DTYPES)


class DecodingConfigError(UserError):
    """A decoding setting that cannot be used (its message names the field)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodingConfig:
    """How to decode. Every field None (the default) is the model's own setting.

    Attributes:
        preset: "translation" or "parsing" (`PRESETS`); None: the one of the model's
            training data.
        beam_size: hypotheses kept (translation: the model's decode_beam_size, the paper's 4).
        alpha: the length penalty's exponent (translation: the model's decode_alpha).
        length_normalization: "gnmt" (the paper's) or "hf" (Hugging Face generate's, an
            imported model's default).
        extra_length: output tokens allowed beyond the input's (translation 50, parsing 300);
            with a model whose hparams fix an output limit (decode_max_output_length, an
            imported model's) and no extra_length given, that limit holds whatever the input's
            length, as where the model came from.
        max_input_length: longest input in tokens; longer ones are truncated (the run's
            longest training input).
        max_output_length: longest output in tokens (see `output_limits`).
        tree_constraint: for a parser, only well-formed trees over the sentence's words (its
            default); False decodes any sequence, as the paper did. True for a translation model
            is an error.
        jit_compile: beam search compiled with XLA (for GPUs).
        batch_size: sentences decoded together by the commands and `translate_lines`
            (`devices.decode_batch_size()`: 32 on a CPU, 128 on a GPU).
        dtype: "auto" (the default: bfloat16 where this machine computes it fast, else
            float32; chosen where a model_dir is loaded, `decoding_config.load_members`) or one
            of `DTYPES`: "float32" (as trained), "mixed_bfloat16" or "bfloat16". A model
            already built decodes in its own; `for_model` records it.
        ema: a run trained with --ema_decay: its moving averages (None: where the checkpoint
            holds them) or, False, the trained weights.

    Raises:
        DecodingConfigError: a field out of its bounds (`MINIMUMS`) or choices, by name.
    """

    preset: str | None = None
    beam_size: int | None = None
    alpha: float | None = None
    length_normalization: str | None = None
    extra_length: int | None = None
    max_input_length: int | None = None
    max_output_length: int | None = None
    tree_constraint: bool | None = None
    jit_compile: bool = False
    batch_size: int | None = None
    dtype: str = "auto"
    ema: bool | None = None

    def __post_init__(self):
        for field, choices in (("preset", PRESETS), ("dtype", DTYPE_CHOICES),
                               ("length_normalization", LENGTH_NORMALIZATIONS)):
            value = getattr(self, field)
            if value is not None:
                check_one_of(f"DecodingConfig {field}", value, sorted(choices),
                             DecodingConfigError)
        for field in MINIMUMS:
            value = getattr(self, field)
            problem = None if value is None else bound_problem(field, value)
            if problem:
                raise DecodingConfigError(f"DecodingConfig {field} {problem}")

    def replace(self, **changes):
        """This configuration with `changes` (checked as a new one is)."""
        return dataclasses.replace(self, **changes)

    def unset(self, defaults):
        """The fields of `defaults` (a dict) that this configuration leaves None, with their
        values there."""
        return {name: value for name, value in defaults.items() if getattr(self, name) is None}

    def with_preset(self, default="translation"):
        """This configuration with the fields it leaves unset taken from its preset (or, if it
        names none, from `default`: the preset of the model's training data)."""
        preset = self.preset or default
        return self.replace(preset=preset, **self.unset(PRESETS[preset]))

    def with_paper_defaults(self):
        """Every field a search reads set: those left None take the paper's (`PAPER`)."""
        return self.replace(**self.unset(PAPER))

    def resolved_for(self, hparams, *, preset, parser, max_input_length, batch_size):
        """Every field set from the model's own settings (max_output_length None: each
        input's length + extra_length).

        Args:
            hparams: the model's `HParams`: its length normalization, a fixed output limit
                (decode_max_output_length, an imported model's), its beam size and alpha.
            preset: the preset of the model's training data ("parsing" for a treebank).
            parser: whether the model writes trees (a tree constraint can hold it).
            max_input_length: its longest training input.
            batch_size: the device's decoding batch.

        Raises:
            DecodingConfigError: tree_constraint True for a model that is no parser (the
                callers that know its training data say so first, naming it).
        """
        config = self
        if config.length_normalization is None:
            config = config.replace(length_normalization=hparams.decode_length_normalization)
        fixed = hparams.decode_max_output_length
        if fixed is not None and config.extra_length is None:
            limit = config.max_output_length or fixed
            config = config.replace(max_output_length=limit, extra_length=limit)
        config = config.with_preset(preset)
        if config.tree_constraint and not parser:
            raise DecodingConfigError("tree_constraint: only a parser (a model trained on a "
                                      "treebank) writes trees")
        return config.replace(
            beam_size=config.beam_size or hparams.decode_beam_size,
            alpha=hparams.decode_alpha if config.alpha is None else config.alpha,
            max_input_length=config.max_input_length or max_input_length,
            tree_constraint=parser and config.tree_constraint is not False,
            batch_size=config.batch_size or batch_size)

    def overridden_by(self, other):
        """This configuration (an export's, every field set) with the fields `other` sets
        (a preset filling what `other` leaves unset). The output cap this one holds stays
        only while `other` changes neither the input length nor extra_length it came from."""
        if other.preset:
            other = other.with_preset()
        given = {field.name: getattr(other, field.name) for field in dataclasses.fields(other)
                 if getattr(other, field.name) is not None
                 and field.name not in ("jit_compile", "dtype")}
        config = self.replace(**given)
        if other.max_output_length is None and (other.max_input_length is not None
                                                 or other.extra_length is not None):
            config = config.replace(max_output_length=None)
        return config

    def output_limits(self, input_lengths, *, model=None, max_positions=None):
        """The most tokens (end of sentence included) a translation of inputs of
        `input_lengths` may have: the paper's input length + extra_length (6.1), at most
        max_output_length, and at most a position table: `model`'s (one or several) where
        learned, or one of `max_positions` rows. The one place the limit is computed.

        Args:
            input_lengths: real input lengths: an int, a numpy array or an int32 tensor.
            model: None, or the model(s) that decode (their learned position tables cap the
                limit).
            max_positions: None, or the rows of the position table that decodes (an int; e.g.
                a CTranslate2 export's).

        Returns:
            `input_lengths`' kind and shape (a tensor if any argument is one; a Python int
            for ints).
        """
        return capped(input_lengths + self.extra_length,
                      self.max_output_length, *position_caps(model, max_positions))

    def longest_output(self, *, model=None, max_positions=None):
        """The longest any translation may be, an int: max_output_length where given (it also
        cuts the targets a Translator scores), else the longest input's limit; under the
        position tables (`output_limits`' `model` and `max_positions`)."""
        if self.max_output_length is None:
            return self.output_limits(self.max_input_length, model=model,
                                      max_positions=max_positions)
        return capped(self.max_output_length, *position_caps(model, max_positions))

    def for_model(self, model, *, max_positions=None):
        """This configuration (every field a search reads set) bounded by `model`'s learned
        position tables, or `max_positions` rows: max_input_length cut to them, and
        max_output_length the longest output (`longest_output`), so that each input's limit
        is `output_limits` of its length; dtype the one `model` computes in."""
        policy = getattr(members(model)[0], "dtype_policy", None)
        config = self.replace(
            max_input_length=capped(self.max_input_length, *position_caps(model, max_positions)),
            dtype=policy.name if policy is not None and policy.name in DTYPES else self.dtype)
        return config.replace(max_output_length=config.longest_output(
            model=model, max_positions=max_positions))


def members(model):
    """The models of `model`: a `Transformer`, or a list or tuple of them (an ensemble)."""
    return list(model) if isinstance(model, (list, tuple)) else [model]


def position_caps(model=None, max_positions=None):
    """[int]: the rows of the position tables that bound an output: `model`'s (one or several,
    `members`) where learned, and `max_positions`."""
    caps = [] if max_positions is None else [max_positions]
    if model is not None:
        caps += [m.max_positions for m in members(model) if m.position_encoding == "learned"]
    return caps


def capped(limits, *caps):
    """`limits` (an int, a numpy array or an int32 tensor) at most each of `caps` (None: no
    cap), in `limits`' kind (a tensor if any is one; a Python int for ints)."""
    for cap in caps:
        if cap is None:
            continue
        if tf.is_tensor(limits) or tf.is_tensor(cap):
            limits = tf.minimum(limits, tf.cast(cap, tf.int32))
        else:
            limits = np.minimum(limits, cap)
    return int(limits) if np.ndim(limits) == 0 and not tf.is_tensor(limits) else limits
