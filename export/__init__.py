"""Inference: `kt-translate` (beam search over a model_dir) and `kt-export` (a SavedModel for TF
Serving whose signature takes raw strings).

    from export import Translator, load
    loaded = load("runs/demo")
    translator = Translator(loaded.model, loaded.vocabulary)
    translator.translate(tf.constant(["In the beginning God created the heaven and the earth."]))
"""

from export.loading import Loaded, ModelDirError, load
from export.saved_model import ExportError, export, next_version
from export.translator import Translator

__all__ = ["ExportError", "Loaded", "ModelDirError", "Translator", "export", "load",
           "next_version"]
