"""kt-demo as a new user first runs it: a new model_dir, the demo's defaults, nothing else
running; what it chose on this machine and what it gave.

    python -m bench.first_run                       # kt-demo's 10 minutes into a new directory
    python -m bench.first_run -- --data bible_en_es # flags after -- go to kt-demo

Records, for the machine's results: the precision `--mixed_precision auto` chose and why (the
run's start line), the updates trained, target tokens a second (median of the progress lines),
where the learning rate peaked and where it began to cool down (kt-train's plan lines), the
demo's dev BLEU (beam 4, its 100 spread dev sentences), the command's wall time, and the
float32 and bfloat16 2048^3 matmul peaks before and after it. One run; the section is titled
with the CPU's model (and kt-demo's flags, if any).
"""

import argparse
import pathlib
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import append_results, markdown_table
from bench.train_step import matmul_peak
from keras_transformer.runtime import devices

COLUMNS = ["precision (auto's reason)", "updates", "target tokens/s", "peak rate at update",
           "cooldown from update", "dev BLEU (beam 4, 100 sentences)", "wall minutes"]


def peaks():
    """(float32, bfloat16) 2048^3 matmul peaks, GFLOP/s."""
    return tuple(matmul_peak(dtype) / 1e9 for dtype in ("float32", "bfloat16"))


def found(pattern, output, default="-"):
    match = re.search(pattern, output)
    return match.group(1) if match else default


def row_of(output, seconds):
    """The table's cells read from kt-demo's output."""
    policy = found(r"replica\(s\) on .*?, (float32|mixed_bfloat16|mixed_float16)[ ,]", output)
    reason = found(r"--mixed_precision auto: (.*?)\), model_dir", output, "")
    rates = [float(rate) for rate in re.findall(r"target_tokens_per_second ([0-9.e+]+)", output)]
    return [f"{policy} ({reason})" if reason else policy,
            found(r"done: step (\d+)", output),
            f"{statistics.median(rates):,.0f}" if rates else "-",
            peak_of(output),
            found(r"the learning rate falls to zero from step (\d+)", output),
            found(r"dev BLEU ([0-9.]+) on \d+ sentences", output),
            f"{seconds / 60:.1f}"]


def peak_of(output):
    """Where the rate peaked: the warmup's plan, or just after the cooldown's start where the
    cooldown's plan moved the peak there ("739 (planned 792)")."""
    planned = found(r"the learning rate peaks at step (\d+)", output)
    if re.search(r"peaking there instead of at step", output):
        start = found(r"the learning rate falls to zero from step (\d+)", output)
        return f"{int(start) + 1} (planned {planned})"
    return planned


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.first_run", description=__doc__.split(
        "\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", help="a new directory (default: a temporary one)")
    parser.add_argument("demo_flags", nargs="*", help="kt-demo's flags, after --")
    args = parser.parse_args(argv)
    before = peaks()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = pathlib.Path(args.model_dir or pathlib.Path(scratch) / "demo")
        if model_dir.exists():
            sys.exit(f"{model_dir} exists: a first run needs a new directory")
        command = [sys.executable, "-m", "keras_transformer.demo", "--model_dir", str(model_dir),
                   *args.demo_flags]
        print("$ " + shlex.join(command), flush=True)
        start = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True)
        seconds = time.monotonic() - start
    print(result.stdout)
    if result.returncode:
        sys.exit(f"kt-demo failed ({result.returncode}):\n{result.stderr[-4000:]}")
    after = peaks()
    table = (f"{shlex.join(['kt-demo', *args.demo_flags])} into a new model_dir, alone on the "
             f"machine. "
             f"Matmul peaks (2048^3) before and after: float32 {before[0]:.0f} and "
             f"{after[0]:.0f}, bfloat16 {before[1]:.0f} and {after[1]:.0f} GFLOP/s.\n\n"
             + markdown_table(COLUMNS, [row_of(result.stdout, seconds)]))
    # The title says the flags: a run with them is not the defaults' first run.
    flags = f" ({shlex.join(args.demo_flags)})" if args.demo_flags else ""
    append_results(f"kt-demo's first run on {devices.cpu_model() or platform.processor()}"
                   f"{flags}", table)


if __name__ == "__main__":
    main()
