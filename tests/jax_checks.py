"""The JAX half of tests/test_jax.py, run there in a subprocess under KERAS_BACKEND=jax with 4 host
CPU devices: `python tests/jax_checks.py WORK_DIR`.

Reads WORK_DIR/reference.npz and the TensorFlow side's weights files (test_jax.py writes them),
runs the model library under JAX, and writes what it found to WORK_DIR/jax.npz (arrays) and
WORK_DIR/jax.json (facts), plus WORK_DIR/jax_trained.weights.h5 for TensorFlow to load.
"""

import json
import pathlib
import sys


class NoTensorFlow:
    """Refuses to import TensorFlow, as on a GPU machine with JAX alone. (Keras's
    `set_random_seed` tries to, and does without it.)"""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ImportError(f"{name} is not installed here (tests/jax_checks.py)")


sys.meta_path.insert(0, NoTensorFlow())

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402
from keras_transformer.layers import attention  # noqa: E402

VOCAB = 30


def tiny(dropout=0.0, seed=3, num_layers=1):
    """transformer_tiny with one layer a side (as test_jax.py's, whose weights files it reads):
    XLA's compiles, most of this process's time, grow with the layers."""
    hp = kt.hparams.get("transformer_tiny", dropout=dropout, num_layers=num_layers)
    keras.utils.set_random_seed(seed)
    return hp, kt.build_model(hp, VOCAB)


def batch(reference):
    return (reference["source"], reference["target_input"]), reference["target"]


def compiled(hp, model, optimizer=None, **compile_args):
    model.compile(optimizer=optimizer or kt.build_optimizer(hp, train_steps=100),
                  loss=kt.build_loss(hp), metrics=[kt.TokenAccuracy(), kt.Perplexity()],
                  **compile_args)
    return model


def fit(model, data, steps, callbacks=()):
    """`steps` updates, each on the whole batch."""
    (source, target_input), target = data
    return model.fit((source, target_input), target, batch_size=len(target), epochs=steps,
                     shuffle=False, verbose=0, callbacks=list(callbacks))


def forward_loss_and_gradients(work, reference, arrays, facts):
    """TensorFlow's initial weights: the logits, the loss and its gradients (through the fused
    attention, counted: TensorFlow's model computes attention explicitly)."""
    fused, calls = attention.fused_attention, []

    def counted(*args):
        calls.append(args[0].shape)
        return fused(*args)

    attention.fused_attention = counted
    hp, model = tiny()
    model.load_weights(work / "initial.weights.h5")
    (source, target_input), target = batch(reference)
    loss = kt.build_loss(hp)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def logits_of(trainable):
        return model.stateless_call(trainable, non_trainable, (source, target_input))[0]

    def loss_of(trainable):
        return loss(target, logits_of(trainable))

    # Compiled, as a train step is: op by op, JAX compiles each operation it dispatches (9.7 s
    # of this process's 44; 3.1 s jitted, AMX Xeon, 2026-11-30).
    arrays["logits"] = np.asarray(jax.jit(logits_of)(trainable))
    value, gradients = jax.jit(jax.value_and_grad(loss_of))(trainable)
    arrays["loss"] = np.asarray(value)
    for i, gradient in enumerate(gradients):
        arrays[f"gradient_{i}"] = np.asarray(gradient)
    attention.fused_attention = fused
    facts["fused_attention_calls"] = len(calls)


def accumulation(work, reference, arrays, facts):
    """One update of the whole batch, in one piece and in 4 micro-batches of unequal real
    tokens (SGD: the weights move by the gradient). 2 micro-batches take the same code path
    (each a compilation of its own: not here; tests/test_accumulation.py splits in 2 and 4)."""
    data = batch(reference)
    for steps in (1, 4):
        hp, model = tiny()
        model.load_weights(work / "initial.weights.h5")
        compiled(hp, model, keras.optimizers.SGD(1.0), accumulate_steps=steps,
                 report_batch_shape=True)
        history = fit(model, data, 1)
        arrays[f"accumulated_{steps}"] = np.concatenate(
            [w.ravel() for w in model.get_weights()])
        facts[f"accumulated_{steps}_loss"] = history.history["loss"][0]
        facts[f"accumulated_{steps}_traces"] = model.train_step_traces
    facts["batch_shape"] = [int(v) for v in np.asarray(history.history["batch_shape"][0])]


def plain_adam_refuses_a_cooldown(work, reference, arrays, facts):
    """Another optimizer cannot carry the cooldown's window: moving it after tracing is
    refused."""
    hp, model = tiny()
    schedule = kt.TransformerSchedule(hp.d_model, hp.warmup_steps)
    fit(compiled(hp, model, keras.optimizers.Adam(schedule)), batch(reference), 1)
    try:
        schedule.set_cooldown(0, 5)
        facts["plain_adam_refused"] = None
    except RuntimeError as error:
        facts["plain_adam_refused"] = str(error)


def trained_twenty_steps(work, reference, arrays, facts):
    """20 updates of the paper's optimizer with dropout, saved for TensorFlow to load; and
    TensorFlow's 2 updates loaded here with the optimizer's state.

    A cooldown placed after the 19th update (as kt-train's TimeLimit places it) stops the 20th:
    the traced step reads the window from the optimizer's state. (In this run rather than one of
    its own: each fit of a new model is a compilation.)"""
    hp, model = tiny(dropout=0.1)
    model.load_weights(work / "initial.weights.h5")
    compiled(hp, model)
    schedule = model.optimizer.learning_rate_schedule
    weights = []

    class Cooldown(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) >= 18:
                weights.append(np.concatenate([w.ravel() for w in self.model.get_weights()]))
            if len(weights) == 2:  # after the 19th update: from 18 to zero at 19 (the 20th)
                schedule.set_cooldown(18, 19)

    class Unsynced(keras.callbacks.Callback):  # runs first, before `self.model` syncs the state
        def on_train_batch_end(self, batch, logs=None):
            try:
                schedule.set_cooldown(0, 9)
                facts["unsynced_refused"] = None
            except RuntimeError as error:
                facts["unsynced_refused"] = str(error)

    history = fit(model, batch(reference), 20, [Unsynced(), Cooldown()])
    # The 19th update's movement, and the 20th's.
    facts["movement_per_update"] = [float(np.abs(b - a).max())
                                    for a, b in zip(weights, weights[1:])]
    facts["losses_20"] = history.history["loss"]
    facts["steps_20"] = int(model.optimizer.iterations.numpy())
    (source, target_input), _ = batch(reference)
    arrays["trained_logits"] = np.asarray(model((source, target_input)))
    model.save_weights(work / "jax_trained.weights.h5")
    hp, model = tiny()
    compiled(hp, model).optimizer.build(model.trainable_variables)
    model.load_weights(work / "tf_trained.weights.h5")
    facts["tf_trained_steps"] = int(model.optimizer.iterations.numpy())
    arrays["tf_trained_logits"] = np.asarray(model((source, target_input)))


def devices(work, reference, arrays, facts):
    """Two updates with dropout on 1 and 4 devices (`keras.distribution.DataParallel`), of
    transformer_tiny's two layers a side from the same seeded weights. (With one, an Adam update
    of a near-zero gradient differed by 2.7e-5 in one weight of 21,952.)"""
    for count in (1, 4):
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(devices=jax.devices()[:count]) if count > 1
            else None)
        hp, model = tiny(dropout=0.1, seed=11, num_layers=2)
        fit(compiled(hp, model), batch(reference), 2)
        arrays[f"devices_{count}"] = np.concatenate([w.ravel() for w in model.get_weights()])
    keras.distribution.set_distribution(None)
    facts["device_count"] = len(jax.devices())


def word_dropout(facts):
    """Source word dropout draws with Keras's random ops: real tokens become unknown, padding
    and the end of sentence stay."""
    ids = np.array([[5, 6, 7, 8, 9, 10, 11, 12, 1, 0, 0, 0]] * 64, "int32")
    dropped = np.asarray(kt.WordDropout(0.5, seed=1)(ids, training=True))
    facts["word_dropout"] = {"unknown_share": float(np.mean(dropped[:, :8] == kt.UNK_ID)),
                             "rest_kept": bool((dropped[:, 8:] == ids[:, 8:]).all())}


def main(work):
    reference = np.load(work / "reference.npz")
    arrays, facts = {}, {"backend": keras.backend.backend()}
    forward_loss_and_gradients(work, reference, arrays, facts)
    accumulation(work, reference, arrays, facts)
    plain_adam_refuses_a_cooldown(work, reference, arrays, facts)
    trained_twenty_steps(work, reference, arrays, facts)
    devices(work, reference, arrays, facts)
    word_dropout(facts)
    facts["tensorflow_loaded"] = "tensorflow" in sys.modules
    try:
        kt.beam_decode
    except ImportError as error:
        facts["beam_decode_refused"] = str(error)
    np.savez(work / "jax.npz", **arrays)
    (work / "jax.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
