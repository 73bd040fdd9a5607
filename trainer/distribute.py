"""Which tf.distribute strategy a run uses (its devices and precision: keras_transformer/devices).

One machine with several GPUs: `MirroredStrategy` over them. One GPU, or the CPU: TensorFlow's
default strategy (no distribution). Several workers named in TF_CONFIG:
`MultiWorkerMirroredStrategy`, with the chief (or worker 0) writing model_dir.
"""

import json
import os
import pathlib
import secrets
import time

import tensorflow as tf


def cluster_workers():
    """The number of worker tasks TF_CONFIG names (1 without TF_CONFIG)."""
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return len(cluster.get("worker", [])) + len(cluster.get("chief", [])) or 1


def strategy():
    """Mirroring one device would only add tf.data's distribution to the run: Keras feeds a
    distributed dataset through a per-device generator that tf.data's optimizations cannot
    serialize and auto-shards it into the one shard it already is, and both warn ("Input of
    GeneratorDatasetOp::Dataset will not be optimized", "The `assert_cardinality` transformation
    is currently not handled by the auto-shard rewrite"). Without it the CPU trained to the same
    bits (--deterministic, float32 and XLA bfloat16)."""
    if cluster_workers() > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_logical_devices("GPU")) > 1:  # MirroredStrategy()'s devices: all GPUs
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def local_replicas(distribution):
    """The replicas on this worker (the default strategy has no `extended.worker_devices`)."""
    if is_multi_worker(distribution):
        return len(distribution.extended.worker_devices)
    return distribution.num_replicas_in_sync


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


# Written by the chief at the start of a multi-worker run; every worker must read it back.
SHARED_CHECK_FILE = "workers.check"


def worker_index(distribution):
    """This worker's place among all workers, 0 for the chief (or worker 0 without a chief)."""
    resolver = distribution.cluster_resolver
    if resolver.task_type == "chief":
        return 0
    return resolver.task_id + ("chief" in resolver.cluster_spec().as_dict())


def sum_over_workers(distribution, values):
    """The element-wise sum over all workers of each worker's `values` (floats, exact below
    2^53): one collective, which every worker must reach."""
    replicas_here = local_replicas(distribution)
    values = tf.constant(values, tf.float64)

    def replica_share():  # the worker's first replica carries its values, the others zeros
        first = tf.equal(tf.distribute.get_replica_context().replica_id_in_sync_group
                         % replicas_here, 0)
        return values * tf.cast(first, tf.float64)

    return distribution.reduce(tf.distribute.ReduceOp.SUM, distribution.run(replica_share),
                               axis=None).numpy()


def _read_token(path, expected, attempts=5):
    """The int in `path`, waiting a second at a time (up to `attempts` reads) for `expected`: a
    network file system may show another host's new file a moment late. None if unreadable."""
    for attempt in range(attempts):
        try:
            seen = int(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            seen = None
        if seen == expected or attempt == attempts - 1:
            return seen
        time.sleep(1)


def check_shared_model_dir(distribution, model_dir):
    """Several workers restore from model_dir and only the chief writes it: a worker whose
    model_dir is a directory of its own would train from step 0, and the cluster would diverge.
    The chief writes a fresh token there; after a collective (which orders the write first) every
    worker reads it back, and a second collective tells all of them who could not.

    Returns:
        the indices (`worker_index`) of the workers that did not read the chief's token (all of
        them when the chief could not write it): empty when model_dir is shared.
    """
    path = pathlib.Path(model_dir) / SHARED_CHECK_FILE
    chief = is_chief(distribution)
    token = 0  # the chief's, when it could write it: every worker must reach both collectives
    if chief:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(secrets.randbelow(2 ** 52) + 1), encoding="utf-8")
            token = int(path.read_text(encoding="utf-8"))
        except OSError:
            token = 0
    token = int(sum_over_workers(distribution, [token])[0])
    seen = _read_token(path, token) if token else None
    missing = [0.0] * cluster_workers()
    missing[worker_index(distribution)] = float(not token or seen != token)
    unseen = [index for index, count in enumerate(sum_over_workers(distribution, missing))
              if count]
    if chief:
        path.unlink(missing_ok=True)  # read by all by now (the collective above)
    return unseen
