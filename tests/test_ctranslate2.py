"""The CTranslate2 export against the model it comes from: same translations, same scores; the
engine behind kt-translate; refusals."""

import json
import shutil

import numpy as np
import pytest
from conftest import run_main

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.export import ctranslate2 as ct2
from keras_transformer.export import export_command, translate
from keras_transformer.export.ctranslate2_engine import Ctranslate2Translator, resolve
from keras_transformer.export.lines import n_best_lines
from keras_transformer.export.translator import Translator


@pytest.fixture(scope="module")
def exported(trained_model_dir, tmp_path_factory):
    """The trained test model exported twice: float32 (version 1) and int8 (version 2)."""
    output = tmp_path_factory.mktemp("ct2") / "exports"
    for quantization in ("float32", "int8"):
        result = run_main(export_command.main, "--model_dir", trained_model_dir, "--format",
                          "ctranslate2", "--quantization", quantization, "--output", output)
        assert f"a CTranslate2 model, {quantization} weights" in result.stdout, result.stderr
    return output


@pytest.fixture(scope="module")
def dev_split():
    sources, references = data.first_pairs(data.get_source("bible_en_es"), "dev", 200)
    return sources + ["", "Jesus wept."], references + ["", "Jesús lloró."]


def both(trained, exported, beam_size, alpha, sources):
    """The model's and the float32 export's n-best lists of `sources`."""
    translator = Translator(trained.model, trained.vocabulary, beam_size=beam_size, alpha=alpha,
                            max_input_length=trained.run.data.max_pair_length)
    engine = Ctranslate2Translator(exported / "1", beam_size=beam_size, alpha=alpha)
    return (n_best_lines(translator, sources, beam_size, 32),
            n_best_lines(engine, sources, beam_size, 32))


def test_the_export_records_where_it_came_from(exported, trained):
    settings = json.loads((exported / "1" / "export.json").read_text())
    assert settings["engine"] == "ctranslate2" and settings["quantization"] == "float32"
    assert settings["checkpoint"] == str(trained.checkpoint)
    assert (settings["beam_size"], settings["alpha"], settings["extra_length"],
            settings["max_positions"]) == (4, 0.6, 50, ct2.POSITIONS)
    assert (exported / "1" / "vocab.model").read_bytes() == trained.vocabulary.model_proto
    assert json.loads((exported / "2" / "export.json").read_text())["quantization"] == "int8"
    assert resolve(exported) == exported / "2"  # the highest version


@pytest.mark.parametrize("beam_size, alpha", [(1, 0.6), (4, 0.0)])
def test_float32_export_translates_as_the_model(trained, exported, dev_split, beam_size,
                                                alpha):
    """Greedy, and beam 4 ranking by log-probability alone (alpha 0, where the two engines'
    length penalties agree): every hypothesis the same ids, every score within 5e-3, or 1e-3 of
    it relative (float32 sums over ~50 tokens differed by up to 3.6e-3, 2.8e-4 relative, between
    the engines with two test processes sharing the cores)."""
    sources, _ = dev_split
    ours, theirs = both(trained, exported, beam_size, alpha, sources)
    assert len(ours) == len(theirs) == 202
    for line, (mine, other) in enumerate(zip(ours, theirs), 1):
        assert [h.text for h in mine] == [h.text for h in other], line
        np.testing.assert_allclose([h.score for h in other], [h.score for h in mine],
                                   rtol=1e-3, atol=5e-3, err_msg=f"line {line}")


def test_beam_4_alpha_06_best_hypotheses_agree(trained, exported, dev_split):
    """At the paper's alpha the engines rank unfinished hypotheses differently (CTranslate2
    divides by length ** alpha, the model by ((5 + length) / 6) ** alpha); the best hypothesis
    of each, scored the model's way, still agrees on nearly every sentence."""
    sources, _ = dev_split
    ours, theirs = both(trained, exported, 4, 0.6, sources)
    same = [mine[0].text == other[0].text for mine, other in zip(ours, theirs)]
    print(f"beam 4, alpha 0.6: the same best hypothesis on {sum(same)} of {len(same)} lines")
    assert sum(same) >= 0.95 * len(same)
    for mine, other in zip(ours, theirs):
        if mine[0].text == other[0].text:
            assert other[0].score == pytest.approx(mine[0].score, rel=1e-3, abs=5e-3)


@pytest.mark.parametrize("overrides", [dict(embedding_sharing="none"),
                                       dict(layer_norm_position="pre"),
                                       dict(ffn_activation="swish", attention_bias=True,
                                            sinusoid_layout="split", output_bias=True,
                                            scale_embeddings=False)],
                         ids=["untied", "pre-norm", "marian-options"])
def test_other_shapes_export_as_the_model_scores(trained, dev_split, tmp_path, overrides):
    """The trained model's weights in a model of another shape: untied token tables (its own,
    plus noise for the source side and for the projection, so a table exported to the wrong
    place changes the probabilities), pre-norm layers with each stack's final normalization, or
    Marian's options (biases, which the trained model lacks, as noise).
    Each engine scores the dev references: every token's log-probability the same."""
    import ctranslate2
    import tensorflow as tf

    model = kt.build_model(trained.hparams.override(**overrides), trained.vocabulary.vocab_size)
    rng = np.random.default_rng(0)
    for mine, theirs in zip(model.encoder_layers + model.decoder_layers,
                            trained.model.encoder_layers + trained.model.decoder_layers):
        trained_weights = {weight.path.split("/", 1)[1]: weight for weight in theirs.weights}
        for weight in mine.weights:  # biases the trained model lacks: noise
            name = weight.path.split("/", 1)[1]  # the path inside the model
            weight.assign(trained_weights[name] if name in trained_weights else
                          rng.normal(0, 0.1, weight.shape))
    table = np.asarray(trained.model.embedding.embeddings)
    if model.output_projection.bias is not None:
        model.output_projection.bias.assign(rng.normal(0, 0.5, model.vocab_size))
    model.embedding.embeddings.assign(table)
    for untied in {model.source_embedding.name: model.source_embedding,
                   model.output_projection.name: model.output_projection}.values():
        if untied is not model.embedding:
            untied.embeddings.assign(table + rng.normal(0, 0.2 * table.std(), table.shape))
    for norm in (model.encoder_norm, model.decoder_norm):
        if norm is not None:  # not the identity
            norm.gamma.assign(rng.normal(1.0, 0.2, norm.gamma.shape))
            norm.beta.assign(rng.normal(0.0, 0.2, norm.beta.shape))
    ct2.export_ctranslate2(trained._replace(model=model), tmp_path / "1")
    engine = ctranslate2.Translator(str(tmp_path / "1"))

    vocabulary = trained.vocabulary
    pieces = vocabulary.pieces(list(range(vocabulary.vocab_size)))
    sources, references = (vocabulary.encode(tf.constant(texts[:20])).to_tensor().numpy()
                           for texts in dev_split)
    # CTranslate2 appends the end of sentence to a target itself.
    scored = engine.score_batch([[pieces[i] for i in row if i] for row in sources],
                                [[pieces[i] for i in row if i > kt.EOS_ID] for row in references])
    ours = kt.score(model, sources, references, alpha=0.0)["token_log_probs"].numpy()
    tied = kt.score(trained.model, sources, references, alpha=0.0)["token_log_probs"].numpy()
    for row, result in enumerate(scored):
        length = len(result.log_probs)
        assert length == (references[row] != kt.PAD_ID).sum()
        np.testing.assert_allclose(result.log_probs, ours[row, :length], rtol=1e-3, atol=5e-3)
        assert np.abs(tied[row, :length] - ours[row, :length]).max() > 0.05


def test_int8_export_stays_close_to_float32(exported, dev_split):
    sources, _ = dev_split
    float32 = n_best_lines(Ctranslate2Translator(exported / "1", beam_size=1), sources,
                           1, 32)
    int8 = n_best_lines(Ctranslate2Translator(exported / "2", beam_size=1), sources, 1, 32)
    same = sum(a[0].text == b[0].text for a, b in zip(float32, int8))
    print(f"int8 greedy = float32 greedy on {same} of {len(sources)} lines")
    assert same >= 0.5 * len(sources)


def test_kt_translate_runs_on_either_engine(trained_model_dir, exported, tmp_path):
    inputs = tmp_path / "in.en"
    inputs.write_text("In the beginning God created the heaven and the earth.\n\nJesus wept.\n")
    common = ["--input", str(inputs), "--beam_size", "1", "--scores"]
    tensorflow = run_main(translate.main, "--model_dir", trained_model_dir, *common)
    engine = run_main(translate.main, "--engine", "ctranslate2", "--ctranslate2_dir",
                      exported / "1", *common)
    assert tensorflow.returncode == engine.returncode == 0, tensorflow.stderr + engine.stderr
    assert "with CTranslate2" in engine.stderr and "(float32)" in engine.stderr
    ours = [line.split("\t") for line in tensorflow.stdout.splitlines()]
    theirs = [line.split("\t") for line in engine.stdout.splitlines()]
    assert [text for _, text in ours] == [text for _, text in theirs]
    np.testing.assert_allclose([float(s) for s, _ in theirs], [float(s) for s, _ in ours],
                               rtol=1e-3, atol=5e-3)
    scored = run_main(translate.main, "--engine", "ctranslate2", "--ctranslate2_dir", exported,
                      "--data", "bible_en_es", "--split", "dev", "--n_best", "2")
    assert scored.stdout.count('"line"') == 492 and "BLEU" in scored.stderr


def test_the_engine_decodes_as_the_export_recorded_unless_told(exported, tmp_path):
    """kt-export's decoding settings travel in export.json: kt-translate --engine ctranslate2
    uses them where no flag (or --decode_preset) says otherwise."""
    copy = tmp_path / "export"
    shutil.copytree(exported / "1", copy)
    settings = json.loads((copy / "export.json").read_text())
    settings.update(beam_size=2, alpha=0.25, extra_length=9)
    (copy / "export.json").write_text(json.dumps(settings))

    def decoding(*argv):
        args = translate.parse_args(["--engine", "ctranslate2", "--ctranslate2_dir", str(copy),
                                     *argv])
        engine = translate.engine_from_flags(args)[0]
        decoding = engine.decoding
        return (decoding.beam_size, decoding.alpha, decoding.extra_length, engine.patience,
                decoding.max_output_length)

    limit = settings["max_output_length"]
    assert decoding() == (2, 0.25, 9, 1, limit)
    assert decoding("--beam_size", "3", "--ctranslate2_patience", "2") == (3, 0.25, 9, 2, limit)
    longest = settings["max_input_length"] + 300  # not the recorded limit, made for + 50
    assert decoding("--decode_preset", "parsing") == (21, 0.3, 300, 1, longest)
    # The converted position table bounds the limit too (`decoding.output_limits`) ...
    (copy / "export.json").write_text(json.dumps(dict(settings, max_positions=12)))
    assert decoding("--decode_preset", "parsing")[-1] == 12
    # ... and a setting the export lacks is named, not guessed.
    del settings["alpha"]
    (copy / "export.json").write_text(json.dumps(settings))
    with pytest.raises(ct2.Ctranslate2Error, match=r"export\.json records no alpha; export the "
                                                   r"model again"):
        decoding()
    assert decoding("--alpha", "0.5")[1] == 0.5
    # An export from before the length normalization was recorded ranked as the paper.
    del settings["length_normalization"]
    (copy / "export.json").write_text(json.dumps(dict(settings, alpha=0.25)))
    assert translate.engine_from_flags(translate.parse_args([
        "--engine", "ctranslate2", "--ctranslate2_dir", str(copy)]))[0].decoding \
        .length_normalization == "gnmt"


def test_patience_reaches_ctranslate2(exported, monkeypatch):
    engine = Ctranslate2Translator(exported / "1", patience=2)
    calls = []
    search = engine.engine.translate_batch
    monkeypatch.setattr(engine, "engine", type("Recorder", (), {"translate_batch": staticmethod(
        lambda *args, **kwargs: calls.append(kwargs) or search(*args, **kwargs))})())
    engine.translate_n_best_ids(engine.tokenize(["Jesus wept."])["source_ids"])
    assert [kwargs["patience"] for kwargs in calls] == [2]


@pytest.mark.parametrize("argv, message", [
    (["--engine", "ctranslate2"], "--engine ctranslate2 needs --ctranslate2_dir"),
    (["--ctranslate2_dir", "x"], "--ctranslate2_dir needs --engine ctranslate2"),
    (["--ctranslate2_patience", "2"], "--ctranslate2_patience needs --engine ctranslate2"),
    (["--engine", "ctranslate2", "--ctranslate2_dir", "x", "--ctranslate2_patience", "0.5"],
     "--ctranslate2_patience: must be at least 1.0, got 0.5"),
    (["--engine", "ctranslate2", "--ctranslate2_dir", "x", "--model_dir", "m"],
     "--model_dir is for --engine tensorflow"),
    (["--engine", "ctranslate2", "--ctranslate2_dir", "x", "--sampling_temperature", "1"],
     "--sampling_temperature is for --engine tensorflow"),
    ([], "the following arguments are required: --model_dir"),
])
def test_kt_translate_refuses_mixed_engine_flags(argv, message):
    result = run_main(translate.main, *argv)
    assert result.returncode == 2 and message in result.stderr


def test_refusals_name_what_is_wrong(trained_model_dir, exported, tmp_path):
    missing = run_main(translate.main, "--engine", "ctranslate2", "--ctranslate2_dir",
                       tmp_path / "nothing")
    assert missing.returncode == 2 and f"--ctranslate2_dir {tmp_path / 'nothing'}: neither" \
        in missing.stderr
    again = run_main(export_command.main, "--model_dir", trained_model_dir, "--format",
                     "ctranslate2", "--output", exported, "--version", "1")
    assert again.returncode == 2 and "exists" in again.stderr
    assert (exported / "1" / "model.bin").is_file()  # untouched
    result = run_main(export_command.main, "--model_dir", trained_model_dir, "--quantization",
                      "int8", "--output", tmp_path / "o")
    assert result.returncode == 2 and "--quantization is for --format ctranslate2" in \
        result.stderr
    bfloat16 = run_main(export_command.main, "--model_dir", trained_model_dir, "--format",
                        "ctranslate2", "--dtype", "bfloat16", "--output", tmp_path / "b")
    assert bfloat16.returncode == 2 and "--dtype is for a SavedModel; a CTranslate2 export's " \
        "weights are --quantization's" in bfloat16.stderr


@pytest.mark.parametrize("overrides, message", [
    (dict(position_encoding="learned", max_positions=4096), "hparams max_positions=4096"),
    (dict(d_k=8, d_v=16), "hparams d_k=8 and d_v=16 differ"),
])
def test_models_ctranslate2_cannot_hold_are_refused(overrides, message):
    model = kt.build_model(kt.hparams.get("transformer_tiny", **overrides), 300)
    with pytest.raises(ct2.Ctranslate2Error, match=message):
        ct2.check_representable(model)
