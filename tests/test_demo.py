"""kt-demo, the README's first command, with test-sized kt-train flags."""

import argparse
import os
import re
import subprocess
import sys

import pytest
import sacrebleu
import tensorflow as tf
from conftest import bundled_lines

from keras_transformer import data
from keras_transformer.demo import demo
from keras_transformer.model_dir import config, config_file

DEMO_STEPS = 60


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, bible_vocab_path):
    """kt-demo on transformer_tiny for DEMO_STEPS steps: (model_dir, the command's stdout); its
    stderr is in model_dir's parent, stderr.txt.

    The README's demo command with test-sized kt-train flags: it trains, computes dev BLEU with
    beam search, translates, exports, reloads the export and draws attention. A few steps
    suffice for what is checked here (the phases, and that the printed figures are the
    export's); the decoding tests read a model trained longer (tests/data/trained_tiny).
    """
    directory = tmp_path_factory.mktemp("demo")
    model_dir = directory / "run"
    command = [
        sys.executable, "-m", "keras_transformer.demo", "--model_dir", str(model_dir),
        "--minutes", "10", "--bleu_sentences", "12", "--data", "bible_en_es",
        "--hparams", "transformer_tiny", "--hparams_override", "warmup_steps=30",
        "--vocab", str(bible_vocab_path), "--batch_tokens", "3000", "--max_pair_length", "64",
        "--train_steps", str(DEMO_STEPS), "--eval_every", "100000", "--eval_sentences", "4",
        "--log_every", "10", "--deterministic",
        # float32, not the demo's auto: on a model this small the casts cost more than
        # bfloat16 saves (kt-train alone: 54 s against 104 s).
        "--mixed_precision", "none"]
    # Warnings shown (the suite's level 2 hides them), so the test can see there are none of
    # tf.data's.
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    (directory / "stderr.txt").write_text(result.stderr, encoding="utf-8")
    return model_dir, result.stdout


def test_the_demo_trains_evaluates_translates_exports_reloads_and_draws(demo_run):
    model_dir, stdout = demo_run
    phases = re.findall(r"^\[(\d)/6\] (.*)$", stdout, re.MULTILINE)
    assert [int(number) for number, _ in phases] == [1, 2, 3, 4, 5, 6], stdout
    assert "--hparams transformer_tiny" in phases[0][1]
    assert f"done: step {DEMO_STEPS}" in stdout  # kt-train's own last line
    # The figures recomputed: the 12 pairs spread over the bundled dev split, translated by the
    # SavedModel the demo exported, scored by sacrebleu: BLEU (its n-gram precisions, brevity
    # penalty and lengths too) and chrF, each line as printed with its signature.
    sources, references = ([line.rstrip("\n") for line in
                            data.spread(bundled_lines("dev", lang), 12)] for lang in ("en", "es"))
    serving = tf.saved_model.load(str(model_dir / "export" / "1")).signatures["serving_default"]
    translations = [text.decode("utf-8") for text in
                    serving(inputs=tf.constant(sources))["translations"].numpy()]
    bleu = sacrebleu.BLEU().corpus_score(translations, [references])
    assert f"\nstep {DEMO_STEPS}: dev BLEU {bleu.score:.2f} on 12 sentences (" in stdout, stdout
    for metric in (sacrebleu.BLEU(), sacrebleu.CHRF()):
        score = metric.corpus_score(translations, [references])
        assert f"\n{score} {metric.get_signature()}\n" in stdout, (score, stdout)
    examples = re.findall(r"^  source:      (.*)\n.*\n  translation: (.*)$", stdout, re.MULTILINE)
    assert len(examples) == 3 and all(translation for _, translation in examples)
    assert all(translations[sources.index(source)] == translation
               for source, translation in examples), examples
    assert f"to {model_dir / 'export' / '1'}\n" in stdout
    assert "the SavedModel's translations equal the checkpoint's on 3 of 3" in stdout
    assert (model_dir / "export" / "1" / "saved_model.pb").is_file()
    png = model_dir / f"attention_step_{DEMO_STEPS}.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"  attention        {png}\n" in stdout
    # C++ log lines that are no news (data/vocab.py says why each is avoided): SentencePiece's
    # INFO about a vocabulary's empty character map, oneDNN's E line about an integer Transpose.
    stderr = (model_dir.parent / "stderr.txt").read_text(encoding="utf-8")
    assert "precompiled_charsmap is empty" not in stderr, stderr
    assert "oneDNN supports" not in stderr, stderr
    # tf.data's, from distributing the datasets over one device (trainer/distribute.py).
    assert "will not be optimized" not in stderr and "auto-shard" not in stderr, stderr


def test_demo_defaults_apply_to_new_runs_only_and_yield_to_given_flags(tmp_path):
    args = argparse.Namespace(model_dir=str(tmp_path / "new"), minutes=5.0)
    argv = demo.train_argv(args, ["--hparams=transformer_tiny"])
    assert argv[:4] == ["--model_dir", str(tmp_path / "new"), "--max_minutes", "5.0"]
    assert "transformer_small" not in argv and "--batch_tokens" in argv
    assert argv[-2:] == ["--hparams_override", "dropout=0"]  # a new run's dropout
    assert "dropout=0" not in demo.train_argv(args, ["--hparams_override=warmup_steps=30"])
    assert "dropout=0" not in demo.train_argv(argparse.Namespace(
        model_dir=args.model_dir, minutes=60.0), [])  # a long run keeps the preset's
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text('{"format_version": 1}')
    args.model_dir = str(tmp_path / "old")  # a resumed run keeps its saved flags
    assert demo.train_argv(args, []) == ["--model_dir", args.model_dir, "--max_minutes", "5.0"]
    # A run the demo started without dropout trains on with the preset's, once.
    def saved_with(override):
        config_file.save(config.RunConfig(model=config.ModelConfig(
            hparams_name="transformer_small", hparams_override=override)), args.model_dir)

    saved_with("dropout=0")
    assert demo.train_argv(args, [])[4:] == ["--hparams_override", "dropout=0.1"]
    assert demo.train_argv(args, ["--hparams_override", "dropout=0.3"])[4:] == [
        "--hparams_override", "dropout=0.3"]
    saved_with("dropout=0,dropout=0.1")
    assert demo.train_argv(args, []) == ["--model_dir", args.model_dir, "--max_minutes", "5.0"]


def test_demo_refuses_flags_it_would_ignore_or_override(tmp_path, capsys):
    model_dir = ["--model_dir", str(tmp_path / "run")]
    assert demo.main([*model_dir, "--max_minutes", "3"]) == 2
    assert "kt-demo sets kt-train's --max_minutes: use --minutes" in capsys.readouterr().err
    assert demo.main([*model_dir, "--minutes", "0", "--batch_tokens", "99"]) == 2
    assert "--batch_tokens 99: kt-train flags need --minutes > 0" in capsys.readouterr().err
    try:  # kt-train's parser reads the flags the demo passes on, typos included
        demo.main([*model_dir, "--batch_tokenz", "99"])
    except SystemExit as exit:
        assert exit.code == 2
    assert "unrecognized arguments: --batch_tokenz 99" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_demo_refusals_name_the_problem(tmp_path, capsys):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    assert demo.main(["--model_dir", str(not_a_dir), "--minutes", "0"]) == 2
    assert f"{not_a_dir} is not a directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert demo.main(["--model_dir", str(empty), "--minutes", "0"]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_demo_evaluates_on_pairs_spread_over_the_dev_split(tmp_path):
    """tatoeba_en_es' dev split starts with its shortest sentences: the first few would show
    three-word translations and a BLEU of those alone."""
    (tmp_path / "train.en").write_text("a\n")
    (tmp_path / "train.es").write_text("b\n")
    (tmp_path / "dev.en").write_text("".join(f"en {i}\n" for i in range(10)))
    (tmp_path / "dev.es").write_text("".join(f"es {i}\n" for i in range(10)))
    source = data.directory_source(str(tmp_path), "en", "es")
    run = config.RunConfig(data=config.DataConfig(corpus=str(tmp_path), source_lang="en",
                                                  target_lang="es"))
    assert demo.dev_pairs(run, 4) == (["en 0", "en 3", "en 6", "en 9"],
                                      ["es 0", "es 3", "es 6", "es 9"])
    assert demo.dev_pairs(run, 20)[0] == [f"en {i}" for i in range(10)]
    assert data.spread_pairs(source, "dev", 1) == (["en 0"], ["es 0"])
    assert data.spread_pairs(source, "dev", 0) == ([], [])
    assert data.spread(list(range(5)), 3) == [0, 2, 4]
    assert demo.NEW_RUN_DEFAULTS["data"] == ("--data", "tatoeba_en_es")
