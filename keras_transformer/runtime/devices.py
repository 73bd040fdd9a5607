"""The devices TensorFlow computes on and what that means for a run: the precision
`--mixed_precision auto` picks for training and `--dtype auto` for decoding (GPUs by compute
capability, CPUs by measuring), the words of a run's start line, decoding's batch.

Each function takes the device details it decides on (`cpuinfo` as Linux's /proc/cpuinfo gives
it, `gpus` as `gpu_details()` gives them, a CPU measurement as a function) and defaults to this
machine's, so that the decisions are tested for machines the tests do not run on.
"""

import os
import pathlib
import re
import typing

import tensorflow as tf

from keras_transformer.runtime import precision_probe

# Present when NVIDIA's kernel driver is loaded, whether or not TensorFlow found CUDA's libraries.
NVIDIA_DRIVER = pathlib.Path("/proc/driver/nvidia/version")


def gpu_details():
    """(name, compute capability) of each GPU TensorFlow sees, e.g. ("Tesla T4", (7, 5))."""
    details = [tf.config.experimental.get_device_details(gpu)
               for gpu in tf.config.list_physical_devices("GPU")]
    return [(detail.get("device_name", "GPU"), tuple(detail.get("compute_capability", (0, 0))))
            for detail in details]


def cpu_flags():
    """Linux's /proc/cpuinfo: the CPU's model name and feature flags ("" elsewhere)."""
    try:
        return pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return ""


def cores_available():
    """The cores this process may use (Linux), or the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cpu_model(cpuinfo=None):
    """The CPU's model name as /proc/cpuinfo gives it (None where it does not)."""
    found = re.search(r"^model name\s*:\s*(.+)$", cpu_flags() if cpuinfo is None else cpuinfo,
                      re.MULTILINE)
    return found.group(1).strip() if found else None


# mixed_bfloat16 keeps layer norms, softmaxes, the loss and the update in float32 and casts
# around the matmuls, so a model trains less than the matmuls' speedup faster (Zen 5: matmuls
# ~2x, training ~1.7x; the AMX-hidden Xeon: 0.6x and 0.55-0.7x): bfloat16 must win clearly.
CPU_SPEEDUP_NEEDED = 1.25


class PolicyChoice(typing.NamedTuple):
    """The Keras dtype policy `--mixed_precision auto` takes, and why (for the start line)."""

    policy: str
    reason: str


def choose_policy(gpus=None, *, measure_cpu=None):
    """`--mixed_precision auto`'s policy and reason.

    GPUs: mixed_bfloat16 where all have compute capability 8.0 or more (Ampere on),
    mixed_float16 where all have 7.x or more (Volta and Turing: float16 tensor cores, no
    bfloat16; e.g. Colab's T4), float32 before; on a GPU machine the GPUs decide, not the host
    CPU. CPUs: measured, since their flags do not say which is faster (precision_probe):
    mixed_bfloat16 where bfloat16 matmuls ran at least CPU_SPEEDUP_NEEDED times float32's
    speed, float32 elsewhere.

    Args:
        gpus: as `gpu_details()` gives them (default: this machine's).
        measure_cpu: a function returning a `precision_probe.Measurement`, called only
            without GPUs (default: `cpu_measurement()` at transformer_base's widths).
    """
    gpus = gpu_details() if gpus is None else gpus
    if gpus:
        lowest, said = lowest_capability(gpus)
        if lowest >= (8, 0):
            return PolicyChoice("mixed_bfloat16", f"{said}: bfloat16 tensor cores")
        if lowest >= (7, 0):
            return PolicyChoice("mixed_float16", f"{said}: float16 tensor cores, no bfloat16")
        return PolicyChoice("float32", f"{said}: no float16 or bfloat16 tensor cores")
    return measured_choice(measure_cpu or (lambda: cpu_measurement(512, 2048, 4096)),
                           "mixed_bfloat16", CPU_SPEEDUP_NEEDED)


def lowest_capability(gpus):
    """(the lowest compute capability of `gpus`, its words: "GPUs of compute capability
    7.5")."""
    lowest = min(capability for _, capability in gpus)
    return lowest, f"GPUs of compute capability {lowest[0]}.{lowest[1]}"


def measured_choice(measure_cpu, faster, needed):
    """`faster` (a dtype or policy) where the CPU measurement `measure_cpu()` has bfloat16 at
    least `needed` times float32's speed, else float32; the measurement's words as the
    reason."""
    measurement = measure_cpu()
    return PolicyChoice(faster if measurement.speedup >= needed else "float32",
                        measurement.describe())


# Decoding in bfloat16 gains less than its matmuls do: the search's scores, softmax and top-k
# stay float32. On the Xeon with AMX (matmuls 3.7x) a beam-4 batch of transformer_base decoded
# 1.73x faster with bfloat16 weights (issue 84's table); where the matmuls gain little, the
# search would gain nothing and its scores would still round.
DECODING_SPEEDUP_NEEDED = 1.25


def choose_decoding_dtype(gpus=None, *, measure_cpu=None):
    """`--dtype auto`'s dtype (a `PolicyChoice`): "bfloat16" (the weights stored in bfloat16,
    the fastest of `DTYPES` where bfloat16 computes fast) or "float32", and why.

    GPUs: bfloat16 where all have compute capability 8.0 or more (bfloat16 tensor cores),
    float32 before. CPUs: measured at decoding's shape, forward only
    (`precision_probe.DECODING_SHAPE`, cached per machine): bfloat16 where its matmuls ran at
    least DECODING_SPEEDUP_NEEDED times float32's speed.

    Args:
        gpus: as `gpu_details()` gives them (default: this machine's).
        measure_cpu: a function returning a `precision_probe.Measurement`, called only
            without GPUs (default: `decoding_measurement`).
    """
    gpus = gpu_details() if gpus is None else gpus
    if gpus:
        lowest, said = lowest_capability(gpus)
        if lowest >= (8, 0):
            return PolicyChoice("bfloat16", f"{said}: bfloat16 tensor cores")
        return PolicyChoice("float32", f"{said}: no bfloat16 tensor cores")
    return measured_choice(measure_cpu or decoding_measurement, "bfloat16",
                           DECODING_SPEEDUP_NEEDED)


def decoding_measurement():
    """bfloat16 against float32 on this CPU at decoding's shape, cached per machine."""
    return precision_probe.speedup(precision_probe.DECODING_SHAPE, cpuinfo=cpu_flags(),
                                   cores=cores_available(), forward_only=True)


def auto_policy(gpus=None, *, measure_cpu=None):
    """The policy of `choose_policy` (the same arguments)."""
    return choose_policy(gpus, measure_cpu=measure_cpu).policy


def cpu_measurement(d_model, d_ff, batch_tokens):
    """bfloat16 against float32 on this CPU at a model's widths, cached per machine
    (`precision_probe.speedup`)."""
    shape = precision_probe.probe_shape(d_model, d_ff, batch_tokens)
    return precision_probe.speedup(shape, cpuinfo=cpu_flags(), cores=cores_available())


def describe_devices(cpuinfo=None, gpus=None, cores=None):
    """The devices a run on this machine trains on, for its start line: e.g. "1 x GPU (Tesla T4,
    compute capability 7.5)" or "CPU (Intel(R) Xeon(R) Platinum 8488C, 2 cores)"."""
    gpus = gpu_details() if gpus is None else gpus
    if gpus:
        kinds = {}
        for gpu in gpus:
            kinds[gpu] = kinds.get(gpu, 0) + 1
        return ", ".join(f"{count} x GPU ({name}, compute capability {major}.{minor})"
                         for (name, (major, minor)), count in kinds.items())
    cores = cores_available() if cores is None else cores
    model = cpu_model(cpuinfo)
    return f"CPU ({model + ', ' if model else ''}{cores} core{'s' if cores != 1 else ''})"


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
