"""kt-translate and kt-export on a trained model_dir, and the SavedModel in a process that imports
only tensorflow and tensorflow_text (tests/client_process.py)."""

import io
import json
import shutil
import sys

import hostile_inputs
import numpy as np
import pytest
import tensorflow as tf
from client_process import run_client
from conftest import SUITE_DTYPE_REASON, run_main, write_decoding_measurement

from keras_transformer import export
from keras_transformer.export import export_command, translate
from keras_transformer.export.lines import translate_lines
from keras_transformer.search import decode as decoding

# Lines a user or a client may send besides real sentences (the first two blank), as lines.
ODD_LINES = [text.replace(b"\n", b" ") for text in hostile_inputs.TEXTS.values()]
# line number in the input file -> offset of its first byte that is not UTF-8
BAD_UTF8_LINES = {24 + 1 + i: {"invalid UTF-8": 3, "truncated UTF-8 sequence": 2}[name]
                  for i, name in enumerate(hostile_inputs.TEXTS)
                  if name in ("invalid UTF-8", "truncated UTF-8 sequence")}

CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

model = tf.saved_model.load(sys.argv[1])
serve = model.signatures["serving_default"]
requests = json.loads(sys.stdin.read())

def call(texts):
    try:
        out = serve(inputs=tf.constant([t.encode("latin-1") for t in texts], tf.string))
        return {"translations": [t.decode("utf-8") for t in out["translations"].numpy()],
                "scores": out["scores"].numpy().tolist()}
    except tf.errors.InvalidArgumentError as error:
        return {"error": error.message}

results = [call(texts) for texts in requests]
ids = model.signatures["tokenize"](inputs=tf.constant(["In the beginning."]))["source_ids"]
by_ids = model.signatures["translate_ids"](source_ids=ids)
ours = sorted(m for m in sys.modules if m.split(".")[0] in
              ("keras_transformer", "data", "trainer", "export"))
print(json.dumps({"results": results, "ids": by_ids["ids"].numpy().tolist(),
                  "id_scores": by_ids["scores"].numpy().tolist(), "our_modules": ours,
                  "assets": sorted(a.asset_path.numpy().decode().rsplit("/", 1)[-1]
                                   for a in (model.vocabulary_file, model.settings_file))}))
"""


def kt_translate(*flags):
    return run_main(translate.main, *flags)


def kt_export(*flags):
    return run_main(export_command.main, *flags)


@pytest.fixture
def translator(trained):
    return export.Translator(trained.model, trained.vocabulary, max_input_length=64,
                             max_batch_size=64)


@pytest.fixture(scope="module")
def input_lines(dev_sentences, tmp_path_factory):
    """A file of 24 dev sentences and the odd lines; the references beside it."""
    directory = tmp_path_factory.mktemp("text")
    lines = [en.encode("utf-8") for en, _ in dev_sentences] + ODD_LINES
    (directory / "input.en").write_bytes(b"\n".join(lines) + b"\n")
    references = [es for _, es in dev_sentences] + ["-"] * len(ODD_LINES)
    (directory / "reference.es").write_text("\n".join(references) + "\n", encoding="utf-8")
    return directory / "input.en", directory / "reference.es", lines


@pytest.fixture(scope="module")
def translated(trained_model_dir, input_lines):
    """kt-translate's output for the input file, in batches of 5 sorted by length."""
    source, reference, lines = input_lines
    result = kt_translate("--model_dir", str(trained_model_dir), "--input", str(source),
                          "--reference", str(reference), "--batch_size", "5")
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def exported(trained_model_dir, tmp_path_factory):
    output = tmp_path_factory.mktemp("exported") / "translator"
    result = kt_export("--model_dir", str(trained_model_dir), "--output", str(output),
                       "--max_batch_size", "48", "--max_search_positions", "20000")
    assert result.returncode == 0, result.stderr
    assert "at most 20000 search positions a request" in result.stdout
    assert (output / "1" / "saved_model.pb").exists()
    return output


def test_kt_translate_writes_one_line_per_input_in_order(translated, input_lines, translator):
    _, _, lines = input_lines
    output = translated.stdout.split("\n")[:-1]
    assert len(output) == len(lines)
    # In order: one batch of everything, unsorted, gives the same lines.
    expected, _ = translate_lines(translator, lines, batch_size=64)
    assert output == expected
    assert output[24] == "" and output[25] == ""  # empty and blank lines: empty translations
    assert all(output[:24])


def test_kt_translate_reports_bleu_chrf_and_bad_lines(translated, input_lines):
    source, _, _ = input_lines
    assert "BLEU = " in translated.stderr and "chrF2 = " in translated.stderr
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0" in translated.stderr
    for number, offset in BAD_UTF8_LINES.items():
        assert f"{source}:{number}: not UTF-8 at byte {offset}" in translated.stderr
    assert f"translated {24 + len(ODD_LINES)} sentence(s)" in translated.stderr


def test_kt_translate_reads_stdin_and_writes_scores(trained_model_dir, monkeypatch, capsys):
    text = b"In the beginning God created the heaven and the earth.\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert translate.main(["--model_dir", str(trained_model_dir), "--scores",
                           "--beam_size", "2"]) == 0
    score, translation = capsys.readouterr().out.rstrip("\n").split("\t")
    assert float(score) < 0 and translation


def test_the_length_penalty_defaults_to_the_hparams_sets(trained_model_dir, tmp_path,
                                                        monkeypatch, capsys):
    model_dir = tmp_path / "run"
    shutil.copytree(trained_model_dir, model_dir)
    saved = json.loads((model_dir / "config.json").read_text())
    # As --hparams_override decode_alpha=1.5 sets it.
    saved["model"]["hparams"]["decode_alpha"] = 1.5
    (model_dir / "config.json").write_text(json.dumps(saved))
    # No lines, so that no search is traced: the summary line names the translator's settings
    # for an empty input too.
    for flags, alpha in (([], "1.5"), (["--alpha", "0.3"], "0.3")):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
        assert translate.main(["--model_dir", str(model_dir), "--beam_size", "2", *flags]) == 0
        assert f"beam 2, alpha {alpha}" in capsys.readouterr().err


def test_kt_translate_scores_a_corpus_split(trained_model_dir, dev_sentences, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "test"):
        (corpus / f"{split}.en").write_text("".join(en + "\n" for en, _ in dev_sentences[:3]))
        (corpus / f"{split}.es").write_text("".join(es + "\n" for _, es in dev_sentences[:3]))
    output = tmp_path / "test.translated.es"
    argv = ["--model_dir", str(trained_model_dir), "--data", str(corpus), "--source_lang", "en",
            "--target_lang", "es", "--output", str(output)]
    assert translate.main(argv) == 0  # --split test by default
    assert len(output.read_text().splitlines()) == 3
    assert "BLEU = " in capsys.readouterr().err
    assert "has no split 'dev'; it has train, test" in refusal(
        translate.main, [*argv, "--split", "dev", "--overwrite"], capsys)
    assert "--data reads the sources and references of --split" in refusal(
        translate.main, [*argv, "--input", str(output)], capsys)


def refusal(main, argv, capsys):
    """stderr of a command that must refuse `argv` with exit status 2."""
    try:
        status = main(argv)
    except SystemExit as exit:  # argparse's refusals
        status = exit.code
    assert status == 2
    return capsys.readouterr().err


def test_kt_translate_refusals_name_the_problem(trained_model_dir, input_lines, tmp_path,
                                                capsys):
    source, reference, _ = input_lines
    model_dir = ["--model_dir", str(trained_model_dir)]
    short = tmp_path / "short.es"
    short.write_text("uno\n")
    assert f"--reference {short} has 1 lines but {source} has {24 + len(ODD_LINES)}" in refusal(
        translate.main, [*model_dir, "--input", str(source), "--reference", str(short)], capsys)
    existing = tmp_path / "out.es"
    existing.write_text("keep me\n")
    assert "exists; pass --overwrite" in refusal(
        translate.main, [*model_dir, "--input", str(source), "--output", str(existing)], capsys)
    assert existing.read_text() == "keep me\n"
    assert f"{tmp_path}: no config.json" in refusal(
        translate.main, ["--model_dir", str(tmp_path), "--input", str(source)], capsys)
    assert f"cannot read --input {tmp_path / 'missing.en'}" in refusal(
        translate.main, [*model_dir, "--input", str(tmp_path / "missing.en")], capsys)
    assert f"--checkpoint {tmp_path} holds no model.weights.h5" in refusal(
        translate.main, [*model_dir, "--checkpoint", str(tmp_path), "--input", str(source)],
        capsys)
    untrained = tmp_path / "untrained"
    shutil.copytree(trained_model_dir, untrained, ignore=shutil.ignore_patterns("checkpoints"))
    assert "has no checkpoint yet; train first" in refusal(
        translate.main, ["--model_dir", str(untrained), "--input", str(source)], capsys)
    assert "--beam_size: must be at least 1, got 0" in refusal(
        translate.main, [*model_dir, "--beam_size", "0"], capsys)
    assert "--alpha: must be at least 0.0, got -0.5" in refusal(
        translate.main, [*model_dir, "--alpha", "-0.5"], capsys)
    assert "--alpha: must be at least 0.0, got nan" in refusal(
        translate.main, [*model_dir, "--alpha", "nan"], capsys)
    assert f"{tmp_path / 'no_such_dir'} is not a writable directory" in refusal(
        translate.main, [*model_dir, "--output", str(tmp_path / "no_such_dir" / "out")], capsys)


def test_the_saved_model_without_this_package_translates_as_kt_translate(
        exported, translated, input_lines):
    _, _, lines = input_lines
    requests = [
        [line.decode("latin-1") for line in lines],  # all at once, unsorted
        [], ["x"] * 49,  # an empty batch; one over --max_batch_size
        # 48 x beam 4 x (64 tokens + 50) positions: over --max_search_positions 20000.
        ["In the beginning God created the heaven and the earth. " * 10] * 48,
        ["In the beginning God created the heaven and the earth."],  # still serving
    ]
    result = run_client(CLIENT, exported / "1", input=json.dumps(requests), cwd=exported)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply["our_modules"] == []
    assert reply["assets"] == ["export.json", "vocab.model"]
    everything, empty, too_many, too_long, after = reply["results"]
    assert everything["translations"] == translated.stdout.split("\n")[:-1]
    assert everything["scores"][24:26] == [0.0, 0.0]
    assert all(np.isfinite(everything["scores"]))
    assert empty == {"translations": [], "scores": []}
    assert "max_batch_size" in too_many["error"] and "48" in too_many["error"]
    assert "(max_search_positions) of 20000 positions" in too_long["error"]
    assert after["translations"][0] and after["scores"][0] < 0
    assert reply["ids"][0][:reply["ids"][0].index(1) + 1] and reply["id_scores"][0] < 0


# Translates `inputs` with a SavedModel in a process without this package and scores `targets` as
# translations of them with its `score` signature.
SCORING_CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

model = tf.saved_model.load(sys.argv[1])
request = json.loads(sys.stdin.read())
inputs = tf.constant(request["inputs"])
out = model.signatures["serving_default"](inputs=inputs)
scored = model.signatures["score"](inputs=inputs, targets=tf.constant(request["targets"]))
print(json.dumps({"translations": [t.decode("utf-8") for t in out["translations"].numpy()],
                  "scores": out["scores"].numpy().tolist(),
                  "target_scores": scored["scores"].numpy().tolist()}))
"""


@pytest.mark.slow
def test_each_export_is_a_new_version_and_a_bfloat16_one_serves_with_half_the_weights(
        exported, trained_model_dir, dev_sentences, translated, translator, capsys, tmp_path,
        monkeypatch):
    """One kt-export for both (each export traces every signature's search): a second version
    beside `exported`'s first, from a checkpoint directory by another name, in the bfloat16
    `--dtype auto` chooses where bfloat16 computes fast (the first chose float32: the suite's
    measurement, conftest.py, says it is slow)."""
    assert f"{exported / '1'} exists" in refusal(export_command.main, [
        "--model_dir", str(trained_model_dir), "--output", str(exported), "--version", "1"],
        capsys)
    settings = json.loads((exported / "1" / "assets" / "export.json").read_text())  # kt-export's
    assert settings["beam_size"] == 4 and settings["alpha"] == 0.6 and (
        settings["dtype"] == "float32")
    assert settings["dtype_reason"] == SUITE_DTYPE_REASON
    assert settings["max_input_length"] == 64 and settings["max_batch_size"] == 48
    assert settings["max_search_positions"] == 20000
    assert settings["run"]["model"]["hparams_name"] == "transformer_tiny"
    assert settings["step"] == 300 and settings["checkpoint"].endswith("ckpt-300")
    # A checkpoint directory by another name (a copy the user kept) exports too.
    kept = exported.parent / "best"
    shutil.copytree(trained_model_dir / "checkpoints" / "ckpt-300", kept)
    # This machine measured as the Xeon with AMX: bfloat16 matmuls 3.7x float32.
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE",
                       str(write_decoding_measurement(tmp_path, 250.0, 925.0)))
    result = kt_export("--model_dir", str(trained_model_dir), "--checkpoint", str(kept),
                       "--output", str(exported))
    assert result.returncode == 0, result.stderr
    output = exported / "2"
    reason = ("--dtype auto: bfloat16 matmuls ran 3.70x float32 here (925 against 250 GFLOP/s "
              "at 128x512x2048, forward only, measured 2026-12-07, cached)")
    assert f"{kept}, in bfloat16 to {output} in " in result.stdout
    assert (f"the export computes in bfloat16 wherever it is served, as chosen for this machine "
            f"({reason})") in result.stdout
    assert sorted(p.name for p in exported.iterdir()) == ["1", "2"]  # no leftovers
    settings = json.loads((output / "assets" / "export.json").read_text())
    assert settings["step"] is None and settings["dtype"] == "bfloat16"
    assert settings["dtype_reason"] == reason
    float32_weights, bfloat16_weights = (
        sum(f.stat().st_size for f in (path / "variables").iterdir())
        for path in (exported / "1", output))
    assert bfloat16_weights < 0.6 * float32_weights
    # float32's translations of the 24 dev sentences (kt-translate's, which the float32 export
    # gives too) and their scores; the bfloat16 export's, and its scores of float32's.
    sentences = [en for en, _ in dev_sentences]
    float32 = translated.stdout.split("\n")[:len(sentences)]
    float32_scores = translator.score(tf.constant(sentences), tf.constant(float32))["scores"]
    reply = run_client(SCORING_CLIENT, output, cwd=output,
                       input=json.dumps({"inputs": sentences, "targets": float32}))
    assert reply.returncode == 0, reply.stderr
    bfloat16 = json.loads(reply.stdout)
    assert all(bfloat16["translations"]) and all(np.isfinite(bfloat16["scores"]))
    # Rounding weights and activations to bfloat16 (8 significant bits, epsilon 2**-7) moves a
    # translation's log-probability by a fraction of it: the bfloat16 export scores each of
    # float32's translations within 2 epsilons of float32's score. Measured: 0.57% off at most,
    # 0.14% the median; weights rounded further, to 5 significant bits, 1.65% (4 bits: 3.5%).
    np.testing.assert_allclose(bfloat16["target_scores"], float32_scores, rtol=2 * 2.0 ** -7)
    # Not every search takes float32's path: this model repeats itself ("¿Qué: ¿Qué: ..."), so
    # hypotheses nearly tie in the middle of a search and beam search keeps one or another as
    # rounding falls (two ends 3 nats apart from a tie of a few tenths). Measured: 16 of the
    # 24 translate alike (weights rounded to 6 significant bits: 14; 5: 10; 4: 6; 3: 1).
    same = sum(a == b for a, b in zip(float32, bfloat16["translations"]))
    assert same >= len(sentences) // 2, list(zip(float32, bfloat16["translations"]))


# saved_model_cli as `python -m tensorflow.python.tools.saved_model_cli argv...` runs it, in
# the client process (TensorFlow's and nothing of this project's: no start-up of its own).
SAVED_MODEL_CLI = r"""
import sys
from tensorflow.python.tools import saved_model_cli

sys.argv = ["saved_model_cli", *sys.argv[1:]]
try:
    saved_model_cli.main()
except SystemExit as exit_info:  # absl's app.run: sys.exit(None) for success
    if exit_info.code not in (None, 0):
        raise
"""


def test_saved_model_cli_lists_the_string_signatures(exported):
    result = run_client(SAVED_MODEL_CLI, "show", "--all", "--dir", exported / "1")
    assert result.returncode == 0, result.stderr
    serving = result.stdout.split("signature_def['serving_default']")[1].split("signature_def")[0]
    assert "inputs['inputs']" in serving and "DT_STRING" in serving
    assert "outputs['translations']" in serving and "outputs['scores']" in serving
    assert "signature_def['translate_ids']" in result.stdout
    assert "signature_def['tokenize']" in result.stdout


def test_requests_are_bounded(translator):
    long_text = tf.constant([" ".join(["word"] * 10_000)])
    ids = translator.tokenize(long_text)["source_ids"].numpy()
    assert ids.shape == (1, 64) and ids[0, -1] == 1  # cut to max_input_length, still ended
    long_ids = np.full((1, 500), 5, "int32")
    result = translator.translate_ids(tf.constant(long_ids))
    assert result["ids"].shape[1] <= 64 + 50  # the input is cut, so is the output
    cut = long_ids[:, :64].copy()
    cut[0, -1] = 1  # cut as tokenize cuts: the end of sentence stays
    np.testing.assert_array_equal(result["ids"], translator.translate_ids(cut)["ids"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_batch_size"):
        translator.translate(tf.constant(["x"] * 65))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, 2000\)"):
        translator.translate_ids(tf.constant([[5, 2000, 1]]))


@pytest.mark.slow
def test_under_xla_the_translator_pads_to_a_few_shapes_and_translates_the_same(
        trained, dev_sentences):
    """kt-translate / kt-export --jit_compile: XLA compiles a program for each input shape."""
    # Two padded lengths: each function traces a search for every one (a switch's branches).
    settings = dict(max_input_length=11, max_batch_size=8)
    graph = export.Translator(trained.model, trained.vocabulary, **settings)
    xla = export.Translator(trained.model, trained.vocabulary, jit_compile=True, **settings)
    assert (xla.xla_shapes.lengths, xla.xla_shapes.rows) == ([7, 11], [1, 2, 4, 8])
    traced = decoding._beam_decode_xla.experimental_get_tracing_count()
    english = [en for en, _ in dev_sentences]
    # 3 sentences padded to 4 rows, at the longer length; 2 (one empty) at the shorter, a row
    # count that fits (as 1 would: each row count XLA meets is a compilation of its own).
    for texts in (english[:3], ["In the beginning.", ""]):
        ids = graph.tokenize(tf.constant(texts))["source_ids"]
        expected, got = graph.translate_ids(ids), xla.translate_ids(ids)
        width = expected["ids"].shape[1]
        assert got["ids"].shape[0] == len(texts) and not got["ids"][:, width:].numpy().any()
        np.testing.assert_array_equal(got["ids"][:, :width], expected["ids"])
        np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-4)
    prefixes = graph.tokenize_prefixes(tf.constant(["Y", "En el"]))["prefix_ids"]
    ids = graph.tokenize(tf.constant(english[4:6]))["source_ids"]
    expected = graph.translate_n_best_ids_with_prefix(ids, prefixes)["ids"]
    got = xla.translate_n_best_ids_with_prefix(ids, prefixes)["ids"]
    np.testing.assert_array_equal(got[..., :expected.shape[-1]], expected)
    # A glossary's rows padded as the sources are (processors.rows_added): 3 sentences run as 4,
    # the one without a phrase and the added one held to nothing.
    terms = graph.tokenize_prefixes(tf.constant(["Dios", "tierra"]))["prefix_ids"]
    phrase_ids = tf.stack([terms[0], tf.zeros_like(terms[0]), terms[1]])[:, None, :]
    ids = graph.tokenize(tf.constant(english[6:9]))["source_ids"]
    expected = graph.translate_n_best_ids_with_glossary(ids, phrase_ids)
    got = xla.translate_n_best_ids_with_glossary(ids, phrase_ids)
    np.testing.assert_array_equal(got["ids"][..., :expected["ids"].shape[-1]], expected["ids"])
    np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-4)
    # One trace a padded length for each of the three functions; XLA compiles each at a row
    # count.
    assert decoding._beam_decode_xla.experimental_get_tracing_count() - traced == 3 * 2


def test_kt_export_refuses_xla_for_ctranslate2(trained_model_dir, tmp_path, capsys):
    assert "--jit_compile is for a SavedModel" in refusal(export_command.main, [
        "--model_dir", str(trained_model_dir), "--output", str(tmp_path / "ct2"), "--format",
        "ctranslate2", "--jit_compile"], capsys)


def test_kt_export_refuses_a_file_as_output(trained_model_dir, tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("")
    assert f"--output {target} is a file" in refusal(export_command.main, [
        "--model_dir", str(trained_model_dir), "--output", str(target)], capsys)
