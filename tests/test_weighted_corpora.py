"""Several corpora mixed by weight (data.WeightedCorpora, kt-train --data A --data B
--data_weights 1,3): the pairs drawn, their seed, a resumed run, each corpus's dev results, the
vocabulary and inspect's report of the mix, and the refusals."""

import gzip
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_main, write_corpus_subset

from keras_transformer import data
from keras_transformer.data import inspect
from keras_transformer.trainer import task


def write_pairs(directory, word, count, split="train"):
    """A directory source of `count` pairs "WORD i" on both sides."""
    directory.mkdir(exist_ok=True)
    for lang in ("en", "es"):
        (directory / f"{split}.{lang}").write_text(
            "".join(f"{word} {i}\n" for i in range(count)), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    """(a corpus of 300 "alpha i" pairs, one of 5,000 "beta i" pairs, a vocabulary of both)."""
    root = tmp_path_factory.mktemp("two")
    small, large = write_pairs(root / "alpha", "alpha", 300), write_pairs(root / "beta", "beta",
                                                                          5000)
    vocabulary = data.build_vocabulary(
        [f"{word} {i}" for word in ("alpha", "beta") for i in range(300)], 300,
        root / "vocab.model")
    return small, large, vocabulary


def mixture(small, large, weights=(1, 3)):
    return data.WeightedCorpora([data.get_source(str(path), "en", "es") for path in
                                 (small, large)], weights, names=["alpha", "beta"])


def first_ids(batches, count):
    """The first source id of every real row of `count` batches, concatenated."""
    rows = []
    for (source_ids, _), _ in batches.take(count).as_numpy_iterator():
        rows.append(source_ids[source_ids.any(axis=1), 0])
    return np.concatenate(rows)


def test_pairs_are_drawn_by_weight_and_the_seed_fixes_the_draws(two_corpora):
    small, large, vocabulary = two_corpora
    alpha = int(vocabulary.encode(tf.constant(["alpha"]))[0, 0])

    def draws(seed, count):
        return first_ids(data.pipeline(mixture(small, large), vocabulary, "train",
                                       batch_tokens=48, max_pair_length=12, seed=seed,
                                       deterministic=True), count)

    # 2,000 batches: the small corpus (6% of the pairs) gives a quarter of those drawn.
    drawn = draws(7, 2000)
    assert len(drawn) > 8000
    assert abs(np.mean(drawn == alpha) - 0.25) < 0.02
    # The same seed, the same batches (a resumed --deterministic run skips the updates done in
    # a pipeline built afresh); another seed, others.
    again = draws(7, 100)
    assert np.array_equal(again, drawn[:len(again)])
    assert not np.array_equal(draws(8, 100)[:400], drawn[:400])
    # The dev split of a mixture is its corpora's, one after the other.
    dev = mixture(write_pairs(small, "alpha", 3, "dev"), write_pairs(large, "beta", 2, "dev"))
    assert [pair[0].decode() for pair in dev.pairs("dev").as_numpy_iterator()] == [
        "alpha 0", "alpha 1", "alpha 2", "beta 0", "beta 1"]


def test_a_vocabulary_and_inspect_read_the_corpora_by_weight(two_corpora):
    small, large, vocabulary = two_corpora
    # kt-vocab and kt-train build a vocabulary of several corpora from these texts.
    texts = list(data.corpus_texts(mixture(small, large, (3, 1))))
    assert len(texts) == 2 * 5300  # as many pairs as both hold, drawn 3:1
    assert abs(np.mean([text.startswith("alpha") for text in texts]) - 0.75) < 0.03
    result = run_main(inspect.main, "--data", small, "--data", large, "--data_weights", "3,1",
                      "--source_lang", "en", "--target_lang", "es", "--vocab", vocabulary.path)
    assert result.returncode == 0, result.stderr
    assert (f"{small}: weight 3, 75.0% of the pairs drawn, 300 pairs kept, each drawn 13.25x "
            f"as often as in the corpora read one after the other") in result.stdout
    assert f"{large}: weight 1, 25.0% of the pairs drawn, 5000 pairs kept" in result.stdout
    assert "split train: 5300 pairs read" in result.stdout


@pytest.mark.parametrize("flags, message", [
    (["--data_weights", "1"], "--data_weights: 1 weight(s) for 2 corpora; give one a --data"),
    (["--data_weights", "1,0"], "--data_weights: 0.0 is not a positive number"),
    (["--data_weights", "1,x"], "argument --data_weights: '1,x': expected numbers separated by "
                                "commas"),
])
def test_weights_that_do_not_fit_the_corpora_are_refused_by_flag(tmp_path, flags, message):
    result = run_main(task.main, "--model_dir", tmp_path / "m", "--data", "bible_en_es",
                      "--data", "tatoeba_en_es", *flags)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "m" / "config.json").exists()


def test_weights_without_several_corpora_and_corpora_of_two_language_pairs_are_refused(
        tmp_path):
    result = run_main(task.main, "--model_dir", tmp_path / "m", "--data", "bible_en_es",
                      "--data_weights", "1")
    assert result.returncode == 2
    assert "--data_weights weigh several corpora" in result.stderr, result.stderr
    german = write_pairs(tmp_path / "de", "eins", 3)
    (german / "train.es").rename(german / "train.de")
    with pytest.raises(data.CorpusError, match=r"different language pairs: bible_en_es "
                                               r"en->es, de en->de"):
        data.WeightedCorpora([data.get_source("bible_en_es"), data.get_source(str(german), "en",
                                                                              "de")],
                             names=["bible_en_es", "de"])


def tatoeba_subset(directory, **counts):
    """`directory` holding the first counts[split] pairs of each bundled tatoeba_en_es split."""
    directory.mkdir()
    for split, count in counts.items():
        for lang in ("en", "es"):
            with gzip.open(data.sources.BUNDLED_DIR / "tatoeba_en_es" / f"{split}.{lang}.gz",
                           "rt", encoding="utf-8") as lines:
                text = "".join(line for _, line in zip(range(count), lines))
            (directory / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return directory


def test_kt_train_mixes_scores_each_corpus_and_resumes_as_one_run(tmp_path):
    (tmp_path / "bible").mkdir()
    bible = write_corpus_subset(tmp_path / "bible", train=300, dev=20)
    tatoeba = tatoeba_subset(tmp_path / "tatoeba", train=300, dev=20)

    def kt_train(model_dir, steps, *flags):
        result = run_main(
            task.main, "--model_dir", model_dir, "--data", bible, "--data", tatoeba,
            "--data_weights", "1,3", "--source_lang", "en", "--target_lang", "es",
            "--hparams", "transformer_tiny", "--hparams_override", "num_layers=1",
            "--batch_tokens", "1500", "--max_pair_length", "150", "--train_steps", str(steps),
            "--eval_every", "4", "--log_every", "2", "--seed", "3", "--deterministic", *flags)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    straight = kt_train(tmp_path / "straight", 4, "--vocab_size", "600", "--eval_sentences",
                        "2", "--keep_best", f"bleu:{tatoeba}")
    evaluation = straight[straight.index("evaluation at step 4"):]
    assert evaluation.startswith("evaluation at step 4: mean of the corpora: dev_loss ")
    for corpus in (bible, tatoeba):
        assert f"\n  {corpus}: dev_loss " in evaluation
        assert "dev BLEU " in evaluation.split(f"\n  {corpus}: ")[1].split("\n")[0]
    assert f"new best dev_bleu/{tatoeba} " in straight
    # Stopped at step 2 and resumed: the same draws, the same weights at step 4.
    kt_train(tmp_path / "resumed", 2, "--vocab", tmp_path / "straight" / "vocab.model",
             "--eval_sentences", "0")
    resumed = kt_train(tmp_path / "resumed", 4, "--eval_sentences", "0")
    checksum = re.compile(r"done: step 4, weights checksum (\S+),")
    assert checksum.search(resumed)[1] == checksum.search(straight)[1]
