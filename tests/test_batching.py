import collections
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import data


def test_boundaries_are_tensor2tensors_geometric_steps():
    assert data.bucket_boundaries(64) == [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22,
                                          24, 26, 28, 30, 33, 36, 39, 42, 46, 50, 55, 60, 65]
    boundaries = data.bucket_boundaries(256)
    assert boundaries[-1] == 257 and all(b > a for a, b in zip(boundaries, boundaries[1:]))
    assert all(b / a <= 1.1 + 1e-9 or b - a == 1 for a, b in zip(boundaries, boundaries[1:-1]))


def test_batch_sizes_fill_the_budget_at_the_padded_length():
    boundaries = data.bucket_boundaries(64)
    sizes = data.bucket_batch_sizes(boundaries, 1000)
    assert sizes == [1000 // (b - 1) for b in boundaries]
    assert data.bucket_batch_sizes(boundaries, 1000, batch_size_multiple=4) == [
        s // 4 * 4 for s in sizes]
    with pytest.raises(ValueError, match="batch_tokens=50 cannot hold 1 pair"):
        data.bucket_batch_sizes(boundaries, 50)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("accumulate_steps", [1, 3])
def test_an_update_is_batch_tokens_times_micro_batches_over_every_replica(workers,
                                                                           accumulate_steps):
    for local_replicas in range(1, 9):
        replicas = workers * local_replicas
        share = data.update_batches(4096, accumulate_steps=accumulate_steps, replicas=replicas,
                                    per_replica=workers > 1, local_replicas=local_replicas)
        update_tokens = 4096 * accumulate_steps
        assert share.update_tokens == update_tokens and share.replicas == replicas
        if workers == 1:  # one batch, split over the replicas by rows, then into micro-batches
            assert (share.batch_tokens, share.size_multiple, share.per_update) == (
                update_tokens, replicas * accumulate_steps, 1)
        else:  # a batch a replica; each worker's replicas take one batch each an update
            assert update_tokens - replicas < share.batch_tokens * replicas <= update_tokens
            assert (share.size_multiple, share.per_update) == (accumulate_steps, local_replicas)


def test_the_papers_batch_on_two_workers_of_eight_gpus_fills_every_bucket():
    # 25,000 tokens over 16 replicas: 1,562 a replica, 6 pairs of the 256-token bucket (rounding
    # each replica's share to a multiple of 16 replicas would have left none).
    share = data.update_batches(25_000, replicas=16, per_replica=True, local_replicas=8)
    share.check(256)
    sizes = data.bucket_batch_sizes(data.bucket_boundaries(256), share.batch_tokens,
                                    share.size_multiple)
    assert share.batch_tokens == 1_562 and sizes[-1] == 6 and min(sizes) >= 1


@pytest.mark.parametrize("batch_tokens, replicas, per_replica, accumulate_steps, message", [
    (4000, 16, False, 1, "an update of 4,000 padded tokens a side over 16 replica(s) makes "
                         "batches of 4,000, too few for 16 pair(s) of the longest bucket (256 "
                         "tokens)"),
    (4000, 16, True, 1, "an update of 4,000 padded tokens a side over 16 replica(s) makes "
                        "batches of 250, too few for 1 pair(s)"),
    (2000, 8, True, 4, "an update of 8,000 padded tokens a side over 8 replica(s) makes batches "
                       "of 1,000, too few for 4 pair(s) of the longest bucket (256 tokens); "
                       "raise batch_tokens or lower max_pair_length"),
])
def test_a_budget_too_small_for_the_longest_bucket_is_refused(batch_tokens, replicas,
                                                              per_replica, accumulate_steps,
                                                              message):
    share = data.update_batches(batch_tokens, accumulate_steps=accumulate_steps,
                                replicas=replicas, per_replica=per_replica)
    with pytest.raises(ValueError, match=re.escape(message)):
        share.check(256)
    share.check(share.batch_tokens // share.size_multiple)  # the most that fits
    with pytest.raises(ValueError, match="replicas must be >= 1, got 0"):
        data.update_batches(4096, replicas=0)


def random_pairs(rng, count, max_pair_length):
    lengths = rng.integers(1, max_pair_length + 1, size=(count, 2))
    return [(rng.integers(2, 100, size=n).astype("int32"), rng.integers(2, 100, size=m)
             .astype("int32")) for n, m in lengths]


def dataset_of(pairs):
    """The (source, target) id arrays as a dataset of [None]-shaped int32 pairs. Not
    `from_generator`: an unfinished generator dataset's iterator, collected later, stalls the
    test that collects it for 20-80 s whenever another process keeps a core busy (its tf.data
    thread needs the GIL the destructor holds; tests/replica_equivalence.py, 2026-11-29)."""
    lengths = np.array([(len(source), len(target)) for source, target in pairs], "int32")
    width = int(lengths.max())
    padded = np.zeros((len(pairs), 2, width), "int32")
    for row, (source, target) in enumerate(pairs):
        padded[row, 0, :len(source)], padded[row, 1, :len(target)] = source, target
    return tf.data.Dataset.from_tensor_slices((padded, lengths)).map(
        lambda both, length: (both[0, :length[0]], both[1, :length[1]]))


def test_every_batch_is_within_budget_and_every_pair_comes_out_once(rng):
    pairs = random_pairs(rng, 2000, 100)
    dataset = dataset_of(pairs)
    boundaries = data.bucket_boundaries(100)
    seen = collections.Counter()
    for source, target in data.batch_by_length(dataset, 700, 100).as_numpy_iterator():
        assert source.shape == target.shape
        assert source.size <= 700 and source.shape[1] + 1 in boundaries
        for s, t in zip(source, target):
            seen[(tuple(s[s > 0]), tuple(t[t > 0]))] += 1
    assert seen == collections.Counter((tuple(s), tuple(t)) for s, t in pairs)


@pytest.mark.parametrize("repeat", [True, False])
def test_batch_sizes_split_evenly_across_replicas(rng, repeat):
    pairs = random_pairs(rng, 301, 30)
    dataset = dataset_of(pairs)
    dataset = dataset.repeat() if repeat else dataset
    batches = list(data.batch_by_length(dataset, 400, 30, batch_size_multiple=4).take(60)
                   .as_numpy_iterator())
    assert all(source.shape[0] % 4 == 0 and source.size <= 400 for source, _ in batches)
    if not repeat:  # The partial last batches were rounded up with all-padding rows only.
        real_rows = sum(int(np.any(source > 0, axis=1).sum()) for source, _ in batches)
        assert real_rows == len(pairs)


@pytest.mark.parametrize("multiple", [1, 4])
def test_static_shapes_are_one_a_bucket_and_lose_no_pair(rng, multiple):
    """For XLA: a finite dataset's partial batches too take their bucket's one shape."""
    pairs = random_pairs(rng, 301, 60)
    dataset = dataset_of(pairs)
    shapes = data.batch_shapes(60, 600, multiple, step=data.XLA_BUCKET_GROWTH)
    assert [width for _, width in shapes] == [7, 11, 17, 26, 39, 59, 60]
    assert all(rows % multiple == 0 and rows * width <= 600 for rows, width in shapes)
    batches = list(data.batch_by_length(dataset, 600, 60, multiple, step=data.XLA_BUCKET_GROWTH,
                                        static_shapes=True).as_numpy_iterator())
    assert {source.shape for source, _ in batches} | {target.shape for _, target in batches} \
        == set(shapes)  # 301 random pairs reach every bucket, and no other shape appears
    seen = collections.Counter((tuple(s[s > 0]), tuple(t[t > 0]))
                               for source, target in batches for s, t in zip(source, target)
                               if np.any(s > 0))
    assert seen == collections.Counter((tuple(s), tuple(t)) for s, t in pairs)
    default = data.batch_by_length(dataset, 600, 60, multiple, step=data.XLA_BUCKET_GROWTH)
    assert len({source.shape for source, _ in default.as_numpy_iterator()}) > len(shapes)


def test_length_sorted_batches_cover_every_row_once_trimmed_longest_first():
    ids = np.array([[5, 1, 0, 0], [5, 6, 7, 1], [1, 0, 0, 0], [5, 6, 1, 0], [0, 0, 0, 0]])
    batches = list(data.length_sorted_batches(ids, batch_size=2))
    assert [rows.tolist() for rows, _ in batches] == [[1, 3], [0, 2], [4]]
    assert [batch.shape for _, batch in batches] == [(2, 4), (2, 2), (1, 1)]
    for rows, batch in batches:
        np.testing.assert_array_equal(batch, ids[rows][:, :batch.shape[1]])
