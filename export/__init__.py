"""Inference: `kt-translate` (beam search over a model_dir), `kt-export` (a SavedModel for TF
Serving whose signature takes raw strings), `kt-attention` (figures 3-5), `kt-score` and
`kt-parse` (trees from a model trained on a treebank, scored as EVALB scores them).

    from keras_transformer.export import DecodingConfig, Translator
    translator = Translator.from_model_dir("runs/demo")  # decodes as kt-translate does
    translator.translate(tf.constant(["In the beginning God created the heaven and the earth."]))
    greedy = Translator.from_model_dir("runs/demo", DecodingConfig(beam_size=1))
"""

from keras_transformer._layout import require_installed_name

require_installed_name(__name__, "export")

from keras_transformer.export.lines import translate_lines
from keras_transformer.export.saved_model import ExportError, export, next_version
from keras_transformer.export.translator import Translator
from keras_transformer.search.settings import DecodingConfig

__all__ = ["DecodingConfig", "ExportError", "Translator", "export", "next_version",
           "translate_lines"]
