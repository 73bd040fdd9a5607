"""What every benchmark shares: the machine's description and the results file."""

import datetime
import os
import pathlib
import platform
import statistics
import sys

RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"


def machine():
    """CPU model, cores and library versions, for the results' header."""
    import keras
    import tensorflow as tf
    import tensorflow_text

    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in
                   open("/proc/cpuinfo", encoding="utf-8") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, TensorFlow "
            f"{tf.__version__}, Keras {keras.__version__}, tensorflow-text "
            f"{tensorflow_text.__version__}")


def summary(values):
    """'median (min-max, n=N)' of a list of numbers."""
    return (f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f}, "
            f"n={len(values)})")


def markdown_table(columns, rows):
    """A Markdown table: a header of `columns`, then one line per row (a sequence of cells)."""
    lines = [columns, ["---"] * len(columns), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def append_results(title, table):
    """Appends a dated section with the machine and the command to bench/RESULTS.md."""
    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    section = (f"\n## {title} ({datetime.date.today().isoformat()})\n\n"
               f"Machine: {machine()}  \nCommand: `{command}`\n\n{table}\n")
    with RESULTS.open("a", encoding="utf-8") as results:
        results.write(section)
    print(section)
