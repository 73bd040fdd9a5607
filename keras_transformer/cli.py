"""What the kt-* commands share: quiet TensorFlow start-up, argparse types, safe output files.

Imports nothing heavy: `keras_transformer/__init__.py` uses it before TensorFlow loads.
"""

import argparse
import contextlib
import os
import pathlib
import sys
import tempfile

VERBOSE_FLAG = "--verbose"
# What `quiet_tensorflow_startup` hid, one string a line.
STARTUP_LINES = []


def is_command():
    """True in a kt-* console script or a `python -m keras_transformer...` command."""
    if pathlib.Path(sys.argv[0]).name.startswith("kt-"):
        return True
    argv = getattr(sys, "orig_argv", [])
    return any(flag == "-m" and module.startswith("keras_transformer")
               for flag, module in zip(argv, argv[1:]))


@contextlib.contextmanager
def quiet_tensorflow_startup():
    """For the commands: TensorFlow's C++ start-up lines (oneDNN, CUDA, CPU features) are hidden,
    kept in `STARTUP_LINES` (a run without the GPU it expected quotes them).

    They are written to file descriptor 2 before TensorFlow's log level is read, so only a
    redirect hides them; the block loads TensorFlow and asks for GPUs (which prints CUDA's
    complaints), then puts stderr back. Later C++ INFO lines are hidden by TF_CPP_MIN_LOG_LEVEL 1;
    warnings and errors still show. Nothing changes outside a command, with `--verbose`, or
    when the user set TF_CPP_MIN_LOG_LEVEL.
    """
    if not is_command() or VERBOSE_FLAG in sys.argv or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    sys.stderr.flush()
    saved = os.dup(2)
    hidden = tempfile.TemporaryFile()
    os.dup2(hidden.fileno(), 2)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        hidden.seek(0)
        STARTUP_LINES[:] = hidden.read().decode("utf-8", "replace").splitlines()
        hidden.close()


def add_verbose_flag(parser):
    """--verbose: accepted by every command (it is read from sys.argv before TensorFlow loads)."""
    parser.add_argument(VERBOSE_FLAG, action="store_true",
                        help="show TensorFlow's C++ start-up and INFO log lines")


def at_least(minimum, kind=int):
    """An argparse type: a number of `kind` that is at least `minimum`."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind.__name__}: {text!r}") from None
        if not minimum <= value < float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def check_output(parser, output, overwrite):
    """Refuses (as a usage error) an --output that exists without --overwrite, or that cannot
    be written."""
    output = pathlib.Path(output)
    if output.exists() and not overwrite:
        parser.error(f"--output {output} exists; pass --overwrite to replace it")
    if not output.parent.is_dir() or not os.access(output.parent, os.W_OK):
        parser.error(f"--output {output}: {output.parent} is not a writable directory")


def replace_atomically(output, write):
    """Calls write(path) on a hidden file beside `output`, then renames it over `output`: never
    half a file, nothing else touched."""
    output = pathlib.Path(output)
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    try:
        write(partial)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


def write_text(output, text):
    """`text` as UTF-8 (whatever the locale) to the file `output`, replaced atomically, or to
    stdout for None."""
    data = text.encode("utf-8")
    if output:
        replace_atomically(output, lambda path: path.write_bytes(data))
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
