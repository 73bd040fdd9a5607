"""Section 6.3 end to end: a treebank the tests write -> kt-train --data ptb:DIR -> kt-parse ->
EVALB F1; the paper's setup by name; bad input to the parsing commands."""

import json
import re

import pytest
import treebank_grammar
from conftest import made_once
from conftest import run_module as run

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import evalb, trees
from keras_transformer.export import flags, parse, translate
from keras_transformer.model_dir import config

# Sized to learn the grammar (held-out F1 ~97) in about two minutes of kt-train on two cores.
PARSER_FLAGS = ["--hparams", "transformer_tiny", "--hparams_override",
                "d_model=64,d_ff=256,num_heads=4,warmup_steps=200", "--vocab_size", "600",
                "--batch_tokens", "2048", "--train_steps", "1500", "--eval_every", "750",
                "--eval_sentences", "50", "--keep_best", "f1", "--log_every", "500",
                "--seed", "3"]


@pytest.fixture(scope="session")
def wsj(tmp_path_factory):
    """A treebank from tests/treebank_grammar.py in LDC's layout: 3,000 training trees, 100
    held-out dev trees and 400 test trees whose sentences are not in the training ones."""
    with made_once(tmp_path_factory, "treebank") as (directory, done):
        root = directory / "treebank_3"
        if not done:
            train = treebank_grammar.treebank(3000, seed=1)
            seen = {" ".join(trees.normalize(next(trees.parse_trees([t]))[1]).words())
                    for t in train}
            held_out = treebank_grammar.treebank(500, seed=2, exclude=seen)
            treebank_grammar.write_wsj(root, {"train": train, "dev": held_out[:100],
                                              "test": held_out[100:]})
    return root / "parsed" / "mrg" / "wsj"


@pytest.fixture(scope="session")
def parser_dir(tmp_path_factory, wsj):
    with made_once(tmp_path_factory, "parser") as (directory, done):
        model_dir = directory / "run"
        if not done:
            result = run("keras_transformer.trainer", "--model_dir", str(model_dir), "--data",
                         f"ptb:{wsj}", *PARSER_FLAGS)
            (directory / "stdout.txt").write_text(result.stdout)
    return model_dir


def test_kt_train_scores_dev_parses_and_keeps_the_best(parser_dir):
    stdout = (parser_dir.parent / "stdout.txt").read_text()
    f1s = [float(f1) for f1 in re.findall(r"dev F1 ([0-9.]+) \(EVALB, COLLINS.prm\)", stdout)]
    assert len(f1s) == 2, stdout  # at steps 750 and 1500
    best = json.loads((parser_dir / config.BEST_DIR / "best.json").read_text())
    assert best["metric"] == "f1" and best["value"] == pytest.approx(max(f1s), abs=0.01)
    # The vocabulary keeps each bracket whole (six pieces and the end of sentence, not 13).
    vocabulary = data.Vocabulary.load(parser_dir / config.VOCAB_FILE)
    assert vocabulary.encode(["(S (NP )NP (VP )VP )S"]).row_lengths().numpy().tolist() == [7]


def test_transformer_parsing_wsj_is_section_6_3():
    hp = kt.hparams.get("transformer_parsing_wsj")
    base = kt.hparams.get("transformer_base")
    assert (hp.num_layers, hp.d_model) == (4, 1024)  # "a 4-layer transformer with d_model 1024"
    assert (hp.dropout, hp.attention_dropout) == (0.2, 0.2)  # tuned; tensor2tensor's values
    assert (hp.d_ff, hp.num_heads, hp.warmup_steps, hp.label_smoothing) == (
        base.d_ff, base.num_heads, base.warmup_steps, base.label_smoothing)
    assert hp.decode_alpha == 0.3


@pytest.mark.parametrize("argv, expected", [
    ([], (4, None, 50)),
    (["--decode_preset", "parsing"], (21, 0.3, 300)),
    (["--decode_preset", "parsing", "--beam_size", "5", "--alpha", "0.5"], (5, 0.5, 300)),
    (["--extra_length", "7"], (4, None, 7)),
])
def test_decode_presets_fill_only_what_is_not_given(argv, expected):
    args = translate.parse_args(["--model_dir", "m", *argv])
    assert (args.beam_size, args.alpha, args.extra_length) == expected
    flags.apply_decode_preset(args)  # again: nothing changes
    assert (args.beam_size, args.alpha, args.extra_length) == expected
    parsed = parse.parse_args(["--model_dir", "m"])
    flags.apply_decode_preset(parsed)
    assert (parsed.beam_size, parsed.alpha, parsed.extra_length) == (21, 0.3, 300)


def f1_of(stderr, title="All"):
    block = stderr[stderr.index(f"-- {title} --"):]
    return float(re.search(r"Bracketing FMeasure\s+=\s+([0-9.]+)", block).group(1))


def test_kt_parse_parses_held_out_trees_and_scores_them(parser_dir, wsj, tmp_path):
    """Every held-out sentence parsed over its own words, EVALB's summary as data.evalb computes
    it: the grammar is learnt (F1 > 90), greedily and with section 6.3's beam 21, alpha 0.3."""
    run_config = config.load(parser_dir)
    assert run_config.data == f"ptb:{wsj}" and run_config.vocab_size == 600
    gold = [tree for _, _, tree in data.get_source(f"ptb:{wsj}").trees("test")]
    scores = {}
    for name, decode in [("greedy", ["--beam_size", "1", "--alpha", "0"]),
                         ("beam 21, alpha 0.3, +300", [])]:
        output = tmp_path / f"{name}.tst"
        result = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--data",
                     f"ptb:{wsj}", "--split", "test", "--output", str(output), *decode)
        parsed = [next(trees.parse_trees([line]))[1] for line in
                  output.read_text().splitlines()]
        assert [t.words() for t in parsed] == [t.words() for t in gold]
        assert [t.tags() for t in parsed] == [t.tags() for t in gold]  # tags from the gold
        every, _, _ = evalb.evaluate(gold, parsed)
        assert every.errors == 0 and every.sentences == 400
        assert f1_of(result.stderr) == pytest.approx(every.f1, abs=0.005)
        scores[name] = every.f1
        print(f"held-out F1, {name}: {every.f1:.2f} (P {every.precision:.2f}, R "
              f"{every.recall:.2f}, complete match {every.complete_match:.1f}%)")
    # Both decodings learn the grammar. Beam 21 at alpha 0.3 is not asserted no worse than greedy:
    # on this small model it scored 0.02-1.3 F1 below greedy in five of six trainings (it loses
    # recall: outputs with fewer brackets), which issue 20 leaves open.
    assert min(scores.values()) > 90.0


def test_kt_parse_reads_sentences_and_gold_files(parser_dir, wsj, tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("John saw the dog with a telescope .\n\nthe cat is very happy .\n")
    result = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--input",
                 str(sentences), "--beam_size", "4")
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[1] == ""
    first = next(trees.parse_trees([lines[0]]))[1]
    assert first.words() == "John saw the dog with a telescope .".split()
    assert set(first.tags()) == {"XX"}
    # A WSJ section directory as --gold scores like --data ... --split.
    by_gold = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--gold",
                  str(wsj / "22"), "--beam_size", "1")
    by_split = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--data",
                   f"ptb:{wsj}", "--split", "dev", "--beam_size", "1")
    assert by_gold.stdout == by_split.stdout
    assert f1_of(by_gold.stderr) == f1_of(by_split.stderr)


def test_kt_parse_refuses_bad_input_naming_it(parser_dir, trained_model_dir, tmp_path):
    sentences = tmp_path / "s.txt"
    sentences.write_text("the dog\n" + " ".join(["the old dog"] * 10) + "\n")
    result = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--input",
                 str(sentences), "--max_input_length", "12", check=False)
    assert result.returncode == 2
    assert f"{sentences}:2: the sentence has" in result.stderr
    assert "more than the 12 the model reads" in result.stderr
    bad = tmp_path / "bad.mrg"
    bad.write_text("( (S (NP (NN a)) (VP (VB b))) )\n( (S (NP (NN c))\n")
    result = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--gold",
                 str(bad), check=False)
    assert result.returncode == 2 and f"{bad}:2: unbalanced brackets" in result.stderr
    empty = tmp_path / "empty.mrg"
    empty.write_text("( )\n")
    result = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--gold",
                 str(empty), check=False)
    assert result.returncode == 2 and f"{empty}:1: empty brackets" in result.stderr
    result = run("keras_transformer.export.parse", "--model_dir", str(trained_model_dir),
                 "--input", str(sentences), check=False)
    assert result.returncode == 2
    assert "trained on --data bible_en_es, a translation corpus" in result.stderr
    result = run("keras_transformer.export.parse", "--model_dir", str(parser_dir), "--data",
                 "bible_en_es", check=False)
    assert result.returncode == 2 and "kt-parse reads a treebank, ptb:DIR" in result.stderr


def test_kt_train_refuses_keep_best_f1_on_a_translation_corpus(tmp_path, bible_vocab_path):
    result = run("keras_transformer.trainer", "--model_dir", str(tmp_path / "m"), "--data",
                 "bible_en_es", "--vocab", str(bible_vocab_path), "--hparams",
                 "transformer_tiny", "--keep_best", "f1", check=False)
    assert result.returncode == 2
    assert "--keep_best f1 scores parses: --data bible_en_es is not a treebank" in result.stderr


def test_kt_train_refuses_a_treebank_without_training_trees(tmp_path):
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "dev.trees").write_text("(S (NN a))\n")
    result = run("keras_transformer.trainer", "--model_dir", str(tmp_path / "m"), "--data",
                 f"ptb:{tmp_path / 'tb'}", "--hparams", "transformer_tiny", check=False)
    assert result.returncode == 2 and "found no training trees" in result.stderr
