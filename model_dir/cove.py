"""CoVe from a kt-train model_dir: the frozen encoder of a trained MT-LSTM or Transformer.

    from keras_transformer.model_dir import cove
    mt = cove.load_cove("runs/mt_lstm")               # --hparams cove_mt_lstm
    vectors = mt.layer(mt.words.encode(tf.constant(["The cat sat."]))[:, :-1].to_tensor())
    encoder = cove.load_transformer_cove("runs/small")  # any translation Transformer
"""

import pathlib
import typing

import keras

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import glove
from keras_transformer.model_dir import config, layout, loading


class LoadedCoVe(typing.NamedTuple):
    layer: keras.layers.Layer  # kt.CoVe (an MT-LSTM's) or kt.TransformerCoVe
    vocabulary: data.Vocabulary  # the run's subword vocabulary (a Transformer's input)
    words: typing.Optional[glove.WordVocabulary]  # an MT-LSTM's source words (CoVe's ids)
    run: config.RunConfig
    checkpoint: pathlib.Path

    def describe(self):
        """What the vectors come from, for logs and results: kind, model_dir data, step."""
        model = self.run.model
        return (f"{model.hparams.model} {model.hparams_name} trained on "
                f"{self.run.data.corpus} ({self.checkpoint})")


def _translation_run(loaded, model_dir):
    if data.is_treebank(loaded.run.data.corpus):
        raise loading.ModelDirError(f"{model_dir} was trained to parse ({loaded.run.data.corpus}), "
                                    f"not to translate: its encoder is not CoVe's")


def load_cove(model_dir, checkpoint=None, with_glove=True):
    """The MT-LSTM of a `--hparams cove_mt_lstm` run as a frozen `kt.CoVe` layer, with the
    source words whose ids it reads (model_dir/words.txt).

    Args:
        checkpoint: as `loading.load`'s (default: the run's final average, else newest).
        with_glove: the layer gives [GloVe(w); CoVe(w)], the paper's downstream input.

    Raises:
        ModelDirError: not a kt-train model_dir, not an MT-LSTM's, or missing its words.
    """
    loaded = loading.load(model_dir, checkpoint, model="mt_lstm")
    _translation_run(loaded, model_dir)
    path = pathlib.Path(model_dir) / layout.WORDS_FILE
    if not path.exists():
        raise loading.ModelDirError(f"{path} is missing; the model_dir is incomplete")
    words = glove.WordVocabulary.load(path)
    if words.vocab_size != loaded.run.model.source_vocab_size:
        raise loading.ModelDirError(
            f"{path} has {len(words.words):,} words, {words.vocab_size:,} ids; the model reads "
            f"{loaded.run.model.source_vocab_size:,} "
            f"({pathlib.Path(model_dir) / layout.CONFIG_FILE})")
    return LoadedCoVe(kt.CoVe(loaded.model, with_glove=with_glove), loaded.vocabulary, words,
                      loaded.run, loaded.checkpoint)


def load_transformer_cove(model_dir, checkpoint=None):
    """The encoder of a translation Transformer's run as a frozen `kt.TransformerCoVe` layer
    (its vectors of a word's subword pieces averaged, `data.glove.word_pieces`).

    Raises:
        ModelDirError: not a kt-train model_dir, not a Transformer's, or one that parses.
    """
    loaded = loading.load(model_dir, checkpoint)
    _translation_run(loaded, model_dir)
    return LoadedCoVe(kt.TransformerCoVe(loaded.model), loaded.vocabulary, None, loaded.run,
                      loaded.checkpoint)
