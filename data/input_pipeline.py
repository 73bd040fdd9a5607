"""From sentence pairs to the batches `model.fit` consumes.

    pairs (sources.py) -> [shard for this input pipeline] -> tokenize in graph (vocab.py)
    -> + end of sentence -> drop empty pairs -> drop or truncate pairs longer than max_pair_length
    -> [cache] -> [shuffle, repeat] -> batch by length to a token budget (batching.py)
    -> ((source_ids, target_input_ids), target_output_ids), int32, 0-padded

The target input is the target shifted right by one with 0 (padding) in front, so position i of the
decoder sees target tokens < i and predicts token i.
"""

import glob
import hashlib
import os
import pathlib

import tensorflow as tf

from keras_transformer.data import batching, sources
from keras_transformer.data.dataset_options import untuned_options
from keras_transformer.data.mixture import WeightedCorpora
from keras_transformer.data.subword_sampling import SampledEncoder
from keras_transformer.data.vocab import PAD_ID
from keras_transformer.data.vocabularies import KINDS, load_vocabulary
from keras_transformer.errors import check_one_of

OVERLONG_MODES = ("drop", "truncate")
# Local corpora are read in file order, which is rarely random (the Bible in book order, Tatoeba
# sorted by length): a buffer smaller than the corpus would feed each epoch's batches from a
# sliding window of that order, short sentences first. This one holds a bundled corpus whole
# (135k pairs of ids, ~30 MB); TFDS corpora also shuffle their files.
SHUFFLE_BUFFER = 200_000
# Sentences tokenized per call: one call per sentence would cost far more than the tokenizing.
_TOKENIZE_BATCH = 1024


def _resolve(source, vocabulary):
    source = sources.get_source(source)
    if not isinstance(vocabulary, KINDS):
        vocabulary = load_vocabulary(vocabulary)
    return source, vocabulary


def tokenized_pairs(source, vocabulary, split, shuffle_files=False, seed=None, shard=None,
                    max_length=None, source_vocabulary=None):
    """(source_ids [n], target_ids [m]) int32 per pair, as `Vocabulary.encode` makes them: end of
    sentence included, an empty side empty; none dropped.

    Args:
        source_vocabulary: encodes the source side instead of `vocabulary` (e.g. the GloVe
            words of an MT-LSTM, `glove.WordVocabulary`, which keeps `encode`'s contract).
        shuffle_files: let the source read its files in a shuffled order (TFDS).
        shard: optional (count, index): keep every count-th pair, starting at index.
        max_length: cut longer sides to this many ids, end of sentence kept (None: no cut).
    """
    source, vocabulary = _resolve(source, vocabulary)
    source_vocabulary = source_vocabulary or vocabulary
    pairs = source.pairs(split, shuffle_files=shuffle_files, seed=seed)
    if shard is not None:
        pairs = pairs.shard(*shard)
    return (pairs.batch(_TOKENIZE_BATCH)
            .map(lambda s, t: (source_vocabulary.encode(s, max_length),
                               vocabulary.target.encode(t, max_length)),
                 num_parallel_calls=tf.data.AUTOTUNE)
            .unbatch()
            # A ragged batch unbatches into ragged_rank-0 RaggedTensors, which padded_batch
            # refuses; a map hands them over as the plain tensors they are.
            .map(lambda s, t: (s, t)))


def limit_length(pairs, max_pair_length):
    """Drops pairs with an empty side, and pairs longer than `max_pair_length` ids on either
    side."""
    return pairs.filter(lambda s, t: tf.logical_and(
        tf.logical_and(tf.size(s) > 0, tf.size(t) > 0),
        tf.logical_and(tf.size(s) <= max_pair_length, tf.size(t) <= max_pair_length)))


def shift_right(target_ids):
    """[batch, length] -> the decoder input: PAD_ID, then target_ids[:, :-1]."""
    start = tf.fill([tf.shape(target_ids)[0], 1], tf.constant(PAD_ID, target_ids.dtype))
    return tf.concat([start, target_ids[:, :-1]], axis=1)


def _shuffled_epochs(pairs, buffer_size, seed):
    """Endless epochs of `pairs`, each shuffled.

    With a seed, epoch e is shuffled with seed (seed, e): the stream depends on nothing else.
    (`shuffle(seed=s).repeat()` draws each epoch's seed from state that every new iterator over
    the dataset advances, so the same seed gave different streams to runs that happened to
    create a different number of iterators, such as a resumed run.)
    """
    if seed is None:
        # tf.data's fused ShuffleAndRepeat filled the buffer 2.6-3.2x slower: the first batch
        # over bible_en_es (29k pairs, one thread) came after 9.8 s fused, 3.1-3.8 s
        # unfused (medians of 3 in two runs, 2026-11-25). The seeded flat_map is never fused.
        unfused = tf.data.Options()
        unfused.experimental_optimization.shuffle_and_repeat_fusion = False
        return pairs.shuffle(buffer_size, reshuffle_each_iteration=True).repeat().with_options(
            unfused)
    return tf.data.Dataset.range(2**62).flat_map(
        lambda epoch: pairs.shuffle(buffer_size, seed=seed * 1_000_003 + epoch,
                                    reshuffle_each_iteration=False))


def _cache_prefix(directory, source, vocabulary, split, max_pair_length, overlong, shard,
                  source_vocabulary=None):
    """A cache file prefix that changes whenever what would be cached changes.

    A cache left half-written by a killed process (no index file yet) is removed, so a restart
    rebuilds it instead of failing on the dead process's lock file.
    """
    key = hashlib.sha256(vocabulary.serialized)
    key.update(repr((repr(source), split, max_pair_length, overlong, shard)).encode())
    if source_vocabulary is not None:
        key.update("\n".join(source_vocabulary.words).encode())
    prefix = pathlib.Path(directory) / f"{split}-{key.hexdigest()[:16]}"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.exists(f"{prefix}.index"):
        for leftover in glob.glob(f"{glob.escape(str(prefix))}*"):
            os.remove(leftover)
    return str(prefix)


def _kept_pairs(source, vocabulary, split, *, shuffle_files, seed, shard, max_pair_length,
                overlong, cache, source_vocabulary):
    """A split's tokenized pairs within the length limit (`pipeline`'s arguments), cached as
    `cache` says. Raises CorpusError when none is left."""
    cut = max_pair_length if overlong == "truncate" else None
    pairs = limit_length(tokenized_pairs(source, vocabulary, split, shuffle_files=shuffle_files,
                                         seed=seed, shard=shard, max_length=cut,
                                         source_vocabulary=source_vocabulary), max_pair_length)
    _refuse_if_empty(pairs, source, split, max_pair_length)
    if cache == "memory":
        return pairs.cache()
    if cache is not None:
        return pairs.cache(_cache_prefix(cache, source, vocabulary, split, max_pair_length,
                                         overlong, shard, source_vocabulary))
    return pairs


def _refuse_if_empty(pairs, source, split, max_pair_length):
    """CorpusError unless `pairs` (a split's, within the length limit) holds one."""
    if not any(True for _ in pairs.take(1)):
        raise sources.CorpusError(
            f"split {split!r} of {source!r} has no pair with both sides non-empty and at most "
            f"max_pair_length={max_pair_length} tokens (see python -m "
            f"keras_transformer.data.inspect)")


def _weighted_draws(corpora, epochs, seed):
    """Endless training pairs of `WeightedCorpora`, each drawn from corpus i with probability
    w_i / sum(w): every corpus's `epochs(corpus, seed)` (its own shuffled epochs, one seed a
    corpus), sampled by `sample_from_datasets` (seeded: the same draws every run)."""
    streams = [epochs(corpus, None if seed is None else seed * 1000 + index + 1)
               for index, corpus in enumerate(corpora.corpora)]
    return tf.data.Dataset.sample_from_datasets(streams, weights=corpora.probabilities(),
                                                seed=seed)


def _sampled_epochs(source, encoder, *, split, seed, shard, buffer_size, max_pair_length, cut):
    """Endless training pairs of `source` whose pieces `encoder` (a `SampledEncoder`) draws
    anew each epoch: its texts (sharded) in shuffled epochs, then sampled, then the length limit
    (`cut`: truncate to it). Raises CorpusError when no pair is left."""
    texts = source.pairs(split, shuffle_files=True, seed=seed)
    if shard is not None:
        texts = texts.shard(*shard)

    def sampled(stream):
        return limit_length(_sampled(stream, encoder, cut), max_pair_length)

    _refuse_if_empty(sampled(texts), source, split, max_pair_length)
    return sampled(_shuffled_epochs(texts, buffer_size, seed))


def _sampled(texts, encoder, max_length):
    """Text pairs -> id pairs whose pieces `encoder` (a `SampledEncoder`) draws, a batch of
    `_TOKENIZE_BATCH` at a time, each batch seeded by its index in the stream."""
    def encode(index, pair):
        source, target = pair
        return (encoder.encode(source, index, max_length),
                encoder.encode(target, index, max_length))

    return (texts.batch(_TOKENIZE_BATCH).enumerate()
            .map(encode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
            .map(lambda s, t: (s, t)))


def counted(batches):
    """A finite dataset with its length made known (by counting it once), which spares Keras'
    evaluate (and fit's validation) its "ran out of data" warning at the end of each pass."""
    return batches.apply(tf.data.experimental.assert_cardinality(
        batches.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)))


def pipeline(source, vocabulary, split="train", *, batch_tokens=25_000, max_pair_length=256,
             overlong="drop", training=None, shuffle_buffer=SHUFFLE_BUFFER, cache=None, seed=None,
             deterministic=False, batch_size_multiple=1, input_context=None,
             source_vocabulary=None, accumulate_steps=1, bucket_growth=batching.BUCKET_GROWTH,
             static_shapes=False, subword_alpha=0.0):
    """The batches of one split, ready for `model.fit` / `model.evaluate`.

    Args:
        source: a source from `data.sources`, or a `--data` spec such as "bible_en_es".
        vocabulary: a `Vocabulary` or the path of its `.model` file.
        split: "train", "dev" or "test".
        batch_tokens: most padded tokens per batch on each side (25000 in the paper), over all
            replicas (with `accumulate_steps`, of one micro-batch): with an `input_context`,
            batches hold one replica's share (`batching.update_batches` does the arithmetic).
        max_pair_length: longest pair kept, in tokens including end of sentence.
        overlong: "drop" or "truncate" pairs longer than max_pair_length.
        training: shuffle (files too, for TFDS) and repeat forever; defaults to split == "train".
        shuffle_buffer: pairs in the shuffle buffer (see SHUFFLE_BUFFER).
        cache: None, "memory", or a directory for a file cache of the tokenized pairs (one per
            source, vocabulary, split, length limit and shard; rebuilt if a run died writing it).
        seed: shuffle seed.
        deterministic: the same batches in the same order on every run (when training, needs a
            seed; slower: parallel stages keep their order).
        batch_size_multiple: the number of replicas that share each batch (under `model.fit`
            with MirroredStrategy); every batch size is a multiple of it (and of
            `accumulate_steps`); the last, partial batches of a bucket get all-padding rows, which
            carry no loss.
        input_context: `tf.distribute.InputContext` from `distribute_datasets_from_function`:
            this pipeline reads its own shard of the pairs, in per-replica batches.
        source_vocabulary: encodes the source side instead of `vocabulary` (`tokenized_pairs`).
        accumulate_steps: each batch holds the K micro-batches of one update (for
            `compile(accumulate_steps=K)`): K times the tokens, rows a multiple of K.
        bucket_growth: the growth factor of the length buckets' boundaries (tensor2tensor's
            1.1; `batching.XLA_BUCKET_GROWTH` makes a handful).
        static_shapes: every batch of a bucket has the same rows (partial ones are filled with
            padding), so the batches take only `batching.batch_shapes`' shapes: for XLA
            (`jit_compile`), which compiles once per shape.
        subword_alpha: when training, each pair's pieces drawn anew every time it is read
            (`subword_sampling`: unigram sampling or BPE-dropout at this alpha; seeded by `seed`);
            0: `Vocabulary.encode`'s one segmentation. The length limit applies to the pieces
            drawn, and the tokenized pairs are not cached (the texts are read again).

    Returns:
        tf.data.Dataset of ((source_ids [b, L], target_input_ids [b, L]), target_output_ids
        [b, L]), int32, 0-padded; L is a bucket boundary minus one.

    Raises:
        CorpusError: no pair of the split survives the length limits.
        ValueError: a batch cannot hold a pair of max_pair_length tokens (per replica, per
            micro-batch).
    """
    training = split == "train" if training is None else training
    if deterministic and training and seed is None:
        raise ValueError("deterministic=True needs a seed to shuffle the same way every run")
    source, vocabulary = _resolve(source, vocabulary)
    shard = None
    if input_context is None:
        share = batching.update_batches(batch_tokens, accumulate_steps=accumulate_steps,
                                        replicas=batch_size_multiple)
    else:
        if batch_size_multiple != 1:
            raise ValueError(f"batch_size_multiple counts the replicas that share a batch; with "
                             f"an input_context each batch goes to one replica, got "
                             f"batch_size_multiple={batch_size_multiple}")
        # distribute_datasets_from_function hands each batch to one replica.
        share = batching.update_batches(batch_tokens, accumulate_steps=accumulate_steps,
                                        replicas=input_context.num_replicas_in_sync,
                                        per_replica=True)
        if input_context.num_input_pipelines > 1:
            shard = (input_context.num_input_pipelines, input_context.input_pipeline_id)
    share.check(max_pair_length)
    check_one_of("overlong", overlong, OVERLONG_MODES, ValueError)
    if subword_alpha and source_vocabulary is not None:
        raise ValueError("subword_alpha samples the pieces of one shared vocabulary; this "
                         "pipeline reads its sources with source_vocabulary (an MT-LSTM's words)")

    cut = max_pair_length if overlong == "truncate" else None

    def kept(corpus, corpus_seed):
        return _kept_pairs(corpus, vocabulary, split, shuffle_files=training, seed=corpus_seed,
                           shard=shard, max_pair_length=max_pair_length, overlong=overlong,
                           cache=cache, source_vocabulary=source_vocabulary)

    def epochs(corpus, corpus_seed):
        if not subword_alpha:
            return _shuffled_epochs(kept(corpus, corpus_seed), shuffle_buffer, corpus_seed)
        return _sampled_epochs(corpus, SampledEncoder(vocabulary, subword_alpha, corpus_seed),
                               split=split, seed=corpus_seed, shard=shard,
                               buffer_size=shuffle_buffer, max_pair_length=max_pair_length,
                               cut=cut)

    if training and isinstance(source, WeightedCorpora):
        pairs = _weighted_draws(source, epochs, seed)
    elif training:
        pairs = epochs(source, seed)
    else:
        pairs = kept(source, seed)
    batches = batching.batch_by_length(pairs, share.batch_tokens, max_pair_length,
                                       share.size_multiple, step=bucket_growth,
                                       static_shapes=static_shapes)
    batches = batches.map(lambda s, t: ((s, shift_right(t)), t),
                          num_parallel_calls=tf.data.AUTOTUNE)
    options = untuned_options()  # data.dataset_options says why
    options.deterministic = deterministic
    if shard is not None:  # Sharded above; tf.distribute must not shard again.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
    return batches.with_options(options).prefetch(tf.data.AUTOTUNE)
