"""The commands of docs/reproduce.md, run as written but small: TFDS mock data, a few steps, a
shrunken model. A renamed flag, a typo or a command that no longer exists fails here."""

import json
import pathlib
import re
import shlex
import subprocess
import sys
from importlib import metadata

import treebank_grammar

DOCS = pathlib.Path(__file__).parent.parent / "docs"

# Flag values that would take days, swapped for ones that take seconds. Everything else on the
# page (every flag name, the dataset, the hparams sets, the paths) is used as written.
SMALL = {"--train_steps": {"100000": "5", "300000": "20"}, "--batch_tokens": {"25000": "400"},
         "--vocab_size": {"37000": "300", "16000": "500"}, "--eval_every": {"5000": "1000"},
         "--eval_sentences": {"500": "4"}, "--max_length": {"512": "160"}}
SHRUNKEN_MODEL = ["--hparams_override", "num_layers=1,d_model=32,d_ff=64,num_heads=2",
                  "--checkpoint_every_steps", "1"]

# Runs each (entry point, argv) inside TFDS's mock data and stops at the first failure.
RUNNER = r"""
import json, sys
from importlib import metadata
import tensorflow_datasets as tfds

scripts = {ep.name: ep for ep in metadata.entry_points(group="console_scripts")}
with tfds.testing.mock_data(num_examples=24):
    for name, argv in json.loads(sys.stdin.read()):
        print(f"$ {name} {' '.join(argv)}", flush=True)
        code = scripts[name].load()(argv)
        if code:
            sys.exit(f"{name} exited with {code}")
"""


def commands(page):
    """The shell commands of a page's ```sh blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip()]


def smaller(argv):
    return [SMALL.get(flag, {}).get(value, value) for flag, value in zip([""] + argv, argv)]


def test_reproduce_page_commands_run_as_written(tmp_path):
    installed = {ep.name for ep in metadata.entry_points(group="console_scripts")}
    runs = []
    for name, *argv in commands(DOCS / "reproduce.md"):
        assert name in installed, f"docs/reproduce.md runs {name}, which is not a console script"
        argv = smaller(argv)
        if name == "kt-train":
            argv += SHRUNKEN_MODEL + ([] if "--max_length" in argv else ["--max_length", "40"])
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
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(runs), cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
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
TEST_COMMAND = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '
                '.venv/bin/python -m pytest')
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
