"""kt-train end to end on a small corpus: files, resume, refusals; and the pieces it is made of."""

import contextlib
import dataclasses
import io
import json
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
from conftest import run_main, write_corpus_subset

import keras_transformer as kt
from keras_transformer import trainer
from keras_transformer.model_dir import averaging, checkpoints, config, config_file, loading
from keras_transformer.runtime import devices, precision_probe
from keras_transformer.trainer import average, callbacks, evaluation, task
from keras_transformer.trainer.flags import parse_args


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """400 train and 40 dev verses of the bundled corpus, as a directory source."""
    return write_corpus_subset(tmp_path_factory.mktemp("corpus"), train=400, dev=40)


@pytest.fixture(scope="module")
def train_only_corpus(small_corpus, tmp_path_factory):
    """small_corpus's train split alone: a run without a dev split builds no dev pipeline and
    evaluates nothing as it ends (a loss step traced, under XLA compiled, for the dev shapes)."""
    corpus = tmp_path_factory.mktemp("train_only")
    for path in small_corpus.glob("train.*"):
        shutil.copy(path, corpus)
    return corpus


def kt_train_command(model_dir, corpus, *flags):
    return [sys.executable, "-m", "keras_transformer.trainer.task", "--model_dir", str(model_dir),
            "--data", str(corpus), "--source_lang", "en", "--target_lang", "es",
            "--vocab_size", "600", "--batch_tokens", "1500", "--max_pair_length", "150",
            "--eval_sentences", "0", "--log_every", "2", *flags]


def kt_train(model_dir, corpus, *flags):
    """Runs kt-train in this process (no TensorFlow start-up, and autograph's conversions are
    reused); returns a CompletedProcess. It sets the float32 policy and the seeds, as the
    tests' own seeding does."""
    return run_main(task.main, *kt_train_command(model_dir, corpus, *flags)[3:])


def kt_train_process(model_dir, corpus, *flags, timeout=600):
    """Runs kt-train in a fresh process, for what a process has alone: signals, exit, and
    global state a run sets (a bfloat16 policy); returns the CompletedProcess."""
    return subprocess.run(kt_train_command(model_dir, corpus, *flags), capture_output=True,
                          text=True, timeout=timeout)


# transformer_tiny with one layer of each stack: what these runs prove does not depend on the
# depth, and a second layer doubled their tracing (the sigkill test's runs 12.3 s against 6.7,
# 2026-12-07).
TINY = ("--hparams", "transformer_tiny", "--hparams_override", "warmup_steps=20,num_layers=1")


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory, small_corpus):
    """kt-train of TINY for 6 steps, evaluated at 3 and 6 (BLEU on 2 sentences),
    checkpoints every 2 (2 kept) and the last 2 averaged, its precision chosen by `auto`: the
    (model_dir, CompletedProcess) of one run that the tests below copy before they change it."""
    directory = tmp_path_factory.mktemp("six_steps")
    # --mixed_precision auto reads this machine's measurement from the cache (written here as
    # the probe would write it for the model's widths: 0.6x, as on the AMX-hidden Xeon).
    key = precision_probe.machine_key(devices.cpu_flags(), devices.cores_available(),
                                      precision_probe.probe_shape(32, 64, 1500))
    (directory / "cache").mkdir()
    (directory / "cache" / "precision.json").write_text(json.dumps({key: {
        "float32_gflops": 281.0, "bfloat16_gflops": 166.0, "measured": "2026-11-27"}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERAS_TRANSFORMER_CACHE", str(directory / "cache"))
        result = kt_train(directory / "run", small_corpus, *TINY, "--train_steps", "6",
                          "--eval_every", "3", "--eval_sentences", "2",
                          "--checkpoint_every_steps", "2", "--keep_checkpoints", "2",
                          "--average_last", "2", "--mixed_precision", "auto")
    assert result.returncode == 0, result.stderr
    return directory / "run", result


def copy_of(six_steps, tmp_path):
    """A copy of six_steps' model_dir in tmp_path, to resume or change."""
    return pathlib.Path(shutil.copytree(six_steps[0], tmp_path / "run"))


def test_a_run_writes_its_files_evaluates_and_resumes(six_steps, tmp_path, small_corpus):
    first = six_steps[1]
    assert "starting at step 0 of 6" in first.stdout
    assert ("float32 (--mixed_precision auto: bfloat16 matmuls ran 0.59x float32 here (166 "
            "against 281 GFLOP/s at 1500x32x64, measured 2026-11-27, cached))") in first.stdout
    assert "evaluation at step 3: dev_loss" in first.stdout
    assert re.search(r"dev BLEU \d+\.\d\d, chrF \d+\.\d\d on 2 sentences", first.stdout)
    assert "sacrebleu nrefs:1|case:mixed|eff:no|tok:13a" in first.stdout
    assert "step 6: learning_rate" in first.stdout
    model_dir = copy_of(six_steps, tmp_path)
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["model"]["hparams"]["d_model"] == 32 and saved["model"]["vocab_size"] == 600
    assert saved["versions"]["tensorflow"] and saved["format_version"] == 3
    assert saved["versions"]["keras_backend"] == "tensorflow"
    assert (model_dir / "vocab.model").is_file()
    assert list((model_dir / "logs").glob("events.out.tfevents.*"))
    names = [p.name for p in checkpoints.CheckpointDirectory(model_dir / "checkpoints").paths()]
    assert names == ["ckpt-4", "ckpt-6"]  # kept 2

    # No hparams flags needed; training fields may change on resume, on top of the run's own
    # overrides (test_flags_that_contradict_the_saved_run_are_refused: the model's may not).
    resumed = kt_train(model_dir, small_corpus, "--hparams_override",
                       "learning_rate_multiplier=0.5", "--train_steps", "8")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout and "ckpt-6 at step 6 of 8" in resumed.stdout
    assert "done: step 8" in resumed.stdout
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["model"]["hparams"]["learning_rate_multiplier"] == 0.5
    assert saved["model"]["hparams"]["warmup_steps"] == 20
    assert saved["model"]["hparams"]["num_layers"] == 1
    assert saved["model"]["hparams_override"] == ("warmup_steps=20,num_layers=1,"
                                                  "learning_rate_multiplier=0.5")
    done = kt_train(model_dir, small_corpus, "--train_steps", "8")
    assert done.returncode == 0 and "nothing to do: step 8 >= train_steps 8" in done.stdout


@pytest.mark.parametrize("flags,message", [
    (("--hparams", "transformer_huge"), "unknown hparams set 'transformer_huge'; valid names: "),
    (("--hparams_override", "dropuot=0.2"), "unknown hparams field 'dropuot'"),
    (("--hparams_override", "num_layers=two"), "num_layers='two': expected int"),
])
def test_bad_hparams_are_refused(tmp_path, small_corpus, flags, message, capsys):
    assert task.main(kt_train_command(tmp_path / "run", small_corpus, *flags)[3:]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.slow
def test_flags_that_contradict_the_saved_run_are_refused(six_steps, tmp_path, small_corpus,
                                                        capsys):
    model_dir = copy_of(six_steps, tmp_path)
    before = (model_dir / "config.json").read_text()
    assert task.main(kt_train_command(model_dir, small_corpus, "--hparams", "transformer_small",
                                      "--max_pair_length", "32")[3:]) == 2
    stderr = capsys.readouterr().err
    assert "was written for another configuration" in stderr
    assert "hparams d_model: saved 32, now 256" in stderr
    assert "max_pair_length: saved 150, now 32" in stderr
    assert (model_dir / "config.json").read_text() == before
    # That training fields may change on resume, on top of the run's own overrides:
    # test_a_run_writes_its_files_evaluates_and_resumes (its resume pays for one trace).


@pytest.mark.slow
def test_the_python_trainer_trains_what_kt_train_trains(tmp_path, small_corpus, monkeypatch):
    """The same configuration through kt-train's flags and through `Trainer(config).fit()`:
    the same config.json and, --deterministic, the same weights."""
    flags = (*TINY, "--train_steps", "4", "--deterministic", "--checkpoint_every_steps", "0")
    command_line = kt_train(tmp_path / "cli", small_corpus, *flags)
    assert command_line.returncode == 0, command_line.stderr
    run = config.RunConfig(
        model=config.ModelConfig(hparams_name="transformer_tiny",
                                 hparams_override="warmup_steps=20,num_layers=1"),
        data=config.DataConfig(corpus=str(small_corpus), source_lang="en", target_lang="es",
                               max_pair_length=150),
        batching=config.BatchingConfig(batch_tokens=1500),
        optimization=config.OptimizationConfig(train_steps=4, deterministic=True),
        evaluation=config.EvaluationConfig(sentences=0),
        checkpoints=config.CheckpointConfig(every_steps=0))
    result = trainer.Trainer(run, tmp_path / "python", vocab=tmp_path / "cli" / "vocab.model",
                             log_every=2).fit()
    assert result.status == "done" and result.step == 4 and result.train_step_traces >= 1
    assert f"weights checksum {result.checksum:.9e}," in command_line.stdout
    assert [step for step, _ in result.evaluations] == [4]
    saved_cli, saved_python = (config_file.load(tmp_path / name) for name in ("cli", "python"))
    assert saved_cli == saved_python and saved_python.model.vocab_size == 600
    reads, read = [], config_file.load
    monkeypatch.setattr(config_file, "load", lambda path: reads.append(path) or read(path))
    again = trainer.Trainer.resume(tmp_path / "python").fit()
    assert again.status == "nothing to do" and again.resumed_from.name == "ckpt-4"
    assert reads == [tmp_path / "python"]  # resolved once: resume's resolution is fit's
    # What kt-train --model_dir python --train_steps 6 --hparams_override
    # learning_rate_multiplier=0.5 would train: the saved run, the new override on top of its own.
    changed = trainer.Trainer.with_changes(tmp_path / "python", {
        ("optimization", "train_steps"): 6,
        ("model", "hparams_override"): "learning_rate_multiplier=0.5"}).config
    assert changed.optimization.train_steps == 6 and changed.data == saved_python.data
    assert changed.model.hparams_override == ("warmup_steps=20,num_layers=1,"
                                              "learning_rate_multiplier=0.5")
    assert changed.model.hparams == saved_python.model.hparams.override_from_string(
        "learning_rate_multiplier=0.5")
    # A change the saved model cannot take is refused as the Trainer is made, before any fit.
    with pytest.raises(config.ConfigError, match=r"model\.hparams dropout: saved 0\.1, now 0\.0"):
        trainer.Trainer.with_changes(tmp_path / "python", {
            ("model", "hparams_override"): "dropout=0.0"})


def test_a_saved_run_is_checked_before_a_new_init_from_is_read(tmp_path):
    """model.init_from is fixed once a run is saved: a new one is refused as that, before its
    path is read (kt-train's resolution, trainer/resolution.py)."""
    config_file.save(config_file.with_hparams(config.RunConfig(
        model=config.ModelConfig(hparams_name="transformer_tiny"))), tmp_path)
    with pytest.raises(config.ConfigError, match=r"written for another configuration "
                                                 r"\(model\.init_from: saved None, now '.*typo'\)"):
        trainer.Trainer.with_changes(tmp_path, {("model", "init_from"): str(tmp_path / "typo")})


def test_a_trainer_whose_model_dir_another_run_wrote_resolves_again(tmp_path):
    """`with_changes` resolves as the Trainer is made; a run that writes model_dir before its
    fit makes that resolution stale, and the fit checks against what is there now: refused,
    config.json left as the other run wrote it."""
    waiting = trainer.Trainer.with_changes(tmp_path, {
        ("model", "hparams_name"): "transformer_small"})
    config_file.save(config_file.with_hparams(config.RunConfig(
        model=config.ModelConfig(hparams_name="transformer_tiny"))), tmp_path)
    written = (tmp_path / "config.json").read_text()
    with pytest.raises(config.ConfigError, match=r"written for another configuration "
                                                 r"\(model\.hparams num_layers: saved 2, now 3"):
        waiting.fit()
    assert (tmp_path / "config.json").read_text() == written


def test_a_config_names_its_bad_field_and_reads_the_flat_format(tmp_path, capsys):
    with pytest.raises(config.ConfigError, match=r"batching\.batch_tokens must be at least 1, "
                                                 r"got 0"):
        config.BatchingConfig(batch_tokens=0)
    with pytest.raises(config.ConfigError, match=r"evaluation\.keep_best must be one of bleu, "
                                                 r"chrf, loss, f1, got 'bleu4'"):
        config.EvaluationConfig(keep_best="bleu4")
    with pytest.raises(config.ConfigError, match=r"optimization\.ema_decay must be at least 0"):
        config.OptimizationConfig(ema_decay=1.0)
    with pytest.raises(config.ConfigError, match=r"checkpoints\.average_last 5 needs at least"):
        config.RunConfig(checkpoints=config.CheckpointConfig(keep=2, average_last=5)).check()
    # A model_dir written before the sections (format 1: kt-train's flag names at the top).
    flat = {"format_version": 1, "hparams_name": "transformer_tiny", "data": "tatoeba_en_es",
            "max_length": 100, "eval_every": 50, "keep_checkpoints": 3, "jit_compile": True,
            "vocab_size": 600, "versions": {"keras": "3.15.1"}}
    run = config.RunConfig.from_dict(flat)
    assert (run.model.hparams_name, run.data.corpus, run.data.max_pair_length, run.evaluation.every,
            run.checkpoints.keep, run.compute.jit_compile, run.model.vocab_size) == \
        ("transformer_tiny", "tatoeba_en_es", 100, 50, 3, True, 600)
    assert run.model.hparams is None  # format 1 may not hold them ...
    config_file.save(run, tmp_path)
    loaded = config_file.load(tmp_path)  # ... and a loaded run gets its set's
    assert loaded == config_file.with_hparams(run) and json.loads(
        (tmp_path / "config.json").read_text())["format_version"] == 3
    assert loaded.model.hparams == kt.hparams.get("transformer_tiny")
    # Format 2's max_length meant the longest pair in data and the position table in hparams.
    without_positions = kt.hparams.get("transformer_tiny").to_dict()
    del without_positions["max_positions"]
    second = config.RunConfig.from_dict({"format_version": 2, "data": {"max_length": 80}, "model": {
        "hparams_name": "transformer_tiny", "hparams_override": "dropout=0.0, max_length=32",
        "hparams": {**without_positions, "max_length": 48}}})
    assert (second.data.max_pair_length, second.model.hparams.max_positions,
            second.model.hparams_override) == (80, 48, "dropout=0.0, max_positions=32")
    assert config_file.with_hparams(dataclasses.replace(second, model=dataclasses.replace(
        second.model, hparams=None))).model.hparams.max_positions == 32
    with pytest.raises(config.ConfigError, match=r"config\.json: model\.hparams holds both "
                                                 r"max_length \(its name before format 3\) and "
                                                 r"max_positions"):
        config.RunConfig.from_dict({"format_version": 2, "model": {"hparams": {
            "max_length": 48, "max_positions": 48}}}, "config.json")
    with pytest.raises(kt.hparams.HParamsError, match=r"'max_length' in override 'max_length=9' "
                                                      r"\(max_length is now max_positions\)"):
        kt.hparams.get("transformer_tiny").override_from_string("max_length=9")
    with pytest.raises(SystemExit):  # and kt-train's flag of then names its new name
        parse_args(["--model_dir", str(tmp_path / "bad"), "--max_length", "64"])
    assert ("argument --max_length: renamed --max_pair_length (the longest training pair) in "
            "0.1.0") in capsys.readouterr().err
    with pytest.raises(config.ConfigError, match=r"unknown fields \['batching\.size'\]"):
        config.RunConfig.from_dict({"format_version": 2, "batching": {"size": 3}})


def test_a_damaged_or_newer_config_is_refused(tmp_path, small_corpus, capsys):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    for text, message in (
            ("{not json", "config.json: not valid JSON"),
            (json.dumps({"format_version": 99}), "format_version 99"),
            (json.dumps({"format_version": 1, "vocab_size": "many"}),
             "config.json: model.vocab_size must be int, got 'many'"),
            (json.dumps({"format_version": 1, "hparams": {"num_layers": "six"}}),
             "config.json: hparams field 'num_layers' must be int, got 'six'"),
            (json.dumps({"format_version": 1, "hparams": {"rotary": True}}),
             "config.json: unknown hparams field(s) ['rotary']")):
        (model_dir / "config.json").write_text(text)
        assert task.main(kt_train_command(model_dir, small_corpus, *TINY)[3:]) == 2
        assert message in capsys.readouterr().err
        assert (model_dir / "config.json").read_text() == text  # left for the user to look at


@pytest.mark.slow
def test_xla_and_bfloat16_training_compiles_once_a_bucket(tmp_path, train_only_corpus):
    dumps = tmp_path / "xla"
    command = kt_train_command(tmp_path / "run", train_only_corpus, *TINY, "--train_steps", "3",
                               "--jit_compile", "--mixed_precision", "mixed_bfloat16",
                               "--deterministic", "--seed", "1")
    # XLA writes each program it compiles to --xla_dump_to: one per batch shape of the step.
    # Three deterministic steps meet two shapes (8 random steps took this test 37.9 s alone, 3
    # deterministic ones 30.7; one run each, AMX Xeon, 2026-11-29).
    # TensorFlow's C++ warnings shown, as kt-train shows them (the tests' level hides them).
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env={
        **os.environ, "XLA_FLAGS": f"--xla_dump_to={dumps} --xla_dump_hlo_as_text",
        "TF_CPP_MIN_LOG_LEVEL": "1"})
    assert result.returncode == 0, result.stderr
    # One device trains without tf.distribute (trainer/distribute.py), whose distributed
    # dataset warned that tf.data could not optimize its per-device generator.
    assert "will not be optimized" not in result.stderr, result.stderr
    assert re.search(r"1 replica\(s\) on CPU \((.+, )?\d+ cores?\), mixed_bfloat16, XLA,",
                     result.stdout) and "done: step 3" in result.stdout
    shapes = re.search(r"XLA compiles the train step once for each of (\d+) batch shapes "
                       r"\(padded lengths 7, 11, 17, 26, 39, 59, 89, 134, 150; bucket_growth "
                       r"1\.5\)", result.stdout)
    assert shapes, result.stdout
    compiled = list(dumps.glob("*one_step_on_data*before_optimizations.txt"))
    assert 2 <= len(compiled) <= int(shapes.group(1)) == 9, sorted(p.name for p in compiled)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["compute"]["mixed_precision"] == "mixed_bfloat16"


def test_a_bucket_growth_of_1_is_refused_naming_the_flag(tmp_path, small_corpus):
    result = kt_train(tmp_path / "run", small_corpus, *TINY, "--bucket_growth", "1")
    assert result.returncode == 2 and "--bucket_growth must be above 1, got 1.0" in result.stderr


def test_a_diverging_loss_stops_with_the_step(tmp_path, small_corpus):
    result = kt_train(tmp_path / "run", small_corpus, "--hparams", "transformer_tiny",
                      "--hparams_override",
                      "warmup_steps=1,learning_rate_multiplier=1e12,num_layers=1",
                      "--train_steps", "50", "--checkpoint_every_steps", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    found = re.search(r"the loss became (nan|inf) at step (\d+), on a batch of \d+ sentences x "
                      r"\d+ source x \d+ target tokens", result.stderr)
    assert found, result.stderr
    assert "learning_rate_multiplier" in result.stderr
    saved = checkpoints.CheckpointDirectory(tmp_path / "run" / "checkpoints").paths()
    assert all(checkpoints.step_in_name(path) < int(found.group(2)) for path in saved)


def weights_at(model_dir, name, directory="checkpoints"):
    run = config_file.load(model_dir)
    model = kt.build_model(run.model.hparams, run.model.vocab_size)
    model.load_weights(str(model_dir / directory / name / checkpoints.WEIGHTS_FILE))
    return model.get_weights()


def latest_weights(model_dir):
    name = checkpoints.CheckpointDirectory(model_dir / "checkpoints").paths()[-1].name
    return name, weights_at(model_dir, name)


def killed_at_checkpoint(command, checkpoint):
    """Runs kt-train `command` and SIGKILLs it the moment `checkpoint` exists."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not checkpoint.exists():
            assert process.poll() is None and time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL


class _Preempting(io.TextIOWrapper):
    """kt-train's stdout that sends this process SIGTERM (os.kill, as a scheduler sends it) as
    the first progress line is written."""

    sent = False

    def write(self, text):
        written = super().write(text)
        if not self.sent and text.startswith("step "):
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return written


def kt_train_preempted(model_dir, corpus, *flags):
    """kt_train, preempted by SIGTERM at its first progress line: (exit code, its stdout)."""
    stdout = _Preempting(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        code = task.main(kt_train_command(model_dir, corpus, *flags)[3:])
    stdout.flush()
    assert stdout.sent, "no progress line"
    return code, stdout.buffer.getvalue().decode("utf-8")


@pytest.mark.slow
def test_sigkill_and_sigterm_then_resume_equal_an_uninterrupted_run(tmp_path,
                                                                    train_only_corpus, capfd):
    """A run killed between micro-batches of an accumulated update, resumed, preempted with
    SIGTERM and resumed again ends with the weights and moving averages of one that ran
    straight through. The resumed runs start inside the learning rate's cooldown (its last 90%),
    which the resume must rebuild as it was. The kill needs a process of its own; the SIGTERM
    is sent to this one (kt-train's handler and stop are the same; a fresh process cost a
    TensorFlow start-up and a trace)."""
    flags = ("--hparams", "transformer_tiny", "--hparams_override",
             "warmup_steps=20,cooldown_fraction=0.9,num_layers=1", "--train_steps", "8",
             "--accumulate_steps", "4", "--batch_tokens", "400", "--ema_decay", "0.9",
             "--checkpoint_every_steps", "3", "--deterministic", "--seed", "3", "--eval_every",
             "1000", "--eval_sentences", "0")
    straight = kt_train(tmp_path / "straight", train_only_corpus, *flags)
    assert straight.returncode == 0, straight.stderr
    assert ("each update: 4 micro-batch(es) x 400 padded tokens a side over 1 replica(s) = "
            "1,600 padded tokens a side") in straight.stdout
    assert "step 8: learning_rate 0," in straight.stdout  # the cooldown ended at --train_steps
    assert "done: step 8," in straight.stdout  # updates, not micro-batches

    # Killed as soon as ckpt-3 exists: inside update 4, between micro-batches.
    interrupted = tmp_path / "interrupted"
    killed_at_checkpoint(kt_train_command(interrupted, train_only_corpus, *flags),
                         interrupted / "checkpoints" / "ckpt-3")

    # Resumed, then preempted: SIGTERM at its first progress line (step 4's).
    # This process's own handler meanwhile: kt-train's must take the signal, then put it back.
    missed = []

    def ours(number, frame):
        missed.append(number)

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        capfd.readouterr()
        code, output = kt_train_preempted(interrupted, train_only_corpus, *flags)
        assert signal.getsignal(signal.SIGTERM) is ours and not missed
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 0, output
    stopped = re.search(r"stopped by SIGTERM at step (\d+), checkpoint (\S+); run the same "
                        r"command to continue", output)
    # The handler writes to file descriptor 2 itself (os.write).
    said = capfd.readouterr().err
    assert stopped and "SIGTERM received: stopping after this step" in said, output + said
    assert "ckpt-3 at step 3 of 8" in output
    assert 3 < int(stopped.group(1)) < 8
    assert stopped.group(2).endswith(f"ckpt-{stopped.group(1)}")

    finished = kt_train(interrupted, train_only_corpus, *flags)
    assert finished.returncode == 0, finished.stderr
    assert f"ckpt-{stopped.group(1)} at step {stopped.group(1)} of 8" in finished.stdout
    assert "done: step 8" in finished.stdout
    (name_a, weights_a), (name_b, weights_b) = latest_weights(tmp_path / "straight"), \
        latest_weights(interrupted)
    assert name_a == name_b == "ckpt-8"
    for a, b in zip(weights_a, weights_b):
        np.testing.assert_allclose(a, b, atol=1e-5)
    run = config_file.load(tmp_path / "straight")
    averages_a, averages_b = (loading.moving_averages(run, directory / "checkpoints" / "ckpt-8")
                              for directory in (tmp_path / "straight", interrupted))
    for a, b in zip(averages_a, averages_b):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert any(not np.allclose(a, w) for a, w in zip(averages_a, weights_a))
    with pytest.raises(SystemExit):
        parse_args(["--model_dir", str(tmp_path / "bad"), "--accumulate_steps", "0"])
    assert "argument --accumulate_steps: must be at least 1, got 0" in capfd.readouterr().err


class FakeClock:
    """time.monotonic for callbacks: the first reading is second 1, the second (the end of the
    first step, which traces) 5 s later, and each later one `seconds(now)` after the last."""

    def __init__(self, seconds=lambda now: 1.0):
        self.now, self.readings, self.seconds = 1.0, 0, seconds

    def monotonic(self):
        self.readings += 1
        if self.readings > 1:
            self.now += 5.0 if self.readings == 2 else self.seconds(self.now)
        return self.now


def fit_within_a_minute(monkeypatch, clock, schedule, train_steps, start_step=0,
                        max_warmup_fraction=0.0, evaluator=None):
    """A one-minute TimeLimit with cooldown_fraction 0.25 over `model.fit` of a small model,
    whose optimizer has made `start_step` updates (a resumed run), with an `Evaluation` told
    the limit's expected end if given; returns (limit, step)."""
    monkeypatch.setattr(callbacks, "time", clock)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
    model.optimizer.iterations.assign(start_step)
    limit = callbacks.TimeLimit(1, 0.25, schedule, train_steps,
                                max_warmup_fraction=max_warmup_fraction)
    if evaluator is not None:
        evaluator.ends_at = limit.expected_end
    steps = min(train_steps - start_step, 200)  # as kt-train's steps_per_epoch
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(steps, 4)), rng.normal(size=(steps, 1)), batch_size=1, epochs=1,
              callbacks=[limit] + ([evaluator] if evaluator else []), verbose=0,
              shuffle=False)
    return limit, checkpoints.step_of(model)


# Step k ends at second k + 5 until second 45, then steps take half a second. The plan comes at
# 45 s (75% of the minute) in, at step 42: 41 steps in 40 s since the first, 15 s left, so 57
# steps; the cooldown is the last quarter of them, from step 43. At the old pace the time would
# end there too; at the new one it ends later, so the stop at 57 is the plan's.
def speeds_up(now):
    return 1.0 if now < 45 else 0.5


def test_a_time_limit_fits_the_cooldown_into_the_budget(monkeypatch):
    schedule = kt.TransformerSchedule(16, 10)
    limit, step = fit_within_a_minute(monkeypatch, FakeClock(speeds_up), schedule, 1000)
    assert limit.planned_steps == 57 and step == 57
    assert schedule.cooldown == (43, 57) and float(schedule(57)) == 0.0 < float(schedule(56))


def test_an_evaluation_just_before_the_planned_end_is_left_to_the_final_one(monkeypatch):
    # Every 28 steps: at 28 (the end unplanned: the budget's 1000), not at 56 (one step before
    # the plan's 57: within a quarter of 28).
    every_28 = evaluation.Evaluation(None, None, every=28)
    fit_within_a_minute(monkeypatch, FakeClock(speeds_up), kt.TransformerSchedule(16, 10), 1000,
                        evaluator=every_28)
    assert [step for step, _ in every_28.history] == [28]


def test_a_resumed_time_limit_cools_down_over_its_own_steps(monkeypatch):
    schedule = kt.TransformerSchedule(16, 10)
    limit, step = fit_within_a_minute(monkeypatch, FakeClock(speeds_up), schedule, 10_000,
                                      start_step=1000)
    assert limit.planned_steps == 1057 and step == 1057
    assert schedule.cooldown == (1043, 1057)  # not the last quarter of all 1,057 steps


# A step a second from second 6 (the first, traced, ends there): the warmup's plan comes 20
# steps later, at step 21 (second 26): 35 seconds left at 1 step/s, so about 56 steps, of which
# the first half (max_warmup_fraction 0.5) may warm up: the rate peaks at step 28, not eq. 3's
# 100. The cooldown's plan then comes as before (step 41: the last quarter of 56 steps).
def test_a_time_limit_fits_the_warmup_into_the_budget(monkeypatch, capsys):
    schedule = kt.TransformerSchedule(16, 100)
    limit, step = fit_within_a_minute(monkeypatch, FakeClock(), schedule, 1000,
                                      max_warmup_fraction=0.5)
    assert schedule.peak_step == 28 and schedule.cooldown == (42, 56) and step == 56
    peak = 16 ** -0.5 * 100 ** -0.5
    assert float(schedule(27)) == pytest.approx(peak) and float(schedule(26)) < peak
    said = capsys.readouterr().out
    assert ("step 21: the time limit affords about 56 updates (1 steps/s); the learning rate "
            "peaks at step 28, 0.025: the first 0.5 of them, sooner than eq. 3's warmup_steps "
            "100 (max_warmup_fraction)") in said
    # A peak planned after the cooldown's start (the first 0.9) moves to that start.
    schedule = kt.TransformerSchedule(16, 100)
    fit_within_a_minute(monkeypatch, FakeClock(), schedule, 1000, max_warmup_fraction=0.9)
    assert schedule.peak_step == 43 and schedule.cooldown == (42, 56)
    assert ("the learning rate falls to zero from step 42 on (cooldown_fraction 0.25), peaking "
            "there instead of at step 50") in capsys.readouterr().out
    # A step budget that ends first keeps the peak build_optimizer fitted to it; a budget long
    # enough for eq. 3's warmup keeps eq. 3's and says where it is.
    schedule = kt.TransformerSchedule(16, 100, peak_step=40)
    fit_within_a_minute(monkeypatch, FakeClock(), schedule, 50, max_warmup_fraction=0.5)
    assert schedule.peak_step == 40 and "peaks at step" not in capsys.readouterr().out
    schedule = kt.TransformerSchedule(16, 10)
    fit_within_a_minute(monkeypatch, FakeClock(), schedule, 1000, max_warmup_fraction=0.5)
    assert schedule.peak_step == 10
    assert ("the learning rate peaks at step 10, 0.0791: eq. 3's warmup_steps, within "
            "max_warmup_fraction 0.5") in capsys.readouterr().out


@pytest.mark.parametrize("case", ["the step budget ends first", "its cooldown is under way",
                                  "the time is up at the plan"])
def test_a_time_limit_leaves_the_schedule_alone_when(case, monkeypatch):
    window, train_steps, clock = {
        "the step budget ends first": ((45, 50), 50, FakeClock()),
        "its cooldown is under way": ((30, 1000), 1000, FakeClock()),
        # An evaluation from second 44 runs 20 s: the plan comes after the minute is over.
        "the time is up at the plan": (None, 1000,
                                       FakeClock(lambda now: 20.0 if now == 44 else 1.0)),
    }[case]
    start, end = window or (None, None)
    schedule = kt.TransformerSchedule(16, 10, cooldown_start=start, cooldown_end=end)
    limit, step = fit_within_a_minute(monkeypatch, clock, schedule, train_steps)
    assert limit.planned_steps is None and schedule.cooldown == window
    assert step == {"the step budget ends first": 50, "its cooldown is under way": 56,
                    "the time is up at the plan": 40}[case]


def test_stop_on_signal_asks_once_then_gets_out_of_the_way():
    calls = []
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, lambda number, frame: calls.append(number))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # e.g. a background job: stays ignored
    stop = callbacks.StopOnSignal()
    try:
        stop.install()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs between bytecodes
        assert stop.received == "SIGTERM" and calls == []
        os.kill(os.getpid(), signal.SIGTERM)  # the second one meets the previous handler
        time.sleep(0.1)
        assert calls == [signal.SIGTERM]
    finally:
        stop.uninstall()
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.mark.slow
def test_checkpoint_round_trip_keeps_optimizer_and_dropout_state(tmp_path):
    hp = kt.hparams.get("transformer_tiny", dropout=0.3, warmup_steps=5, num_layers=1)
    rng = np.random.default_rng(0)
    source = rng.integers(2, 30, (8, 7)).astype("int32")
    target = rng.integers(2, 30, (8, 6)).astype("int32")
    batch = ((source, np.pad(target[:, :-1], [(0, 0), (1, 0)])), target)

    def compiled():
        model = kt.build_model(hp, 30)
        model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp))
        return model

    a = compiled()
    for _ in range(3):
        a.train_on_batch(*batch)
    directory = checkpoints.CheckpointDirectory(tmp_path / "ckpts", keep=2)
    directory.save(a, checkpoints.step_of(a))
    b = compiled()
    assert directory.restore_latest(b).name == "ckpt-3"
    assert checkpoints.step_of(b) == 3
    a.train_on_batch(*batch)  # same weights, optimizer state and dropout masks: same update
    b.train_on_batch(*batch)
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(x, y, atol=1e-6)


def test_a_damaged_checkpoint_is_refused_by_name_and_the_previous_used(tmp_path, capsys):
    model = kt.build_model("transformer_tiny", 30)
    directory = checkpoints.CheckpointDirectory(tmp_path, keep=5)
    directory.save(model, 1)
    expected = model.get_weights()
    model.set_weights([w + 1 for w in expected])
    truncated, corrupted, half_copied = (directory.save(model, step) for step in (2, 3, 4))
    weights_file = truncated / checkpoints.WEIGHTS_FILE
    weights_file.write_bytes(weights_file.read_bytes()[:1000])
    data = bytearray((corrupted / checkpoints.WEIGHTS_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the weights: HDF5 loads it
    (corrupted / checkpoints.WEIGHTS_FILE).write_bytes(bytes(data))
    (half_copied / checkpoints.MANIFEST_FILE).unlink()  # as if from an earlier version...
    (half_copied / checkpoints.RNG_FILE).unlink()  # ...and copied without its last file
    (tmp_path / ".ckpt-5.partial123").mkdir()  # what a killed save leaves: never listed
    assert [p.name for p in directory.paths()] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]

    assert directory.restore_latest(model).name == "ckpt-1"
    err = capsys.readouterr().err
    assert f"{half_copied / checkpoints.MANIFEST_FILE} is missing, so {half_copied} cannot be " \
        f"verified" in err and f"{half_copied / checkpoints.RNG_FILE}" in err
    assert f"{corrupted / checkpoints.WEIGHTS_FILE} is corrupted: its SHA-256 differs" in err
    assert f"{weights_file} is truncated or overwritten: 1000 bytes, the manifest says" in err
    for a, b in zip(model.get_weights(), expected):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(checkpoints.CheckpointError, match="ckpt-3/model.weights.h5 is corrupted"):
        averaging.average(model, [truncated.with_name("ckpt-1"), corrupted])
    assert directory.save(model, 2) == truncated  # the unreadable one is replaced
    assert directory.restore_latest(model) == truncated
    for path in directory.paths():
        (path / checkpoints.WEIGHTS_FILE).write_bytes(b"")
    with pytest.raises(checkpoints.CheckpointError, match="no checkpoint could be read"):
        directory.restore_latest(model)


def test_a_checkpoint_written_before_the_attribute_renames_loads(tmp_path):
    # Weights are keyed by attribute path: memory_attention became encoder_decoder_attention,
    # and Dropout layers' `dropout` became `dropout_layer`. An old checkpoint is made from a
    # new one by renaming its groups back (and rewriting its manifest).
    import h5py

    model = kt.build_model("transformer_tiny", 30)
    saved = checkpoints.CheckpointDirectory(tmp_path).save(model, 3)
    new_names = {new: old for old, new in checkpoints._RENAMED.items()}
    with h5py.File(saved / checkpoints.WEIGHTS_FILE, "r+") as file:
        names = []
        file.visit(names.append)
        renamed = [name for name in names if name.rsplit("/", 1)[-1] in new_names]
        for name in sorted(renamed, key=lambda name: -name.count("/")):
            parent, _, leaf = name.rpartition("/")
            file.move(name, f"{parent}/{new_names[leaf]}")
        assert "decoder_layers/decoder_layer/memory_attention/vars" in file
    checkpoints._write_manifest(saved, 3)
    fresh = kt.build_model("transformer_tiny", 30)
    checkpoints.restore(fresh, saved)
    for expected, restored in zip(model.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(expected, restored)


def test_a_failing_checkpoint_write_is_an_error_and_the_previous_stays(tmp_path):
    # The kernel refuses the writes (RLIMIT_FSIZE, this process's, for the second save only) as
    # it would on a full disk; reliability/faults.py fills a real tmpfs. Python ignores SIGXFSZ,
    # so a write past the limit fails with EFBIG. (In-process: a fresh one for it cost a
    # TensorFlow start-up, 7 s of the test's 7.1 in CI.)
    model = kt.build_model("transformer_tiny", 30)
    directory = checkpoints.CheckpointDirectory(tmp_path)
    first = directory.save(model, 1)
    size = (first / checkpoints.WEIGHTS_FILE).stat().st_size
    model.set_weights([w + 1 for w in model.get_weights()])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, hard))  # writes past it fail
    try:
        with pytest.raises(checkpoints.CheckpointError) as error:
            directory.save(model, 2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert f"could not write checkpoint {tmp_path / 'ckpt-2'}: " in str(error.value)
    assert f"The newest checkpoint, {tmp_path / 'ckpt-1'}, is untouched" in str(error.value)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1"]  # no partial files left
    model = kt.build_model("transformer_tiny", 30)
    checkpoints.restore(model, tmp_path / "ckpt-1")  # verified against its manifest


def test_a_checkpoint_from_another_optimizer_setup_is_refused(tmp_path):
    hp = kt.hparams.get("transformer_tiny")
    model = kt.build_model(hp, 30)
    model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp))
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(7)
    directory = checkpoints.CheckpointDirectory(tmp_path)
    directory.save(model, 7)
    keras.mixed_precision.set_global_policy("mixed_float16")  # adds loss-scale state
    try:
        other = kt.build_model(hp, 30)
        other.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp))
        with pytest.raises(checkpoints.CheckpointError, match="restored the optimizer at step 0, "
                                                              "not 7.*--mixed_precision"):
            directory.restore_latest(other)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_average_last_and_kt_average_write_the_mean_of_the_last_checkpoints(six_steps, tmp_path,
                                                                            capsys):
    assert "averaged ckpt-4, ckpt-6 into" in six_steps[1].stdout
    model_dir = copy_of(six_steps, tmp_path)
    inputs = [weights_at(model_dir, f"ckpt-{step}") for step in (4, 6)]
    output = weights_at(model_dir, "ckpt-6", directory="averaged")
    for a, b, mean in zip(*inputs, output):
        np.testing.assert_allclose(mean, (a + b) / 2, atol=1e-7)
    # What the run ended with is what kt-translate and kt-export load by default.
    assert loading.load(model_dir).checkpoint == model_dir / "averaged" / "ckpt-6"
    assert average.main(["--model_dir", str(model_dir), "--last", "9"]) == 2
    assert "fewer than --last 9" in capsys.readouterr().err
    before = (model_dir / "averaged" / "ckpt-6" / checkpoints.MANIFEST_FILE).read_bytes()
    assert average.main(["--model_dir", str(model_dir), "--last", "1"]) == 2
    assert "ckpt-6 exists (an earlier average); pass --overwrite" in capsys.readouterr().err
    assert (model_dir / "averaged" / "ckpt-6" / checkpoints.MANIFEST_FILE).read_bytes() == before
    assert average.main(["--model_dir", str(model_dir), "--last", "1", "--overwrite"]) == 0
    for a, b in zip(weights_at(model_dir, "ckpt-6", directory="averaged"), inputs[1]):
        np.testing.assert_allclose(a, b, atol=1e-7)
    # Once training has moved past it, the average is no longer the run's result.
    shutil.copytree(model_dir / "checkpoints" / "ckpt-6", model_dir / "checkpoints" / "ckpt-8")
    assert loading.final_average(model_dir) is None
    assert task.main(["--model_dir", str(model_dir), "--average_last", "3",
                      "--keep_checkpoints", "2"]) == 2
    assert "--average_last 3 needs at least as many kept checkpoints" in capsys.readouterr().err
