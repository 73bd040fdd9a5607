"""Which tf.distribute strategy a run uses (its devices and precision: keras_transformer/devices).

One machine: `MirroredStrategy` over its GPUs, or its CPU. Several workers named in TF_CONFIG:
`MultiWorkerMirroredStrategy`, with the chief (or worker 0) writing model_dir.
"""

import json
import os

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
