"""One decoding configuration: `DecodingConfig` resolved from the model's own settings, the same
for `Translator.from_model_dir` and kt-translate; the output limit in one function."""

import json
import shutil
import types
import typing

import numpy as np
import pytest
import tensorflow as tf
from conftest import bundled_lines, run_main

import keras_transformer as kt
from keras_transformer.export import DecodingConfig, Translator, lines, translate, translate_parts
from keras_transformer.model_dir import decoding_config
from keras_transformer.search.settings import DecodingConfigError


def run_of(corpus, max_pair_length=64, **hparams):
    """A stand-in for `model_dir.Loaded`: what `decoding_config.resolved` reads of a run."""
    return types.SimpleNamespace(hparams=kt.HParams(**hparams), run=types.SimpleNamespace(
        data=types.SimpleNamespace(corpus=corpus, max_pair_length=max_pair_length)))


def fields(config, *names):
    return tuple(getattr(config, name) for name in names)


SEARCH = ("preset", "beam_size", "alpha", "length_normalization", "extra_length",
          "max_input_length", "max_output_length", "tree_constraint")


@pytest.mark.parametrize("config, run, expected", [
    # the model's beam and alpha, the paper's output limit, the run's longest input
    (DecodingConfig(), run_of("bible_en_es", decode_alpha=1.0, decode_beam_size=3),
     ("translation", 3, 1.0, "gnmt", 50, 64, None, False)),
    # a parser: section 6.3's preset, decoded among trees
    (DecodingConfig(), run_of("ptb:/treebank"), ("parsing", 21, 0.3, "gnmt", 300, 64, None, True)),
    (DecodingConfig(tree_constraint=False, beam_size=5), run_of("ptb:/treebank"),
     ("parsing", 5, 0.3, "gnmt", 300, 64, None, False)),
    # an imported model's fixed limit holds whatever the input's length ...
    (DecodingConfig(), run_of("tatoeba_en_es", decode_length_normalization="hf",
                              decode_max_output_length=63),
     ("translation", 4, 0.6, "hf", 63, 64, 63, False)),
    (DecodingConfig(max_output_length=20), run_of("tatoeba_en_es", decode_max_output_length=63),
     ("translation", 4, 0.6, "gnmt", 20, 64, 20, False)),
    # ... unless extra_length is given
    (DecodingConfig(extra_length=7, max_input_length=9),
     run_of("tatoeba_en_es", decode_max_output_length=63),
     ("translation", 4, 0.6, "gnmt", 7, 9, None, False)),
])
def test_unset_fields_take_the_models_settings(config, run, expected):
    resolved = decoding_config.resolved(config, run)
    assert fields(resolved, *SEARCH) == expected
    assert resolved.batch_size >= 1
    # resolving again changes nothing
    assert fields(decoding_config.resolved(resolved, run), *SEARCH) == expected


@pytest.mark.parametrize("config, message", [
    (dict(beam_size=0), "beam_size must be at least 1, got 0"),
    (dict(alpha=float("nan")), "alpha must be at least 0.0, got nan"),
    (dict(max_input_length=1), "max_input_length must be at least 2"),
    (dict(preset="summaries"), "preset must be one of parsing, translation, got 'summaries'"),
    (dict(dtype="float16"), "dtype must be one of"),
])
def test_bad_settings_are_refused_by_name(config, message):
    with pytest.raises(DecodingConfigError, match=message):
        DecodingConfig(**config)


def test_a_tree_constraint_needs_a_parser():
    with pytest.raises(DecodingConfigError,
                       match="trained on --data bible_en_es, a translation corpus"):
        decoding_config.resolved(DecodingConfig(tree_constraint=True), run_of("bible_en_es"))


def test_the_output_limit_is_one_rule_for_ints_arrays_and_tensors():
    lengths = np.array([3, 20, 0])
    capped = DecodingConfig(extra_length=50, max_output_length=60)
    assert list(capped.output_limits(lengths)) == [53, 60, 50]
    assert DecodingConfig(extra_length=50).output_limits(10) == 60
    assert DecodingConfig(extra_length=5, max_output_length=12).output_limits(10) == 12
    tensor = capped.output_limits(tf.constant(lengths, tf.int32))
    assert tensor.numpy().tolist() == [53, 60, 50]


@pytest.fixture(scope="module")
def small_settings_run(trained_model_dir, tmp_path_factory):
    """The trained model_dir with transformer_small's decoding settings in its config (alpha
    1.0) and a beam of 3, neither the `Translator` constructor's defaults (0.6, 4)."""
    directory = tmp_path_factory.mktemp("decoding") / "run"
    directory.mkdir()
    shutil.copy(trained_model_dir / "vocab.model", directory / "vocab.model")
    (directory / "checkpoints").symlink_to(trained_model_dir / "checkpoints")
    config = json.loads((trained_model_dir / "config.json").read_text())
    config["model"]["hparams"].update(
        decode_alpha=kt.hparams.get("transformer_small").decode_alpha, decode_beam_size=3)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_the_python_api_decodes_as_kt_translate(small_settings_run, tmp_path):
    """`Translator.from_model_dir` with no decoding arguments: kt-translate's lines and scores."""
    sources = [line.rstrip("\n") for line in bundled_lines("dev", "en", 12)]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n")
    command = run_main(translate.main, "--model_dir", small_settings_run, "--input",
                       tmp_path / "in.txt", "--scores")
    assert command.returncode == 0, command.stderr
    assert "beam 3, alpha 1.0" in command.stderr
    translator = Translator.from_model_dir(small_settings_run)
    decoding = translator.decoding
    assert (decoding.beam_size, decoding.alpha, decoding.max_input_length) == (3, 1.0, 64)
    result = translator.translate(tf.constant(sources))
    assert command.stdout.splitlines() == [
        f"{score:.4f}\t{text.decode('utf-8')}"
        for score, text in zip(result["scores"].numpy(), result["translations"].numpy())]
    # Given settings override the model's, as the flags do.
    greedy = Translator.from_model_dir(small_settings_run, DecodingConfig(beam_size=1, alpha=0.6))
    assert (greedy.decoding.beam_size, greedy.decoding.alpha) == (1, 0.6)


class CountsHypothesisSteps(typing.NamedTuple):
    """A processor adding up the rows of every step of every search: what decoding costs."""
    count: tf.Variable

    def start(self, layout):
        def adjust(logits, ids, step, state):
            with tf.control_dependencies([self.count.assign_add(tf.shape(logits)[0])]):
                return tf.identity(logits), state
        return adjust, ()


def test_a_large_request_is_searched_in_kt_translates_length_sorted_batches(trained):
    """One long sentence among short ones: `translate` searches in batches of the decoding's
    batch_size, longest first, as kt-translate's lines are (`lines.translate_lines`), at the
    same cost and with the same results; it searched the whole request as one batch, every
    short sentence as long as the long one."""
    sources = [line.rstrip("\n") for line in bundled_lines("dev", "en", 12)]
    sources.insert(5, " ".join(sources))
    count = tf.Variable(0)

    def searched(batch_size):
        translator = Translator.from_loaded(
            trained, DecodingConfig(batch_size=batch_size, beam_size=2), max_batch_size=16,
            processors=[CountsHypothesisSteps(count)])
        count.assign(0)
        return translator, translator.translate(tf.constant(sources)), count.numpy()

    translator, result, steps = searched(4)
    count.assign(0)
    texts, scores = lines.translate_lines(translator, sources, 4)
    assert steps == count.numpy()
    assert [text.decode("utf-8") for text in result["translations"].numpy()] == texts
    np.testing.assert_allclose(result["scores"], scores, atol=1e-5)
    _, whole, whole_steps = searched(16)
    assert steps < whole_steps
    np.testing.assert_array_equal(whole["translations"], result["translations"])


def test_kt_translate_reports_user_errors_by_input_and_shows_internal_ones(
        small_settings_run, tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("Jesus wept.\n")
    (tmp_path / "terms.tsv").write_text("wept\t" + " ".join(["lloró"] * 60) + "\n")
    refused = run_main(translate.main, "--model_dir", small_settings_run, "--input",
                       tmp_path / "in.txt", "--glossary", tmp_path / "terms.tsv")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"kt-translate: error: {tmp_path / 'in.txt'}: line 1: its "
                                     f"glossary terms need")

    def broken(*args, **kwargs):
        raise ValueError("an internal error")

    monkeypatch.setattr(translate_parts, "n_best_lines", broken)
    with pytest.raises(ValueError, match="an internal error"):  # not an exit code 2 line
        translate.main(["--model_dir", str(small_settings_run), "--input",
                        str(tmp_path / "in.txt")])


def test_the_translators_longest_output_is_the_cap_given_or_the_longest_inputs_limit(
        bible_vocab):
    model = kt.build_model(kt.hparams.get("transformer_tiny"), bible_vocab.vocab_size)
    given = Translator(model, bible_vocab, max_input_length=256, max_output_length=400)
    paper = Translator(model, bible_vocab, max_input_length=256, extra_length=50)
    assert (given.decoding.max_output_length, paper.decoding.max_output_length) == (400, 306)
    assert json.dumps(given.settings())  # Python ints: export.json is written from them


def test_the_trainers_dev_bleu_decodes_as_kt_translate():
    """The dev evaluation a run trains with takes its model's resolved `DecodingConfig` (beam
    --eval_beam_size): an imported model's ranking and fixed output limit, the model's alpha,
    as kt-translate decodes it; it had the paper's ranking and input + 50."""
    from keras_transformer import data, model_dir
    from keras_transformer.trainer.loop import TrainingLoop

    hparams = kt.hparams.get("transformer_tiny", decode_alpha=1.0,
                             decode_length_normalization="hf", decode_max_output_length=63)
    run = model_dir.RunConfig(
        model=model_dir.ModelConfig(hparams_name="transformer_tiny", hparams=hparams),
        data=model_dir.DataConfig(corpus="bible_en_es", max_pair_length=64),
        evaluation=model_dir.EvaluationConfig(beam_size=2))
    # What the Trainer prepared, as far as the evaluator reads it (a worker that is not the
    # chief translates no dev sentences, so nothing is read from the corpus).
    setup = types.SimpleNamespace(corpus=data.get_source("bible_en_es"), chief=False,
                                  vocabulary=None, hp=hparams, words=None)
    evaluation = TrainingLoop.evaluator(types.SimpleNamespace(run=run, setup=setup, best=None),
                                        dev=object(), writer=None)
    decoding = evaluation.decoding
    assert (decoding.beam_size, decoding.alpha, decoding.length_normalization,
            decoding.extra_length, decoding.max_output_length, decoding.max_input_length,
            evaluation.tree_constraints) == (2, 1.0, "hf", 63, 63, 64, None)
