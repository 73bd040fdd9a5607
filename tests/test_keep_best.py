"""kt-train --keep_best / --early_stopping: the best checkpoint outlives the rotation, a run
stops when its metric stops improving, and `--checkpoint best` loads what was kept."""

import io
import json
import re
import sys

import numpy as np
import pytest
from conftest import run_main
from test_trainer import kt_train, kt_train_command, small_corpus  # noqa: F401  (a fixture)

import keras_transformer as kt
from keras_transformer import model_dir
from keras_transformer.export import DecodingConfig, translate
from keras_transformer.model_dir import checkpoints, config, decoding_config
from keras_transformer.trainer import average, evaluation, keep_best, task
from keras_transformer.trainer.flags import parse_args


def evaluations(tracker, model, results):
    """Feeds `tracker` one evaluation per (step, value); returns the steps it asked to stop at."""
    stops = []
    for step, value in results:
        model.optimizer.iterations.assign(step)
        if tracker.update(model, step, {tracker.result: value}):
            stops.append(step)
    return stops


@pytest.fixture
def compiled_tiny():
    hp = kt.hparams.get("transformer_tiny")
    model = kt.build_model(hp, 40)
    model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp))
    model.optimizer.build(model.trainable_variables)
    return model


def test_the_best_is_kept_and_a_resumed_run_counts_on(tmp_path, compiled_tiny):
    tracker = keep_best.KeepBest(tmp_path, "loss", patience=3)
    # Lower is better for loss; equal is no improvement.
    assert evaluations(tracker, compiled_tiny, [(10, 3.0), (20, 2.0), (30, 2.5), (40, 2.0)]) == []
    assert [p.name for p in model_dir.CheckpointDirectory(tmp_path / "best").paths()] == \
        ["ckpt-20"]
    assert model_dir.best_checkpoint(tmp_path).name == "ckpt-20"
    state = json.loads((tmp_path / "best" / "best.json").read_text())
    assert state == {"metric": "loss", "value": 2.0, "step": 20, "evaluations_since": 2}

    resumed = keep_best.KeepBest(tmp_path, "loss", patience=3)
    assert (resumed.best_value, resumed.best_step, resumed.since) == (2.0, 20, 2)
    assert evaluations(resumed, compiled_tiny, [(50, 2.1)]) == [50]
    assert resumed.stopped and keep_best.KeepBest(tmp_path, "loss", patience=3).stopped
    assert not keep_best.KeepBest(tmp_path, "loss", patience=4).stopped  # more patience: go on

    for metric in ("bleu", "chrf"):  # higher is better; no early stopping
        higher = keep_best.KeepBest(tmp_path / metric, metric)
        steps = [(10, 5.0), (20, 9.0), (30, 8.0), (40, 1.0)]
        assert evaluations(higher, compiled_tiny, steps) == []
        assert higher.best_step == 20 and not higher.stopped


def test_a_damaged_state_file_is_named(tmp_path):
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "best.json").write_text('{"metric": "loss"}')
    with pytest.raises(config.ConfigError, match=r"best\.json is damaged"):
        keep_best.KeepBest(tmp_path, "loss")


@pytest.mark.slow
def test_kt_train_keeps_the_best_after_the_rotation_stops_early_and_translates_with_it(
        tmp_path, small_corpus, capsys, monkeypatch):  # noqa: F811
    # A learning rate too small to move a float32 weight: every dev loss after the first equals
    # it, so the first evaluation stays the best and the next two do not improve on it.
    # Deterministic ops: a reduction split across threads differently can move the loss in its
    # last bit, which counts as an improvement (it did once in CI's parallel run, 2026-11-26).
    flags = ("--deterministic", "--hparams", "transformer_tiny", "--hparams_override",
             "warmup_steps=2,learning_rate_multiplier=1e-30,num_layers=1", "--train_steps", "40",
             "--eval_every", "2", "--eval_sentences", "0", "--checkpoint_every_steps", "2",
             "--keep_checkpoints", "1", "--keep_best", "loss", "--early_stopping", "2")
    run = tmp_path / "run"
    trained = kt_train(run, small_corpus, *flags)
    assert trained.returncode == 0, trained.stderr
    assert "new best dev_loss" in trained.stdout and "at step 2, kept in" in trained.stdout
    assert "early stopping: no better dev_loss in 2 evaluations" in trained.stdout
    assert "done: step 6," in trained.stdout
    assert [p.name for p in checkpoints.CheckpointDirectory(run / "checkpoints").paths()] == \
        ["ckpt-6"]
    assert model_dir.best_checkpoint(run).name == "ckpt-2"

    again = kt_train(run, small_corpus, *flags)
    assert again.returncode == 0, again.stderr
    assert "nothing to do: early stopping ended this run" in again.stdout

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"In the beginning.\n")))
    translated = run_main(translate.main, "--model_dir", run, "--checkpoint", "best",
                          "--beam_size", "1")
    assert translated.returncode == 0, translated.stderr
    assert str(run / "best" / "ckpt-2") in translated.stderr

    assert average.main(["--model_dir", str(run), "--checkpoint", "best", "--checkpoint",
                         str(run / "checkpoints" / "ckpt-6")]) == 0
    assert "averaged ckpt-2, ckpt-6 into" in capsys.readouterr().out
    assert (run / "averaged" / "ckpt-6" / "model.weights.h5").exists()


def test_kt_train_keeps_the_best_by_chrf(tmp_path, small_corpus):  # noqa: F811
    """--keep_best chrf reads the chrF that the evaluation computes of its dev translations."""
    run = tmp_path / "run"
    trained = kt_train(run, small_corpus, "--hparams", "transformer_tiny", "--hparams_override",
                       "num_layers=1", "--train_steps", "2",
                       "--eval_every", "2", "--eval_sentences", "2", "--keep_best", "chrf")
    assert trained.returncode == 0, trained.stderr
    assert re.search(r"dev BLEU \d+\.\d\d, chrF \d+\.\d\d on 2 sentences", trained.stdout)
    assert "new best dev_chrf" in trained.stdout
    assert model_dir.best_checkpoint(run).name == "ckpt-2"


@pytest.mark.parametrize("flags, message", [
    (("--early_stopping", "3"), "--early_stopping needs --keep_best bleu|chrf|loss"),
    (("--keep_best", "bleu", "--eval_sentences", "0"), "--keep_best bleu needs dev sentences"),
    (("--keep_best", "chrf", "--eval_sentences", "0"), "--keep_best chrf needs dev sentences"),
])
def test_keep_best_flags_that_cannot_work_are_refused(tmp_path, small_corpus, flags,  # noqa: F811
                                                     message, capsys):
    assert task.main(kt_train_command(tmp_path / "run", small_corpus, *flags)[3:]) == 2
    assert message in capsys.readouterr().err


def test_keep_best_with_no_evaluations_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--model_dir", str(tmp_path), "--keep_best", "loss", "--eval_every", "0"])
    assert "argument --eval_every: must be at least 1, got 0" in capsys.readouterr().err


def test_keep_best_without_a_dev_split_is_refused(tmp_path, small_corpus, capsys):  # noqa: F811
    corpus = tmp_path / "no_dev"
    corpus.mkdir()
    for lang in ("en", "es"):
        (corpus / f"train.{lang}").write_bytes((small_corpus / f"train.{lang}").read_bytes())
    assert task.main(kt_train_command(tmp_path / "run", corpus, "--keep_best", "loss")[3:]) == 2
    assert "--keep_best needs a dev split to evaluate on" in capsys.readouterr().err


def test_checkpoint_best_without_one_is_refused(trained_model_dir):
    with pytest.raises(model_dir.ModelDirError, match=r"--checkpoint best: .*best holds no "
                                                      r"checkpoint; kt-train --keep_best"):
        model_dir.load(trained_model_dir, "best")


def test_in_training_bleu_can_use_beam_search(trained):
    # --eval_beam_size: the dev translations are beam search's best, as kt.beam_decode gives it.
    model, vocabulary = trained.model, trained.vocabulary
    sentences = ["In the beginning God created the heavens and the earth.", "Jesus wept.",
                 "And God said, Let there be light: and there was light."]
    ids = evaluation.source_ids(vocabulary, sentences, 64)
    beams, _ = kt.beam_decode(model, ids, beam_size=3, alpha=0.6)
    translated = evaluation.translate_ids(
        model, ids, decoding_config.resolved(DecodingConfig(beam_size=3, alpha=0.6), trained))
    for row, best in zip(translated, beams.numpy()[:, 0]):
        np.testing.assert_array_equal(row, best)
    greedy = evaluation.translate_ids(
        model, ids, decoding_config.resolved(DecodingConfig(beam_size=1), trained))
    assert any(not np.array_equal(a, b) for a, b in zip(greedy, translated))
