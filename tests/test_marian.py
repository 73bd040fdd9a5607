"""kt-import --from marian against `transformers` itself: tests/data/marian_tiny holds a small
random MarianMTModel, its SentencePiece models and vocab.json, and what transformers 5.23 computed
with them (`python -m bench.marian_checkpoint --shape tiny` made it; the suite needs neither
PyTorch nor transformers). The import must tokenize as MarianTokenizer, give MarianMTModel's
logits, `generate`'s greedy and beam-4 outputs (Hugging Face's length normalization, its
stopping rule, forced end of sentence at max_length) and, exported, the same strings in a fresh
process; fine-tune and resume; and refuse what it cannot represent, naming it."""

import io
import json
import pathlib
import pickle
import shutil
import sys
import types
import zipfile
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from client_process import run_client
from conftest import TRAINED_TINY, run_main

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.export import DecodingConfig, Translator, export_command, translate
from keras_transformer.model_dir import config_file, hf_checkpoint, loading, marian
from keras_transformer.trainer import import_model, init_from, vocab_update

CHECKPOINT = pathlib.Path(__file__).parent / "data" / "marian_tiny"
REFERENCE = json.loads((CHECKPOINT / "reference.json").read_text(encoding="utf-8"))
ARRAYS = np.load(CHECKPOINT / "reference.npz")
MARIAN_IDS = json.loads((CHECKPOINT / "vocab.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    return marian.import_marian(CHECKPOINT, tmp_path_factory.mktemp("marian") / "model_dir")


@pytest.fixture(scope="module")
def loaded(imported):
    return loading.load(imported)


def marian_order(loaded):
    """order[i]: the Marian id (vocab.json's) of the model_dir's id i."""
    vocabulary = loaded.vocabulary
    return [MARIAN_IDS[piece] for piece in vocabulary.pieces(range(vocabulary.vocab_size))]


def our_ids(loaded, marian_ids):
    """Marian's ids as the model_dir's, rows of any length."""
    ours = {marian: i for i, marian in enumerate(marian_order(loaded))}
    return [[ours[int(i)] for i in row] for row in marian_ids]


def test_the_vocabulary_reads_text_as_marian_tokenizer(loaded):
    assert isinstance(loaded.vocabulary, data.VocabularyProtocol)  # test_vocab: signatures
    vocabulary = loaded.vocabulary
    # Sources by source.spm (nmt_nfkc), one with a >>spa<< code; targets by target.spm.
    assert vocabulary.encode(tf.constant(REFERENCE["sources"])).to_list() == our_ids(
        loaded, REFERENCE["source_ids"])
    assert vocabulary.target.encode(tf.constant(REFERENCE["targets"])).to_list() == our_ids(
        loaded, REFERENCE["target_ids"])
    assert vocabulary.target is vocabulary.target.target
    pad = MARIAN_IDS["<pad>"]
    outputs = our_ids(loaded, [[i for i in row if i != pad] for row in ARRAYS["beam4"]])
    assert [text.decode("utf-8") for text in vocabulary.detokenize(
        tf.ragged.constant(outputs)).numpy()] == REFERENCE["beam4"]
    assert vocabulary.pieces(range(3)) == ["<pad>", "</s>", "<unk>"]
    reloaded = data.load_vocabulary(loaded.checkpoint.parent.parent / "vocab.marian")
    assert reloaded.serialized == vocabulary.serialized


def test_teacher_forced_logits_are_marian_mt_models(loaded):
    """A batch of 6 sentences, padded on both sides: every real position's logits over the
    whole vocabulary within 1e-4 (measured: 3.3e-6)."""
    pad = MARIAN_IDS["<pad>"]
    labels = ARRAYS["labels"]  # padded with <pad>, as the tokenizer pads them
    source, target = (np.array(our_ids(loaded, ids)) for ids in (ARRAYS["input_ids"], labels))
    decoder_input = np.pad(target[:, :-1], [[0, 0], [1, 0]])
    logits = loaded.model((source, decoder_input), training=False).numpy()
    real = labels != pad
    np.testing.assert_allclose(logits[real], ARRAYS["logits"][:, :, marian_order(loaded)][real],
                               atol=1e-4)


@pytest.mark.parametrize("name, decoding", [("greedy", DecodingConfig(beam_size=1)),
                                            ("beam4", None)])
def test_the_python_api_and_kt_translate_give_generates_outputs(imported, loaded, name, decoding,
                                                                tmp_path):
    """An imported model's own decoding settings (its beam 4, alpha 1.0, Hugging Face's
    normalization, 63 tokens at most), which `Translator.from_model_dir` and kt-translate both
    take from the model_dir: the same ids and strings as generate on 50 sentences, about a third
    ending early and the rest at the limit; kt-translate's lines and scores are the Python
    API's."""
    translator = Translator.from_model_dir(imported, decoding)
    assert (translator.decoding.alpha, translator.decoding.length_normalization) == (1.0, "hf")
    assert (translator.decoding.max_output_length, translator.decoding.beam_size) == (
        63, 4 if name == "beam4" else 1)
    sources = tf.constant(REFERENCE["sources"])
    source_ids = translator.tokenize(sources)["source_ids"]
    best = translator.translate_ids(source_ids)
    pad = MARIAN_IDS["<pad>"]
    expected = our_ids(loaded, [[i for i in row if i != pad] for row in ARRAYS[name]])
    assert [[int(i) for i in row if i] for row in best["ids"].numpy()] == expected
    # Scoring each output gives its search score back, also where the limit ended it.
    np.testing.assert_allclose(translator.score_ids(source_ids, best["ids"])["scores"],
                               best["scores"], rtol=1e-5)
    # Each output the limit ended (with end of sentence, as generate does) is said to be so.
    signs = translator.check_ids(source_ids, best["ids"], best["scores"])
    assert list(signs["stopped_at_limit"].numpy()) == [len(row) == 63 for row in expected]
    if decoding is not None:
        translated = translator.translate(sources)
        assert [text.decode("utf-8") for text in translated["translations"].numpy()] == (
            REFERENCE[name])
    else:  # the command with no decoding flags
        # (`translate`'s strings under beam 4: test_the_export_serves_generates_strings_..., its
        # serving signature; tracing it here too cost a beam search's trace.)
        (tmp_path / "in.txt").write_text("\n".join(REFERENCE["sources"]) + "\n")
        command = run_main(translate.main, "--model_dir", imported, "--input",
                           tmp_path / "in.txt", "--scores")
        assert command.returncode == 0, command.stderr
        assert command.stdout.splitlines() == [
            f"{score:.4f}\t{text}" for score, text in zip(best["scores"].numpy(),
                                                         REFERENCE[name])]


# The SavedModel in a process that imports only tensorflow and tensorflow_text.
CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

model = tf.saved_model.load(sys.argv[1])
request = json.loads(sys.stdin.read())
out = model.signatures["serving_default"](inputs=tf.constant(request["inputs"]))
scored = model.signatures["score"](inputs=tf.constant(request["inputs"][:len(request["targets"])]),
                                   targets=tf.constant(request["targets"]))
print(json.dumps({"our_modules": sorted(m for m in sys.modules if m.startswith("keras_transf")),
                  "translations": [t.decode("utf-8") for t in out["translations"].numpy()],
                  "scores": scored["scores"].numpy().tolist()}))
"""


@pytest.mark.slow
def test_the_export_serves_generates_strings_without_this_package(imported, tmp_path):
    """Its translations are generate's; its scores of the 6 reference pairs (target.spm in the
    graph) are MarianMTModel's log-probabilities without <pad>, over length ** 1.0."""
    result = run_main(export_command.main, "--model_dir", imported, "--output", tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "1" / "assets" / "vocab.marian").is_file()
    served = run_client(CLIENT, tmp_path / "1", input=json.dumps(
        {"inputs": REFERENCE["sources"], "targets": REFERENCE["targets"]}))
    assert served.returncode == 0, served.stderr
    reply = json.loads(served.stdout)
    assert reply["our_modules"] == [] and reply["translations"] == REFERENCE["beam4"]
    pad, labels = MARIAN_IDS["<pad>"], ARRAYS["labels"]
    logits = np.delete(ARRAYS["logits"], pad, axis=-1).astype(np.float64)  # pad is the last
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != pad
    chosen = np.take_along_axis(log_probs, np.where(real, labels, 0)[..., None], -1)[..., 0]
    expected = (chosen * real).sum(1) / real.sum(1)
    np.testing.assert_allclose(reply["scores"], expected, rtol=1e-4)


def test_the_ctranslate2_export_decodes_greedily_as_generate(imported, tmp_path):
    """CTranslate2 with Hugging Face's normalization: the same greedy strings (a hypothesis
    still open one token before the limit ends there, as generate forces). Its beam search
    stops by its own rule (patience), not generate's: beam 4 gave 30 of the 50 here."""
    from keras_transformer.export.ctranslate2_engine import Ctranslate2Translator

    result = run_main(export_command.main, "--model_dir", imported, "--output", tmp_path,
                      "--format", "ctranslate2")
    assert result.returncode == 0, result.stderr
    engine = Ctranslate2Translator(tmp_path, beam_size=1)
    decoding = engine.decoding
    assert (decoding.length_normalization, decoding.alpha, decoding.max_output_length) == (
        "hf", 1.0, 63)
    source_ids = engine.tokenize(tf.constant(REFERENCE["sources"]))["source_ids"].numpy()
    best = engine.translate_n_best_ids(source_ids)["ids"][:, 0]
    assert [text.decode("utf-8") for text in engine.detokenize(best).numpy()] == (
        REFERENCE["greedy"])


def test_pytorch_files_are_read_without_pytorch(tmp_path):
    """pytorch_model.bin in PyTorch's legacy format (the 2020 uploads': position tables, tied
    copies sharing one storage) and in its zip format give the safetensors file's weights."""
    weights = hf_checkpoint.read_weights(CHECKPOINT)  # model.safetensors, read first
    for name in ("pytorch_model.bin", "zip_format/pytorch_model.bin"):
        copy = tmp_path / name.replace("/", "_")
        copy.mkdir()
        shutil.copy(CHECKPOINT / name, copy / "pytorch_model.bin")
        from_pytorch = hf_checkpoint.read_weights(copy)
        assert "model.encoder.embed_positions.weight" in from_pytorch
        for key, value in weights.items():
            np.testing.assert_array_equal(from_pytorch[key], value, err_msg=f"{name}: {key}")


def torch_like_file(path, content, size=(2,), stride=(2,), count=4):
    """Writes a zip-format PyTorch file whose data.pkl is `content`'s pickle, the tensors in it
    ({name: None}) of `size` and `stride` over one storage of `count` floats, as torch.save
    would name them (stand-ins for torch's names, so that no PyTorch is needed)."""
    fake_torch, fake_utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        return args
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = ("torch._utils",
                                                                      "_rebuild_tensor_v2")
    storage_type = type("FloatStorage", (), {"__module__": "torch"})
    fake_utils._rebuild_tensor_v2, fake_torch.FloatStorage = _rebuild_tensor_v2, storage_type
    storage = object()

    class Tensor:
        def __reduce__(self):
            return _rebuild_tensor_v2, (storage, 0, size, stride, False, {})

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", storage_type, "0", "cpu", count) if obj is storage else None

    buffer = io.BytesIO()
    with mock.patch.dict(sys.modules, {"torch": fake_torch, "torch._utils": fake_utils}):
        Pickler(buffer, protocol=2).dump({key: Tensor() if value is None else value
                                          for key, value in content.items()})
    path.mkdir(parents=True)
    with zipfile.ZipFile(path / "pytorch_model.bin", "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/data/0", np.arange(count, dtype=np.float32).tobytes())
    return path


def test_a_weights_file_runs_nothing_and_reads_nothing_outside_its_storages(tmp_path):
    good = hf_checkpoint.read_weights(torch_like_file(tmp_path / "good", {"w": None}))
    np.testing.assert_array_equal(good["w"], [0.0, 2.0])  # every second value
    with pytest.raises(hf_checkpoint.CheckpointFormatError, match="w lies outside its storage"):
        hf_checkpoint.read_weights(torch_like_file(tmp_path / "far", {"w": None}, size=(3,)))
    with pytest.raises(hf_checkpoint.CheckpointFormatError, match=r"holds __builtin__\.print"):
        hf_checkpoint.read_weights(torch_like_file(tmp_path / "hostile", {"w": print}))


def test_the_import_from_pytorchs_file_checks_its_position_tables(tmp_path, loaded):
    copy = checkpoint_copy(tmp_path / "bin")
    (copy / "model.safetensors").unlink()
    model = loading.load(marian.import_marian(copy, tmp_path / "bin_import")).model
    for ours, theirs in zip(model.weights, loaded.model.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    weights = hf_checkpoint.read_weights(copy)
    weights["model.decoder.embed_positions.weight"][5] += 0.01  # not sinusoids
    with pytest.raises(marian.MarianImportError, match="decoder.embed_positions.weight is not "):
        marian.keras_weights(weights, list(range(len(MARIAN_IDS))), loaded.hparams, copy)


def checkpoint_copy(tmp_path, **config_changes):
    copy = tmp_path / "checkpoint"
    shutil.copytree(CHECKPOINT, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(dict(config, **config_changes)))
    return copy


@pytest.mark.parametrize("changes, message", [
    ({"normalize_before": True}, "normalize_before True is not supported"),
    ({"activation_function": "tanh"}, "activation_function must be one of swish, silu, gelu, relu, "
                                     "got 'tanh'"),
    ({"decoder_layers": 3}, "encoder_layers 2 differs from decoder_layers 3"),
    ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings False"),
    ({"decoder_vocab_size": 7}, "separate vocabularies are not supported"),
    ({"model_type": "bart"}, "model_type is 'bart', not 'marian'"),
])
def test_a_config_the_model_cannot_represent_is_refused_by_field(tmp_path, changes, message):
    with pytest.raises(marian.MarianImportError, match=message):
        marian.import_marian(checkpoint_copy(tmp_path, **changes), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_config_without_a_head_count_is_refused_naming_the_field(tmp_path):
    copy = checkpoint_copy(tmp_path)
    config = json.loads((copy / "config.json").read_text())
    del config["encoder_attention_heads"]
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(marian.MarianImportError,
                       match=r"config.json: no encoder_attention_heads field$"):
        marian.import_marian(copy, tmp_path / "out")


@pytest.mark.parametrize("bad_id", ["3", None, 3.0, [3], True])
def test_a_vocabulary_id_that_is_not_an_integer_is_refused_naming_the_file(tmp_path, bad_id):
    copy = checkpoint_copy(tmp_path)
    piece = next(piece for piece, id_ in MARIAN_IDS.items() if id_ == 3)
    (copy / "vocab.json").write_text(json.dumps(dict(MARIAN_IDS, **{piece: bad_id})))
    result = run_main(import_model.main, "--from", "marian", copy, "--model_dir", tmp_path / "o")
    assert result.returncode == 2 and not (tmp_path / "o").exists()
    assert f"vocab.json: the id of {piece!r} is {json.dumps(bad_id)}, not an integer" in (
        result.stderr)
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_checkpoints_are_refused_naming_what_is_wrong(tmp_path, imported):
    copy = checkpoint_copy(tmp_path)
    for name in ("model.safetensors", "pytorch_model.bin"):
        (copy / name).unlink()
    with pytest.raises(hf_checkpoint.CheckpointFormatError, match="holds no weights"):
        marian.import_marian(copy, tmp_path / "out")
    # vocab.json of another model: the SentencePiece models' pieces are not in it.
    copy = checkpoint_copy(tmp_path / "other")
    (copy / "vocab.json").write_text(json.dumps(
        {"</s>": 0, "<unk>": 1, **{f"x{i}": i + 2 for i in range(len(MARIAN_IDS) - 3)},
         "<pad>": len(MARIAN_IDS) - 1}))
    with pytest.raises(data.VocabularyError, match="does not match .*source.spm"):
        marian.import_marian(copy, tmp_path / "out")
    # An existing --model_dir is never replaced.
    before = sorted(p.name for p in imported.iterdir())
    result = run_main(import_model.main, "--from", "marian", CHECKPOINT, "--model_dir", imported)
    assert result.returncode != 0 and f"--model_dir {imported} exists" in result.stderr
    assert sorted(p.name for p in imported.iterdir()) == before


def dev_losses(stdout):
    return {int(line.split()[3].rstrip(":")): float(line.split()[5].rstrip(","))
            for line in stdout.splitlines() if line.startswith("evaluation at step")}


@pytest.mark.slow
def test_the_imported_model_fine_tunes_and_resumes(imported, loaded, tmp_path):
    """kt-train --init_from the import on bundled pairs: dev loss falls; a second run in the
    same model_dir resumes from its checkpoint with its vocab.marian; the result keeps the
    import's hparams, decoding defaults included."""
    from keras_transformer.trainer import task

    corpus = tmp_path / "corpus"  # a few bundled pairs: tokenizing all of them costs seconds
    corpus.mkdir()
    for split, count in (("train", 600), ("dev", 40)):
        pairs = data.first_pairs(data.get_source("bible_en_es"), split, count)
        (corpus / f"{split}.tsv").write_text("".join(f"{en}\t{es}\n" for en, es in zip(*pairs)),
                                             encoding="utf-8")
    common = ["--model_dir", tmp_path / "tuned", "--data", corpus, "--source_lang", "en",
              "--target_lang", "es", "--batch_tokens",
              "2000", "--eval_every", "10", "--eval_sentences", "0", "--log_every", "10",
              "--checkpoint_every_steps", "10"]
    # 10 steps (was 20): dev loss 7.23 -> 4.73 here, 5.6 already at step 5.
    first = run_main(task.main, *common, "--init_from", imported, "--train_steps", "10",
                     "--hparams_override", "learning_rate_multiplier=0.5,warmup_steps=10")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "tuned" / "vocab.marian").read_bytes() == (
        imported / "vocab.marian").read_bytes()
    losses = dev_losses(first.stdout)
    assert losses[10] < losses[0] - 1.0, losses
    # Run again, the model_dir's own vocab.marian and checkpoint are what it resumes from
    # (with nothing left to train: a resume's training is tests/test_trainer.py's).
    second = run_main(task.main, *common, "--train_steps", "10")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming from" in second.stdout and "ckpt-10 at step 10 of 10" in second.stdout
    # The tuned run keeps the import's decoding (beam 4, alpha 1.0, generate's ranking).
    tuned = config_file.load(tmp_path / "tuned")
    assert tuned.model.hparams == loaded.hparams.override(
        learning_rate_multiplier=0.5, warmup_steps=10)
    assert data.vocabulary_file(tmp_path / "tuned").name == "vocab.marian"


def test_an_imported_model_takes_a_new_vocabulary_piece_by_piece(imported, loaded, tmp_path):
    # kt-train --init_from IMPORTED --update_vocab: a kt-vocab vocabulary (the trained tiny
    # model's), matched to vocab.json's pieces by string.
    new = data.Vocabulary.load(TRAINED_TINY / "vocab.model")
    model = kt.build_model(loaded.run.model.hparams, vocab_size=new.vocab_size)
    _, line = init_from.initialize(model, imported, False, new, tmp_path)
    new_ids, old_ids = vocab_update.piece_mapping(loaded.vocabulary, new)
    assert new.pieces(new_ids) == loaded.vocabulary.pieces(old_ids)
    assert {"</s>", "<unk>", "<pad>"} <= set(new.pieces(new_ids))
    assert line.startswith(f"a new vocabulary of {new.vocab_size} ids: {len(new_ids)} pieces "
                           f"kept from {loaded.vocabulary.vocab_size}")
    for (variable, _), (trained, _) in zip(model.vocabulary_weights(),
                                           loaded.model.vocabulary_weights()):
        np.testing.assert_array_equal(variable.numpy()[new_ids], trained.numpy()[old_ids])


def test_generation_settings_it_does_not_follow_are_named(tmp_path):
    copy = checkpoint_copy(tmp_path)
    settings = json.loads((copy / "generation_config.json").read_text())
    del settings["renormalize_logits"]  # generate's default is False
    (copy / "generation_config.json").write_text(json.dumps(
        dict(settings, early_stopping=True, num_beams=6, forced_eos_token_id=None)))
    result = run_main(import_model.main, "--from", "marian", copy, "--model_dir", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "decoding beam 6, alpha 1.0" in result.stdout
    assert ("generation settings kt-translate does not follow: early_stopping True, "
            "renormalize_logits False (generate's default), forced_eos_token_id None"
            ) in result.stderr
