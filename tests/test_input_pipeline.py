import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import inspect as data_inspect


def test_batches_have_the_models_structure(bible_vocab):
    batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=2000)
    (source, target_input), target = next(iter(batches))
    assert source.dtype == target_input.dtype == target.dtype == tf.int32
    assert source.shape == target.shape == target_input.shape
    source, target_input, target = (np.asarray(t) for t in (source, target_input, target))
    np.testing.assert_array_equal(target_input[:, 0], 0)
    np.testing.assert_array_equal(target_input[:, 1:], target[:, :-1])
    for row in (source, target):
        real = row > 0
        lengths = real.sum(1)
        # Real tokens first, then padding; each sentence ends with end of sentence.
        assert np.all(real == (np.arange(row.shape[1]) < lengths[:, None]))
        assert np.all(row[np.arange(len(row)), lengths - 1] == data.EOS_ID)
    # No autotuning thread, whose sleep (up to a minute) an iterator's end waits for: not in
    # the pipeline, nor in what a source gives an evaluation or a vocabulary to read.
    assert batches.options().autotune.enabled is False
    assert data.get_source("bible_en_es").pairs("dev").options().autotune.enabled is False


def test_targets_detokenize_to_the_corpus(bible_vocab):
    batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=100_000,
                            max_pair_length=128, training=False)
    texts = {data.normalize_whitespace(t.decode())
             for _, t in data.get_source("bible_en_es").pairs("dev").as_numpy_iterator()}
    decoded = {t.decode() for _, target in batches.as_numpy_iterator()
               for t in bible_vocab.detokenize(target).numpy()}
    assert decoded == texts


def test_bundled_corpus_at_25k_tokens_is_within_budget_and_efficient(bible_vocab):
    report = data_inspect.describe("bible_en_es", bible_vocab, "train", batch_tokens=25_000)
    print("\n" + report.format())
    assert report.pairs == report.kept == 29_418
    assert report.max_padded_tokens <= 25_000
    assert report.padding_efficiency >= 0.90


def test_training_batches_stay_within_budget_and_repeat(bible_vocab):
    batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=1500, training=True,
                            seed=1)
    count = 0
    for (source, _), target in batches.take(100).as_numpy_iterator():  # dev has ~40 batches
        assert source.size <= 1500 and target.size <= 1500
        count += 1
    assert count == 100


def test_deterministic_mode_repeats_the_same_batches(bible_vocab):
    def first_batches(seed):
        batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=1500,
                                training=True, seed=seed, deterministic=True)
        return [t for _, t in batches.take(5).as_numpy_iterator()]

    first, again, other_seed = first_batches(7), first_batches(7), first_batches(8)
    assert len(first) == len(again) == 5
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other_seed))
    with pytest.raises(ValueError, match="deterministic=True needs a seed"):
        data.pipeline("bible_en_es", bible_vocab, "dev", training=True, deterministic=True)


def test_a_seeded_stream_does_not_depend_on_other_iterators(bible_vocab):
    """What a resumed run relies on: the same seed, the same batches, whatever ran before."""
    def batches():
        return data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=1500,
                             training=True, seed=5, deterministic=True)

    fresh = [t for _, t in batches().take(60).as_numpy_iterator()]  # past one epoch (~40)
    used = batches()
    for _ in zip(range(3), used):  # e.g. Keras drawing a batch to build the model
        pass
    again = [t for _, t in used.take(60).as_numpy_iterator()]
    assert all(np.array_equal(a, b) for a, b in zip(fresh, again, strict=True))


def test_input_contexts_split_the_pairs_and_the_budget(bible_vocab):
    def rows(context):
        batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=4000,
                                training=False, input_context=context)
        found = []
        for (source, _), _ in batches.as_numpy_iterator():
            assert source.size <= (2000 if context else 4000)
            found.extend(tuple(row[row > 0]) for row in source)
        return found

    shards = [rows(tf.distribute.InputContext(2, i, 2)) for i in range(2)]
    everything = rows(None)
    assert sorted(shards[0] + shards[1]) == sorted(everything)
    assert not set(shards[0]) & set(shards[1])


@pytest.mark.parametrize("overlong", ["drop", "truncate"])
def test_overlong_pairs_are_dropped_or_truncated_and_counted(bible_vocab, overlong):
    report = data_inspect.describe("bible_en_es", bible_vocab, "dev", batch_tokens=4000,
                                   max_pair_length=24, overlong=overlong)
    assert report.overlong_pairs > 0
    expected_kept = report.pairs - (report.overlong_pairs if overlong == "drop" else 0)
    assert report.kept == expected_kept
    batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=4000,
                            max_pair_length=24, overlong=overlong, training=False)
    kept = 0
    for (source, _), target in batches.as_numpy_iterator():
        assert source.shape[1] <= 24
        kept += len(source)
        if overlong == "truncate":
            full = target[:, -1] != 0
            assert np.all(target[full, -1] == data.EOS_ID)
    assert kept == expected_kept


def test_empty_sides_are_dropped(tmp_path, bible_vocab):
    (tmp_path / "train.en").write_text("a house\n\n   \nthe cat\n")
    (tmp_path / "train.es").write_text("una casa\nnada\nnada\n\n")
    report = data_inspect.describe(data.get_source(str(tmp_path), "en", "es"), bible_vocab,
                                   batch_tokens=100, max_pair_length=32)
    assert (report.pairs, report.empty, report.kept) == (4, 3, 1)


def corpus_dir(directory, english, spanish):
    directory.mkdir(exist_ok=True)
    (directory / "train.en").write_text("".join(line + "\n" for line in english))
    (directory / "train.es").write_text("".join(line + "\n" for line in spanish))
    return data.get_source(str(directory), "en", "es")


def targets(batches, vocabulary):
    return sorted(t.decode() for _, target in batches.as_numpy_iterator()
                  for t in vocabulary.detokenize(target).numpy())


def test_file_cache_is_used_and_keyed_by_what_it_holds(tmp_path, bible_vocab):
    source = corpus_dir(tmp_path / "corpus", ["a house", "the cat"], ["una casa", "el gato"])
    cache = tmp_path / "cache"

    def batches(max_pair_length=32):
        return data.pipeline(source, bible_vocab, "train", batch_tokens=200, training=False,
                             max_pair_length=max_pair_length, cache=cache)

    assert targets(batches(), bible_vocab) == ["el gato", "una casa"]
    corpus_dir(tmp_path / "corpus", ["a house", "the cat"], ["una casa", "el perro"])
    assert targets(batches(), bible_vocab) == ["el gato", "una casa"]  # read from the cache
    assert targets(batches(max_pair_length=31), bible_vocab) == ["el perro", "una casa"]  # new key


def test_file_cache_left_half_written_by_a_dead_run_is_rebuilt(tmp_path, bible_vocab):
    source = corpus_dir(tmp_path / "corpus", ["a house"], ["una casa"])
    cache = tmp_path / "cache"
    data.pipeline(source, bible_vocab, "train", batch_tokens=200, max_pair_length=32, cache=cache,
                  training=False)  # names the cache files without writing them
    (prefix,) = {p.name.split(".")[0].split("_")[0] for p in cache.iterdir()} or {"train-x"}
    (cache / f"{prefix}_0.lockfile").write_text("")  # what a SIGKILLed writer leaves
    batches = data.pipeline(source, bible_vocab, "train", batch_tokens=200, max_pair_length=32,
                            cache=cache, training=False)
    assert targets(batches, bible_vocab) == ["una casa"]


def test_nothing_left_after_the_length_limits_is_an_error(tmp_path, bible_vocab):
    with pytest.raises(data.CorpusError, match="has no pair .* at most max_pair_length=3 tokens"):
        data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=100, max_pair_length=3)
    source = corpus_dir(tmp_path / "blank", ["", " "], ["algo", "nada"])
    with pytest.raises(data.CorpusError, match="has no pair with both sides non-empty"):
        data.pipeline(source, bible_vocab, "train", batch_tokens=1000, max_pair_length=32)


def test_bad_arguments(bible_vocab, bible_vocab_path, tmp_path):
    with pytest.raises(ValueError, match="overlong must be one of"):
        data.pipeline("bible_en_es", bible_vocab, overlong="wrap")
    with pytest.raises(ValueError, match=r"an update of 100 padded tokens a side over 1 "
                       r"replica\(s\) makes batches of 100, too few for 1 pair\(s\) of the "
                       r"longest bucket \(256 tokens\); raise batch_tokens"):
        data.pipeline("bible_en_es", bible_vocab, batch_tokens=100)
    with pytest.raises(ValueError, match="with an input_context each batch goes to one replica"):
        data.pipeline("bible_en_es", bible_vocab, batch_size_multiple=2,
                      input_context=tf.distribute.InputContext(2, 0, 2))
    with pytest.raises(data.VocabularyError, match="no such vocabulary file"):
        data.pipeline("bible_en_es", tmp_path / "nope.model")
    assert data.pipeline("bible_en_es", bible_vocab_path, "dev") is not None  # a path works


def test_model_fit_consumes_the_pipeline(bible_vocab):
    """The notebook path: a model, compiled, fit on data.pipeline(...)."""
    # One layer: what fit does with the pipeline does not depend on depth (a second doubled
    # tracing).
    hp = kt.hparams.get("transformer_tiny", warmup_steps=10, num_layers=1)
    model = kt.build_model(hp, bible_vocab.vocab_size)
    bible_vocab.check_size(model.vocab_size)
    model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp),
                  metrics=[kt.TokenAccuracy()])
    # A small shuffle buffer: the default (200k pairs) reads the whole corpus before the first
    # batch, twice here (fit, then take), which is what the budget test measures, not this one.
    batches = data.pipeline("bible_en_es", bible_vocab, "train", batch_tokens=1024, seed=1,
                            shuffle_buffer=2000)
    history = model.fit(batches, steps_per_epoch=12, epochs=2, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]
    # Batches of several bucket shapes, yet the step is not retraced for each new shape.
    shapes = {batch[1].shape for batch in batches.take(24).as_numpy_iterator()}
    assert len(shapes) > 3 and model.train_step_traces <= 3
    assert isinstance(model, keras.Model)
