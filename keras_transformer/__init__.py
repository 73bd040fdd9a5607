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

# The layers use TensorFlow where TensorFlow is the point (tf.function, tf.data, SavedModel).
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        f"keras_transformer needs the TensorFlow backend of Keras, but Keras was loaded with "
        f"KERAS_BACKEND={keras.backend.backend()!r}; set KERAS_BACKEND=tensorflow before "
        f"importing keras")

from keras_transformer import hparams  # noqa: E402
from keras_transformer.attention import MultiHeadAttention, scaled_dot_product_attention  # noqa
from keras_transformer.builders import build_loss, build_model, build_optimizer  # noqa: E402
from keras_transformer.embedding import SharedEmbedding  # noqa: E402
from keras_transformer.feed_forward import PositionwiseFeedForward  # noqa: E402
from keras_transformer.hparams import HParams, HParamsError  # noqa: E402
from keras_transformer.layers import DecoderLayer, EncoderLayer  # noqa: E402
from keras_transformer.losses import LabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.masks import EOS_ID, PAD_ID, causal_mask, padding_mask  # noqa: E402
from keras_transformer.metrics import Perplexity, TokenAccuracy  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402
from keras_transformer.positional import (  # noqa: E402
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
)
from keras_transformer.schedules import TransformerSchedule, paper_adam  # noqa: E402

__version__ = "0.1.0"
