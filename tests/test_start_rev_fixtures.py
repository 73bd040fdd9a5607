"""Files made before keras_transformer/'s flat modules moved into sub-packages (issue 81) load
unchanged and translate byte for byte as they did: users hold .keras files and SavedModels
written by older code, and kt-translate's output on a model_dir must not move with the code.

tests/data/made_at_d74f1e7 was written at commit d74f1e7, the last one before the move, by
that commit's code (tests/make_start_rev_fixtures.py, which says how): model.keras (trained_tiny
saved by `model.save`), saved_model/1 (`kt-export` of trained_tiny), sentences.txt (7 verses of
the bundled corpus, curly quotes, one longer than the model's 64-subword input limit) and
expected.json, the translations that code gave of them four ways:

(a) `kt-translate --model_dir tests/data/trained_tiny --input sentences.txt`;
(b) `Translator.from_model_dir(tests/data/trained_tiny).translate(sentences)`;
(c) the SavedModel's serving_default, loaded by `tf.saved_model.load` where nothing of this
    package is imported yet;
(d) model.keras loaded by `keras.saving.load_model` after `import keras_transformer` (which
    must register every class under the Keras name the file records, `keras_transformer>
    Transformer`, wherever its module moved) and decoded by `kt.beam_decode` (beam 4, alpha
    0.6) on `data.Vocabulary.load(trained_tiny/vocab.model)`'s ids.

Only public import paths that outlive the move are used here: `import keras_transformer as
kt`, `from keras_transformer import data`, `from keras_transformer.export import Translator`,
`keras.saving`, `tf.saved_model.load`, and the documented module form of kt-translate,
`python -m keras_transformer.export.translate`. Never regenerate the fixtures at a later
commit: they are what d74f1e7 wrote.
"""

import json
import pathlib
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

import keras_transformer as kt

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "made_at_d74f1e7"
TRAINED_TINY = ROOT / "tests" / "data" / "trained_tiny"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
SENTENCES = EXPECTED["sentences"]
# Scores are kept as d74f1e7's float32 values, exactly; this machine gives them again exactly,
# but another CPU's kernels may sum in another order (last bits). A change in how scores are
# computed (a length penalty, an input cut) moves them by far more: line 7's score, its input
# cut at 64 subwords or not, differs by 0.05.
SCORE_RTOL = 1e-5

# (c), then (b), (d) and (a), in one fresh process (cwd: the checkout, so that `python -c` imports
# its keras_transformer, as `python -m pytest` does here). The SavedModel is loaded first,
# before anything of this package is imported, as a TF Serving client would load it.
CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

fixtures, trained_tiny = sys.argv[1:3]
sentences = json.loads(sys.stdin.read())


def texts(tensor):
    return [text.decode("utf-8") for text in tensor.numpy()]


serve = tf.saved_model.load(fixtures + "/saved_model/1").signatures["serving_default"]
out = serve(inputs=tf.constant(sentences))
saved_model = {"translations": texts(out["translations"]),
               "scores": out["scores"].numpy().tolist(),
               "our_modules": sorted(m for m in sys.modules
                                     if m.split(".")[0] == "keras_transformer")}

import keras
import keras_transformer as kt
from keras_transformer import data
from keras_transformer.export import Translator

# Kept in a name: Translator.from_model_dir(...).translate(...) in one expression fails at
# d74f1e7 (AttributeError: 'NoneType' object has no attribute 'tokenize'): a tf.function
# method holds its instance weakly, and nothing else held this one while it ran.
model_dir_translator = Translator.from_model_dir(trained_tiny)
out = model_dir_translator.translate(tf.constant(sentences))
translator = {"translations": texts(out["translations"]),
              "scores": out["scores"].numpy().tolist()}

model = keras.saving.load_model(fixtures + "/model.keras")
vocabulary = data.Vocabulary.load(trained_tiny + "/vocab.model")
ids, scores = kt.beam_decode(model, vocabulary.encode(tf.constant(sentences)).to_tensor())
keras_file = {"translations": texts(vocabulary.detokenize(ids[:, 0])),
              "scores": scores[:, 0].numpy().tolist(),
              "is_a_transformer": isinstance(model, kt.Transformer)}
# (a), the documented module form of kt-translate, run as `python -m` runs it: its stdout's
# bytes, read back as latin-1 (one character a byte).
import io, runpy
stdout, sys.stdout = sys.stdout, io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
sys.argv = ["keras_transformer.export.translate", "--model_dir", trained_tiny, "--input",
            fixtures + "/sentences.txt"]
try:
    runpy.run_module("keras_transformer.export.translate", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exit_info:
    code = exit_info.code
sys.stdout.flush()
written, sys.stdout = sys.stdout.buffer.getvalue(), stdout
kt_translate = {"exit_code": code, "stdout": written.decode("latin-1")}
print(json.dumps({"saved_model": saved_model, "translator": translator,
                  "keras_file": keras_file, "kt_translate": kt_translate}))
"""


def run(argv, **kwargs):
    return subprocess.run([str(arg) for arg in argv], capture_output=True, cwd=ROOT,
                          timeout=600, **kwargs)


@pytest.fixture(scope="module")
def in_a_fresh_process():
    """(a), (b), (c) and (d) of the fixtures' sentences, from one new Python process."""
    result = run([sys.executable, "-c", CLIENT, FIXTURES, TRAINED_TINY],
                 input=json.dumps(SENTENCES), text=True, encoding="utf-8")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def check(got, expected):
    assert got["translations"] == expected["translations"]  # str equal: UTF-8 bytes equal
    np.testing.assert_allclose(got["scores"], expected["scores"], rtol=SCORE_RTOL)


def test_the_four_ways_translated_alike_at_d74f1e7():
    """What the fixtures record (no computing): d74f1e7 gave one translation of each sentence
    four ways, so a later difference is the later code's."""
    translations = [EXPECTED[way]["translations"] for way in
                    ("kt_translate", "translator", "saved_model", "keras_file")]
    assert len(SENTENCES) == 7 and all(t == translations[0] for t in translations)
    assert EXPECTED["made_at"].startswith("d74f1e7")
    lines = (FIXTURES / "sentences.txt").read_text(encoding="utf-8").split("\n")
    assert lines == [*SENTENCES, ""]


def test_the_keras_file_names_classes_registered_by_import():
    """The .keras config names each class of this package by its registered Keras name (and the
    module it was in at d74f1e7, which Keras reads only for unregistered names): `import
    keras_transformer` must register every such name, to the class that loads the file."""
    with zipfile.ZipFile(FIXTURES / "model.keras") as archive:
        config = json.loads(archive.read("config.json"))
    names = set()

    def collect(item):
        if isinstance(item, dict):
            if item.get("registered_name"):
                names.add(item["registered_name"])
            for value in item.values():
                collect(value)
        elif isinstance(item, list):
            for value in item:
                collect(value)

    collect(config)
    assert names == {"keras_transformer>Transformer"}
    assert keras.saving.get_registered_object("keras_transformer>Transformer") is kt.Transformer


def test_kt_translate_writes_the_same_bytes(in_a_fresh_process):
    """(a): the command, as documented (`python -m keras_transformer.export.translate`, run by
    runpy as `-m` runs it), on the committed model_dir."""
    got = in_a_fresh_process["kt_translate"]
    assert got["exit_code"] == 0
    expected = "".join(f"{line}\n" for line in EXPECTED["kt_translate"]["translations"])
    assert got["stdout"].encode("latin-1") == expected.encode("utf-8")


def test_the_saved_model_serves_the_same_translations(in_a_fresh_process):
    """(c): a SavedModel exported at d74f1e7 needs nothing of this package to load."""
    got = in_a_fresh_process["saved_model"]
    assert got.pop("our_modules") == []
    check(got, EXPECTED["saved_model"])


def test_the_translator_translates_the_same(in_a_fresh_process):
    """(b): `Translator.from_model_dir` on the committed model_dir."""
    check(in_a_fresh_process["translator"], EXPECTED["translator"])


def test_the_keras_file_loads_and_beam_decodes_the_same(in_a_fresh_process):
    """(d): model.keras, saved at d74f1e7, loaded by Keras after `import keras_transformer`."""
    got = in_a_fresh_process["keras_file"]
    assert got.pop("is_a_transformer")
    check(got, EXPECTED["keras_file"])
