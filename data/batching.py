"""Batching by sequence length to a token budget (paper section 5.1, tensor2tensor's buckets).

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." Pairs go to buckets by their longer side; bucket boundaries grow geometrically (x1.1 from
8, as in tensor2tensor); a bucket of boundary b pads both sides to b - 1 tokens and holds
batch_tokens // (b - 1) pairs, so no batch exceeds the budget on either side, and the handful of
distinct shapes keeps `model.fit` from retracing for every batch.

XLA (`--jit_compile`) compiles a step once per batch shape, where TensorFlow's graphs take any:
for it, `static_shapes` fills every batch of a bucket to the bucket's size, and a coarser growth
(`XLA_BUCKET_GROWTH`) makes fewer buckets, so `batch_shapes` lists every shape a run can see.
"""

import dataclasses

import numpy as np
import tensorflow as tf

BUCKET_GROWTH = 1.1  # tensor2tensor's: 42 buckets up to 256 tokens
# 10 buckets up to 256 tokens (widths 7, 11, 17, 26, 39, 59, 89, 134, 201, 256), for XLA.
XLA_BUCKET_GROWTH = 1.5


def bucket_boundaries(max_pair_length, min_length=8, step=BUCKET_GROWTH):
    """Geometric boundaries from `min_length`, the last one max_pair_length + 1.

    A pair of length n (its longer side, end of sentence included) falls in the first bucket whose
    boundary exceeds n.
    """
    if max_pair_length < 1 or min_length < 1 or step <= 1.0:
        raise ValueError(f"need max_pair_length >= 1, min_length >= 1 and step > 1, got "
                         f"max_pair_length={max_pair_length}, min_length={min_length}, step={step}")
    boundaries = []
    boundary = min_length
    while boundary <= max_pair_length:
        boundaries.append(boundary)
        boundary = max(boundary + 1, int(boundary * step))
    return boundaries + [max_pair_length + 1]


def bucket_widths(boundaries):
    """The padded length of each bucket's batches: its boundary - 1."""
    return [boundary - 1 for boundary in boundaries]


def bucket_batch_sizes(boundaries, batch_tokens, batch_size_multiple=1):
    """Pairs per batch for each bucket: as many as fit `batch_tokens` at the padded length.

    Sizes are rounded down to a multiple of `batch_size_multiple` (the number of replicas, so a
    batch splits evenly across them).
    """
    sizes = [(batch_tokens // (b - 1)) // batch_size_multiple * batch_size_multiple
             for b in boundaries]
    if min(sizes) < 1:
        raise ValueError(
            f"batch_tokens={batch_tokens} cannot hold {batch_size_multiple} pair(s) of "
            f"{boundaries[-1] - 1} tokens; raise batch_tokens or lower max_pair_length")
    return sizes


def batch_shapes(max_pair_length, batch_tokens, batch_size_multiple=1, min_length=8,
                 step=BUCKET_GROWTH):
    """[(rows, width)]: the shape of every batch `batch_by_length(..., static_shapes=True)` can
    make with these arguments, one a bucket (so the XLA compilations of a step that reads them)."""
    boundaries = bucket_boundaries(max_pair_length, min_length, step)
    sizes = bucket_batch_sizes(boundaries, batch_tokens, batch_size_multiple)
    return list(zip(sizes, bucket_widths(boundaries)))


@dataclasses.dataclass(frozen=True)
class UpdateBatches:
    """How the tokens of one optimizer update are cut into the batches one pipeline yields.

    Attributes:
        update_tokens: padded tokens a side of one update, all micro-batches and replicas.
        replicas: replicas in sync, over all workers.
        batch_tokens: most padded tokens a side of one pipeline batch.
        size_multiple: its rows come in multiples of this (the replicas that share the batch
            times the micro-batches each splits its rows into).
        per_update: pipeline batches one update takes from one worker's pipeline (what a resume
            skips per step done).
    """

    update_tokens: int
    replicas: int
    batch_tokens: int
    size_multiple: int
    per_update: int

    def check(self, max_pair_length):
        """Raises ValueError when the longest bucket (pairs of `max_pair_length` tokens) cannot hold
        `size_multiple` pairs: its batches would be empty."""
        if self.batch_tokens // max_pair_length < self.size_multiple:
            raise ValueError(
                f"an update of {self.update_tokens:,} padded tokens a side over "
                f"{self.replicas} replica(s) makes batches of {self.batch_tokens:,}, too few for "
                f"{self.size_multiple} pair(s) of the longest bucket ({max_pair_length} tokens); "
                f"raise batch_tokens or lower max_pair_length")


def update_batches(batch_tokens, *, accumulate_steps=1, replicas=1, per_replica=False,
                   local_replicas=1):
    """The batch arithmetic of data-parallel training: an update is `accumulate_steps`
    micro-batches of `batch_tokens` padded tokens a side over all `replicas`.

    Args:
        batch_tokens: padded tokens a side of one micro-batch over all replicas (kt-train's
            --batch_tokens).
        accumulate_steps: micro-batches an update adds up (each replica splits its rows).
        replicas: replicas in sync, over all workers.
        per_replica: each pipeline batch goes to one replica (`distribute_datasets_from_function`,
            as for several workers); otherwise a batch is split over the replicas by rows
            (`model.fit` under MirroredStrategy).
        local_replicas: with `per_replica`, the replicas of this worker, each taking one batch of
            its pipeline per update.

    Returns:
        UpdateBatches. E.g. the paper's 25,000 tokens on 2 workers x 8 GPUs: per-replica batches of
        1,562 tokens, 6 pairs of the 256-token bucket, 8 batches an update from each worker.
    """
    for name, value in (("batch_tokens", batch_tokens), ("accumulate_steps", accumulate_steps),
                        ("replicas", replicas), ("local_replicas", local_replicas)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    update_tokens = batch_tokens * accumulate_steps
    if per_replica:
        return UpdateBatches(update_tokens, replicas, batch_tokens=update_tokens // replicas,
                             size_multiple=accumulate_steps, per_update=local_replicas)
    return UpdateBatches(update_tokens, replicas, batch_tokens=update_tokens,
                         size_multiple=replicas * accumulate_steps, per_update=1)


def batch_by_length(pairs, batch_tokens, max_pair_length, batch_size_multiple=1, min_length=8,
                    step=BUCKET_GROWTH, static_shapes=False):
    """Batches (source_ids, target_ids) pairs of 1-D int32 tensors by length.

    Args:
        pairs: dataset of (source_ids [n], target_ids [m]), every n, m <= max_pair_length.
        batch_tokens: most padded tokens a batch holds on each side.
        max_pair_length: the longest pair.
        batch_size_multiple: every batch size is a multiple of it.
        min_length, step: the bucket boundaries' start and growth factor.
        static_shapes: every batch of a bucket has its size (`batch_shapes`): the last, partial
            batches of a finite dataset are filled with all-padding rows too.

    Returns:
        dataset of (source_ids [batch, L], target_ids [batch, L]), 0-padded to the bucket's L;
        batch is a multiple of batch_size_multiple.
    """
    boundaries = bucket_boundaries(max_pair_length, min_length, step)
    sizes = bucket_batch_sizes(boundaries, batch_tokens, batch_size_multiple)
    batches = pairs.bucket_by_sequence_length(
        element_length_func=lambda source, target: tf.maximum(tf.size(source), tf.size(target)),
        bucket_boundaries=boundaries,
        # The bucket past the last boundary never fills: every pair is shorter than it.
        bucket_batch_sizes=sizes + [1],
        pad_to_bucket_boundary=True)
    if batch_size_multiple == 1 and not static_shapes:
        return batches
    widths = tf.constant(bucket_widths(boundaries))
    bucket_rows = tf.constant(sizes)

    def pad_rows(source, target):
        # A bucket's last batch of a finite dataset is partial; all-padding rows round it up.
        rows = tf.shape(source)[0]
        if static_shapes:
            bucket = tf.argmax(tf.cast(widths == tf.shape(source)[1], tf.int32))
            missing = tf.gather(bucket_rows, bucket) - rows
        else:
            missing = -rows % batch_size_multiple
        return tuple(tf.pad(ids, [[0, missing], [0, 0]]) for ids in (source, target))

    return batches.map(pad_rows)


def length_sorted_batches(ids, batch_size):
    """Rows of int ids [n, length] (0-padded) in batches of similar length, the longest first.

    Yields (rows, batch): the row indices and ids[rows] cut to that batch's longest row, so
    decoding a batch spends little on padding; callers put results back in order with `rows`.
    """
    lengths = np.count_nonzero(ids, axis=1)
    order = np.argsort(-lengths, kind="stable")  # the longest first: memory trouble shows early
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        yield rows, ids[rows][:, :max(1, lengths[rows].max())]
