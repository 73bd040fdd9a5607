"""Makes tests/data/made_at_d74f1e7: files written by the package as it was at commit d74f1e7,
before keras_transformer/'s flat modules moved into sub-packages (issue 81), and the
translations that commit's code gave of them. tests/test_start_rev_fixtures.py checks that the
code of every later commit loads the same files and translates them byte for byte alike.

Run once, at d74f1e7, with that commit's code: a checkout of d74f1e7 installed with
`pip install -e .` into a venv, the script run by that venv's Python from a directory outside
any checkout (so `import keras_transformer` is the installed d74f1e7 one, which the script
checks through git before it writes anything):

    cd /tmp/fixwork && /path/to/d74f1e7-checkout/.venv/bin/python \\
        /path/to/repo/tests/make_start_rev_fixtures.py      # writes tests/data/made_at_d74f1e7

(the commit's files were made so: /work/runs/base, a clone at d74f1e7, with its .venv; the
script ran from /tmp/fixwork, one TensorFlow process at a time). The source model is
tests/data/trained_tiny (transformer_tiny, 300 steps, a 2,000-id vocabulary), copied into a
scratch directory and named there by the relative path `tests/data/trained_tiny`, so that
what the export records of it (export.json's checkpoint) names no machine's directories.
It writes:

- model.keras: `model_dir.load(trained_tiny).model.save(...)` (a .keras zip: the config names
  each layer by its registered Keras name and module, which the move must keep loadable).
- saved_model/1/: `kt-export --model_dir tests/data/trained_tiny` (its defaults: float32, the
  run's beam 4 and alpha 0.6), only saved_model.pb, variables/ and assets/ (vocab.model and
  export.json) kept: what `tf.saved_model.load` reads.
- sentences.txt: 7 English verses of the bundled bible_en_es corpus (`LINES`), with curly
  quotes and apostrophes as the corpus writes them; the sixth is long (55 subwords) and the
  seventh longer than the run's 64-subword input limit (72), which kt-translate, the
  Translator and the SavedModel cut to 64 subwords and `kt.beam_decode` on a vocabulary's ids
  does not: (d) scores that line's translation otherwise (-9.0128 against -8.9627 at
  d74f1e7; the translation is the same).
- expected.json: the translations of sentences.txt by (a) `kt-translate --model_dir
  tests/data/trained_tiny --input sentences.txt`, (b) `Translator.from_model_dir(...)
  .translate(...)`, (c) the SavedModel's serving_default signature in a process that imports
  only tensorflow and tensorflow_text, (d) model.keras loaded by `keras.saving.load_model`
  (after `import keras_transformer`) in a fresh process and decoded by `kt.beam_decode` (its
  defaults: beam 4, alpha 0.6) on `data.Vocabulary.load(trained_tiny/vocab.model)`'s ids, then
  detokenized; with the scores of (b), (c) and (d) (float32, written exactly), the commit and
  the versions of the libraries. At d74f1e7 the four gave the same 7 translations; (b) and (c)
  the same scores, (d) scores within 2e-7 (relative) of theirs on the other lines (its batch
  is padded to 72 subwords, not 64, so its sums round otherwise).
"""

import gzip
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

START_REV = "d74f1e7"
TESTS = pathlib.Path(__file__).resolve().parent
OUTPUT = TESTS / "data" / f"made_at_{START_REV}"
TRAINED_TINY = TESTS / "data" / "trained_tiny"
MODEL_DIR = "tests/data/trained_tiny"  # relative to the scratch directory the commands run in
CORPUS = TESTS.parent / "data" / "corpora" / "bible_en_es"
# (split, line number from 1) of the bundled corpus's English side.
LINES = (("train", 1),    # In the beginning, God created the heavens and the earth.
         ("train", 3),    # God said, “Let there be light,” and there was light.
         ("train", 89),   # Yahweh said to Cain, “Where is Abel, ...? ... I don’t know. ...”
         ("dev", 375),    # Don’t be deceived, my beloved brothers.
         ("dev", 324),    # A little yeast grows through the whole lump.
         ("dev", 1),      # How the city sits solitary, ... (55 subwords)
         ("dev", 7))      # Jerusalem remembers ... (72 subwords: over the 64 of the run)

# (c): the SavedModel where nothing of this package is imported, as a TF Serving client.
SAVED_MODEL_CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

sentences = json.loads(sys.stdin.read())
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serve(inputs=tf.constant(sentences))
ours = sorted(m for m in sys.modules if m.split(".")[0] == "keras_transformer")
print(json.dumps({"translations": [t.decode("utf-8") for t in out["translations"].numpy()],
                  "scores": out["scores"].numpy().tolist(), "our_modules": ours}))
"""

# (d): the .keras file in a process that never built the model.
KERAS_FILE_CLIENT = r"""
import json, sys
import keras
import tensorflow as tf
import keras_transformer as kt
from keras_transformer import data

sentences = json.loads(sys.stdin.read())
model = keras.saving.load_model(sys.argv[1])
vocabulary = data.Vocabulary.load(sys.argv[2])
source_ids = vocabulary.encode(tf.constant(sentences)).to_tensor()
ids, scores = kt.beam_decode(model, source_ids)
print(json.dumps({"translations": [t.decode("utf-8") for t in
                                   vocabulary.detokenize(ids[:, 0]).numpy()],
                  "scores": scores[:, 0].numpy().tolist(),
                  "model_class": type(model).__module__ + "." + type(model).__name__}))
"""


def corpus_line(split, number):
    with gzip.open(CORPUS / f"{split}.en.gz", "rt", encoding="utf-8") as lines:
        for index, line in enumerate(lines, 1):
            if index == number:
                return line.rstrip("\n")
    raise ValueError(f"{split}.en has no line {number}")


def command(name):
    """The kt-* console script installed beside this Python."""
    return str(pathlib.Path(sys.executable).with_name(name))


def run(argv, cwd, input=None):
    result = subprocess.run([str(arg) for arg in argv], cwd=cwd, input=input,
                            capture_output=True, text=True, encoding="utf-8", timeout=900)
    if result.returncode != 0:
        sys.exit(f"{argv[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


def package_revision(kt):
    """The commit of the checkout the imported keras_transformer comes from."""
    directory = pathlib.Path(kt.__file__).resolve().parent
    revision = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    changed = subprocess.run(["git", "-C", str(directory.parent), "status", "--porcelain",
                              "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return revision, directory, changed


def main():
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer import model_dir
    from keras_transformer.export import Translator
    from keras_transformer.model_dir import config_file

    revision, directory, changed = package_revision(kt)
    if not revision.startswith(START_REV) or changed:
        sys.exit(f"keras_transformer comes from {directory} at {revision}"
                 f"{' with changes' if changed else ''}, not a clean {START_REV}: run this "
                 f"with that commit's code (see the docstring)")

    sentences = [corpus_line(split, number) for split, number in LINES]
    assert all(sentences) and not any("\r" in s or "\n" in s for s in sentences)
    with tempfile.TemporaryDirectory(prefix="start-rev-fixtures-") as scratch:
        scratch = pathlib.Path(scratch)
        shutil.copytree(TRAINED_TINY, scratch / MODEL_DIR)
        shutil.rmtree(OUTPUT, ignore_errors=True)
        OUTPUT.mkdir(parents=True)
        (OUTPUT / "sentences.txt").write_text("".join(s + "\n" for s in sentences),
                                              encoding="utf-8")

        # (a) kt-translate, its defaults (the run's beam 4, alpha 0.6, input limit 64).
        kt_translate = run([command("kt-translate"), "--model_dir", MODEL_DIR,
                            "--input", OUTPUT / "sentences.txt"], cwd=scratch)
        kt_translate = kt_translate.split("\n")
        assert kt_translate[-1] == "" and len(kt_translate) == len(sentences) + 1, kt_translate
        kt_translate = kt_translate[:-1]

        # kt-export's default float32 export; what loading it needs, kept.
        print(run([command("kt-export"), "--model_dir", MODEL_DIR, "--output", "export"],
                  cwd=scratch), end="")
        version = OUTPUT / "saved_model" / "1"
        version.mkdir(parents=True)
        shutil.copy(scratch / "export" / "1" / "saved_model.pb", version)
        for name in ("variables", "assets"):
            shutil.copytree(scratch / "export" / "1" / name, version / name)

        # model.keras, through the public model_dir loading; (b) the Translator.
        loaded = model_dir.load(scratch / MODEL_DIR)
        loaded.model.save(OUTPUT / "model.keras")
        translator = Translator.from_model_dir(scratch / MODEL_DIR)
        out = translator.translate(tf.constant(sentences))
        by_translator = {"translations": [t.decode("utf-8") for t in
                                          out["translations"].numpy()],
                         "scores": out["scores"].numpy().tolist()}

        # (c) and (d), each in a fresh process.
        by_saved_model = json.loads(run([sys.executable, "-c", SAVED_MODEL_CLIENT, version],
                                        cwd=scratch, input=json.dumps(sentences)))
        assert by_saved_model.pop("our_modules") == [], "the client imported keras_transformer"
        by_keras_file = json.loads(run(
            [sys.executable, "-c", KERAS_FILE_CLIENT, OUTPUT / "model.keras",
             scratch / MODEL_DIR / "vocab.model"], cwd=scratch, input=json.dumps(sentences)))
        model_class = by_keras_file.pop("model_class")

    expected = {
        "made_at": revision,
        "made_by": "tests/make_start_rev_fixtures.py",
        "versions": config_file.versions(),
        "model_class_at_start_rev": model_class,
        "sentences": sentences,
        "kt_translate": {
            "command": f"kt-translate --model_dir {MODEL_DIR} --input sentences.txt",
            "translations": kt_translate},
        "translator": {
            "call": f"Translator.from_model_dir({MODEL_DIR!r}).translate(sentences)",
            **by_translator},
        "saved_model": {
            "call": "tf.saved_model.load('saved_model/1').signatures['serving_default']"
                    "(inputs=sentences), in a process importing only tensorflow and "
                    "tensorflow_text",
            **by_saved_model},
        "keras_file": {
            "call": "kt.beam_decode(keras.saving.load_model('model.keras'), "
                    f"data.Vocabulary.load('{MODEL_DIR}/vocab.model').encode(sentences)"
                    ".to_tensor()) (beam 4, alpha 0.6), the best beam detokenized",
            **by_keras_file},
    }
    (OUTPUT / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False)
                                          + "\n", encoding="utf-8")
    size = sum(f.stat().st_size for f in OUTPUT.rglob("*") if f.is_file())
    print(f"wrote {OUTPUT} ({size:,} bytes)")
    for name in ("kt_translate", "translator", "saved_model", "keras_file"):
        print(name, json.dumps(expected[name]["translations"], ensure_ascii=False))


if __name__ == "__main__":
    main()
