"""The moving average of the weights (--ema_decay): the formula, and an export of the averages
that loads and translates in a process without this package."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from client_process import run_client
from conftest import run_main
from test_accumulation import VOCAB, batch_of_unequal_rows
from test_trainer import kt_train, small_corpus  # noqa: F401  (a fixture)

import keras_transformer as kt
from keras_transformer import model_dir
from keras_transformer.export import export_command
from keras_transformer.export.translator import Translator
from keras_transformer.trainer.evaluation import averaged_weights


def test_the_average_follows_its_formula_and_evaluation_swaps_it_in_and_out():
    hp = kt.hparams.get("transformer_tiny", dropout=0.0, warmup_steps=1)
    keras.utils.set_random_seed(5)
    model = kt.build_model(hp, VOCAB)
    model.compile(optimizer=kt.build_optimizer(hp, ema_decay=0.75), loss=kt.build_loss(hp))
    batch = batch_of_unequal_rows()
    expected = None
    for _ in range(4):
        model.train_on_batch(*batch)
        trained = model.get_weights()
        # a_1 = w_1, then a_t = d a_{t-1} + (1 - d) w_t.
        expected = trained if expected is None else [
            0.75 * a + 0.25 * w for a, w in zip(expected, trained)]
    with averaged_weights(model):
        averaged = model.get_weights()
    for got, want in zip(averaged, expected):
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert any(not np.allclose(a, w) for a, w in zip(averaged, trained))
    for got, want in zip(model.get_weights(), trained):  # the trained weights are back
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_an_export_of_the_averages_loads_and_translates_without_this_package(
        tmp_path, small_corpus):  # noqa: F811
    run = tmp_path / "run"
    # One layer: the averages' export does not depend on depth, and a second doubled tracing.
    trained = kt_train(run, small_corpus, "--hparams", "transformer_tiny", "--hparams_override",
                       "num_layers=1", "--train_steps", "8", "--ema_decay", "0.5", "--eval_every",
                       "8", "--eval_sentences", "2")
    assert trained.returncode == 0, trained.stderr
    assert "evaluation at step 8: dev_loss" in trained.stdout

    averages, raw = model_dir.load(run), model_dir.load(run, ema=False)
    assert averages.ema and not raw.ema
    assert any(not np.allclose(a, b) for a, b in zip(averages.model.get_weights(),
                                                       raw.model.get_weights()))
    exported = run_main(export_command.main, "--model_dir", run, "--output", tmp_path / "export",
                        "--beam_size", "1")
    assert exported.returncode == 0, exported.stderr
    assert "(moving averages)" in exported.stdout
    version = next((tmp_path / "export").iterdir())
    facts = json.loads((version / "assets" / "export.json").read_text())
    assert facts["moving_averages"] is True

    # The export translates as the averaged model does in Python (greedy: beam 1 both ways).
    script = ("import sys, tensorflow as tf, tensorflow_text\n"
              "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
              "out = serve(inputs=tf.constant(['In the beginning.', 'He said to them.']))\n"
              "print('\\n'.join(t.decode() for t in out['translations'].numpy()))\n")
    loaded = run_client(script, version)
    assert loaded.returncode == 0, loaded.stderr
    translator = Translator(averages.model, averages.vocabulary, beam_size=1)
    in_python = [text.decode() for text in translator.translate(
        tf.constant(["In the beginning.", "He said to them."]))["translations"].numpy()]
    assert loaded.stdout.splitlines() == in_python, (loaded.stdout, in_python)
