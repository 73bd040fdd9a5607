"""Model, optimizer and loss from a named hyper-parameter set."""

from keras_transformer import hparams as hparams_lib
from keras_transformer.models.transformer import Transformer
from keras_transformer.runtime import backend
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.schedules import cooldown_window, fitted_peak_step, paper_adam

# HParams fields that are Transformer constructor arguments (the rest are about training).
MODEL_FIELDS = ("num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout",
                "attention_dropout", "relu_dropout", "position_encoding", "max_positions",
                "layer_norm_epsilon", "layer_norm_position", "embedding_sharing",
                "source_word_dropout", "ffn_activation", "attention_bias", "sinusoid_layout",
                "output_bias", "scale_embeddings")
# The fields two runs must share to be the same model (which model, then its shape).
ARCHITECTURE_FIELDS = ("model", *MODEL_FIELDS)


def _resolve(hparams):
    return hparams_lib.get(hparams) if isinstance(hparams, str) else hparams


def build_model(hparams, vocab_size, source_vocab_size=None, embedding_dim=None,
                source_embedding=None, **kwargs):
    """A `Transformer` (or, for `hparams.model == "mt_lstm"`, an `MTLSTM`) for `hparams` (an
    `HParams` or a registered name) and a vocabulary size.

    The model is built (its weights exist), so `count_params()` and `summary()` work at once.
    `kwargs` go to the `keras.Model` constructor (e.g. `name`, `dtype`).

    Args:
        vocab_size: ids of the (shared, or for the MT-LSTM target) vocabulary.
        source_vocab_size, embedding_dim: the MT-LSTM's source words and GloVe dimensions.
        source_embedding: the MT-LSTM's GloVe matrix [source_vocab_size, embedding_dim] (gives
            both sizes; without it the fixed vectors start at zero, for a checkpoint to fill).

    Example:
    >>> model = build_model("transformer_tiny", vocab_size=100)
    """
    hp = _resolve(hparams)
    if hp.model == "mt_lstm":
        backend.require_tensorflow("the MT-LSTM (hparams model 'mt_lstm')")
        from keras_transformer.models.mt_lstm import MTLSTM

        if source_embedding is not None:
            source_vocab_size, embedding_dim = source_embedding.shape
        if source_vocab_size is None or embedding_dim is None:
            raise hparams_lib.HParamsError(
                "an mt_lstm model reads GloVe vectors: build_model needs source_embedding, or "
                "source_vocab_size and embedding_dim")
        model = MTLSTM(source_vocab_size, vocab_size, embedding_dim, hidden_size=hp.d_model,
                       num_layers=hp.num_layers, dropout=hp.dropout,
                       source_embedding=source_embedding, **kwargs)
    else:
        model = Transformer(vocab_size=vocab_size, **{f: getattr(hp, f) for f in MODEL_FIELDS},
                            **kwargs)
    model.build()
    return model


def build_optimizer(hparams, train_steps=None, ema_decay=None):
    """The paper's Adam on the eq. 3 schedule with `hparams`' d_model, warmup and Adam settings.

    With `hparams.cooldown_fraction` > 0, the rate falls to zero over that fraction of
    `train_steps` updates (default: `hparams.train_steps`): pass the run's own step count.
    With `hparams.max_warmup_fraction` > 0, the rate peaks within that fraction of them
    (`fitted_peak_step`). `ema_decay` (e.g. 0.9999) keeps a moving average of the weights
    (`paper_adam`).
    """
    hp = _resolve(hparams)
    train_steps = train_steps or hp.train_steps
    return paper_adam(hp.d_model, hp.warmup_steps, hp.learning_rate_multiplier, hp.adam_beta_1,
                      hp.adam_beta_2, hp.adam_epsilon,
                      cooldown_window(train_steps, hp.cooldown_fraction), ema_decay,
                      fitted_peak_step(hp.warmup_steps, train_steps, hp.max_warmup_fraction))


def build_loss(hparams):
    """Label-smoothed cross-entropy with `hparams.label_smoothing`, ignoring padding."""
    return LabelSmoothedCrossEntropy(_resolve(hparams).label_smoothing)
