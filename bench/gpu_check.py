"""The Python half of bench/gpu_check.sh: which devices TensorFlow sees, and how much of a device's
peak a kt-train run used.

    python -m bench.gpu_check devices
    python -m bench.gpu_check paper_batch
    python -m bench.gpu_check utilization --model_dir RUN --log RUN.log

Model FLOPs utilization (MFU) = 6 x parameters x target tokens a second / peak FLOP/s. Six FLOPs a
parameter a token is the forward pass's multiply-add (2) and the backward pass's two (4); it
counts the encoder's work on source tokens as if there were as many as target tokens (about so
in translation) and leaves out the attention scores (small at these lengths), and the tokens are
real ones, so padding counts as waste. The peak is the GPU's dense bfloat16/float16 tensor-core
figure from NVIDIA's data sheets (PEAK_TFLOPS overrides it), or on a CPU the 2048^3 matmul peak
measured here in the run's compute dtype.
"""

import argparse
import os
import pathlib
import re
import statistics
import sys

# Dense (no sparsity) tensor-core TFLOP/s in bfloat16, or float16 where the GPU has no bfloat16,
# from NVIDIA's data sheets; matched against TensorFlow's device name, first match wins.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("L4", 121.0),
               ("V100", 125.0), ("T4", 65.0)]


def gpu_peak_tflops(name):
    """The data-sheet peak of a GPU named `name` (e.g. "Tesla T4"), or None if not listed (whole
    words only: an L40S is no L4, an RTX A1000 no A100)."""
    return next((peak for model, peak in PEAK_TFLOPS
                 if re.search(rf"\b{re.escape(model)}\b", name)), None)


def mfu(parameters, tokens_per_second, peak_flops):
    """Model FLOPs utilization (module doc): 6 x parameters x tokens/s over the peak."""
    return 6 * parameters * tokens_per_second / peak_flops


def paper_batch(gpus):
    """(--batch_tokens, --accumulate_steps) giving the paper's 25,000 tokens an update on `gpus`
    GPUs, each holding the P100's 3,125 a micro-batch (docs/gpus.md's table; 0 GPUs: as 1)."""
    accumulate_steps = max(1, 8 // max(1, gpus))
    return 25_000 // accumulate_steps, accumulate_steps


def steady_tokens_per_second(log_text):
    """The median of kt-train's printed target tokens a second, the first line (which pays for
    tracing) left out when there are others."""
    rates = [float(rate) for rate in
             re.findall(r"target_tokens_per_second ([0-9.e+]+)", log_text)]
    if not rates:
        raise SystemExit("gpu_check: the training log has no 'target_tokens_per_second' line "
                         "(did kt-train run for at least --log_every steps?)")
    return statistics.median(rates[1:] or rates)


def devices():
    from keras_transformer import cli
    from keras_transformer.runtime import devices as kt_devices

    gpus = kt_devices.gpu_details()
    print(f"devices: {kt_devices.describe_devices(gpus=gpus)}")
    print(f"--mixed_precision auto: {kt_devices.auto_policy(gpus=gpus)}")
    warning = kt_devices.missing_gpu_warning(cli.STARTUP_LINES, gpus=gpus)
    if warning:
        print(warning)
    for name, _ in gpus:
        peak = gpu_peak_tflops(name)
        print(f"{name}: peak {peak:g} TFLOP/s (data sheet, dense)" if peak else
              f"{name}: peak not listed in bench/gpu_check.py; set PEAK_TFLOPS")


def peak_flops(policy):
    """FLOP/s the run's devices can do at most (module doc), with the source of the figure."""
    from keras_transformer.runtime import devices as kt_devices

    if os.environ.get("PEAK_TFLOPS"):
        return float(os.environ["PEAK_TFLOPS"]) * 1e12, "PEAK_TFLOPS"
    gpus = kt_devices.gpu_details()
    if gpus:
        peaks = [gpu_peak_tflops(name) for name, _ in gpus]
        if None in peaks:
            return None, f"{gpus[0][0]} is not in the table; set PEAK_TFLOPS"
        return sum(peaks) * 1e12, f"{len(gpus)} x {gpus[0][0]} data sheet"
    from bench.train_step import matmul_peak

    dtype = "bfloat16" if "bfloat16" in policy else "float32"
    return matmul_peak(dtype), f"2048^3 {dtype} matmul measured now"


def utilization(model_dir, log):
    import keras_transformer as kt
    from keras_transformer.model_dir import config_file

    run = config_file.load(model_dir)
    parameters = kt.build_model(run.model.hparams,
                                run.model.vocab_size).count_params()
    log_text = pathlib.Path(log).read_text(encoding="utf-8")
    rate = steady_tokens_per_second(log_text)
    policy = re.search(r"\b(float32|mixed_bfloat16|mixed_float16)\b", log_text).group(1)
    peak, source = peak_flops(policy)
    print(f"{run.model.hparams_name}: {parameters:,} parameters, {rate:,.0f} target tokens/s "
          f"({policy})")
    if peak is None:
        print(f"MFU: {source}")
        return
    print(f"MFU = 6 x {parameters:,} parameters x {rate:,.0f} tokens/s / {peak / 1e12:.3g} "
          f"TFLOP/s ({source}) = {mfu(parameters, rate, peak):.1%}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("devices", help="the devices, auto's precision, the GPUs' peaks")
    commands.add_parser("paper_batch", help="kt-train's batch flags for 25,000 tokens an update "
                                            "on this machine's GPUs")
    measured = commands.add_parser("utilization", help="tokens/s and MFU of a kt-train run")
    measured.add_argument("--model_dir", required=True)
    measured.add_argument("--log", required=True, help="kt-train's printed output")
    args = parser.parse_args(argv)
    if args.command == "devices":
        devices()
    elif args.command == "paper_batch":
        from keras_transformer.runtime import devices as kt_devices

        batch_tokens, accumulate_steps = paper_batch(len(kt_devices.gpu_details()))
        print(f"--batch_tokens {batch_tokens} --accumulate_steps {accumulate_steps}")
    else:
        utilization(args.model_dir, args.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
