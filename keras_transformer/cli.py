"""What the kt-* commands share: --verbose, argparse types, safe output files.

Imports nothing heavy: data/ uses it without the model.
"""

import argparse
import contextlib
import os
import pathlib
import signal
import sys
import threading

VERBOSE_FLAG = "--verbose"
# TensorFlow's C++ start-up lines, one string a line, which the kt-* scripts hide
# (_keras_transformer_commands.py, beside this package, fills it).
STARTUP_LINES = []


def add_verbose_flag(parser):
    """--verbose: accepted by every command (the kt-* scripts read it before TensorFlow loads)."""
    parser.add_argument(VERBOSE_FLAG, action="store_true",
                        help="show TensorFlow's C++ start-up and INFO log lines")


def checked(kind, problem):
    """An argparse type: a number of `kind`, refused with the message `problem(value)` gives
    (None: accepted). The commands' flags for settings that check themselves parse with their
    rule (e.g. `search.settings.bound_problem`), so each bound is stated once."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind.__name__}: {text!r}") from None
        message = problem(value)
        if message:
            raise argparse.ArgumentTypeError(message)
        return value
    return parse


def at_least(minimum, kind=int):
    """An argparse type: a number of `kind` that is at least `minimum`."""
    return checked(kind, lambda value: None if minimum <= value < float("inf")  # refuses nan
                   else f"must be at least {minimum}, got {value}")


def renamed(new_flag, meaning):
    """An argparse type that refuses a flag renamed `new_flag` (what it is: `meaning`), so an
    old command line gets the new name instead of "unrecognized arguments"."""
    def refuse(text):
        raise argparse.ArgumentTypeError(f"renamed {new_flag} ({meaning}) in 0.1.0")
    return refuse


def check_output(parser, output, overwrite):
    """Refuses (as a usage error) an --output that exists without --overwrite, or that cannot
    be written."""
    output = pathlib.Path(output)
    try:
        exists = output.exists()
    except OSError as error:  # a name too long for the file system, say
        parser.error(f"--output {output}: {error.strerror}")
    if exists and not overwrite:
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


class PieceWriter:
    """Text written as UTF-8 in pieces, as it is made: to stdout (output None), flushed after
    each piece; or to the file `output` through a hidden file beside it, which `finish` renames
    over `output` (whole, or the pieces so far after an interruption) and `discard` removes."""

    def __init__(self, output):
        self.output = pathlib.Path(output) if output else None
        self.partial = self.output and self.output.with_name(
            f".{self.output.name}.partial-{os.getpid()}")
        self.stream = self.partial.open("wb") if self.partial else sys.stdout.buffer

    def write(self, text):
        self.stream.write(text.encode("utf-8"))
        self.stream.flush()

    def finish(self):
        if self.partial:
            self.stream.close()
            os.replace(self.partial, self.output)

    def discard(self):
        if self.partial:
            try:
                self.stream.close()
            except OSError:  # a full disk refuses the buffered rest again; it is thrown away
                pass
            finally:
                self.partial.unlink(missing_ok=True)


def write_text(output, text):
    """`text` as UTF-8 (whatever the locale) to the file `output`, replaced atomically, or to
    stdout for None."""
    data = text.encode("utf-8")
    if output:
        replace_atomically(output, lambda path: path.write_bytes(data))
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


# Ctrl-C or SIGTERM while a command works: `_stop` raises KeyboardInterrupt wherever the main
# thread is, and remembers it. Raised inside a finalizer (a `__del__`, which TensorFlow's
# objects run at any moment), Python prints it as "Exception ignored in" and drops it, and the
# command went on (a --documents run translated on for 15 minutes past its SIGTERM); so the
# work loops also call `raise_if_stopped` between batches, and one signal always stops.
_STOPPED = threading.Event()


@contextlib.contextmanager
def stopped_by_signals():
    """Within it (in the main thread: signals reach only it), SIGTERM and SIGINT (unless the
    process ignores it, as one started in the background by a shell does) raise
    KeyboardInterrupt, which `raise_if_stopped` raises again until the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOPPED.clear()
    previous = {number: signal.signal(number, _stop) for number in (signal.SIGINT, signal.SIGTERM)
                if number == signal.SIGTERM or signal.getsignal(number) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        _STOPPED.clear()


def _stop(signum, frame):
    _STOPPED.set()
    raise KeyboardInterrupt


def raise_if_stopped():
    """Raises KeyboardInterrupt if a signal came within `stopped_by_signals` (its first
    KeyboardInterrupt may have been dropped); a work loop calls it between batches."""
    if _STOPPED.is_set():
        raise KeyboardInterrupt
