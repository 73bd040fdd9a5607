"""kt-train --init_from: a trained model fine-tuned on new pairs starts from what it knows and
improves on them; a different model or vocabulary is refused by name."""

import json
import math
import re
import shutil

import numpy as np
import pytest
from conftest import bundled_lines, run_main
from test_trainer import kt_train, kt_train_command

import keras_transformer as kt
from keras_transformer import data, model_dir
from keras_transformer.export import export_command
from keras_transformer.trainer import init_from, task, vocab_update

DEV_LOSS = re.compile(r"evaluation at step (\d+): dev_loss ([0-9.]+)")


@pytest.fixture(scope="module")
def new_pairs(tmp_path_factory):
    """Pairs the trained model never saw: the bundled dev split's verses, 392 to train on and
    100 to evaluate, as a directory source."""
    directory = tmp_path_factory.mktemp("new_pairs")
    for lang in ("en", "es"):
        verses = bundled_lines("dev", lang)
        (directory / f"train.{lang}").write_text("".join(verses[:392]), encoding="utf-8")
        (directory / f"dev.{lang}").write_text("".join(verses[392:]), encoding="utf-8")
    return directory


@pytest.mark.slow
def test_fine_tuning_starts_from_the_trained_model_and_improves(tmp_path, trained_model_dir,
                                                                new_pairs):
    run = tmp_path / "tuned"
    # A fresh optimizer at a twentieth of eq. 3's rate: a fresh Adam's first steps move every
    # weight by about the learning rate, and at the full rate (measured) they undo more than
    # 392 pairs teach.
    tuned = kt_train(run, new_pairs, "--init_from", str(trained_model_dir), "--hparams_override",
                     "warmup_steps=10,learning_rate_multiplier=0.05", "--train_steps", "40",
                     "--eval_every", "40", "--eval_sentences", "0", "--max_pair_length", "64",
                     "--deterministic")
    assert tuned.returncode == 0, tuned.stderr
    assert f"initialized from {trained_model_dir}/checkpoints/ckpt-300\n" in tuned.stdout
    assert "starting at step 0 of 40: transformer_tiny" in tuned.stdout
    losses = {int(step): float(loss) for step, loss in DEV_LOSS.findall(tuned.stdout)}
    assert sorted(losses) == [0, 40]
    assert losses[40] < losses[0] - 0.04, losses  # it learns from the new pairs...

    # ...from where the trained model is on them: far below the loss of knowing nothing (a
    # uniform distribution over the vocabulary).
    loaded = model_dir.load(run)
    assert loaded.run.model.init_from == str(trained_model_dir)
    assert (run / "vocab.model").read_bytes() == (trained_model_dir / "vocab.model").read_bytes()
    assert losses[0] < math.log(loaded.run.model.vocab_size) - 1.5, losses

    # The train split alone: nothing below reads a dev loss, which would cost an evaluation.
    train_only = tmp_path / "train_only"
    train_only.mkdir()
    for lang in ("en", "es"):
        shutil.copy(new_pairs / f"train.{lang}", train_only)
    with_optimizer = kt_train(tmp_path / "continued", train_only, "--init_from",
                              str(trained_model_dir), "--init_optimizer", "--train_steps", "302",
                              "--eval_sentences", "0", "--max_pair_length", "64")
    assert with_optimizer.returncode == 0, with_optimizer.stderr
    assert "with its optimizer" in with_optimizer.stdout
    assert "starting at step 300 of 302" in with_optimizer.stdout


@pytest.mark.parametrize("flags, message", [
    (("--hparams_override", "d_model=64"), "d_model: {source} has 32, this run 64"),
    (("--hparams", "transformer_small"), "num_layers: {source} has 2, this run 3"),
    (("--vocab", "{other}"), "--vocab {other} differs from {source}/vocab.model, the "
                             "vocabulary of --init_from {source}; a fine-tuned model keeps its "
                             "vocabulary unless --update_vocab"),
])
def test_another_model_or_vocabulary_is_refused(tmp_path, trained_model_dir, new_pairs, flags,
                                                message, capsys):
    other = tmp_path / "other.model"
    other.write_bytes(b"another vocabulary")
    flags = [flag.format(other=other) for flag in flags]
    argv = kt_train_command(tmp_path / "run", new_pairs, "--init_from", str(trained_model_dir),
                            *flags)[3:]
    assert task.main(argv) == 2
    assert message.format(source=trained_model_dir, other=other) in capsys.readouterr().err


def test_a_new_vocabulary_keeps_the_rows_of_the_pieces_both_hold_and_the_run_exports(
        tmp_path, trained_model_dir, new_pairs):
    # A vocabulary of the new pairs alone, a different size: kt-train builds it.
    run = tmp_path / "updated"
    tuned = kt_train(run, new_pairs, "--init_from", trained_model_dir, "--update_vocab",
                     "--vocab_size", "500", "--train_steps", "2", "--eval_sentences", "0",
                     "--max_pair_length", "64")
    assert tuned.returncode == 0, tuned.stderr
    record = json.loads((run / vocab_update.RECORD_FILE).read_text())
    old = model_dir.load(trained_model_dir)
    new = data.Vocabulary.load(run / "vocab.model")
    assert new.vocab_size == 500 and record["kept"] + record["new"] == 500
    assert record["kept"] + record["dropped"] == old.vocabulary.vocab_size
    assert 300 < record["kept"] < 500  # the bytes and many pieces of Spanish verses are shared
    assert (f"a new vocabulary of 500 ids: {record['kept']} pieces kept from "
            f"{old.vocabulary.vocab_size}, {record['new']} new") in tuned.stdout
    # Where the run started: the shared pieces' rows the old model's, exactly.
    model = kt.build_model(old.run.model.hparams, vocab_size=500)
    init_from.initialize(model, trained_model_dir, False, new, tmp_path)
    new_ids, old_ids = vocab_update.piece_mapping(old.vocabulary, new)
    assert new_ids.tolist() == record["new_ids"] and len(new_ids) == record["kept"]
    assert new.pieces(new_ids[:50]) == old.vocabulary.pieces(old_ids[:50])
    for (variable, _), (trained, _) in zip(model.vocabulary_weights(),
                                           old.model.vocabulary_weights()):
        rows, trained_rows = variable.numpy(), trained.numpy()
        np.testing.assert_array_equal(rows[new_ids], trained_rows[old_ids])
        fresh = np.setdiff1d(np.arange(500), new_ids)
        if rows.ndim == 2:  # the embedding: new rows initialized, neither zeros nor copies
            assert np.abs(rows[fresh]).min(axis=1).max() > 0
            copied = {row.tobytes() for row in trained_rows}
            assert not any(row.tobytes() in copied for row in rows[fresh])
    np.testing.assert_array_equal(model.weights[-1].numpy(), old.model.weights[-1].numpy())
    # The run exports with its own vocabulary.
    result = run_main(export_command.main, "--model_dir", run, "--output", tmp_path / "export")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "export" / "1" / "assets" / "vocab.model").read_bytes() == (
        run / "vocab.model").read_bytes()


def test_init_from_something_else_is_refused(tmp_path, new_pairs, capsys):
    assert task.main(kt_train_command(tmp_path / "run", new_pairs, "--init_from",
                                      str(tmp_path))[3:]) == 2
    assert f"--init_from {tmp_path} is neither a kt-train model_dir" in capsys.readouterr().err
    assert task.main(kt_train_command(tmp_path / "run", new_pairs, "--init_optimizer")[3:]) == 2
    assert "--init_optimizer needs --init_from" in capsys.readouterr().err
    assert task.main(kt_train_command(tmp_path / "run", new_pairs, "--update_vocab")[3:]) == 2
    assert "--update_vocab needs --init_from" in capsys.readouterr().err
