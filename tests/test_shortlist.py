"""A vocabulary shortlist: Model 1's candidates, CTranslate2's file format, a search over the
candidates exact with respect to them, and what constraints force always among them."""

import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import bundled_lines, run_main

from keras_transformer.data import shortlist
from keras_transformer.export import (
    DecodingConfig,
    Translator,
    export_command,
    shortlist_command,
    translate,
)
from keras_transformer.export.ctranslate2_engine import Ctranslate2Translator
from keras_transformer.export.flags import beam_description
from keras_transformer.model_dir import ModelDirError
from keras_transformer.search.decode import beam_decode, greedy_decode
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID


def test_model_1_ranks_a_pieces_translation_above_the_pieces_found_everywhere():
    """Piece 30 is in every target, more often than any translation: counts would make it every
    source piece's first candidate; Model 1 gives each source piece its own, and 30 is among
    the frequent pieces every search keeps."""
    pairs = [([5, 7], [20, 30, 30]), ([6, 7], [21, 30, 30]), ([5, 8], [20, 30, 22]),
             ([6, 8], [21, 30, 22]), ([5], [20, 30]), ([6], [21, 30])]
    built = shortlist.build(pairs, per_source=1, frequent=1)
    assert {source: ids.tolist() for source, ids in built.by_source.items()} == {
        5: [20], 6: [21], 7: [30], 8: [22]}
    assert built.always.tolist() == [EOS_ID, UNK_ID, 30]
    assert built.candidates(np.array([5, 0])).tolist() == [EOS_ID, UNK_ID, 20, 30]


def test_the_vmap_file_reads_back_and_a_bad_line_is_named(bible_vocab, tmp_path):
    pieces = shortlist.pieces_of(bible_vocab)
    built = shortlist.Shortlist(always=np.array([EOS_ID, UNK_ID, 40], np.int32),
                                by_source={300: np.array([310, 305], np.int32)})
    path = tmp_path / "shortlist.vmap"
    shortlist.write_vmap(path, built, *pieces)
    first, second = path.read_text(encoding="utf-8").splitlines()
    assert first == "\t" + " ".join(pieces[1][i] for i in (EOS_ID, UNK_ID, 40))
    assert second == f"{pieces[0][300]}\t{pieces[1][310]} {pieces[1][305]}"
    read = shortlist.read_vmap(path, *pieces)
    assert read.always.tolist() == built.always.tolist()
    assert {s: ids.tolist() for s, ids in read.by_source.items()} == {300: [310, 305]}
    path.write_text(f"{first}\n{pieces[0][300]}\tnot-a-piece\n", encoding="utf-8")
    with pytest.raises(shortlist.ShortlistError, match=r"shortlist.vmap:2: 'not-a-piece' is "
                                                       r"not a piece of the target vocabulary"):
        shortlist.read_vmap(path, *pieces)


@pytest.fixture(scope="module")
def sources(trained):
    texts = [line.rstrip("\n") for line in bundled_lines("dev", "en", 6)]
    return trained.vocabulary.encode(tf.constant(texts)).to_tensor()


def test_every_id_a_candidate_is_the_full_search(trained, sources):
    full = beam_decode(trained.model, sources, beam_size=3)
    listed = beam_decode(trained.model, sources, beam_size=3,
                         candidates=tf.range(trained.model.vocab_size))
    np.testing.assert_array_equal(full[0], listed[0])
    # The projection reads a gathered copy of the kernel: another matmul, rounded apart.
    np.testing.assert_allclose(full[1], listed[1], atol=1e-5)


def test_a_search_over_candidates_scores_the_softmax_restricted_to_them(trained, sources):
    """Greedy search with its own choices among the candidates chooses them again; each
    token's log-probability is the full softmax's restricted to the candidates and
    renormalized: log p(y) - log sum over candidates of p(c)."""
    model = trained.model
    ids, _ = greedy_decode(model, sources)
    candidates = np.union1d(ids.numpy().ravel(), [EOS_ID, 3, 4, 5])
    candidates = candidates[candidates != PAD_ID]
    listed, log_probs = greedy_decode(model, sources, candidates=candidates)
    np.testing.assert_array_equal(ids, listed)
    inputs = tf.pad(listed[:, :-1], [[0, 0], [1, 0]])
    logits = tf.gather(model([sources, inputs]), candidates, axis=-1)
    chosen = np.searchsorted(candidates, np.maximum(listed.numpy(), EOS_ID))
    token_log_probs = np.take_along_axis(tf.nn.log_softmax(logits).numpy(), chosen[..., None],
                                         axis=-1)[..., 0]
    expected = np.where(listed.numpy() != PAD_ID, token_log_probs, 0).sum(axis=1)
    np.testing.assert_allclose(log_probs, expected, atol=1e-4)


def test_what_a_prefix_or_glossary_forces_stays_a_candidate(trained, sources):
    """A shortlist holding nothing but end of sentence and unknown: the searches can write
    only what their constraints force, which they still do."""
    nothing = shortlist.Shortlist(always=np.array([EOS_ID, UNK_ID], np.int32), by_source={})
    translator = Translator(trained.model, trained.vocabulary, shortlist=nothing, beam_size=2)
    prefix = np.zeros([len(sources), 3], np.int32)
    prefix[:, :2] = [500, 501]
    result = translator.translate_n_best_ids_with_prefix(sources, prefix)["ids"].numpy()
    np.testing.assert_array_equal(result[:, 0, :2], prefix[:, :2])
    assert set(np.unique(result)) <= {PAD_ID, EOS_ID, UNK_ID, 500, 501}
    phrases = np.zeros([len(sources), 1, 2], np.int32)
    phrases[:, 0] = [600, 601]
    held = translator.translate_n_best_ids_with_glossary(sources, phrases)["ids"].numpy()
    best = held[:, 0]
    assert all(600 in row and 601 in row for row in best)
    assert set(np.unique(held)) <= {PAD_ID, EOS_ID, UNK_ID, 600, 601}


def test_kt_shortlist_then_kt_translate_shortlist_decode_as_the_python_api(
        trained_model_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_model_dir, run, symlinks=True)
    (tmp_path / "in.txt").write_text("".join(bundled_lines("dev", "en", 8)))
    missing = run_main(translate.main, "--model_dir", run, "--shortlist",
                       "--input", tmp_path / "in.txt")
    assert missing.returncode == 2
    assert "has no shortlist.vmap; make one with kt-shortlist --model_dir" in missing.stderr
    built = run_main(shortlist_command.main, "--model_dir", run, "--max_pairs", "1000")
    assert built.returncode == 0, built.stderr
    refused = run_main(translate.main, "--model_dir", run, "--shortlist", "--jit_compile",
                       "--input", tmp_path / "in.txt")
    assert refused.returncode == 2
    assert "(--shortlist) and jit_compile (--jit_compile) do not go together" in refused.stderr
    assert "from 1,000 train pairs" in built.stderr and "of the references' pieces" in built.stderr
    command = run_main(translate.main, "--model_dir", run, "--shortlist", "--input",
                       tmp_path / "in.txt", "--scores", "--dtype", "float32")
    assert command.returncode == 0, command.stderr
    assert "over the shortlist's candidates" in command.stderr
    translator = Translator.from_model_dir(run, DecodingConfig(dtype="float32"), shortlist=True)
    lines = [line.rstrip("\n") for line in bundled_lines("dev", "en", 8)]
    result = translator.translate(tf.constant(lines))
    assert command.stdout.splitlines() == [
        f"{score:.4f}\t{text.decode('utf-8')}"
        for score, text in zip(result["scores"].numpy(), result["translations"].numpy())]
    with pytest.raises(ModelDirError, match="shortlist.vmap"):
        Translator.from_model_dir(trained_model_dir, shortlist=True)
    # The export keeps the shortlist's table (its variables) and searches over it.
    exported = run_main(export_command.main, "--model_dir", run, "--shortlist", "--dtype",
                        "float32", "--output", tmp_path / "exported")
    assert exported.returncode == 0, exported.stderr
    assert "over the shortlist's candidates" in exported.stdout
    served = tf.saved_model.load(str(tmp_path / "exported" / "1")).signatures["serving_default"]
    np.testing.assert_array_equal(served(inputs=tf.constant(lines))["translations"],
                                  result["translations"])
    # The CTranslate2 export carries the same file as its vmap, which its engine decodes with.
    converted = run_main(export_command.main, "--model_dir", run, "--shortlist", "--format",
                         "ctranslate2", "--output", tmp_path / "ct2")
    assert converted.returncode == 0, converted.stderr
    assert "with the shortlist as its vmap" in converted.stdout
    assert (tmp_path / "ct2" / "1" / "vmap.txt").read_text(encoding="utf-8") == (
        run / "shortlist.vmap").read_text(encoding="utf-8")
    engine = Ctranslate2Translator(tmp_path / "ct2")
    assert engine.shortlist and "over the shortlist's candidates" in beam_description(engine)
    source_ids = engine.tokenize(tf.constant(lines))["source_ids"]
    assert len(engine.translate_n_best_ids(source_ids)["ids"]) == len(lines)
