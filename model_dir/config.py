"""A training run's configuration, kept in model_dir/config.json.

The file makes model_dir self-contained: translate, export and a resumed run need nothing else.
Fields that define the model or its data are fixed once a run starts; a later command whose flags
disagree with them is refused rather than allowed to mix two configurations in one directory.
Fields about how to train (steps, batch size, checkpoint and evaluation cadence, precision) may
change between runs.
"""

import dataclasses
import json
import os
import pathlib
import platform

from keras_transformer import data
from keras_transformer.data import glove

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.model"
WORDS_FILE = glove.WORDS_FILE  # an mt_lstm run's source words, data.glove.WordVocabulary's
CHECKPOINT_DIR = "checkpoints"
AVERAGED_DIR = "averaged"
BEST_DIR = "best"  # kt-train --keep_best
LOG_DIR = "logs"
FORMAT_VERSION = 1


class ConfigError(ValueError):
    """A model_dir whose configuration cannot be used with the given flags."""


@dataclasses.dataclass
class RunConfig:
    hparams_name: str = "transformer_base"
    hparams_override: str = ""
    hparams: dict = dataclasses.field(default_factory=dict)  # resolved from the two above
    data: str = "bible_en_es"
    source_lang: str = None
    target_lang: str = None
    tfds_data_dir: str = None
    invalid_utf8: str = "error"
    max_length: int = 256
    overlong: str = "drop"
    vocab_size: int = None  # the vocabulary's, known once it is built or loaded
    glove: str = None  # an mt_lstm run's GloVe file (its source words and their fixed vectors)
    glove_words: int = None  # ... of which it keeps the first (most frequent) N (None: all)
    source_vocab_size: int = None  # an mt_lstm run's source word ids (WORDS_FILE's words + 3)
    embedding_dim: int = None  # an mt_lstm run's GloVe dimensions
    batch_tokens: int = 25_000
    accumulate_steps: int = 1  # micro-batches of batch_tokens per update
    bucket_growth: float = None  # None: data.BUCKET_GROWTH, with jit_compile data.XLA_BUCKET_GROWTH
    train_steps: int = None  # None: the hparams set's train_steps
    seed: int = 1
    deterministic: bool = False
    mixed_precision: str = "none"
    jit_compile: bool = False
    eval_every: int = 1000
    eval_sentences: int = 500
    eval_beam_size: int = 1  # in-training BLEU: greedy (1) or beam search
    keep_best: str = None  # "bleu", "chrf", "loss" or "f1": the best checkpoint in model_dir/best/
    early_stopping: int = 0  # evaluations without improvement before stopping (0: never)
    keep_checkpoints: int = 5
    checkpoint_every_steps: int = 1000
    checkpoint_every_minutes: float = 10.0
    average_last: int = 0  # at the end, average the newest N checkpoints (0: none)
    ema_decay: float = 0.0  # a moving average of the weights (0: none)
    init_from: str = None  # fine-tuning: the model_dir or checkpoint this run started from
    init_optimizer: bool = False  # ... with its optimizer state and step
    format_version: int = FORMAT_VERSION
    versions: dict = dataclasses.field(default_factory=dict)

    # Changing these would change the model or the data it learns from. Of "hparams", only the
    # fields that shape the model count (builders.ARCHITECTURE_FIELDS); training ones may change.
    FIXED = ("hparams", "data", "source_lang", "target_lang", "max_length", "overlong",
             "vocab_size", "init_from", "ema_decay", "glove", "glove_words")

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    def source(self, download=False):
        """The data source this run trains on (a `data.sources` source)."""
        return data.get_source(self.data, self.source_lang, self.target_lang,
                               self.tfds_data_dir, download, self.invalid_utf8)


def field_names():
    return [field.name for field in dataclasses.fields(RunConfig)]


def versions():
    """Library versions, recorded with every run."""
    import keras
    import sentencepiece
    import tensorflow as tf
    import tensorflow_text

    import keras_transformer

    return {"python": platform.python_version(), "tensorflow": tf.__version__,
            "keras": keras.__version__, "tensorflow_text": tensorflow_text.__version__,
            "sentencepiece": sentencepiece.__version__,
            "keras_transformer": keras_transformer.__version__}


def load(model_dir):
    """The RunConfig saved in model_dir, or None if there is none.

    Raises:
        ConfigError: the file is not valid JSON, is from a newer format, or has unknown fields.
    """
    path = pathlib.Path(model_dir) / CONFIG_FILE
    if not path.exists():
        return None
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid JSON ({error}); it is not a model_dir written by "
                          f"this version, or it was damaged") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    version = values.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ConfigError(f"{path}: format_version {version!r}; this version of "
                          f"keras-transformer reads up to {FORMAT_VERSION}: upgrade it")
    unknown = sorted(set(values) - set(field_names()))
    if unknown:
        raise ConfigError(f"{path}: unknown fields {unknown}")
    _check_types(values, path)
    return RunConfig(**values)


def _check_types(values, path):
    """Refuses a field whose JSON value has the wrong type, before anything uses it."""
    import keras_transformer as kt

    for field in dataclasses.fields(RunConfig):
        if field.name not in values:  # the default applies
            continue
        value = values[field.name]
        if value is None and field.default is None:
            continue
        if field.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = type(value) is field.type
        if not ok:
            raise ConfigError(f"{path}: field {field.name!r} must be {field.type.__name__}, got "
                              f"{value!r}")
    if values.get("hparams"):
        unknown = sorted(set(values["hparams"]) - set(kt.hparams.field_names()))
        if unknown:
            raise ConfigError(f"{path}: unknown hparams field(s) {unknown}")
        try:
            kt.HParams(**values["hparams"])
        except kt.HParamsError as error:
            raise ConfigError(f"{path}: {error}") from None


def save(config, model_dir):
    """Writes config.json atomically (write, then rename)."""
    path = pathlib.Path(model_dir) / CONFIG_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(config.to_json() + "\n", encoding="utf-8")
    os.replace(partial, path)


def _conflicts(saved, updated, given):
    from keras_transformer.builders import ARCHITECTURE_FIELDS
    from keras_transformer.hparams import HParams

    for name in RunConfig.FIXED:
        if name not in given:
            continue
        if name == "hparams":
            # Through HParams: a field newer than the saved run takes its default.
            before_hp, after_hp = (HParams(**h) for h in (saved.hparams, updated.hparams))
            for field in ARCHITECTURE_FIELDS:
                before, after = getattr(before_hp, field), getattr(after_hp, field)
                if before != after:
                    yield f"hparams {field}: saved {before!r}, now {after!r}"
        elif getattr(updated, name) != getattr(saved, name):
            yield f"{name}: saved {getattr(saved, name)!r}, now {getattr(updated, name)!r}"


def merge(saved, given, model_dir):
    """The run's configuration: `saved` (or the defaults) updated with the flags in `given`.

    Args:
        saved: RunConfig from model_dir, or None for a new run.
        given: dict of the flags the user set (not their defaults).

    Raises:
        ConfigError: a given flag contradicts a fixed field of the saved configuration.
    """
    config = saved or RunConfig()
    updated = dataclasses.replace(config, **given)
    if saved is not None:
        conflicts = list(_conflicts(saved, updated, given))
        if conflicts:
            raise ConfigError(
                f"{pathlib.Path(model_dir) / CONFIG_FILE} was written for another configuration "
                f"({'; '.join(conflicts)}). Continue it without those flags, or train into a new "
                f"--model_dir")
    return updated
