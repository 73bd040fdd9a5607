"""config.json in a model_dir: the `RunConfig` read and written, resolved where it names its
hparams set only, and a new run's configuration checked against the one saved there (the
fields `config.FIXED` holds once a run has started)."""

import pathlib
import platform

from keras_transformer.cli import replace_atomically
from keras_transformer.hparams import get as get_hparams
from keras_transformer.model_dir.config import FIXED, ConfigError, RunConfig
from keras_transformer.model_dir.layout import CONFIG_FILE


def versions():
    """Library versions, and the Keras backend that trained, recorded with every run."""
    import keras
    import sentencepiece
    import tensorflow as tf
    import tensorflow_text

    import keras_transformer

    return {"python": platform.python_version(), "tensorflow": tf.__version__,
            "keras": keras.__version__, "keras_backend": keras.backend.backend(),
            "tensorflow_text": tensorflow_text.__version__,
            "sentencepiece": sentencepiece.__version__,
            "keras_transformer": keras_transformer.__version__}


def load(model_dir):
    """The RunConfig saved in model_dir, or None if there is none.

    Raises:
        ConfigError: the file is not valid JSON, is from a newer format, or has unknown or bad
            fields.
    """
    path = pathlib.Path(model_dir) / CONFIG_FILE
    if not path.exists():
        return None
    return with_hparams(RunConfig.from_json(path.read_bytes(), str(path)))


def with_hparams(run):
    """`run` with model.hparams resolved from its hparams_name and hparams_override where it
    has none (a new run's configuration; a format-1 config.json may have none either).

    Raises:
        HParamsError: an unknown hparams set or override.
    """
    if run.model.hparams is not None:
        return run
    resolved = get_hparams(run.model.hparams_name).override_from_string(
        run.model.hparams_override)
    return run.updated({("model", "hparams"): resolved})


def save(run, model_dir):
    """Writes config.json atomically."""
    text = run.to_json() + "\n"
    replace_atomically(pathlib.Path(model_dir) / CONFIG_FILE,
                       lambda path: path.write_text(text, encoding="utf-8"))


def conflicts(saved, updated):
    """The FIXED fields `updated` changes from `saved`, one line each."""
    from keras_transformer.models.builders import ARCHITECTURE_FIELDS

    for section, name in FIXED:
        before, after = saved.get(section, name), updated.get(section, name)
        if name == "hparams":
            for field in ARCHITECTURE_FIELDS:
                if getattr(before, field) != getattr(after, field):
                    yield (f"model.hparams {field}: saved {getattr(before, field)!r}, now "
                           f"{getattr(after, field)!r}")
        elif before != after:
            yield f"{section}.{name}: saved {before!r}, now {after!r}"


def check_against_saved(saved, run, model_dir):
    """Refuses `run` where it contradicts a FIXED field of the run saved in model_dir."""
    found = list(conflicts(saved, run))
    if found:
        raise ConfigError(
            f"{pathlib.Path(model_dir) / CONFIG_FILE} was written for another configuration "
            f"({'; '.join(found)}). Continue it without those changes, or train into a new "
            f"model_dir")
