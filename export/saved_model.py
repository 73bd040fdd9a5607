"""The SavedModel of a `Translator` for TF Serving: its signatures (kt-export's help lists them,
export/export_command.py), the vocabulary and settings as assets, each export a new numbered
version directory under an output directory, the layout TF Serving watches."""


import json
import pathlib
import tempfile

import tensorflow as tf

from keras_transformer.errors import UserError
from keras_transformer.export.documents import DOCUMENTS, DocumentTranslator
from keras_transformer.export.glossary import (
    GLOSSARY_SOURCES,
    GLOSSARY_TARGETS,
    GlossaryTranslator,
)
from keras_transformer.export.markup_translator import MarkupTranslator
from keras_transformer.export.translator import IDS, TARGETS, TEXTS
from keras_transformer.model_dir import config_file
from keras_transformer.model_dir.checkpoints import step_in_name

SETTINGS_FILE = "export.json"


class ExportError(UserError):
    """The output directory cannot take a new version."""


def next_version(output):
    """1 for a new directory, else one more than the highest numbered version in it."""
    output = pathlib.Path(output)
    if output.exists() and not output.is_dir():
        raise ExportError(f"--output {output} is a file, not a directory")
    versions = [int(p.name) for p in output.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0) + 1


def version_path(output, version=None):
    """output/<version> (default the next version); an existing one is an ExportError."""
    output = pathlib.Path(output)
    path = output / str(next_version(output) if version is None else version)
    if path.exists():
        raise ExportError(f"{path} exists; choose another --version (TF Serving serves the "
                          f"highest) or remove it yourself")
    return path


def export(translator, output, version=None, provenance=None, documents=False,
           glossaries=False, markup=False):
    """Writes the SavedModel of `translator` to output/<version>; returns that path.

    It is written next to its final place and renamed into it when complete, so TF Serving,
    which watches `output`, never loads half a model.

    Args:
        translator: a `Translator`.
        output: the directory of versions.
        version: default: `next_version(output)`.
        provenance: JSON-able facts to keep in the export.json asset beside the settings
            (kt-export: the checkpoint, its step and the run's configuration).
        documents: add the `translate_document` signature (`DocumentTranslator`): a second
            search traced, so more time to export and a larger model.
        glossaries: add the `translate_with_glossary` signature (`GlossaryTranslator`): a
            glossary with each request; a search held to it traced, likewise.
        markup: add the `translate_with_markup` signature (`MarkupTranslator`): tagged text
            in; two searches traced. The translator's vocabulary must hold markup's tokens.
    """
    output = pathlib.Path(output)
    path = version_path(output, version)
    output.mkdir(parents=True, exist_ok=True)
    settings = dict(translator.settings(), **(provenance or {}), versions=config_file.versions())
    with tempfile.TemporaryDirectory(dir=output, prefix=".export-") as scratch:
        scratch = pathlib.Path(scratch)
        assets = scratch / "assets-source"
        assets.mkdir()
        vocabulary_file = assets / translator.vocabulary.FILE_NAME
        vocabulary_file.write_bytes(translator.vocabulary.serialized)
        (assets / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
        signatures = {
            "serving_default": translator.translate.get_concrete_function(TEXTS),
            "translate_ids": translator.translate_ids.get_concrete_function(IDS),
            "tokenize": translator.tokenize.get_concrete_function(TEXTS),
            "translate_n_best": translator.translate_n_best.get_concrete_function(TEXTS),
            "score": translator.score.get_concrete_function(TEXTS, TARGETS),
        }
        document_translator = DocumentTranslator(translator)  # its functions hold it weakly
        if documents:
            signatures["translate_document"] = \
                document_translator.translate_documents.get_concrete_function(DOCUMENTS)
        glossary_translator = GlossaryTranslator(translator)
        if glossaries:
            signatures["translate_with_glossary"] = \
                glossary_translator.translate_with_glossary.get_concrete_function(
                    TEXTS, GLOSSARY_SOURCES, GLOSSARY_TARGETS)
        markup_translator = MarkupTranslator(translator) if markup else None
        if markup:
            signatures["translate_with_markup"] = \
                markup_translator.translate_with_markup.get_concrete_function(TEXTS)
        # A root of its own, so the caller's translator keeps no asset in a deleted directory.
        # It tracks what the signatures read (the weights, the tokenizer), not the translator:
        # saving a tf.Module traces each of its tf.functions, and two of the translator's are
        # no signature (translate_n_best_ids_with_prefix, tokenize_prefixes: a second beam
        # search traced; transformer_tiny: 5.3 s -> 1.1 s to save, 3.2 MB -> 1.7 MB).
        root = tf.Module()
        root.model_variables = translator.model_variables
        root.shortlist = translator.shortlist  # a CandidateTable's two variables, or None
        root.vocabulary = translator.vocabulary
        root.vocabulary_file = tf.saved_model.Asset(str(vocabulary_file))
        root.settings_file = tf.saved_model.Asset(str(assets / SETTINGS_FILE))
        tf.saved_model.save(root, str(scratch / "model"), signatures=signatures)
        (scratch / "model").rename(path)
    return path


def provenance(loaded, *others):
    """What an export of `model_dir.load`'s result keeps of where it came from; with `others`
    (an ensemble's further members), "ensemble" lists every member's checkpoint."""
    facts = {"checkpoint": str(loaded.checkpoint), "step": step_in_name(loaded.checkpoint),
             "moving_averages": loaded.ema,
             "dtype": loaded.model.dtype_policy.name, "dtype_reason": loaded.dtype_reason,
             "run": loaded.run.to_dict()}
    if others:
        facts["ensemble"] = [str(member.checkpoint) for member in (loaded, *others)]
    return facts
