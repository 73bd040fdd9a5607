"""Which translations to trust (keras_transformer/search/confidence.py, export/checks.py,
export/calibrate.py): the signs of trouble against hand-made outputs and attention, the
cross-attention against the model's own weights, the calibration's fit against known weights,
and kt-calibrate / kt-translate --checks --alignments --min_confidence on the trained model."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from client_process import run_client
from conftest import CALIBRATION_LINES, PRODUCTION_FLAGS, bundled_lines, run_main

from keras_transformer.export import calibrate, checks, translate
from keras_transformer.model_dir import CALIBRATION_FILE
from keras_transformer.search import confidence

EOS = 1


def test_a_loop_is_an_ngram_three_times_in_a_row_before_the_end():
    rows = [[5, 6, 5, 6, 5, 6, EOS],  # a bigram three times
            [5, 6, 5, 6, EOS, 0, 0],  # twice only
            [7, 7, 7, EOS, 0, 0, 0],  # a unigram three times
            [7, 7, EOS, 7, 0, 0, 0],  # the third after the end of sentence: not the output
            [2, 3, 4, 5, 2, 3, 4],  # a 4-gram that came back once, stopped at the limit
            [0, 0, 0, 0, 0, 0, 0]]
    assert confidence.repeated_ngrams(tf.constant(rows)).numpy().tolist() == [
        True, False, True, False, False, False]
    assert confidence.stopped_at_limit(tf.constant(rows)).numpy().tolist() == [
        False, False, False, False, True, False]
    assert confidence.repeated_ngrams(tf.constant([[2, 3, 4, 5] * 3 + [EOS]])).numpy()[0]
    # A 5-gram is longer than LOOP_NGRAM: not counted.
    assert not confidence.repeated_ngrams(tf.constant([[2, 3, 4, 5, 6] * 3 + [EOS]])).numpy()[0]


def test_uncovered_and_alignment_read_the_attention_as_documented():
    source = tf.constant([[9, 8, 7, EOS], [9, EOS, 0, 0]])
    target = tf.constant([[4, 5, EOS], [4, EOS, 0]])
    # [batch, target, source]: row 0 attends 0.9 to word 0 twice, word 1 a little, word 2 never
    attention = tf.constant([[[0.9, 0.05, 0.0, 0.05], [0.8, 0.1, 0.0, 0.1], [0.1, 0.2, 0.2, 0.5]],
                             [[0.6, 0.4, 0.0, 0.0], [0.3, 0.7, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    assert confidence.uncovered(attention, source).numpy().tolist() == pytest.approx(
        [2 / 3, 0.0])  # words 1 and 2 got 0.35 and 0.2 < COVERED; row 1's word got 0.9
    assert confidence.alignment(attention, source, target).numpy().tolist() == [
        [0, 0, -1], [0, -1, -1]]
    empty = confidence.uncovered(attention[:1], tf.constant([[0, 0, 0, 0]]))
    assert empty.numpy().tolist() == [0.0]


def test_cross_attention_is_the_penultimate_layers_head_average_and_ignores_batch_mates(trained):
    model = trained.model
    source = tf.constant([[45, 230, 17, EOS]], tf.int32)
    target = tf.constant([[80, 31, 99, EOS, 0]], tf.int32)
    attention = confidence.cross_attention(model, source, target)
    decoder_inputs = tf.constant([[0, 80, 31, 99, EOS]], tf.int32)
    _, weights = model((source, decoder_inputs), return_attention_scores=True)
    layers = weights["encoder_decoder_attention"]
    expected = tf.reduce_mean(layers[:, max(0, layers.shape[1] - 2)], axis=1).numpy()
    expected[:, 4:] = 0  # the token after the end of sentence is not the translation's
    np.testing.assert_allclose(attention.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(attention.numpy()[0, :4].sum(axis=1), 1.0, atol=1e-5)
    # With a longer batch mate (more source and target padding) the row is the same.
    padded_source = tf.constant([[45, 230, 17, EOS, 0, 0], [5, 6, 7, 8, 9, EOS]], tf.int32)
    padded_target = tf.constant([[80, 31, 99, EOS, 0, 0, 0], [3] * 6 + [EOS]], tf.int32)
    together = confidence.cross_attention(model, padded_source, padded_target).numpy()
    np.testing.assert_allclose(together[0, :5, :4], attention.numpy()[0], atol=1e-5)
    assert not together[0, :, 4:].any() and not together[0, 4:].any()


def test_the_calibration_recovers_known_weights_and_round_trips_through_json():
    rng = np.random.default_rng(3)
    inputs = rng.normal(size=[4000, len(confidence.FEATURES)]) * [1, 0.5, 0.5, 0.2, 10] + [
        -2, 0, 0, 0.2, 30]
    weights, bias = np.array([1.5, -0.8, -0.5, -1.0, 0.3]), 0.2
    standard = (inputs - inputs.mean(0)) / inputs.std(0)
    targets = 1 / (1 + np.exp(-(standard @ weights + bias)))
    fitted = confidence.Calibration.fit(inputs, targets, l2=0)
    np.testing.assert_allclose(fitted.weights, weights, atol=1e-6)
    assert fitted.bias == pytest.approx(bias, abs=1e-6)
    np.testing.assert_allclose(fitted.confidence(inputs).numpy(), targets, atol=1e-5)
    again = confidence.Calibration.from_json(fitted.to_json())
    np.testing.assert_allclose(again.confidence(inputs).numpy(), targets, atol=1e-5)
    constant = confidence.Calibration.fit(inputs * [1, 0, 0, 1, 1], targets)  # no loops ever
    assert constant.weights[1] == 0 and np.isfinite(constant.weights).all()


@pytest.mark.parametrize("text, named", [
    ("{", "not a usable calibration"), ('{"features": ["score"]}', "calibrate again"),
    (json.dumps({"features": list(confidence.FEATURES), "mean": [0] * 5, "scale": [1] * 5}),
     "no field 'weights'"),
    (json.dumps({"features": list(confidence.FEATURES), "mean": [0] * 5, "scale": [1] * 5,
                 "weights": [1, 2], "bias": 0}), "5 numbers each")])
def test_a_calibration_that_cannot_be_used_is_refused_by_name(text, named):
    with pytest.raises(ValueError, match="runs/x/calibration.json: .*" + named):
        confidence.Calibration.from_json(text, "runs/x/calibration.json")


def test_spearman_is_pearson_of_average_ranks():
    a, b = [1, 2, 2, 5, 4], [10, 30, 20, 50, 40]
    ranks_a, ranks_b = [0, 1.5, 1.5, 4, 3], [0, 2, 1, 4, 3]
    assert confidence.spearman(a, b) == pytest.approx(np.corrcoef(ranks_a, ranks_b)[0, 1])
    assert confidence.spearman([1, 1, 1], [1, 2, 3]) == 0.0


@pytest.fixture(scope="module")
def calibrated(calibrated_run):
    return calibrated_run


@pytest.fixture(scope="module")
def checked(calibrated):
    """kt-translate --checks --alignments' records of the calibration's sentences, with the
    flags it was fitted with; its stderr."""
    model_dir, directory = calibrated
    result = run_main(translate.main, "--model_dir", str(model_dir), "--input",
                      str(directory / "dev.en"), "--checks", "--alignments", "--batch_size", "7",
                      *PRODUCTION_FLAGS)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def assert_same_checks(records, translations, served):
    """`served`'s signs (lists or arrays by name) equal the records' wherever the translation is
    the same: this model loops ("¿Qué: ¿Qué: ..."), and a search in another batch can take
    another branch of a near tie. Most must be the same."""
    same = [i for i, (r, t) in enumerate(zip(records, translations)) if r["translation"] == t]
    assert len(same) >= 0.9 * len(records)
    for name in ("confidence", "uncovered"):
        np.testing.assert_allclose([served[name][i] for i in same],
                                   [records[i][name] for i in same], atol=1e-4)
    for name in ("repeated_ngrams", "stopped_at_limit"):
        assert [bool(served[name][i]) for i in same] == [records[i][name] for i in same]


def test_kt_calibrate_records_what_it_fitted_on(calibrated):
    model_dir, directory = calibrated
    fit = json.loads((model_dir / CALIBRATION_FILE).read_text())
    assert fit["features"] == list(confidence.FEATURES)
    assert fit["about"]["sentences"] == CALIBRATION_LINES and fit["about"]["beam_size"] == 1
    assert fit["about"]["checkpoint"].endswith("ckpt-300") and fit["about"]["mean_chrf"] > 0


def test_checks_give_flags_confidence_and_word_alignments(calibrated, checked):
    model_dir, _ = calibrated
    records, stderr = checked
    assert "warning" not in stderr  # fitted with the same checkpoint and search
    sources = [line.rstrip("\n") for line in bundled_lines("dev", "en", CALIBRATION_LINES)]
    assert [r["line"] for r in records] == list(range(1, CALIBRATION_LINES + 1))
    for record, source in zip(records, sources):
        assert 0 < record["confidence"] < 1 and 0 <= record["uncovered"] <= 1
        pairs = [tuple(map(int, pair.split("-"))) for pair in record["alignment"].split()]
        assert all(i < len(source.split()) and j < len(record["translation"].split())
                   for i, j in pairs)
    # The SavedModel's serving_default gives the same: see the last test.


def test_min_confidence_leaves_low_lines_untranslated_and_marked(calibrated, checked, tmp_path):
    model_dir, _ = calibrated
    records, _ = checked
    lines = bundled_lines("dev", "en", 12)
    (tmp_path / "few.en").write_text("".join(lines), encoding="utf-8")
    threshold = float(np.median([r["confidence"] for r in records[:12]]))
    result = run_main(translate.main, "--model_dir", str(model_dir), "--input",
                      tmp_path / "few.en", "--checks", "--min_confidence", threshold,
                      *PRODUCTION_FLAGS)
    assert result.returncode == 0, result.stderr
    again = [json.loads(line) for line in result.stdout.splitlines()]
    low = [r["confidence"] < threshold for r in again]
    assert 0 < sum(low) < len(again) and [r["untranslated"] for r in again] == low
    assert all((r["translation"] is None) == r["untranslated"] for r in again)
    assert f"{sum(low)} of 12 line(s) left untranslated" in result.stderr
    # Without --checks, a low line is its source after the mark.
    fake = [checks.Checked(False, False, 0.0, value, (), "0-0") for value in (0.2, 0.9)]
    text, count = checks.checked_text([b"Low one.", b"High one."], ["-", "Alta."],
                                      [[None], [None]], fake, as_json=False, alignments=False,
                                      min_confidence=0.5)
    assert (text, count) == ("[untranslated] Low one.\nAlta.\n", 1)


def test_checks_refuse_what_they_cannot_honour(calibrated, trained_model_dir, tmp_path):
    model_dir, directory = calibrated
    no_fit = run_main(translate.main, "--model_dir", str(trained_model_dir), "--input",
                      str(directory / "dev.en"), "--min_confidence", "0.5")
    assert no_fit.returncode == 2 and "has no calibration; fit one with kt-calibrate" in (
        no_fit.stderr)
    both = run_main(translate.main, "--model_dir", str(model_dir), "--alignments", "--markup")
    assert both.returncode == 2 and "--alignments cannot go with --markup" in both.stderr
    (tmp_path / "few.en").write_text("a\nb\n")
    (tmp_path / "few.es").write_text("a\nb\n")
    few = run_main(calibrate.main, "--model_dir", str(model_dir), "--input",
                   str(tmp_path / "few.en"), "--reference", str(tmp_path / "few.es"))
    assert few.returncode == 2 and "few.en: 2 sentence pair(s)" in few.stderr
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken, symlinks=True)
    (broken / CALIBRATION_FILE).write_text("{")
    damaged = run_main(translate.main, "--model_dir", str(broken), "--input",
                       str(directory / "dev.en"))
    assert damaged.returncode == 2 and f"{broken / CALIBRATION_FILE}: not a usable" in (
        damaged.stderr)


SERVING_CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
texts, outputs = json.loads(sys.stdin.read()), {}
for start in range(0, len(texts), 3):  # the export's max_batch_size
    out = serve(inputs=tf.constant(texts[start:start + 3]))
    for name, value in out.items():
        values = value.numpy().tolist()
        outputs.setdefault(name, []).extend(
            [v.decode() for v in values] if name == "translations" else values)
print(json.dumps(outputs))
"""


def test_the_saved_model_of_a_calibrated_run_serves_its_confidence(calibrated, checked,
                                                                  production_export):
    model_dir, _ = calibrated
    records, _ = checked
    settings = json.loads((production_export / "assets" / "export.json").read_text())
    assert settings["calibration"] == json.loads((model_dir / CALIBRATION_FILE).read_text())
    sources = [line.rstrip("\n") for line in bundled_lines("dev", "en", CALIBRATION_LINES)]
    reply = run_client(SERVING_CLIENT, production_export, input=json.dumps(sources))
    assert reply.returncode == 0, reply.stderr
    served = json.loads(reply.stdout)
    assert sorted(served) == ["confidence", "repeated_ngrams", "scores", "stopped_at_limit",
                              "translations", "uncovered"]
    assert_same_checks(records, served["translations"], served)
