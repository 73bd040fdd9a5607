import gzip
import inspect
import typing

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_main

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import build_vocab
from keras_transformer.token_ids import UNK_ID

HARD_STRINGS = [
    "", " ", "  leading and trailing  ", "a  b   c", "tab\tinside", "Ñandú, café, naïve, Ærø",
    "combining e\u0301 and n\u0303", "日本語のテキストと中文", "emoji 😀👍🏽 👨‍👩‍👧",
    "מימין לשמאל \u200f",
    "Jehová fué á", "x" * 300, "\ufeffbyte order mark", "\tleading tab", "a \u2581b", "x \u2581 y",
    "line end\r\n",
]


def test_ids_follow_keras_transformer_conventions(bible_vocab):
    assert (data.PAD_ID, data.EOS_ID) == (kt.PAD_ID, kt.EOS_ID)
    assert bible_vocab.vocab_size == 2000
    ids = bible_vocab.tokenize(["In the beginning, God created the heavens and the earth."])
    assert ids.dtype == tf.int32 and ids.shape[0] == 1
    assert np.all(ids.flat_values.numpy() > data.EOS_ID)


def test_round_trip_on_the_dev_corpus(bible_vocab):
    for source_texts, target_texts in data.get_source("bible_en_es").pairs("dev").batch(
            1000).as_numpy_iterator():
        for texts in (source_texts, target_texts):
            back = bible_vocab.detokenize(bible_vocab.tokenize(texts)).numpy()
            expected = [data.normalize_whitespace(t.decode()) for t in texts]
            assert [b.decode() for b in back] == expected


def test_round_trip_on_hard_strings(bible_vocab):
    back = bible_vocab.detokenize(bible_vocab.tokenize(HARD_STRINGS)).numpy()
    assert [b.decode() for b in back] == [data.normalize_whitespace(s) for s in HARD_STRINGS]


def test_unseen_characters_fall_back_to_bytes_not_unk(bible_vocab):
    ids = bible_vocab.tokenize(["日本語 😀"]).flat_values.numpy()
    assert UNK_ID not in ids


def test_detokenize_stops_at_eos_and_skips_padding(bible_vocab):
    ids = bible_vocab.tokenize(["God said", "light"]).to_tensor().numpy()
    row = np.concatenate([ids[0][ids[0] > 0], [data.EOS_ID], ids[1][ids[1] > 0], [0, 0]])
    padded = np.stack([row, np.concatenate([ids[1][ids[1] > 0], [data.EOS_ID]]
                                           + [np.zeros(len(row) - 1 - (ids[1] > 0).sum(), int)])])
    assert [s.decode() for s in bible_vocab.detokenize(padded).numpy()] == ["God said", "light"]


def test_detokenize_takes_int64_and_single_sequences(bible_vocab):
    ids = tf.cast(bible_vocab.tokenize(["God said"]).to_tensor(), tf.int64)
    assert bible_vocab.detokenize(ids).numpy().tolist() == [b"God said"]
    assert bible_vocab.detokenize(ids[0]).numpy() == b"God said"


def test_setting_a_seed_after_loading_does_not_break_the_vocabulary(bible_vocab):
    """tf.random.set_seed clears the kernel cache that owns tensorflow-text's model."""
    expected = bible_vocab.tokenize(["Let there be light"]).to_list()
    tf.random.set_seed(99)
    assert bible_vocab.tokenize(["Let there be light"]).to_list() == expected
    tf.random.set_seed(100)
    batches = data.pipeline("bible_en_es", bible_vocab, "dev", batch_tokens=2000)
    assert next(iter(batches))[1].shape[0] > 0


def test_tokenize_and_detokenize_run_in_a_graph(bible_vocab):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(texts):
        return bible_vocab.detokenize(bible_vocab.tokenize(texts))

    assert round_trip(tf.constant(["Let there be light"])).numpy()[0] == b"Let there be light"


def test_size_mismatch_names_the_file(bible_vocab, bible_vocab_path):
    bible_vocab.check_size(2000)
    with pytest.raises(data.VocabularyError, match=rf"{bible_vocab_path.name} has 2000 ids but "
                                                   r"the model expects 37000"):
        bible_vocab.check_size(37000)


def test_bad_vocabulary_files_are_named(tmp_path):
    with pytest.raises(data.VocabularyError, match="missing.model: no such vocabulary file"):
        data.Vocabulary.load(tmp_path / "missing.model")
    text = tmp_path / "vocab.txt"
    text.write_text("the\nof\nand\n")
    with pytest.raises(data.VocabularyError, match="vocab.txt: not a SentencePiece model"):
        data.Vocabulary.load(text)


def test_foreign_sentencepiece_ids_are_refused(tmp_path):
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["a b c d e f g h"] * 20), model_writer=model, vocab_size=12,
        minloglevel=2)  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
    path = tmp_path / "foreign.model"
    path.write_bytes(model.getvalue())
    with pytest.raises(data.VocabularyError, match="foreign.model: the vocabulary must reserve"):
        data.Vocabulary.load(path)


def test_build_refuses_to_overwrite_and_leaves_no_partial_file(tmp_path):
    path = tmp_path / "v.model"
    texts = ["the quick brown fox jumps over the lazy dog"] * 50
    data.build_vocabulary(texts, 300, path)
    before = path.read_bytes()
    with pytest.raises(data.VocabularyError, match="exists; pass overwrite=True"):
        data.build_vocabulary(texts, 300, path)
    assert path.read_bytes() == before
    with pytest.raises(data.VocabularyError, match="cannot build .* vocab_size=100000"):
        data.build_vocabulary(texts, 100_000, tmp_path / "big.model")
    assert not (tmp_path / "big.model").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.model"]


def run_kt_vocab(*args):
    return run_main(build_vocab.main, *args)


def test_kt_vocab_command(tmp_path):
    source, target = tmp_path / "a.en.gz", tmp_path / "a.de"
    with gzip.open(source, "wt") as f:
        f.write("the house is small\nthe cat sleeps\n" * 30)
    target.write_text("das Haus ist klein\ndie Katze schläft\n" * 30)
    output = tmp_path / "v.model"
    spec = f"text:{source},{target}"
    built = run_kt_vocab("--data", spec, "--vocab_size", "300", "--output", str(output))
    assert built.returncode == 0, built.stderr
    assert "300 ids" in built.stdout and data.Vocabulary.load(output).vocab_size == 300
    again = run_kt_vocab("--data", spec, "--vocab_size", "300", "--output", str(output))
    assert again.returncode == 2 and "exists; pass overwrite=True (--overwrite)" in again.stderr
    missing = run_kt_vocab("--data", f"text:{source},{tmp_path / 'nope.de'}", "--output",
                           str(tmp_path / "w.model"))
    assert missing.returncode == 2 and "nope.de: no such file" in missing.stderr
    assert "--vocab_size" in run_kt_vocab("--help").stdout


@pytest.mark.parametrize("kind", data.vocabularies.KINDS)
def test_each_vocabulary_keeps_the_written_contract(kind, bible_vocab):
    """Every member of `data.VocabularyProtocol`, with its signature (a runtime isinstance
    check sees only names); the instance attributes on a loaded vocabulary (test_marian checks
    an imported one)."""
    protocol = data.VocabularyProtocol
    for name, member in vars(protocol).items():
        if isinstance(member, property):
            assert isinstance(getattr(kind, name), property), (kind, name)
        elif not name.startswith("_") and (isinstance(member, classmethod) or callable(member)):
            assert (inspect.signature(getattr(kind, name)) ==
                    inspect.signature(getattr(protocol, name))), (kind, name)
    assert set(typing.get_type_hints(protocol)) == {"FILE_NAME", "path", "vocab_size"}
    assert isinstance(kind.FILE_NAME, str)
    assert isinstance(bible_vocab, protocol)
