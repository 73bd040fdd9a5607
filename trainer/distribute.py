"""Which tf.distribute strategy a run uses, and whether its devices compute bfloat16 natively.

One machine: `MirroredStrategy` over its GPUs, or its CPU. Several workers named in TF_CONFIG:
`MultiWorkerMirroredStrategy`, with the chief (or worker 0) writing model_dir.
"""

import json
import os
import pathlib
import re

import tensorflow as tf


def cluster_workers():
    """The number of worker tasks TF_CONFIG names (1 without TF_CONFIG)."""
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return len(cluster.get("worker", [])) + len(cluster.get("chief", [])) or 1


def strategy():
    if cluster_workers() > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy()


def is_multi_worker(distribution):
    return isinstance(distribution, tf.distribute.MultiWorkerMirroredStrategy)


def is_chief(distribution):
    """True on the task that writes checkpoints, logs and config (always, on one machine)."""
    if not is_multi_worker(distribution):
        return True
    resolver = distribution.cluster_resolver
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


def native_bfloat16(cpu_flags=None):
    """True where bfloat16 matmuls run natively: on GPUs of compute capability 8.0 or more
    (Ampere on), and on CPUs with AVX512_BF16 or AMX (Linux's /proc/cpuinfo, or `cpu_flags`).

    There mixed_bfloat16 trains about 1.7x faster than float32 with the same loss curve
    (bench/RESULTS.md); elsewhere bfloat16 is emulated, and slower.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus and cpu_flags is None:
        return all(tf.config.experimental.get_device_details(gpu).get(
            "compute_capability", (0, 0)) >= (8, 0) for gpu in gpus)
    if cpu_flags is None:
        try:
            cpu_flags = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", cpu_flags) is not None
