"""The commands of docs/reproduce.md and README.md's examples, run as written but small: TFDS mock
data, a few steps, a shrunken model. A renamed flag, a typo or a command that no longer exists
fails here."""

import io
import json
import pathlib
import re
import shlex
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest
import treebank_grammar

DOCS = pathlib.Path(__file__).parent.parent / "docs"

# Flag values that would take days, swapped for ones that take seconds. Everything else on the
# page (every flag name, the dataset, the hparams sets, the paths) is used as written.
SMALL = {"--train_steps": {"100000": "5", "300000": "20"}, "--batch_tokens": {"25000": "400"},
         "--vocab_size": {"37000": "300", "16000": "500"}, "--eval_every": {"5000": "1000"},
         "--eval_sentences": {"500": "4"}, "--max_pair_length": {"512": "160"}}
SHRUNKEN_MODEL = ["--hparams_override", "num_layers=1,d_model=32,d_ff=64,num_heads=2"]
# A checkpoint each step, only for a run whose last checkpoints kt-average reads next (a save
# took 0.4 s of a loaded machine: the parser's run keeps the page's end-of-run save).
EVERY_STEP = ["--checkpoint_every_steps", "1"]

def commands(page):
    """The shell commands of a page's ```sh blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip()]


def smaller(argv):
    return [SMALL.get(flag, {}).get(value, value) for flag, value in zip([""] + argv, argv)]


@pytest.mark.slow
def test_reproduce_page_commands_run_as_written(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds
    from conftest import run_main

    scripts = {ep.name: ep for ep in metadata.entry_points(group="console_scripts")}
    installed = set(scripts)
    runs = []
    page = commands(DOCS / "reproduce.md")
    for (name, *argv), following in zip(page, page[1:] + [[""]]):
        assert name in installed, f"docs/reproduce.md runs {name}, which is not a console script"
        argv = smaller(argv)
        if name == "kt-train":
            argv += SHRUNKEN_MODEL + (EVERY_STEP if following[0] == "kt-average" else []) + (
                [] if "--max_pair_length" in argv else ["--max_pair_length", "40"])
        if name == "kt-translate":  # the averaged checkpoint is named after the last step
            argv = [re.sub(r"ckpt-(100000|300000)$", lambda m: "ckpt-" + SMALL["--train_steps"][
                m.group(1)], arg) for arg in argv]
        runs.append((name, argv))
    assert [name for name, _ in runs] == ["kt-vocab"] + ["kt-train", "kt-average",
                                                         "kt-translate"] * 2 + [
        "kt-train", "kt-parse", "kt-parse"]
    # Section 4's treebank, in LDC's layout where the page expects it: a small one the tests make.
    splits = {"train": treebank_grammar.treebank(60, seed=1),
              "dev": treebank_grammar.treebank(6, seed=2), "test": treebank_grammar.treebank(
                  6, seed=3)}
    treebank_grammar.write_wsj(tmp_path / "treebank_3", splits)
    # In this process, as the README's commands below run (a fresh one cost TensorFlow's start).
    monkeypatch.chdir(tmp_path)
    stdout, stderr = [], []
    with tfds.testing.mock_data(num_examples=24):
        for name, argv in runs:
            result = run_main(scripts[name].load(), *argv)
            assert result.returncode == 0, f"{name} {argv}\n{result.stdout}\n{result.stderr}"
            stdout.append(result.stdout)
            stderr.append(result.stderr)
    result = subprocess.CompletedProcess(runs, 0, "".join(stdout), "".join(stderr))
    for model in ("base", "big"):
        translations = (tmp_path / f"newstest2014.{model}.de").read_text().splitlines()
        assert len(translations) == 24
    assert "averaged ckpt-1, ckpt-2, ckpt-3, ckpt-4, ckpt-5 into" in result.stdout
    assert "ckpt-19, ckpt-20 into" in result.stdout  # the big model's last 20
    assert result.stderr.count("BLEU = ") == 2 and "nrefs:1" in result.stderr
    for section in ("22", "23"):
        assert len((tmp_path / f"wsj{section}.tst").read_text().splitlines()) == 6
    assert result.stderr.count("Bracketing FMeasure") == 4  # all, and <= 40 words, twice
    assert "beam 21, alpha 0.3, output up to input + 300 tokens" in result.stderr


ROOT = DOCS.parent
# The README's two commands: CI runs the second verbatim (.ci/run), so they must not drift.
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/kt-demo"
TEST_COMMAND = ('python3 -m venv .venv && .venv/bin/pip install uv==0.13.9 && '
                '.venv/bin/uv pip install --python .venv/bin/python --compile-bytecode '
                '-e ".[test]" && .venv/bin/python -m pytest')
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")  # [text](target) and ![alt](target)
EXTERNAL = ("http://", "https://", "#", "mailto:")


def test_readme_starts_small():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; move details to docs/"
    first_screen = lines[:40]
    for command in (DEMO_COMMAND, TEST_COMMAND):
        assert command in first_screen, f"not in README.md's first 40 lines: {command}"


def test_relative_links_point_to_files():
    broken = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in LINK.findall(text):
            if target.startswith(EXTERNAL):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to missing files: " + ", ".join(broken)


def readme_block(heading, language):
    """The first ```language block under README.md's `## heading`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", section, re.DOTALL).group(1)


def swapped(text, swaps):
    """`text` with each (old, new) of `swaps` replaced; each old must be there."""
    for old, new in swaps:
        assert old in text, f"README.md no longer has {old!r}: update the swaps"
        text = text.replace(old, new)
    return text


def test_readme_python_example_runs_small(tmp_path, monkeypatch, capsys, bible_vocab_path):
    # The page's code, as written but for the model's and the training's size; the vocabulary
    # where the page expects the demo's (a 2,000-id one of the bundled corpus).
    code = swapped(readme_block("From Python", "python"), [
        ('"transformer_small"', '"transformer_tiny"'), ("batch_tokens=3072", "batch_tokens=400"),
        ("steps_per_epoch=500", "steps_per_epoch=2")])
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "vocab.model").write_bytes(bible_vocab_path.read_bytes())
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "README.md (From Python)", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()[-1]
    model, ids, scores = namespace["model"], namespace["ids"], namespace["scores"]
    assert int(model.optimizer.iterations) == 2
    assert ids.shape[:2] == (1, 4) and np.isfinite(scores.numpy()).all()
    assert printed == namespace["vocabulary"].detokenize(ids[:, 0]).numpy()[0].decode()


# The README's command-line block, each line by what it needs. Lines the test cannot run say
# why; a line it does not know fails the test.
README_COMMANDS_NOT_RUN = {
    "kt-parse --model_dir runs/wsj": "a parser trained on the Penn treebank (LDC's, not in the "
    "repository); kt-parse on a generated treebank runs in "
    "test_reproduce_page_commands_run_as_written and tests/test_parsing.py",
    "kt-train --model_dir runs/mt_lstm": "Stanford's glove.6B.50d.txt.bz2 (not in the "
    "repository); cove_mt_lstm trains on a generated GloVe file in tests/test_cove_from_runs.py",
    "kt-classify --task trec6 --inputs glove+cove": "the MT-LSTM of the line before; kt-classify "
    "over CoVe runs in tests/test_cove_from_runs.py",
    "kt-import --from marian opus-mt-en-es": "a checkpoint downloaded from Hugging Face (no "
    "network here); kt-import of a transformers-made checkpoint runs in tests/test_marian.py",
}
README_SMALL = [("--vocab_size 8000", "--vocab_size 500"), ("--batch_tokens 3072",
                                                              "--batch_tokens 400"),
                ("--train_steps 5000", "--train_steps 5"), ("ckpt-5000", "ckpt-5")]


@pytest.mark.slow
def test_readme_command_line_block_runs_small(tmp_path, monkeypatch):
    from conftest import bundled_lines, run_main

    scripts = {ep.name: ep for ep in metadata.entry_points(group="console_scripts")}
    lines = [line for line in readme_block("From the command line", "sh").splitlines()
             if line.strip()]
    not_run = [line for line in lines if line.startswith(tuple(README_COMMANDS_NOT_RUN))]
    assert len(not_run) == len(README_COMMANDS_NOT_RUN), not_run
    runs = [swapped(line.split("  #")[0], [
        (old, new) for old, new in README_SMALL if old in line]) for line in lines
        if line not in not_run]
    names = [shlex.split(line.split("|")[-1])[0] for line in runs]
    assert names == ["kt-vocab", "kt-train", "kt-average", "kt-translate", "kt-export",
                     "kt-translate", "kt-score"], runs
    # The user's own files the page reads: a few dev pairs of the bundled corpus.
    count = 3
    (tmp_path / "dev.en").write_text("".join(bundled_lines("dev", "en", count)), encoding="utf-8")
    (tmp_path / "dev.es").write_text("".join(bundled_lines("dev", "es", count)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    results = []
    for line in runs:
        stdin = None
        if "|" in line:  # echo "..." | kt-...
            echo, line = line.split("|")
            stdin = shlex.split(echo)[1] + "\n"
        line, _, redirect = line.partition(">")
        name, *argv = shlex.split(line)
        if name == "kt-train":  # a model of seconds, a checkpoint each step for kt-average
            argv += SHRUNKEN_MODEL + EVERY_STEP + ["--max_pair_length", "40", "--eval_sentences",
                                                   "4"]
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        result = run_main(scripts[name].load(), *argv)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        if redirect:
            (tmp_path / redirect.strip()).write_text(result.stdout, encoding="utf-8")
        results.append(result)
    vocab, train, average, translate, export, n_best, score = results
    assert (tmp_path / "vocab.model").is_file()
    assert "done: step 5" in train.stdout
    assert "averaged ckpt-1, ckpt-2, ckpt-3, ckpt-4, ckpt-5 into" in average.stdout
    assert len(translate.stdout.splitlines()) == 1 and translate.stdout.strip()
    assert (tmp_path / "exported" / "small" / "1" / "saved_model.pb").is_file()
    hypotheses = [json.loads(line) for line in
                  (tmp_path / "dev.nbest.jsonl").read_text().splitlines()]
    assert len(hypotheses) == count and all(len(h["hypotheses"]) == 4 for h in hypotheses), \
        hypotheses
    scores = [float(line.split("\t")[0]) for line in score.stdout.splitlines()]
    assert len(scores) == count and all(s < 0 for s in scores), score.stdout
