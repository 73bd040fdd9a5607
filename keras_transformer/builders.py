"""Model, optimizer and loss from a named hyper-parameter set."""

from keras_transformer import hparams as hparams_lib
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.model import Transformer
from keras_transformer.schedules import cooldown_window, paper_adam

# HParams fields that are Transformer constructor arguments (the rest are about training).
MODEL_FIELDS = ("num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout",
                "attention_dropout", "relu_dropout", "position_encoding", "max_length",
                "layer_norm_epsilon")


def _resolve(hparams):
    return hparams_lib.get(hparams) if isinstance(hparams, str) else hparams


def build_model(hparams, vocab_size, **kwargs):
    """A `Transformer` for `hparams` (an `HParams` or a registered name) and a vocabulary size.

    The model is built (its weights exist), so `count_params()` and `summary()` work at once.
    `kwargs` go to the `keras.Model` constructor (e.g. `name`, `dtype`).

    Example:
    >>> model = build_model("transformer_tiny", vocab_size=100)
    """
    hp = _resolve(hparams)
    model = Transformer(vocab_size=vocab_size, **{f: getattr(hp, f) for f in MODEL_FIELDS},
                        **kwargs)
    model.build()
    return model


def build_optimizer(hparams, train_steps=None, ema_decay=None):
    """The paper's Adam on the eq. 3 schedule with `hparams`' d_model, warmup and Adam settings.

    With `hparams.cooldown_fraction` > 0, the rate falls to zero over that fraction of
    `train_steps` updates (default: `hparams.train_steps`): pass the run's own step count.
    `ema_decay` (e.g. 0.9999) keeps a moving average of the weights (`paper_adam`).
    """
    hp = _resolve(hparams)
    return paper_adam(hp.d_model, hp.warmup_steps, hp.learning_rate_multiplier, hp.adam_beta_1,
                      hp.adam_beta_2, hp.adam_epsilon,
                      cooldown_window(train_steps or hp.train_steps, hp.cooldown_fraction),
                      ema_decay)


def build_loss(hparams):
    """Label-smoothed cross-entropy with `hparams.label_smoothing`, ignoring padding."""
    return LabelSmoothedCrossEntropy(_resolve(hparams).label_smoothing)
