"""Held-out F1 of the test suite's small parser, decoding any sequence or only trees.

The treebank tests/test_parsing.py writes (tests/treebank_grammar.py: 3,000 training trees, 100
dev, 400 test trees whose sentences are not in training), a parser trained on it with that
test's PARSER_FLAGS but for the steps, seed and label smoothing of each row (kt-train in a
fresh process each), and the 400 test trees parsed four ways: greedy and beam 21 (alpha 0.3,
input + 300 tokens: section 6.3's search), each unconstrained (`--no-tree_constraint`, as the
paper decoded) and among trees (kt-parse's default). EVALB F1 (data.evalb, COLLINS.prm), and how
many unconstrained outputs did not read back as themselves (malformed sequences that
`data.delinearize` repaired).

    python -m bench.parsing_f1 --rows 1500:3,1500:4:0,1500:6:0,750:3,750:4
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

from bench.common import append_results, markdown_table
from bench.train_step import matmul_peak
from keras_transformer import data
from keras_transformer.data import evalb, trees
from keras_transformer.export.translator import Translator
from keras_transformer.model_dir.decoding_config import DecodingConfig

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "tests"))
import test_parsing  # noqa: E402  the tests' treebank and parser flags
import treebank_grammar  # noqa: E402


def write_treebank(root):
    """test_parsing's `wsj` fixture: the same trees, in LDC's layout under `root`."""
    train = treebank_grammar.treebank(3000, seed=1)
    seen = {" ".join(trees.normalize(next(trees.parse_trees([t]))[1]).words()) for t in train}
    held_out = treebank_grammar.treebank(500, seed=2, exclude=seen)
    treebank_grammar.write_wsj(root, {"train": train, "dev": held_out[:100],
                                      "test": held_out[100:]})
    return root / "parsed" / "mrg" / "wsj"


def parser_flags(steps, seed, label_smoothing):
    """PARSER_FLAGS with these steps, seed and (if not None) label smoothing."""
    argv = list(test_parsing.PARSER_FLAGS)
    for flag, value in (("--train_steps", steps), ("--seed", seed)):
        argv[argv.index(flag) + 1] = str(value)
    if label_smoothing is not None:
        index = argv.index("--hparams_override") + 1
        argv[index] += f",label_smoothing={label_smoothing}"
    return argv


def decode(run_dir, gold, beam_size, tree_constraint):
    """(F1, outputs that did not read back as themselves) of the test trees, decoded as
    kt-parse decodes (section 6.3's preset) with `beam_size`, with or without the tree
    constraint."""
    translator = Translator.from_model_dir(run_dir, DecodingConfig(
        beam_size=beam_size, tree_constraint=tree_constraint), max_batch_size=400)
    sources = tf.constant([" ".join(tree.words()) for tree in gold])
    ids = translator.translate_ids(translator.tokenize(sources)["source_ids"])["ids"]
    outputs = [text.decode() for text in translator.detokenize(ids).numpy()]
    parsed = [trees.parsed(out.split(), tree.words(), tree) for out, tree in zip(outputs, gold)]
    repaired = sum(trees.linearize(tree)[1] != out.split() for tree, out in
                   zip((trees.delinearize(out.split(), g.words()) for out, g in
                        zip(outputs, gold)), outputs))
    return evalb.evaluate(gold, parsed)[0].f1, repaired


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.parsing_f1",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1500:3,1500:4:0,1500:6:0,750:3,750:4",
                        help="comma-separated STEPS:SEED[:LABEL_SMOOTHING] trainings")
    args = parser.parse_args()
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        wsj = write_treebank(pathlib.Path(tmp) / "treebank_3")
        gold = [tree for _, _, tree in data.get_source(f"ptb:{wsj}").trees("test")]
        for row in args.rows.split(","):
            steps, seed, *smoothing = row.split(":")
            label_smoothing = float(smoothing[0]) if smoothing else None
            run_dir = pathlib.Path(tmp) / f"run-{row.replace(':', '-')}"
            trained = time.perf_counter()
            subprocess.run([sys.executable, "-m", "keras_transformer.trainer", "--model_dir",
                            str(run_dir), "--data", f"ptb:{wsj}",
                            *parser_flags(steps, seed, label_smoothing)],
                           check=True, capture_output=True)
            trained = time.perf_counter() - trained
            results = {(beam, constrained): decode(run_dir, gold, beam, constrained)
                       for beam in (1, 21) for constrained in (False, True)}
            name = f"{int(steps):,} steps, seed {seed}" + (
                f", label smoothing {label_smoothing:g}" if smoothing else "")
            rows.append([name, " / ".join(f"{results[beam, False][0]:.2f}" for beam in (1, 21)),
                         " / ".join(f"{results[beam, True][0]:.2f}" for beam in (1, 21)),
                         " / ".join(str(results[beam, False][1]) for beam in (1, 21)),
                         f"{trained:.0f}"])
            print(rows[-1], flush=True)
    peak = matmul_peak(tf.float32) / 1e9
    table = (f"{len(gold)} test trees of tests/treebank_grammar.py, parsers of "
             f"tests/test_parsing.py's PARSER_FLAGS (label smoothing 0.1 unless named), greedy / "
             f"beam 21 alpha 0.3. {time.perf_counter() - start:.0f} s in all; 2048^3 float32 "
             f"matmul peak at the end {peak:.0f} GFLOP/s.\n\n" +
             markdown_table(["training", "F1 unconstrained", "F1 among trees",
                             "unconstrained outputs repaired", "training seconds"], rows))
    append_results("Parsing F1, any sequence or only trees, the tests' grammar", table)


if __name__ == "__main__":
    tf.get_logger().setLevel("ERROR")
    main()
