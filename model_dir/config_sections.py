"""The sections of a training run's configuration (`config.RunConfig` holds one of each): frozen
dataclasses whose fields have their defaults and are checked, type and range, as a section is
made; a `ConfigError` names the field as `section.field`."""

import dataclasses

from keras_transformer import data
from keras_transformer.errors import UserError, check_one_of
from keras_transformer.hparams import DECODING_MINIMUMS, HParams, HParamsError, field_names

KEEP_BEST_METRICS = ("bleu", "chrf", "loss", "f1")  # f1: a parser's (EVALB)
PRECISIONS = ("none", "mixed_float16", "mixed_bfloat16", "auto")


class ConfigError(UserError):
    """A configuration that cannot be used: a bad field, or one a model_dir contradicts."""


def _check_field(section, field, value):
    """Refuses a value of the wrong type for `field` of `section` (None where the default is)."""
    if value is None and field.default is None:
        return
    if field.type is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = type(value) is field.type
    if not ok:
        raise ConfigError(f"{section}.{field.name} must be {field.type.__name__}, got {value!r}")


class _Section:
    """Checks each field's type and the limits `LIMITS` gives (field -> (lowest, highest or None,
    a closed upper bound)) when a section is made."""

    NAME = ""
    LIMITS = {}
    CHOICES = {}
    SEVERAL = ()  # fields that may hold a tuple of values of their type

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in self.SEVERAL and isinstance(value, tuple):
                for each in value:
                    _check_field(self.NAME, field, each)
                continue
            _check_field(self.NAME, field, value)
            if value is None:
                continue
            if field.name in self.CHOICES:
                check_one_of(f"{self.NAME}.{field.name}", value, self.CHOICES[field.name],
                             ConfigError)
            if field.name in self.LIMITS:
                low, high = self.LIMITS[field.name]
                if not low <= value or (high is not None and not value < high):
                    bound = f"at least {low}" + (f" and below {high}" if high is not None else "")
                    raise ConfigError(f"{self.NAME}.{field.name} must be {bound}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ModelConfig(_Section):
    """What the model is: its hyper-parameters, its vocabularies, where its weights start."""

    NAME = "model"
    LIMITS = {"vocab_size": (1, None), "glove_words": (1, None), "source_vocab_size": (1, None),
              "embedding_dim": (1, None)}

    hparams_name: str = "transformer_base"
    hparams_override: str = ""
    # A kt.HParams resolved from the two above (None until it is); a dict (config.json's form)
    # is read into one, a field newer than the file taking its default.
    hparams: HParams = None
    vocab_size: int = None  # the vocabulary's, known once it is built or loaded
    glove: str = None  # an mt_lstm run's GloVe file (its source words and their fixed vectors)
    glove_words: int = None  # ... of which it keeps the first (most frequent) N (None: all)
    source_vocab_size: int = None  # an mt_lstm run's source word ids (WORDS_FILE's words + 3)
    embedding_dim: int = None  # an mt_lstm run's GloVe dimensions
    init_from: str = None  # fine-tuning: the model_dir or checkpoint this run started from
    init_optimizer: bool = False  # ... with its optimizer state and step
    update_vocab: bool = False  # ... with a new vocabulary (the shared pieces' rows copied)

    def __post_init__(self):
        if isinstance(self.hparams, dict):  # frozen: set once, as it is read
            object.__setattr__(self, "hparams", _hparams_of(self.hparams) if self.hparams
                               else None)
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class DataConfig(_Section):
    """What the model learns from: the corpus, its languages, and which pairs are kept."""

    NAME = "data"
    LIMITS = {"max_pair_length": (2, None), "markup_rate": (0.0, 1.0),
              "subword_alpha": (0.0, 1.0)}
    CHOICES = {"invalid_utf8": data.sources.INVALID_UTF8_MODES, "overlong": ("drop", "truncate")}
    SEVERAL = ("corpus",)

    # kt-train --data: a bundled corpus, files, a TFDS name, ptb:DIR; several (--data repeated):
    # a tuple of them, whose training pairs are drawn by corpus_weights (data.WeightedCorpora).
    corpus: str = "bible_en_es"
    corpus_weights: tuple = None  # several corpora: one positive number each; None: equal
    source_lang: str = None
    target_lang: str = None
    tfds_data_dir: str = None
    invalid_utf8: str = "error"
    max_pair_length: int = 256  # the longest training pair, in tokens a side
    overlong: str = "drop"  # or "truncate" longer pairs
    # The share of training pairs that show the model markup as placeholder tokens
    # (data.markup_pairs), for translating with --markup; its vocabulary keeps them whole.
    markup_rate: float = 0.0
    # Training pairs' pieces drawn anew each time they are read (data.subword_sampling: unigram
    # sampling or BPE-dropout at this alpha); 0: one segmentation, as dev and serving read.
    subword_alpha: float = 0.0

    def __post_init__(self):
        # Frozen: normalized once, as the section is made (a list as config.json has it).
        if isinstance(self.corpus, (list, tuple)):
            if not self.corpus or not all(isinstance(spec, str) for spec in self.corpus):
                raise ConfigError(f"data.corpus must be a str or a list of them, got "
                                  f"{self.corpus!r}")
            object.__setattr__(self, "corpus", self.corpus[0] if len(self.corpus) == 1
                               else tuple(self.corpus))
        if self.corpus_weights is not None:
            self._normalize_weights()
        super().__post_init__()

    def _normalize_weights(self):
        if not isinstance(self.corpus, tuple):
            raise ConfigError("data.corpus_weights weigh several corpora (data.corpus a list); "
                              f"data.corpus is one: {self.corpus!r}")
        try:
            data.mixture.check_weights(list(self.corpus_weights), len(self.corpus),
                                       "data.corpus_weights")
        except data.CorpusError as error:
            raise ConfigError(str(error)) from None
        object.__setattr__(self, "corpus_weights", tuple(float(w) for w in self.corpus_weights))

    @property
    def corpora(self):
        """The corpus specs: one, or the several of a weighted mixture."""
        return self.corpus if isinstance(self.corpus, tuple) else (self.corpus,)

    def open(self, download=False):
        """The corpus as a `data.sources` source (`download`: let TFDS fetch it), its training
        pairs rewritten with markup at `markup_rate`; several corpora as one
        `data.WeightedCorpora`."""
        opened = []
        for spec in self.corpora:
            source = data.get_source(spec, self.source_lang, self.target_lang,
                                     self.tfds_data_dir, download, self.invalid_utf8)
            opened.append(data.MarkupAugmentedSource(source, self.markup_rate)
                          if self.markup_rate else source)
        if len(opened) == 1:
            return opened[0]
        return data.WeightedCorpora(opened, self.corpus_weights, names=self.corpora)


@dataclasses.dataclass(frozen=True)
class BatchingConfig(_Section):
    """How pairs become batches and batches become updates."""

    NAME = "batching"
    LIMITS = {"batch_tokens": (1, None), "accumulate_steps": (1, None),
              "bucket_growth": (1.0, None)}

    batch_tokens: int = 25_000  # padded tokens a side of a (micro-)batch, all replicas
    accumulate_steps: int = 1  # micro-batches of batch_tokens per update
    bucket_growth: float = None  # None: data.BUCKET_GROWTH, with jit_compile data.XLA_BUCKET_GROWTH

    def __post_init__(self):
        super().__post_init__()
        if self.bucket_growth is not None and not self.bucket_growth > 1:
            raise ConfigError(f"batching.bucket_growth must be above 1, got {self.bucket_growth}")


@dataclasses.dataclass(frozen=True)
class OptimizationConfig(_Section):
    """How long and how reproducibly to train, and the moving average of the weights."""

    NAME = "optimization"
    LIMITS = {"train_steps": (1, None), "ema_decay": (0.0, 1.0)}

    train_steps: int = None  # optimizer updates; None: the hparams set's train_steps
    seed: int = 1
    deterministic: bool = False  # same batches and dropout on every run, also across a resume
    ema_decay: float = 0.0  # a moving average of the weights (0: none)


@dataclasses.dataclass(frozen=True)
class EvaluationConfig(_Section):
    """Dev evaluation during training, and what it decides (the best checkpoint, stopping)."""

    NAME = "evaluation"
    # The beam's least size is the decoding's (`hparams.DECODING_MINIMUMS`): one rule.
    LIMITS = {"every": (1, None), "sentences": (0, None),
              "beam_size": (DECODING_MINIMUMS["beam_size"], None),
              "early_stopping": (0, None)}

    every: int = 1000  # steps between evaluations
    sentences: int = 500  # dev sentences translated for BLEU (0: none)
    beam_size: int = 1  # in-training BLEU: greedy (1) or beam search
    keep_best: str = None  # "bleu", "chrf", "loss" or "f1" (of one of several corpora:
    # "bleu:CORPUS"; else their mean): the best checkpoint in model_dir/best/
    early_stopping: int = 0  # evaluations without improvement before stopping (0: never)

    def __post_init__(self):
        super().__post_init__()
        if self.keep_best is not None:  # METRIC:CORPUS's corpus: RunConfig.check
            check_one_of(f"{self.NAME}.keep_best", self.keep_best.partition(":")[0],
                         KEEP_BEST_METRICS, ConfigError)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(_Section):
    """When checkpoints are written, how many are kept, and the average at the end."""

    NAME = "checkpoints"
    LIMITS = {"keep": (0, None), "every_steps": (0, None), "every_minutes": (0.0, None),
              "average_last": (0, None)}

    keep: int = 5  # 0: all
    every_steps: int = 1000  # 0: off
    every_minutes: float = 10.0  # 0: off
    average_last: int = 0  # at the end, average the newest N checkpoints (0: none)


@dataclasses.dataclass(frozen=True)
class ComputeConfig(_Section):
    """How the devices compute a step: the dtype policy and XLA. (The devices themselves, and
    the workers, come from the machine and TF_CONFIG: trainer/distribute.py.)"""

    NAME = "compute"
    CHOICES = {"mixed_precision": PRECISIONS}

    mixed_precision: str = "none"  # "auto": the faster on these devices (devices.choose_policy)
    jit_compile: bool = False


SECTIONS = {"model": ModelConfig, "data": DataConfig, "batching": BatchingConfig,
            "optimization": OptimizationConfig, "evaluation": EvaluationConfig,
            "checkpoints": CheckpointConfig, "compute": ComputeConfig}


def _hparams_of(values):
    """The HParams of config.json's model.hparams dict, or ConfigError naming what is wrong."""
    unknown = sorted(set(values) - set(field_names()))
    if unknown:
        raise ConfigError(f"unknown hparams field(s) {unknown}")
    try:
        return HParams(**values)
    except HParamsError as error:
        raise ConfigError(str(error)) from None
