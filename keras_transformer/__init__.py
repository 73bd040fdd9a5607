"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers.

Quick start:

    import keras_transformer as kt
    model = kt.build_model("transformer_base", vocab_size=37000)
    model.compile(optimizer=kt.build_optimizer("transformer_base"),
                  loss=kt.build_loss("transformer_base"),
                  metrics=[kt.TokenAccuracy(), kt.Perplexity()])
    model.fit(dataset)  # ((source_ids, target_input_ids), target_output_ids) batches
"""

import os

# TensorFlow unless the user chose: tf.data, the searches and SavedModel export are TensorFlow's.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer.runtime import backend  # imports keras, with that backend

if backend.name() not in backend.SUPPORTED:
    raise ImportError(
        f"keras_transformer runs on Keras's TensorFlow or JAX backend, but Keras was loaded with "
        f"KERAS_BACKEND={backend.name()!r}; set KERAS_BACKEND=tensorflow or jax before "
        f"importing keras")

from keras_transformer import hparams
from keras_transformer.errors import UserError
from keras_transformer.hparams import HParams, HParamsError
from keras_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder_decoder import DecoderLayer, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masks import causal_mask, padding_mask
from keras_transformer.layers.positional import (
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
)
from keras_transformer.layers.word_dropout import WordDropout
from keras_transformer.models.bcn import BiattentiveClassificationNetwork, Maxout
from keras_transformer.models.builders import build_loss, build_model, build_optimizer
from keras_transformer.models.transformer import Transformer
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID
from keras_transformer.training.loss_scaling import LossScaleOptimizer
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import Perplexity, TargetTokens, TokenAccuracy
from keras_transformer.training.schedules import FusedAdam, TransformerSchedule, paper_adam

# Searching, scoring and the recurrent models are TensorFlow graph code.
_TENSORFLOW_ONLY = ("CoVe", "MTLSTM", "TransformerCoVe", "beam_decode", "beam_search",
                    "greedy_decode", "length_penalty", "sample_decode", "sampling_search",
                    "score")
if backend.is_tensorflow():
    from keras_transformer.models.cove import CoVe, TransformerCoVe
    from keras_transformer.models.mt_lstm import MTLSTM
    from keras_transformer.search.beam import beam_search, length_penalty
    from keras_transformer.search.decode import beam_decode, greedy_decode, sample_decode
    from keras_transformer.search.sampling import sampling_search
    from keras_transformer.search.scoring import score

__version__ = "0.1.0"

_SUBPACKAGES = ("data", "model_dir", "trainer", "export", "demo")


def __getattr__(name):
    """`kt.data`, `kt.trainer`, ...: the subpackages, imported when first used (the model library
    itself imports none of them)."""
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name in _TENSORFLOW_ONLY:
        backend.require_tensorflow(f"kt.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "BiattentiveClassificationNetwork", "CoVe", "DecoderLayer", "Dropout", "EOS_ID",
    "EncoderLayer", "FusedAdam", "HParams", "HParamsError", "LabelSmoothedCrossEntropy",
    "LearnedPositionEmbedding", "LossScaleOptimizer", "MTLSTM", "Maxout", "MultiHeadAttention",
    "PAD_ID", "Perplexity", "PositionwiseFeedForward", "SharedEmbedding",
    "SinusoidalPositionEncoding", "TargetTokens", "TokenAccuracy", "Transformer",
    "TransformerCoVe", "TransformerSchedule", "UNK_ID", "UserError", "WordDropout", "beam_decode",
    "beam_search", "build_loss", "build_model", "build_optimizer", "causal_mask", "greedy_decode",
    "hparams", "length_penalty", "padding_mask", "paper_adam", "sample_decode", "sampling_search",
    "scaled_dot_product_attention", "score",
]
if not backend.is_tensorflow():  # `from keras_transformer import *` under JAX
    __all__ = [name for name in __all__ if name not in _TENSORFLOW_ONLY]
