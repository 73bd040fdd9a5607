"""Run by tests/test_distributed.py in a process of its own (the logical devices must be made
before TensorFlow starts): N replicas on logical CPUs against one device, per precision, with and
without gradient accumulation; float16 overflow in one replica's rows; dropout per replica.
Prints one JSON line. `python tests/replica_equivalence.py full` runs every replica count in every
precision, with and without accumulation (the suite runs a covering third of them)."""

import json
import sys

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 8)
import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402

VOCAB = 30
HOT = VOCAB - 1  # a source token whose embedding overflows float16 in the encoder
ROWS = 16  # splits over 8 replicas x 2 micro-batches
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# Every precision with and without accumulation, on 2 replicas, and on 4 in float32 (the
# tightest tolerance): what the suite runs. A run over N replicas traces
# the model N times: over 8, 11-18 s against 3 for 2 (Zen 5, 2026-11-27); on a Cascade Lake
# Xeon alone, 42 s, and mixed_float16 accumulating over 4 replicas 59 s against 26 for 2
# (2026-11-28), so that case runs on 2. 8 replicas run the code of 4 (each replica its share of
# rows, the sums across replicas); the float32 case on 8 cost the report 33 s of its 120 on a
# loaded 2-core Zen 4 (2026-12-07), so it runs in "full" (the first argument), with all 18.
# mixed_bfloat16 ran on 4 too until 2026-12-07: a precision's casts are each replica's own, the
# same on 2 as on 4 (float32 on 4 proves the 4-way sums), and it cost the report 17.7 s against
# 8.2 s on 2 (loaded 2-core Zen 4).
COVERING = [("float32", 1, 4), ("float32", 2, 2), ("mixed_bfloat16", 1, 2),
            ("mixed_bfloat16", 2, 2), ("mixed_float16", 1, 2), ("mixed_float16", 2, 2)]
FULL = [(policy, accumulate_steps, replicas) for policy in PRECISIONS
        for accumulate_steps in (1, 2) for replicas in (2, 4, 8)]


def batches(count=2, seed=0):
    """Global batches of ROWS pairs, padding on both sides, unequal real tokens per row."""
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(count):
        source = rng.integers(3, HOT, (ROWS, 7)).astype("int32")
        target = rng.integers(3, VOCAB, (ROWS, 6)).astype("int32")
        for row in range(ROWS):
            source[row, rng.integers(1, 8):] = 0
            target[row, rng.integers(1, 7):] = 0
        result.append(((source, np.pad(target[:, :-1], [(0, 0), (1, 0)])), target))
    return result


def dataset(data):
    """The batches as a dataset of tensors. Not `from_generator`: destroying its iterator (the
    next fit's tracing collects the last fit's) waits for a tf.data thread that needs the GIL the
    destructor holds, 20-80 s at a time whenever another process keeps a core busy; this report
    took 408 s beside one busy loop on 2 cores, 97 s alone (2026-11-29)."""
    source, target_input, target = (np.stack(part) for part in zip(*(
        (source, target_input, target) for (source, target_input), target in data)))
    options = tf.data.Options()
    options.autotune.enabled = False  # as data.pipeline's: an iterator's end waits for its thread
    return tf.data.Dataset.from_tensor_slices(((source, target_input), target)).with_options(
        options)


STRATEGIES = {1: tf.distribute.get_strategy()}


def strategy_of(replicas):
    if replicas not in STRATEGIES:
        # Every MirroredStrategy numbers its collective groups from 1: strategies of other sizes
        # in one process need ranges of their own (as TensorFlow's own tests give them).
        tf.distribute.MirroredStrategy._collective_key_base = replicas * 10_000
        STRATEGIES[replicas] = tf.distribute.MirroredStrategy(
            [f"/cpu:{i}" for i in range(replicas)])
    return STRATEGIES[replicas]


# transformer_tiny with one layer (traced once a replica), no dropout, and embeddings of its own on
# each side: `overflow` makes one source token's embedding overflow float16, which a shared
# output projection would turn into overflowing logits in every case.
HPARAMS = kt.hparams.get("transformer_tiny", dropout=0.0, num_layers=1, embedding_sharing="none")
COMPILED = {}


def compiled(replicas, policy, accumulate_steps):
    """The model of HPARAMS compiled for a case, once a process: a run over N replicas traces
    its step N times, and `equivalence` and `overflow` run most cases twice. (model, the values
    of its optimizer's variables before its first update)."""
    key = replicas, policy, accumulate_steps
    if key not in COMPILED:
        with strategy_of(replicas).scope():
            model = kt.build_model(HPARAMS, VOCAB)
            # SGD: the weights move by the gradient itself. Adam would hide a gradient off by
            # a factor (its steps are lr * g / |g|), and its first steps would turn rounding in
            # near-zero gradients into whole steps. Under mixed_float16 compile wraps it in a
            # kt.LossScaleOptimizer.
            model.compile(optimizer=keras.optimizers.SGD(0.5), loss=kt.build_loss(HPARAMS),
                          accumulate_steps=accumulate_steps)
            model.optimizer.build(model.trainable_variables)
        COMPILED[key] = model, [v.numpy() for v in model.optimizer.variables]
    return COMPILED[key]


def train(initial, data, *, replicas, policy, accumulate_steps=1):
    """Weights, loss scale (None outside float16) and optimizer steps after fit on `data`, from
    the weights `initial` and a fresh optimizer state."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        model, fresh_state = compiled(replicas, policy, accumulate_steps)
        model.set_weights(initial)
        for variable, value in zip(model.optimizer.variables, fresh_state):
            variable.assign(value)
        model.fit(dataset(data), epochs=1, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    scale = getattr(model.optimizer, "dynamic_scale", None)
    return (model.get_weights(), None if scale is None else float(scale.numpy()),
            int(model.optimizer.iterations.numpy()))


def largest_difference(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def equivalence(cases):
    """Per (precision, accumulate_steps): how far one device moved the weights, and for each
    replica count the largest weight difference from one device.

    One device trains on whole batches, without accumulation, in each precision: the reference
    for N replicas both with and without accumulating, since K micro-batches make the update of
    their whole batch (tests/test_accumulation.py). A run per precision instead of two."""
    keras.utils.set_random_seed(1)
    initial = kt.build_model(HPARAMS, VOCAB).get_weights()
    data = batches()
    report, one_device = {}, {}
    for policy, accumulate_steps, replicas in cases:
        if policy not in one_device:
            one_device[policy], _, _ = train(initial, data, replicas=1, policy=policy)
        key = f"{policy} accumulate {accumulate_steps}"
        report.setdefault(key, {"moved": largest_difference(initial, one_device[policy])})
        weights, _, _ = train(initial, data, replicas=replicas, policy=policy,
                              accumulate_steps=accumulate_steps)
        report[key][str(replicas)] = largest_difference(one_device[policy], weights)
    return report


def overflow():
    """mixed_float16: rows holding HOT overflow in the encoder. Overflow in one replica's rows
    (or one micro-batch's) must skip the update on every replica and halve the loss scale."""
    keras.utils.set_random_seed(2)
    model = kt.build_model(HPARAMS, VOCAB)
    model.source_embedding.embeddings.assign(  # inf in float16 once it reaches the queries
        tf.tensor_scatter_nd_update(model.source_embedding.embeddings, [[HOT]],
                                    tf.fill([1, HPARAMS.d_model], 1e4)))
    initial = model.get_weights()
    report = {}
    # Every case's model is one `equivalence` compiled. Keras's own LossScaleOptimizer read the
    # first replica's gradients only, so an overflow on a later replica is the case to hold: on
    # replica 1 of 2 here, not the last of 4, whose model no other case shares (4 more traced
    # steps: the overflow part 12.8-13.7 s, now 5.9; AMX Xeon, 2026-11-30).
    for name, replicas, accumulate_steps, hot_rows in [
            ("no overflow", 2, 1, slice(0, 0)),
            ("one device", 1, 1, slice(12, 16)),
            ("last rows of replica 1 of 2", 2, 1, slice(12, 16)),
            ("micro-batch 1 of replica 1 of 2", 2, 2, slice(8, 12))]:
        (source, target_input), target = batches(1, seed=5)[0]
        source = source.copy()
        source[hot_rows, 0] = HOT
        weights, scale, steps = train(initial, [((source, target_input), target)],
                                      replicas=replicas, policy="mixed_float16",
                                      accumulate_steps=accumulate_steps)
        report[name] = {"changed": largest_difference(initial, weights), "scale": scale,
                        "finite": all(bool(np.isfinite(w).all()) for w in weights)}
    return report


def replica_outputs(strategy, layer, inputs):
    """`layer(inputs, training=True)` on each replica, the same inputs on all: a list of arrays."""
    return [value.numpy() for value in strategy.experimental_local_results(tf.function(
        lambda: strategy.run(lambda: layer(inputs, training=True)))())]


def dropout():
    """Replicas fed the same rows in training: how much their outputs differ, for kt.Dropout,
    keras.layers.Dropout, and the model with only its dropout or only its word dropout on; the
    difference between two runs of one seed; the seed state before and after one call."""
    strategy = strategy_of(2)
    ones = np.ones((4, 16), "float32")
    report = {}
    for name, make in [("kt.Dropout", kt.Dropout), ("keras.layers.Dropout", keras.layers.Dropout)]:
        with strategy.scope():
            layer = make(0.5, seed=3)
        first, second = replica_outputs(strategy, layer, ones)
        report[name] = float(np.abs(first - second).max())
    rows = (np.array([[5, 6, 7, 8, 1]] * 2, "int32"), np.array([[1, 5, 6, 7, 8]] * 2, "int32"))

    def model_outputs(seed, **rates):
        """Each replica's output, and the state of the decoder input dropout's (or, with dropout
        0, the word dropout's) seed generator before and after the call."""
        keras.utils.set_random_seed(seed)
        with strategy.scope():
            model = kt.build_model(kt.hparams.get("transformer_tiny", num_layers=1, **rates),
                                   VOCAB)
            model(rows)
        generator = (model.decoder_input_dropout if rates.get("dropout") else
                     model.source_word_dropout_layer).seed_generator
        before = generator.state.numpy().tolist()
        outputs = replica_outputs(strategy, model, rows)
        return outputs, [before, generator.state.numpy().tolist()]

    once, report["states"] = model_outputs(1, dropout=0.3)
    report["model, dropout"] = float(np.abs(once[0] - once[1]).max())
    (first, second), _ = model_outputs(1, dropout=0.0, source_word_dropout=0.5)
    report["model, word dropout"] = float(np.abs(first - second).max())
    again, _ = model_outputs(1, dropout=0.3)
    report["same seed"] = largest_difference(once, again)
    return report


cases = FULL if sys.argv[1:] == ["full"] else COVERING
print(json.dumps({"dropout": dropout(), "equivalence": equivalence(cases),
                  "overflow": overflow()}))
