"""Makes tests/data/trained_tiny: transformer_tiny trained 300 steps on the bundled bible_en_es
corpus with a 2,000-id SentencePiece vocabulary built from it, the model every test of decoding,
export, serving and fine-tuning reads (conftest's `trained_model_dir`, `bible_vocab_path`).

    python tests/make_trained_tiny.py            # writes tests/data/trained_tiny (~1.5 MB)

It is committed instead of trained by each test session: the training took 90 of the 135 s the
suite's first fixture spent (one thread, a 2-core Cascade Lake Xeon, 2026-11-28), and every
module that decodes waited for it. kt-demo itself is still run fresh by tests/test_demo.py.

The flags are the ones the suite's kt-demo run used before (kt-demo passes them to kt-train):
trained enough that its distributions are a translation model's, not uniform, so beam search
and greedy decoding disagree on it, which is what the decoding tests need. Run it again after a
change to the model's weights or the checkpoint format; the tests' figures are computed from the
model, not stored with it. Only config.json, vocab.model and checkpoints/ are kept (the logs
would record this machine).
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

OUTPUT = pathlib.Path(__file__).with_name("data") / "trained_tiny"
STEPS = 300


def main():
    from keras_transformer import data

    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        vocabulary = scratch / "bible2k.model"
        data.build_vocabulary(data.corpus_texts(data.get_source("bible_en_es")), 2000,
                              vocabulary)
        run = scratch / "run"
        subprocess.run([
            sys.executable, "-m", "keras_transformer.trainer.task", "--model_dir", str(run),
            "--max_minutes", "10", "--data", "bible_en_es", "--hparams", "transformer_tiny",
            "--hparams_override", "warmup_steps=100", "--vocab", str(vocabulary),
            "--batch_tokens", "3000", "--max_pair_length", "64", "--train_steps", str(STEPS),
            "--eval_every", "100000", "--eval_sentences", "4", "--log_every", "100",
            "--deterministic", "--mixed_precision", "none"], check=True)
        shutil.rmtree(OUTPUT, ignore_errors=True)
        OUTPUT.mkdir(parents=True)
        for name in ("config.json", "vocab.model"):
            shutil.copy(run / name, OUTPUT / name)
        shutil.copytree(run / "checkpoints", OUTPUT / "checkpoints")
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
