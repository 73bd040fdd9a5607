"""CoVe from trained runs: kt-train trains an MT-LSTM on the package's pipelines, its encoder
loads as CoVe, a Transformer's encoder reads words through their subword pieces, and kt-classify
trains the BCN over either; with the refusals of runs of the wrong kind."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import run_main, write_corpus_subset

import keras_transformer as kt
from keras_transformer.data import glove
from keras_transformer.export import translate
from keras_transformer.model_dir import cove, loading
from keras_transformer.trainer import classify, task

QUESTIONS = [("NUM:count", "How many sons did Jacob have ?"),
             ("HUM:ind", "Who is the king of Israel ?"),
             ("LOC:other", "Where did the people go ?"),
             ("NUM:date", "When did the LORD speak ?")]


@pytest.fixture(scope="module")
def corpus_and_glove(tmp_path_factory):
    """300 train and 20 dev verses of the bundled corpus as a directory source, and a 6-d GloVe
    file of the 400 most frequent words of its English side."""
    directory = write_corpus_subset(tmp_path_factory.mktemp("corpus"), train=300, dev=20)
    counts = {}
    english = (directory / "train.en").read_text(encoding="utf-8").splitlines()
    for row in glove.tokenize_words(tf.constant(english)).to_list():
        for word in row:
            counts[word.decode("utf-8")] = counts.get(word.decode("utf-8"), 0) + 1
    words = sorted(counts, key=lambda word: -counts[word])[:400]
    vectors = np.random.default_rng(0).normal(size=(len(words), 6)).round(4)
    path = directory.parent / "glove.6d.txt"
    path.write_text("".join(word + " " + " ".join(f"{v:.4f}" for v in vector) + "\n"
                            for word, vector in zip(words, vectors)), encoding="utf-8")
    return directory, path


def kt_train(model_dir, corpus, *flags):
    return run_main(task.main, "--model_dir", model_dir, "--data", corpus, "--source_lang", "en",
                    "--target_lang", "es", "--vocab_size", "500", "--batch_tokens", "1200",
                    "--max_pair_length", "100", "--log_every", "2", *flags)


MT_LSTM = ("--hparams", "cove_mt_lstm", "--hparams_override", "d_model=16,warmup_steps=10")


@pytest.fixture(scope="module")
def mt_lstm_run(corpus_and_glove, tmp_path_factory):
    """A cove_mt_lstm run of 4 steps over the test GloVe file, then resumed to 6."""
    corpus, glove_path = corpus_and_glove
    model_dir = tmp_path_factory.mktemp("mt_lstm") / "run"
    first = kt_train(model_dir, corpus, *MT_LSTM, "--glove", glove_path, "--train_steps", "4",
                     "--eval_every", "4", "--eval_sentences", "3")
    assert first.returncode == 0, first.stderr
    resumed = kt_train(model_dir, corpus, "--train_steps", "6", "--eval_sentences", "0")
    assert resumed.returncode == 0, resumed.stderr
    return model_dir, first.stdout, resumed.stdout


def test_kt_train_trains_an_mt_lstm_over_fixed_glove_and_resumes(mt_lstm_run, corpus_and_glove):
    model_dir, first, resumed = mt_lstm_run
    assert "starting at step 0 of 4: cove_mt_lstm" in first
    assert "evaluation at step 4: dev_loss" in first and "dev BLEU" in first and "(greedy;" in first
    assert "resuming from" in resumed and "step 6: learning_rate" in resumed
    saved = json.loads((model_dir / "config.json").read_text())
    words, vectors = glove.read_glove(corpus_and_glove[1])
    assert saved["model"]["hparams"]["model"] == "mt_lstm"
    assert saved["model"]["embedding_dim"] == 6
    assert saved["model"]["source_vocab_size"] == len(words) + glove.FIRST_WORD_ID
    assert (model_dir / "words.txt").read_text(encoding="utf-8").split("\n")[:-1] == words
    # The GloVe vectors went through training and a resume unchanged, into the checkpoint.
    loaded = loading.load(model_dir, model="mt_lstm")
    assert isinstance(loaded.model, kt.MTLSTM) and loaded.checkpoint.name == "ckpt-6"
    np.testing.assert_array_equal(loaded.model.glove.embeddings.numpy()[glove.FIRST_WORD_ID:],
                                  vectors)


def test_cove_loads_from_the_run_and_reads_text_through_its_words(mt_lstm_run):
    model_dir = mt_lstm_run[0]
    loaded = cove.load_cove(model_dir)
    assert "mt_lstm cove_mt_lstm trained on" in loaded.describe()
    ids = loaded.words.encode(tf.constant(["And God said , Let there be light .",
                                           "In the beginning ."]))[:, :-1].to_tensor()
    vectors = loaded.layer(ids)
    assert vectors.shape == (2, 9, 6 + 2 * 16)
    np.testing.assert_array_equal(vectors[..., :6], loaded.layer.mt_lstm.glove(ids))
    assert not np.any(vectors[1, 4:]) and np.all(np.any(vectors[1, :4], axis=-1))
    np.testing.assert_array_equal(loaded.layer.compute_mask(ids), ids.numpy() != 0)
    alone = loaded.layer(ids[1:, :4])  # padding changes no real word's vector
    np.testing.assert_allclose(alone[0], vectors[1, :4], atol=1e-6)


def test_runs_of_the_wrong_kind_are_refused_naming_the_model_dir(mt_lstm_run, trained_model_dir,
                                                                 corpus_and_glove, tmp_path):
    model_dir = mt_lstm_run[0]
    with pytest.raises(loading.ModelDirError, match="holds a model of kind 'mt_lstm' "
                                                    r"\(cove_mt_lstm\), not 'transformer': an "
                                                    "MT-LSTM is read as CoVe"):
        loading.load(model_dir)
    result = run_main(translate.main, "--model_dir", model_dir)
    assert result.returncode == 2 and "kind 'mt_lstm'" in result.stderr
    with pytest.raises(loading.ModelDirError, match="kind 'transformer'.*not 'mt_lstm'"):
        cove.load_cove(trained_model_dir)
    with pytest.raises(loading.ModelDirError, match="no config.json"):
        cove.load_transformer_cove(tmp_path)
    missing = kt_train(tmp_path / "new", corpus_and_glove[0], *MT_LSTM, "--train_steps", "1")
    assert missing.returncode == 2 and "give --glove (a GloVe text file" in missing.stderr
    beam = kt_train(tmp_path / "beam", corpus_and_glove[0], *MT_LSTM, "--glove",
                    corpus_and_glove[1], "--eval_beam_size", "4")
    assert beam.returncode == 2 and "--eval_beam_size: an MT-LSTM's dev BLEU" in beam.stderr
    words_alone = kt_train(tmp_path / "w", corpus_and_glove[0], *MT_LSTM, "--glove_words", "9")
    assert words_alone.returncode == 2 and "--glove_words keeps the first words of --glove" \
        in words_alone.stderr
    glove_for_a_transformer = kt_train(tmp_path / "t", corpus_and_glove[0], "--hparams",
                                       "transformer_tiny", "--glove", corpus_and_glove[1])
    assert glove_for_a_transformer.returncode == 2
    assert "--glove is for cove_mt_lstm" in glove_for_a_transformer.stderr


def test_word_pieces_are_the_sentence_as_encoded_with_each_words_pieces(bible_vocab):
    texts = ["Don't stop, it\u2019s 5.30!", "In the beginning God created the heaven.",
             "  And  the  earth was without form  ", 'Tom said "Hi."', "5 apples"]
    pieces, spans = glove.word_pieces(bible_vocab, texts)
    encoded = bible_vocab.encode(tf.constant(texts)).to_list()
    for text, row, row_spans, expected in zip(texts, pieces, spans, encoded):
        assert row[:len(expected)].tolist() == expected and not row[len(expected):].any()
        words = [w.decode() for w in glove.tokenize_words(tf.constant([text]), False)[0].numpy()]
        assert np.all(row_spans[len(words):] == 0)
        covered = set()
        for word, (first, end) in zip(words, row_spans):
            assert 0 <= first < end < len(expected)  # never the end of sentence
            covered.update(range(first, end))
            # The word is inside its pieces' text (in its case; ' for the text's \u2019).
            text_of = bible_vocab.detokenize(tf.constant(row[first:end])).numpy().decode()
            assert word in text_of.replace(" ", "").replace("\u2019", "'"), (word, text_of)
        # Pieces of no word are white space.
        for index in set(range(len(expected) - 1)) - covered:
            assert not bible_vocab.detokenize(tf.constant(row[index:index + 1])).numpy().strip()
    assert glove.tokenize_words(tf.constant(texts[:1]), False)[0].numpy().tolist() == [
        b"Do", b"n't", b"stop", b",", b"it", b"'s", b"5.30", b"!"]
    cut_pieces, cut_spans = glove.word_pieces(bible_vocab, texts[1:2], max_length=4)
    assert cut_pieces.tolist() == [encoded[1][:3] + [1]] and np.all(cut_spans[0, 3:] == 0)


@pytest.mark.parametrize("text", ["DON'T\u0130K stop", "\ufeffThe \u2581cat's", "x\ue000y z",
                                  "It\u2019S 3,000 CAN'T"])
def test_words_are_the_same_in_either_case(text):
    lower, kept = (glove.tokenize_words(tf.constant([text]), lowercase)[0].numpy().tolist()
                   for lowercase in (True, False))
    assert len(lower) == len(kept)
    assert lower == [tf.strings.lower(word, encoding="utf-8").numpy() for word in kept]


def test_transformer_cove_is_the_mean_of_each_words_piece_vectors():
    keras.utils.set_random_seed(2)
    transformer = kt.build_model("transformer_tiny", vocab_size=40)
    layer = kt.TransformerCoVe(transformer)
    word_ids = np.array([[7, 8, 9, 0], [5, 6, 0, 0]], "int32")
    pieces = np.array([[11, 12, 13, 14, 15, 1], [21, 22, 23, 1, 0, 0]], "int32")
    # Row 0: a word of two pieces, a piece shared by two words, a piece of none (3).
    spans = np.array([[[0, 2], [2, 3], [2, 3], [0, 0]], [[0, 1], [1, 3], [0, 0], [0, 0]]],
                     "int32")
    vectors = layer([word_ids, pieces, spans]).numpy()
    encoded = transformer.encode(pieces).numpy()
    expected = np.zeros((2, 4, 32), np.float32)
    for row in range(2):
        for word in range(4):
            if word_ids[row, word]:
                first, end = spans[row, word]
                expected[row, word] = encoded[row, first:end].mean(axis=0)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    np.testing.assert_array_equal(layer.compute_mask([word_ids, pieces, spans]), word_ids != 0)
    alone = layer([word_ids[1:, :2], pieces[1:, :4], spans[1:, :2]]).numpy()
    np.testing.assert_allclose(alone[0], vectors[1, :2], atol=1e-5)
    assert not layer.trainable_weights


def write_task(directory):
    directory.mkdir()
    lines = "".join(f"{label}\t{text}\n" for label, text in QUESTIONS)
    (directory / "train.tsv").write_text(lines * 8, encoding="utf-8")
    (directory / "test.tsv").write_text(lines, encoding="utf-8")
    return directory


@pytest.mark.slow
def test_kt_classify_reads_cove_or_a_transformer_encoder_and_the_classifier_reloads(
        mt_lstm_run, trained_model_dir, corpus_and_glove, tmp_path):
    common = ["--task", f"trec50:{write_task(tmp_path / 'task')}", "--epochs", "1",
              "--hidden_size", "8", "--seed", "2"]
    with_cove = run_main(classify.main, *common, "--inputs", "glove+cove", "--cove_model_dir",
                         mt_lstm_run[0], "--output", tmp_path / "cove")
    assert with_cove.returncode == 0, with_cove.stderr
    assert "inputs glove+cove (" in with_cove.stdout and "mt_lstm cove_mt_lstm" in with_cove.stdout
    assert "trec50 test accuracy" in with_cove.stdout
    results = json.loads((tmp_path / "cove" / "results.json").read_text())
    assert results["inputs"] == "glove+cove" and "mt_lstm cove_mt_lstm" in results["encoder"]
    with_transformer = run_main(
        classify.main, *common, "--inputs", "glove+transformer", "--glove",
        corpus_and_glove[1], "--cove_model_dir", trained_model_dir, "--output", tmp_path / "t")
    assert with_transformer.returncode == 0, with_transformer.stderr
    assert "transformer transformer_tiny" in with_transformer.stdout

    model = keras.saving.load_model(tmp_path / "t" / "classifier.keras")
    with_cove = keras.saving.load_model(tmp_path / "cove" / "classifier.keras")
    # The encoders stay frozen through a load (their weights are not the optimizer's).
    encoders = [layer for loaded in (model, with_cove) for layer in loaded.layers
                if isinstance(layer, (kt.CoVe, kt.TransformerCoVe))]
    assert len(encoders) == 2 and not any(layer.trainable_weights for layer in encoders)
    texts = [text for _, text in QUESTIONS]
    args = classify.parse_args([*common, "--inputs", "glove+transformer", "--glove",
                                str(corpus_and_glove[1]), "--cove_model_dir",
                                str(trained_model_dir)])
    arrays = classify.Inputs(args, texts).arrays(texts)
    assert model(arrays).shape == (4, 4)

    wrong = run_main(classify.main, *common, "--inputs", "glove+cove", "--cove_model_dir",
                     trained_model_dir)
    assert wrong.returncode == 2 and "--cove_model_dir: " in wrong.stderr
    assert "kind 'transformer'" in wrong.stderr and "glove+transformer" in wrong.stderr
    no_dir = run_main(classify.main, *common, "--inputs", "glove+cove")
    assert no_dir.returncode == 2 and "needs --cove_model_dir" in no_dir.stderr
    unread = run_main(classify.main, *common, "--inputs", "random", "--cove_model_dir",
                      mt_lstm_run[0])
    assert unread.returncode == 2 and "--inputs random reads no trained encoder" in unread.stderr
