"""Makes tests/data/trained_parser: the parser of section 6.3's tests (tests/test_parsing.py),
kt-train --data ptb:DIR on tests/treebank_grammar.py's parsing treebank, 750 steps.

    python tests/make_trained_parser.py          # writes tests/data/trained_parser (~1 MB)

It is committed instead of trained by each test session, as tests/data/trained_tiny is: the
training took 78 of the suite's ~1,150 s (one thread, an AMX Xeon, 2026-11-29). kt-train's
evaluation by F1 and --keep_best f1 are still run by the tests, on a short training.

The run was sized to learn the grammar in about a minute of kt-train on two cores: held-out F1
among trees (kt-parse's default) with beam 21 98.4 and 99.7, greedy 89.0 and 95.9, in two
trainings (seeds 3 and 4); twice as long (seed 3), 99.7 and 95.9. --deterministic, so that
running this again gives the same parser. Its config.json names the corpus it was trained on
as `ptb:TREEBANK`; the tests point it at the treebank they write (the same trees). Run it
again after a change to the model's weights or the checkpoint format.
"""

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import treebank_grammar

OUTPUT = pathlib.Path(__file__).with_name("data") / "trained_parser"
CORPUS_PLACEHOLDER = "ptb:TREEBANK"
FLAGS = ["--hparams", "transformer_tiny", "--hparams_override",
         "num_layers=1,d_model=64,d_ff=256,num_heads=4,warmup_steps=200", "--vocab_size", "600",
         "--batch_tokens", "2048", "--train_steps", "750", "--eval_every", "375",
         "--eval_sentences", "50", "--keep_best", "f1", "--log_every", "500", "--seed", "3",
         "--deterministic"]


def main():
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        wsj = treebank_grammar.write_parsing_treebank(scratch / "treebank_3")
        run = scratch / "run"
        subprocess.run([sys.executable, "-m", "keras_transformer.trainer", "--model_dir",
                        str(run), "--data", f"ptb:{wsj}", *FLAGS], check=True)
        shutil.rmtree(OUTPUT, ignore_errors=True)
        OUTPUT.mkdir(parents=True)
        config = json.loads((run / "config.json").read_text())
        config["data"]["corpus"] = CORPUS_PLACEHOLDER  # the scratch path means nothing here
        (OUTPUT / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        shutil.copy(run / "vocab.model", OUTPUT / "vocab.model")
        last = max((run / "checkpoints").glob("ckpt-*"), key=lambda p: int(p.name[5:]))
        shutil.copytree(last, OUTPUT / "checkpoints" / last.name)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
