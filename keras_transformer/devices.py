"""The devices TensorFlow computes on, what they compute natively, and what that means for a run:
the precision `--mixed_precision auto` picks, the words of a run's start line, decoding's batch.

Each function takes the device details it decides on (`flags` as Linux's /proc/cpuinfo lists them,
`gpus` as `gpu_details()` gives them) and defaults to this machine's, so that the decisions are
tested for machines the tests do not run on.
"""

import os
import pathlib
import re

import tensorflow as tf

# Present when NVIDIA's kernel driver is loaded, whether or not TensorFlow found CUDA's libraries.
NVIDIA_DRIVER = pathlib.Path("/proc/driver/nvidia/version")


def gpu_details():
    """(name, compute capability) of each GPU TensorFlow sees, e.g. ("Tesla T4", (7, 5))."""
    details = [tf.config.experimental.get_device_details(gpu)
               for gpu in tf.config.list_physical_devices("GPU")]
    return [(detail.get("device_name", "GPU"), tuple(detail.get("compute_capability", (0, 0))))
            for detail in details]


def cpu_flags():
    """The CPU's feature flags as Linux's /proc/cpuinfo lists them ("" elsewhere)."""
    try:
        return pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return ""


def _cpu_bfloat16(flags):
    """How the CPU computes bfloat16 natively: "AMX", "AVX512_BF16" or None (emulated)."""
    if re.search(r"\bamx_bf16\b", flags):
        return "AMX"
    if re.search(r"\bavx512_bf16\b", flags):
        return "AVX512_BF16"
    return None


def native_bfloat16(flags=None, gpus=None):
    """True where bfloat16 matmuls run natively: on GPUs of compute capability 8.0 or more
    (Ampere on), and on CPUs with AVX512_BF16 or AMX.

    There mixed_bfloat16 trains about 1.7x faster than float32 with the same loss curve
    (bench/RESULTS.md); elsewhere bfloat16 is emulated, and slower. `flags` and `gpus` (as
    `cpu_flags()` and `gpu_details()` give them) default to this machine's.
    """
    gpus = gpu_details() if gpus is None else gpus
    if gpus:
        return all(capability >= (8, 0) for _, capability in gpus)
    return _cpu_bfloat16(cpu_flags() if flags is None else flags) is not None


def auto_policy(flags=None, gpus=None):
    """The Keras dtype policy `--mixed_precision auto` picks: mixed_bfloat16 where bfloat16 is
    native (`native_bfloat16`), mixed_float16 on GPUs of compute capability 7.x (Volta and
    Turing: float16 tensor cores, no bfloat16; e.g. Colab's T4), float32 elsewhere.
    """
    gpus = gpu_details() if gpus is None else gpus
    if native_bfloat16(flags, gpus):
        return "mixed_bfloat16"
    if gpus and all(capability >= (7, 0) for _, capability in gpus):
        return "mixed_float16"
    return "float32"


def describe_devices(flags=None, gpus=None, cores=None):
    """The devices a run on this machine trains on, for its start line: e.g. "1 x GPU (Tesla T4,
    compute capability 7.5)" or "CPU (2 cores, AMX bfloat16)"."""
    gpus = gpu_details() if gpus is None else gpus
    if gpus:
        kinds = {}
        for gpu in gpus:
            kinds[gpu] = kinds.get(gpu, 0) + 1
        return ", ".join(f"{count} x GPU ({name}, compute capability {major}.{minor})"
                         for (name, (major, minor)), count in kinds.items())
    if cores is None:  # the cores this process may use (Linux), or the machine's
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            os.cpu_count()
    bfloat16 = _cpu_bfloat16(cpu_flags() if flags is None else flags)
    return f"CPU ({cores} core{'s' if cores != 1 else ''}" + (
        f", {bfloat16} bfloat16)" if bfloat16 else ")")


def missing_gpu_warning(startup_lines=(), gpus=None, driver=NVIDIA_DRIVER):
    """A warning when NVIDIA's driver is loaded but TensorFlow sees no GPU (CUDA's libraries
    missing or mismatched): the run would train on the CPU. Quotes TensorFlow's start-up lines
    about it, which the commands hide. None when there is nothing to say."""
    gpus = gpu_details() if gpus is None else gpus
    if gpus or not driver.exists():
        return None
    said = [line for line in startup_lines
            if re.search(r"dlopen|cuda|GPU|libcu|libnv", line, re.IGNORECASE)]
    return ("warning: NVIDIA's driver is loaded (" + str(driver) + ") but TensorFlow sees no "
            "GPU, so this run trains on the CPU; install TensorFlow with its CUDA libraries "
            "(pip install 'tensorflow[and-cuda]') and check `python -c \"import tensorflow as "
            "tf; print(tf.config.list_physical_devices('GPU'))\"`" +
            "".join(f"\n  TensorFlow said: {line}" for line in said))


def decode_batch_size(gpus=None):
    """Sentences kt-translate decodes together by default: 32 on a CPU (two cores are busy with
    fewer), 128 on a GPU (whose matmuls need wide batches; beam 4 makes it 512 hypotheses)."""
    return 128 if (gpu_details() if gpus is None else gpus) else 32
