"""Subword regularization (data.subword_sampling, kt-train --subword_alpha): a training
sentence's pieces differ between draws and decode to the same text, the same seed draws the same
pieces, and dev reads one segmentation."""

import pytest
import tensorflow as tf
from conftest import TRAINED_TINY, run_main

from keras_transformer import data
from keras_transformer.data.subword_sampling import SampledEncoder
from keras_transformer.trainer import task

SENTENCE = "In the beginning God created the heavens and the earth."


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory):
    """{"bpe": the trained tiny model's vocabulary, "unigram": one of the same texts}."""
    bpe = data.Vocabulary.load(TRAINED_TINY / "vocab.model")
    texts = [line.strip() for line in data.corpus_texts(data.get_source("bible_en_es"))][:4000]
    unigram = data.build_vocabulary(texts, 1000, tmp_path_factory.mktemp("u") / "u.model",
                                    model_type="unigram")
    return {"bpe": bpe, "unigram": unigram}


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_drawn_pieces_differ_decode_to_the_text_and_follow_the_seed(vocabularies, kind):
    vocabulary = vocabularies[kind]
    texts = tf.constant([SENTENCE] * 16)
    encoder = SampledEncoder(vocabulary, 0.3, seed=5)
    drawn = encoder.encode(texts, tf.constant(0, tf.int64))
    rows = {tuple(row) for row in drawn.to_list()}
    assert len(rows) > 4  # BPE-dropout, or unigram sampling
    assert all(row[-1] == data.EOS_ID for row in rows)
    assert set(vocabulary.detokenize(drawn).numpy().tolist()) == {SENTENCE.encode()}
    assert drawn.to_list() == encoder.encode(texts, tf.constant(0, tf.int64)).to_list()
    assert drawn.to_list() != encoder.encode(texts, tf.constant(1, tf.int64)).to_list()
    assert drawn.to_list() != SampledEncoder(vocabulary, 0.3, seed=6).encode(
        texts, tf.constant(0, tf.int64)).to_list()


def test_training_batches_draw_pieces_and_dev_reads_one_segmentation(tmp_path, vocabularies):
    vocabulary = vocabularies["bpe"]
    for split in ("train", "dev"):
        for lang in ("en", "es"):
            (tmp_path / f"{split}.{lang}").write_text(f"{SENTENCE}\n" * 40, encoding="utf-8")
    source = data.get_source(str(tmp_path), "en", "es")

    def source_rows(split, alpha, seed=3):
        batches = data.pipeline(source, vocabulary, split, batch_tokens=256, max_pair_length=40,
                                seed=seed, deterministic=True, subword_alpha=alpha)
        rows = [tuple(row[row > 0]) for (ids, _), _ in batches.take(10).as_numpy_iterator()
                for row in ids]
        return rows

    drawn = source_rows("train", 0.2)
    assert len(set(drawn)) > 5
    texts = vocabulary.detokenize(tf.ragged.constant([list(row) for row in drawn])).numpy()
    assert set(texts.tolist()) == {SENTENCE.encode()}
    assert source_rows("train", 0.2) == drawn  # the same seed, the same pieces
    assert len(set(source_rows("train", 0.0))) == 1
    assert len(set(source_rows("dev", 0.2))) == 1  # dev is not training: one segmentation
    with pytest.raises(data.VocabularyError, match="above 0 and below 1"):
        SampledEncoder(vocabulary, 1.0)


def test_kt_train_samples_subwords_and_refuses_an_alpha_out_of_range(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in ("en", "es"):
        (corpus / f"train.{lang}").write_text(f"{SENTENCE}\n" * 40, encoding="utf-8")
    common = ["--data", corpus, "--source_lang", "en", "--target_lang", "es", "--vocab",
              TRAINED_TINY / "vocab.model", "--hparams", "transformer_tiny",
              "--hparams_override", "num_layers=1", "--batch_tokens", "512",
              "--max_pair_length", "64", "--train_steps", "2", "--log_every", "1"]
    result = run_main(task.main, "--model_dir", tmp_path / "bad", *common, "--subword_alpha",
                      "1.5")
    assert result.returncode == 2
    assert "--subword_alpha must be at least 0.0 and below 1.0, got 1.5" in result.stderr
    result = run_main(task.main, "--model_dir", tmp_path / "run", *common, "--subword_alpha",
                      "0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done: step 2" in result.stdout
    saved = (tmp_path / "run" / "config.json").read_text()
    assert '"subword_alpha": 0.1' in saved
