"""Documents into sentences and back (data/documents.py), long sentences split and never cut,
and kt-translate --documents translating as the graph function an export saves
(export/documents.py)."""

import json
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from client_process import run_client
from conftest import PRODUCTION_FLAGS, run_main
from hypothesis import given
from hypothesis import strategies as st

from keras_transformer.data import documents
from keras_transformer.export import Translator, translate
from keras_transformer.export.documents import DocumentTranslator, parts

SPLIT_IN_GRAPH = tf.function(documents.split, input_signature=[tf.TensorSpec([None], tf.string)])
PIECES = st.sampled_from(["The", "cat", "sat.", "Mr.", "Smith", "1.5", "e.g.", "U.S.", "end!",
                          "why?", "“Quoted.”", "¿Qué?", "ok,", "so;", ":", "é", "\n", "\n\n",
                          " ", "  ", "\t", "\r\n", "word"])


@given(st.lists(st.lists(PIECES, max_size=12).map(" ".join), max_size=3))
def test_a_document_split_joins_back_byte_for_byte_in_graph_and_eagerly(texts):
    pieces, is_sentence = documents.split(tf.constant(texts, tf.string))
    assert documents.join(pieces).numpy().tolist() == [text.encode() for text in texts]
    for piece, sentence in zip(pieces.flat_values.numpy(), is_sentence.flat_values.numpy()):
        if sentence:  # a sentence is text on one line, without spaces around it
            assert piece.strip() == piece and piece and b"\n" not in piece
    in_graph = SPLIT_IN_GRAPH(tf.constant(texts, tf.string))
    assert [part.to_list() for part in in_graph] == [pieces.to_list(), is_sentence.to_list()]


def test_sentences_end_where_sentences_end():
    pieces, is_sentence = documents.split(tf.constant([
        "Mr. Smith paid 1.5 dollars, e.g. for bread. Then he left!  Did he?\n\nA title\n"]))
    sentences = [piece.decode() for piece, sentence in zip(
        pieces.flat_values.numpy(), is_sentence.flat_values.numpy()) if sentence]
    assert sentences == ["Mr. Smith paid 1.5 dollars, e.g. for bread.", "Then he left!",
                         "Did he?", "A title"]


def test_long_sentences_are_split_at_clauses_then_words_and_never_cut():
    text = ("Short. One two three, " + ", ".join(["one two three"] * 2) + "; " +
            " ".join(["word"] * 9) + " end.\nNext line")
    class Words:  # a vocabulary whose tokens are words
        def tokenize(self, texts):
            return tf.strings.split(texts)

    result = parts(Words(), tf.constant([text]), max_input_length=5)  # 4 words a part
    pieces = [p.decode() for p in result.pieces.flat_values.numpy()]
    sentence_parts = [p for p, s in zip(pieces, result.is_sentence.flat_values.numpy()) if s]
    assert "".join(pieces) == text
    assert all(len(part.split()) <= 4 for part in sentence_parts), sentence_parts
    assert sentence_parts[:4] == ["Short.", "One two three,", "one two three,", "one two three;"]
    assert (int(result.sentences[0]), int(result.split_at_clauses[0]),
            int(result.split_into_windows[0])) == (3, 1, 1)


# A fresh process (its peak memory its own): one 64 KiB line of ~12,000 words split as the
# document signature splits it, in a graph.
SPLIT_MEMORY = r"""
import json, sys
import tensorflow as tf
from keras_transformer import data
from keras_transformer.data import documents
from keras_transformer.export.documents import parts

vocabulary = data.Vocabulary.load(sys.argv[1])
split = tf.function(lambda texts: parts(vocabulary, texts, 64).pieces)
line = " ".join(["In", "the", "beginning", "God", "created", "the", "heaven"] * 2000)[:65536]
split(tf.constant(["Warm up."]))  # traced before measuring


def memory_mb(field):
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so it would start at the
    # pytest worker's peak.
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


before = memory_mb("VmRSS")
pieces = split(tf.constant([line]))
print(json.dumps({"growth": memory_mb("VmHWM") - before,
                  "whole": documents.join(pieces).numpy()[0].decode() == line,
                  "pieces": int(pieces.row_lengths()[0])}))
"""


def test_a_long_line_splits_in_memory_linear_in_its_size(bible_vocab_path):
    """Each word of a line once cost a copy of the whole line (tf.gather before substr): +724
    MB for this 64 KiB line, 64 such documents past 7 GB; now +16 MB (one thread, a 2-core
    Cascade Lake Xeon, 2026-11-28)."""
    result = subprocess.run([sys.executable, "-c", SPLIT_MEMORY, str(bible_vocab_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply["whole"] and reply["pieces"] > 400  # windows of words and the gaps between
    assert reply["growth"] < 200, reply


@pytest.mark.slow
def test_kt_translate_documents_translates_as_the_exported_signature(trained_model_dir, tmp_path,
                                                                    production_export):
    document = ("In the beginning God created the heavens and the earth. The earth was formless "
                "and empty, and darkness was on the surface of the deep, and God’s Spirit was "
                "hovering over the surface of the waters.\n\nGod said, “Let there be light,” "
                "and there was light.\r\nGod saw the light.\r\n")  # CRLF kept, both ways
    (tmp_path / "doc.en").write_bytes(document.encode())
    result = run_main(translate.main, "--model_dir", trained_model_dir,
                      "--documents", "--input", tmp_path / "doc.en", "--batch_size", "3",
                      *PRODUCTION_FLAGS)
    assert result.returncode == 0, result.stderr
    counts = re.search(r"translated (\d+) sentence\(s\).*; of them (\d+) split after clause "
                       r"marks, (\d+) clause\(s\) into windows of words", result.stderr)
    assert [line == "" for line in result.stdout.split("\n")] == [
        line == "" for line in document.split("\n")]  # every line and paragraph break kept
    # The export's translate_document, in a process with only tensorflow and tensorflow_text.
    script = ("import json, sys, tensorflow as tf, tensorflow_text\n"
              "serve = tf.saved_model.load(sys.argv[1]).signatures['translate_document']\n"
              "out = serve(documents=tf.constant([open(sys.argv[2], 'rb').read()]))\n"
              "print(*(int(out[name][0]) for name in sys.argv[3:]))\n"
              "print(json.dumps(out['translations'].numpy()[0].decode()))\n")
    loaded = run_client(script, production_export, tmp_path / "doc.en", "sentences",
                        "split_at_clauses", "split_into_windows")
    assert loaded.returncode == 0, loaded.stderr
    counts_line, translation = loaded.stdout.split("\n", 1)
    assert json.loads(translation) == result.stdout and result.stdout.count("\r\n") == 2
    # 16 tokens at most: the second sentence is split (2 sentences, 3 clauses, with this model's
    # vocabulary), and both ways count alike.
    assert counts_line.split() == list(counts.groups()) == ["4", "2", "3"]
    refused = run_main(translate.main, "--model_dir", trained_model_dir,
                       "--documents", "--n_best", "2")
    assert refused.returncode == 2 and "--documents writes the translated document alone: " \
        "drop --n_best" in refused.stderr


@pytest.mark.slow
def test_the_document_signature_refuses_what_it_cannot_take_whole(trained):
    translator = Translator(trained.model, trained.vocabulary, max_input_length=16,
                            max_batch_size=2, beam_size=1)
    documents = DocumentTranslator(translator, max_document_bytes=1_000, max_sentences=3)
    blank = " \n\n\t \n"
    result = documents.translate_documents(tf.constant([blank, ""]))
    assert [t.decode() for t in result["translations"].numpy()] == [blank, ""]
    assert result["sentences"].numpy().tolist() == [0, 0]
    for texts, limit in (([("In the beginning. " * 60_000)[:1_000_000]], "longer than the limit "
                          "of 1000 bytes; split it"),  # 1 MB: refused before any work
                         (["One. Two.", "Three. Four."], "too many sentences in one request: "
                          "the limit is 3"),
                         (["One."] * 3, "too many documents in one request: the limit "
                          "(max_batch_size) is 2")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(limit)):
            documents.translate_documents(tf.constant(texts))
    # Under a search ceiling that fits one sentence a search, the parts go one at a time and
    # come back as they did two at a time.
    one_at_a_time = DocumentTranslator(Translator(
        trained.model, trained.vocabulary, max_input_length=16, max_batch_size=2, beam_size=1,
        max_search_positions=translator.decoding.max_output_length), max_document_bytes=1_000,
        max_sentences=3)
    text = tf.constant(["In the beginning God created the heaven. And the earth was void. Amen."])
    bounded = one_at_a_time.translate_documents(text)
    assert bounded["sentences"].numpy().tolist() == [3]
    assert bounded["translations"].numpy().tolist() == documents.translate_documents(text)[
        "translations"].numpy().tolist()
