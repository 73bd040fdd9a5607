"""What every benchmark shares: the machine's description and the results file.

The reliability campaigns (reliability/) use it too, with their own results file.
"""

import datetime
import os
import pathlib
import platform
import shlex
import statistics
import sys

from keras_transformer import cli
from keras_transformer.runtime import precision_probe

RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"


def machine():
    """CPU model, cores and library versions, for the results' header."""
    import keras
    import tensorflow as tf
    import tensorflow_text

    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            fields = dict(line.split(":", 1) for line in file.read().split("\n\n")[0]
                          .splitlines() if ":" in line)
        fields = {name.strip(): value.strip() for name, value in fields.items()}
        # One model name covers CPUs years apart ("AMD EPYC" was Zen 1 and Zen 4 on two days
        # here, 6x apart in speed): the family, model and bfloat16 support tell them apart.
        flags = fields.get("flags", "").split()
        native = any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))
        cpu = (f"{fields['model name']} (family {fields.get('cpu family', '?')} model "
               f"{fields.get('model', '?')}, {'AVX-512' if 'avx512f' in flags else 'no AVX-512'}"
               f", {'native' if native else 'no native'} bfloat16)")
    except (OSError, KeyError, ValueError):
        pass
    # The CPU's flags say what it has, these what oneDNN may use of it: a capped ISA stands in
    # for another machine kind (bfloat16 0.36x float32 on the Zen 4 under AVX512_CORE_VNNI).
    settings = precision_probe.kernel_settings()
    return (f"{cpu}{', ' + ', '.join(settings) if settings else ''}, {os.cpu_count()} cores; "
            f"Python {platform.python_version()}, TensorFlow {tf.__version__}, Keras "
            f"{keras.__version__}, tensorflow-text {tensorflow_text.__version__}")


def summary(values):
    """'median (min-max, n=N)' of a list of numbers."""
    return (f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f}, "
            f"n={len(values)})")


def peaks_sentence(peaks, precision="float32"):
    """The sentence a bench prints beside its figures: the 2048^3 matmul peak (GFLOP/s, as
    `bench.train_step.matmul_peak` measures it / 1e9) before and after its runs."""
    return (f"{precision} matmul peak (2048^3) before and after: {peaks[0]:.0f} and "
            f"{peaks[-1]:.0f} GFLOP/s.")


def add_model_and_corpus_flags(parser):
    """--model_dir (a trained model_dir) and --data with its --source_lang / --target_lang (a
    corpus of the model's language pair, en->es by default), the flags of the benches that
    measure one trained model on a corpus."""
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="es")


def markdown_table(columns, rows):
    """A Markdown table: a header of `columns`, then one line per row (a sequence of cells)."""
    lines = [columns, ["---"] * len(columns), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def command_line():
    """The command that is running, as typed from the repository root and quoted for a shell:
    `python -m bench.train_step --repeats 5` when run as a module."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = ["-m", spec.name] if spec is not None and spec.name else [
        os.path.relpath(sys.argv[0])]
    return shlex.join(["python", *program, *sys.argv[1:]])


def append_results(title, table, results=RESULTS, machine_line=None):
    """Writes a dated section with the machine (`machine_line`, or the CPU's and the
    libraries' from `machine()`) and the command at the end of `results` (bench/RESULTS.md
    unless given). Every run keeps its section, the newest last: readings written by hand
    cite earlier runs of the same benchmark (on other machines, or before a change), which
    replacing sections of the same title had twice written over."""
    section = (f"## {title} ({datetime.date.today().isoformat()})\n\n"
               f"Machine: {machine_line or machine()}  \nCommand: `{command_line()}`\n\n"
               f"{table}\n")
    results = pathlib.Path(results)
    text = results.read_text(encoding="utf-8") if results.exists() else ""
    # A crash mid-write leaves the old file, not half of it.
    cli.write_text(results, text.rstrip("\n") + "\n\n" + section if text.strip() else section)
    print(section)
    print(f"(written to {results})")
