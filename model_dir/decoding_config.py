"""How a trained model decodes, resolved once from the model's own defaults: the one place the
commands, the Python API, the SavedModel, the CTranslate2 engine and the Trainer's dev BLEU take
their settings from (here, below trainer/ and export/, for both).

    from keras_transformer.export import DecodingConfig, Translator
    translator = Translator.from_model_dir("runs/demo")  # as kt-translate --model_dir runs/demo
    wider = Translator.from_model_dir("runs/demo", DecodingConfig(beam_size=8))

A field left None takes the model's default (`DecodingConfig.resolved`): the run's hparams
(decode_beam_size, decode_alpha, decode_length_normalization, an imported model's
decode_max_output_length), the preset of what it was trained on (translation, or parsing for a
treebank: section 6.3's beam 21, alpha 0.3, input + 300) and the run's longest training input.
"""

import dataclasses

from keras_transformer.data import treebank
from keras_transformer.hparams import LENGTH_NORMALIZATIONS
from keras_transformer.model_dir.config import ConfigError
from keras_transformer.model_dir.loading import DTYPES, ModelDirError, load
from keras_transformer.runtime import devices
from keras_transformer.search.decode import EXTRA_LENGTH

# Section 6.1's translation settings and section 6.3's parsing ones; what a preset leaves out
# (translation's beam size and alpha) the model's hparams say (the paper's 4 and 0.6 unless the
# run overrode them or the model was imported with its own).
DECODE_PRESETS = {"translation": dict(extra_length=EXTRA_LENGTH),
                  "parsing": dict(beam_size=21, alpha=0.3, extra_length=treebank.EXTRA_LENGTH)}


def preset_of(run_data):
    """The decode preset of a model trained on --data `run_data`: parsing for a treebank."""
    return "parsing" if treebank.is_treebank(run_data) else "translation"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodingConfig:
    """How to decode. Every field None (the default) is the model's own setting.

    Attributes:
        preset: "translation" or "parsing" (`DECODE_PRESETS`); None: the one of the model's
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
        max_output_length: longest output in tokens (see `decoding.output_limits`).
        tree_constraint: for a parser, only well-formed trees over the sentence's words (its
            default); False decodes any sequence, as the paper did. True for a translation model
            is an error.
        jit_compile: beam search compiled with XLA (for GPUs).
        batch_size: sentences decoded together by the commands and `translate_lines`
            (`devices.decode_batch_size()`: 32 on a CPU, 128 on a GPU).
        dtype: "float32" (as trained), "mixed_bfloat16" or "bfloat16" (`model_dir.DTYPES`).
        ema: a run trained with --ema_decay: its moving averages (None: where the checkpoint
            holds them) or, False, the trained weights.
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
    dtype: str = "float32"
    ema: bool | None = None

    def __post_init__(self):
        for field, choices in (("preset", DECODE_PRESETS), ("dtype", DTYPES),
                               ("length_normalization", LENGTH_NORMALIZATIONS)):
            value = getattr(self, field)
            if value is not None and value not in choices:
                raise ConfigError(f"DecodingConfig {field} must be one of "
                                            f"{', '.join(sorted(choices))}, got {value!r}")
        for field, minimum in (("beam_size", 1), ("alpha", 0), ("extra_length", 0),
                               ("max_input_length", 2), ("max_output_length", 1),
                               ("batch_size", 1)):
            value = getattr(self, field)
            if value is not None and not minimum <= value < float("inf"):
                raise ConfigError(f"DecodingConfig {field} must be a number >= "
                                            f"{minimum}, got {value}")

    def with_preset(self, run_data=None):
        """This configuration with the fields it leaves unset taken from its preset (or, if it
        names none, the preset of a model trained on `run_data`; None: translation)."""
        preset = self.preset or preset_of(run_data)
        unset = {name: value for name, value in DECODE_PRESETS[preset].items()
                 if getattr(self, name) is None}
        return dataclasses.replace(self, preset=preset, **unset)

    def resolved(self, loaded):
        """Every field set (max_output_length None: each input's length + extra_length), from
        this configuration and the model `loaded` (a `model_dir.Loaded`): `resolved_for` its
        hparams and its run's data section.

        Raises:
            ConfigError: tree_constraint True for a model that does not write trees.
        """
        return self.resolved_for(loaded.hparams, loaded.run.data)

    def resolved_for(self, hparams, run_data):
        """`resolved` for a model not loaded from a model_dir (the Trainer's, while it
        trains): its `HParams` give the length normalization, a fixed output limit, the beam
        size and alpha; `run_data` (a `DataConfig`) the preset and the longest input; the
        device the batch size."""
        config = dataclasses.replace(
            self, length_normalization=(self.length_normalization
                                        or hparams.decode_length_normalization))
        fixed = hparams.decode_max_output_length
        if fixed is not None and config.extra_length is None:
            limit = config.max_output_length or fixed
            config = dataclasses.replace(config, max_output_length=limit, extra_length=limit)
        config = config.with_preset(run_data.corpus)
        leaves = (treebank.leaves_of(run_data.corpus) if treebank.is_treebank(run_data.corpus)
                  else None)
        if config.tree_constraint and leaves is None:
            raise ConfigError(
                f"tree_constraint: the model was trained on --data {run_data.corpus}, a "
                f"translation corpus; only a parser (trained on ptb: data) writes trees")
        return dataclasses.replace(
            config,
            beam_size=config.beam_size or hparams.decode_beam_size,
            alpha=hparams.decode_alpha if config.alpha is None else config.alpha,
            max_input_length=config.max_input_length or run_data.max_pair_length,
            tree_constraint=leaves is not None and config.tree_constraint is not False,
            batch_size=config.batch_size or devices.decode_batch_size())

    def translator_settings(self, loaded):
        """`Translator`'s keyword arguments for the model `loaded` decoded as configured
        (all but max_batch_size, processors and calibration)."""
        config = self.resolved(loaded)
        return dict(beam_size=config.beam_size, alpha=config.alpha,
                    length_normalization=config.length_normalization,
                    extra_length=config.extra_length,
                    max_input_length=config.max_input_length,
                    max_output_length=config.max_output_length,
                    tree_leaves=(treebank.leaves_of(loaded.run.data.corpus)
                                 if config.tree_constraint else None),
                    jit_compile=config.jit_compile)


def load_members(path, decoding=None, *, checkpoints=None, ensemble=()):
    """[model_dir.Loaded]: the model_dir `path` with each of `checkpoints` (None: its default
    one), then each model_dir of `ensemble` (its default checkpoint), in `decoding`'s dtype and
    with its ema choice; more than one is an ensemble.

    Raises:
        ModelDirError: as `model_dir.load`, or members whose vocabularies differ (naming both
            files).
    """
    decoding = decoding or DecodingConfig()
    members = [load(path, checkpoint, decoding.dtype, decoding.ema)
               for checkpoint in checkpoints or [None]]
    members += [load(other, None, decoding.dtype, decoding.ema) for other in ensemble]
    first = members[0].vocabulary
    for member in members[1:]:
        if member.vocabulary.serialized != first.serialized:
            raise ModelDirError(
                f"{member.vocabulary.path} and {first.path} are different vocabularies; the "
                f"members of an ensemble must share one")
    return members
