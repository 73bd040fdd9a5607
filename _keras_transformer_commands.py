"""The kt-* console scripts (setup.py's entry points): each loads TensorFlow quietly, then imports
its command's module and runs its main.

This module is installed beside the keras_transformer package, not in it, and imports only the
standard library until TensorFlow is loaded: importing anything under keras_transformer first
runs keras_transformer/__init__.py, which imports Keras and so TensorFlow, and TensorFlow writes
its C++ start-up lines (oneDNN, CUDA, CPU features) while it loads. A library import should not
change with the program that imports it, so the hiding happens here, before the library loads.
(`python -m keras_transformer...` forms load TensorFlow before any of their code runs, so they
show the lines.)
"""

import contextlib
import importlib
import os
import sys
import tempfile

# keras_transformer.cli.add_verbose_flag's flag (that module cannot be imported before TensorFlow).
VERBOSE_FLAG = "--verbose"


def load_tensorflow_quietly(argv):
    """Imports TensorFlow (asking it for GPUs, which prints CUDA's complaints) and the library
    with file descriptor 2 redirected, and keeps what they wrote in `keras_transformer.cli.
    STARTUP_LINES` (a run without the GPU it expected quotes them). Later C++ INFO lines are
    hidden by TF_CPP_MIN_LOG_LEVEL 1; warnings and errors still show.

    Only a redirect hides the start-up lines: TensorFlow writes them before it reads its log
    level. Does nothing with --verbose in `argv`, when the user set TF_CPP_MIN_LOG_LEVEL, or
    when TensorFlow is already loaded (a command called from Python).
    """
    if VERBOSE_FLAG in argv or "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    with tempfile.TemporaryFile() as hidden:
        try:
            with _stderr_into(hidden):
                import tensorflow as tf

                tf.config.list_physical_devices("GPU")
                from keras_transformer import cli
        except BaseException:
            sys.stderr.write(_text_of(hidden))  # it failed to load: what it said may be why
            raise
        cli.STARTUP_LINES[:] = _text_of(hidden).splitlines()


@contextlib.contextmanager
def _stderr_into(file):
    """File descriptor 2 (where C++ code writes) goes to `file` inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _text_of(file):
    file.seek(0)
    return file.read().decode("utf-8", "replace")


def run(module, argv=None):
    """`module`'s main(argv) (argv None: the command line's), TensorFlow loaded quietly first."""
    load_tensorflow_quietly(sys.argv[1:] if argv is None else argv)
    return importlib.import_module(module).main(argv)


def kt_vocab(argv=None):
    return run("keras_transformer.data.build_vocab", argv)


def kt_train(argv=None):
    return run("keras_transformer.trainer.task", argv)


def kt_average(argv=None):
    return run("keras_transformer.trainer.average", argv)


def kt_translate(argv=None):
    return run("keras_transformer.export.translate", argv)


def kt_export(argv=None):
    return run("keras_transformer.export.export_command", argv)


def kt_attention(argv=None):
    return run("keras_transformer.export.attention_figures", argv)


def kt_score(argv=None):
    return run("keras_transformer.export.score", argv)


def kt_calibrate(argv=None):
    return run("keras_transformer.export.calibrate", argv)


def kt_parse(argv=None):
    return run("keras_transformer.export.parse", argv)


def kt_classify(argv=None):
    return run("keras_transformer.trainer.classify", argv)


def kt_demo(argv=None):
    return run("keras_transformer.demo.demo", argv)


def kt_shortlist(argv=None):
    return run("keras_transformer.export.shortlist_command", argv)


def kt_import(argv=None):
    return run("keras_transformer.trainer.import_model", argv)
