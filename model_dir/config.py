"""A training run's configuration in sections, kept in model_dir/config.json (read, written and
compared with a new run's by config_file.py).

    run = RunConfig(model=ModelConfig(hparams_name="transformer_small"),
                    data=DataConfig(corpus="tatoeba_en_es"),
                    batching=BatchingConfig(batch_tokens=4096))

Each section is a frozen dataclass whose fields have their defaults and are checked when it is
made (config_sections.py; a `ConfigError` names the field as `section.field`); `RunConfig.check`
checks the fields that depend on each other. The file makes model_dir self-contained: translate,
export and a resumed run need nothing else. Fields that define the model or its data (`FIXED`) are
fixed once a run starts; a later run whose configuration disagrees with them is refused rather than
allowed to mix two configurations in one directory. Fields about how to train (steps, batch size,
checkpoint and evaluation cadence, precision) may change between runs.

Format version 1 (kt-train before the sections) kept every field at the top level under the flag
names of `FLAT_NAMES`; format 3 renamed two fields so that each name has one meaning
(`data.max_length` -> `data.max_pair_length`, the hparams' `max_length` -> `max_positions`).
Files of every earlier format still load.
"""

import dataclasses
import json
import re

from keras_transformer import data
from keras_transformer.hparams import RENAMED_FIELDS
from keras_transformer.model_dir.config_sections import (
    KEEP_BEST_METRICS,
    PRECISIONS,
    SECTIONS,
    BatchingConfig,
    CheckpointConfig,
    ComputeConfig,
    ConfigError,
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    OptimizationConfig,
)

# The sections are config_sections.py's; they are imported from here too, beside RunConfig.
__all__ = ["BatchingConfig", "CheckpointConfig", "ComputeConfig", "ConfigError", "DataConfig",
           "EvaluationConfig", "FIXED", "FLAT_NAMES", "FORMAT_VERSION", "KEEP_BEST_METRICS",
           "ModelConfig", "OptimizationConfig", "PRECISIONS", "RunConfig", "SECTIONS"]

FORMAT_VERSION = 3
# kt-train's flag names -> (section, field): format 1's top-level names, but for
# max_pair_length, which format 1 called max_length (`_sections_of_flat`).
FLAT_NAMES = {
    "hparams_name": ("model", "hparams_name"), "hparams_override": ("model", "hparams_override"),
    "hparams": ("model", "hparams"), "vocab_size": ("model", "vocab_size"),
    "glove": ("model", "glove"), "glove_words": ("model", "glove_words"),
    "source_vocab_size": ("model", "source_vocab_size"),
    "embedding_dim": ("model", "embedding_dim"), "init_from": ("model", "init_from"),
    "init_optimizer": ("model", "init_optimizer"), "update_vocab": ("model", "update_vocab"),
    "data": ("data", "corpus"), "data_weights": ("data", "corpus_weights"),
    "source_lang": ("data", "source_lang"),
    "target_lang": ("data", "target_lang"), "tfds_data_dir": ("data", "tfds_data_dir"),
    "invalid_utf8": ("data", "invalid_utf8"), "max_pair_length": ("data", "max_pair_length"),
    "overlong": ("data", "overlong"), "markup_rate": ("data", "markup_rate"),
    "subword_alpha": ("data", "subword_alpha"),
    "batch_tokens": ("batching", "batch_tokens"),
    "accumulate_steps": ("batching", "accumulate_steps"),
    "bucket_growth": ("batching", "bucket_growth"),
    "train_steps": ("optimization", "train_steps"), "seed": ("optimization", "seed"),
    "deterministic": ("optimization", "deterministic"),
    "ema_decay": ("optimization", "ema_decay"),
    "eval_every": ("evaluation", "every"), "eval_sentences": ("evaluation", "sentences"),
    "eval_beam_size": ("evaluation", "beam_size"), "keep_best": ("evaluation", "keep_best"),
    "early_stopping": ("evaluation", "early_stopping"),
    "keep_checkpoints": ("checkpoints", "keep"),
    "checkpoint_every_steps": ("checkpoints", "every_steps"),
    "checkpoint_every_minutes": ("checkpoints", "every_minutes"),
    "average_last": ("checkpoints", "average_last"),
    "mixed_precision": ("compute", "mixed_precision"), "jit_compile": ("compute", "jit_compile"),
}

# Changing these would change the model or the data it learns from. Of hparams, only the fields
# that shape the model count (builders.ARCHITECTURE_FIELDS); training ones may change.
FIXED = (("model", "hparams"), ("model", "vocab_size"), ("model", "init_from"),
         ("model", "glove"), ("model", "glove_words"), ("data", "corpus"),
         ("data", "corpus_weights"), ("data", "source_lang"), ("data", "target_lang"),
         ("data", "max_pair_length"), ("data", "overlong"), ("data", "markup_rate"),
         ("optimization", "ema_decay"))


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A training run's configuration: one frozen section each (`SECTIONS`), the format version
    and the library versions that wrote it."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    batching: BatchingConfig = dataclasses.field(default_factory=BatchingConfig)
    optimization: OptimizationConfig = dataclasses.field(default_factory=OptimizationConfig)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    checkpoints: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    compute: ComputeConfig = dataclasses.field(default_factory=ComputeConfig)
    format_version: int = FORMAT_VERSION
    versions: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for name, kind in SECTIONS.items():
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name} must be a {kind.__name__}, got "
                                  f"{getattr(self, name)!r}")

    def updated(self, changes):
        """A copy with `changes` ({(section, field): value}) applied."""
        sections = {}
        for (section, name), value in changes.items():
            sections.setdefault(section, {})[name] = value
        return dataclasses.replace(self, **{
            section: dataclasses.replace(getattr(self, section), **values)
            for section, values in sections.items()})

    def get(self, section, name):
        return getattr(getattr(self, section), name)

    def check(self):
        """Refuses fields that contradict each other, naming them."""
        model, evaluation = self.model, self.evaluation
        average_last, keep = self.checkpoints.average_last, self.checkpoints.keep
        if average_last and 0 < keep < average_last:
            raise ConfigError(f"checkpoints.average_last {average_last} needs at least as many "
                              f"kept checkpoints; checkpoints.keep is {keep}")
        for option in ("init_optimizer", "update_vocab"):
            if getattr(model, option) and not model.init_from:
                raise ConfigError(f"model.{option} needs model.init_from")
        if model.init_optimizer and model.update_vocab:
            raise ConfigError("model.init_optimizer takes the optimizer's state, whose moments "
                              "of the vocabulary rows model.update_vocab remaps; use one")
        if model.glove_words and not model.glove:
            raise ConfigError("model.glove_words keeps the first words of model.glove, which is "
                              "not given")
        if evaluation.early_stopping and not evaluation.keep_best:
            raise ConfigError("evaluation.early_stopping needs evaluation.keep_best "
                              "bleu|chrf|loss: the metric whose improvement it waits for")
        if evaluation.keep_best:
            self._check_keep_best()
        mt_lstm = model.hparams is not None and model.hparams.model == "mt_lstm"
        if self.data.subword_alpha and mt_lstm:
            raise ConfigError("data.subword_alpha samples the pieces of a shared vocabulary; an "
                              "MT-LSTM reads GloVe's words")
        if self.data.markup_rate and (data.is_treebank(self.data.corpus) or mt_lstm):
            raise ConfigError("data.markup_rate shows a translation model markup; a parser or "
                              "an MT-LSTM has none to keep")

    def _check_keep_best(self):
        """evaluation.keep_best: METRIC:CORPUS names one of several corpora (without it, their
        mean), and the metric is one the run computes."""
        evaluation, corpus = self.evaluation, self.data.corpus
        metric, _, one = evaluation.keep_best.partition(":")  # metric checked by its section
        if one and (len(self.data.corpora) == 1 or one not in self.data.corpora):
            raise ConfigError(f"evaluation.keep_best {evaluation.keep_best}: {one!r} is not one "
                              f"of several corpora (data.corpus {corpus!r}); METRIC:CORPUS "
                              f"follows one of them")
        if metric in ("bleu", "chrf", "f1") and not evaluation.sentences:
            raise ConfigError(f"evaluation.keep_best {evaluation.keep_best} needs dev sentences "
                              f"to translate; evaluation.sentences is 0")
        if metric == "f1" and not data.is_treebank(corpus):
            raise ConfigError(f"evaluation.keep_best f1 scores parses: data.corpus "
                              f"{corpus} is not a treebank (ptb:DIR)")

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values, origin="the configuration"):
        """The RunConfig of a dict in either format (`origin` names it in errors).

        Raises:
            ConfigError: a newer format, an unknown section or field, a bad value.
        """
        if not isinstance(values, dict):
            raise ConfigError(f"{origin}: expected a JSON object")
        version = values.get("format_version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ConfigError(f"{origin}: format_version {version!r}; this version of "
                              f"keras-transformer reads up to {FORMAT_VERSION}: upgrade it")
        if version == 1:
            values = _sections_of_flat(values, origin)
        if version < 3:
            values = _with_format_3_names(values, origin)
        unknown = sorted(set(values) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"{origin}: unknown fields {unknown}")
        try:
            sections = {name: _section(kind, values.get(name, {}), name)
                        for name, kind in SECTIONS.items()}
            return cls(**sections, format_version=FORMAT_VERSION,
                       versions=values.get("versions", {}))
        except ConfigError as error:
            raise ConfigError(f"{origin}: {error}") from None

    @classmethod
    def from_json(cls, text, origin="the configuration"):
        try:
            values = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{origin}: not valid JSON ({error}); it is not a model_dir "
                              f"written by this version, or it was damaged") from None
        return cls.from_dict(values, origin)


def _section(kind, values, name):
    if not isinstance(values, dict):
        raise ConfigError(f"{name} must be a JSON object, got {values!r}")
    known = {field.name for field in dataclasses.fields(kind)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown fields {[f'{name}.{field}' for field in unknown]}")
    return kind(**values)


def _sections_of_flat(values, origin):
    """Format 1's top-level fields, by section."""
    unknown = sorted(set(values) - set(FLAT_NAMES) - {"format_version", "versions", "max_length"})
    if unknown:
        raise ConfigError(f"{origin}: unknown fields {unknown}")
    sections = {"versions": values.get("versions", {})}
    for flat, (section, name) in FLAT_NAMES.items():
        if flat in values:
            sections.setdefault(section, {})[name] = values[flat]
    if "max_length" in values:  # the flag before format 3
        sections.setdefault("data", {})["max_length"] = values["max_length"]
    return sections


def _with_format_3_names(values, origin):
    """Format 1 or 2's sections (a dict) under format 3's names."""
    values = dict(values)
    data_values, model_values = values.get("data"), values.get("model")
    if isinstance(data_values, dict) and "max_length" in data_values:
        values["data"] = _renamed(data_values, "max_length", "max_pair_length",
                                  f"{origin}: data")
    if isinstance(model_values, dict):
        hparams, override = model_values.get("hparams"), model_values.get("hparams_override")
        model_values = dict(model_values)
        for old, new in RENAMED_FIELDS.items():
            if isinstance(hparams, dict) and old in hparams:
                hparams = _renamed(hparams, old, new, f"{origin}: model.hparams")
                model_values["hparams"] = hparams
            if isinstance(override, str):
                override = re.sub(rf"(^|,)(\s*){old}(\s*)=", rf"\1\2{new}\3=", override)
                model_values["hparams_override"] = override
        values["model"] = model_values
    return values


def _renamed(values, old, new, where):
    if new in values:
        raise ConfigError(f"{where} holds both {old} (its name before format 3) and {new}; "
                          f"keep one")
    return {(new if name == old else name): value for name, value in values.items()}
