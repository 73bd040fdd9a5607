"""What tracing costs a call: milliseconds to put one call of each op pattern the layers use into
a tf.function's graph, `keras.ops` against `tf`, on a [None, None, 64] input; and the graph of
transformer_tiny's gradients, its ops and the seconds to trace it.

The suite spends most of its time tracing (each kt-train run traces its train and test steps,
every decoding test traces a search), so the cost of a traced call is what its budget turns on.
Each pattern is called 100 times in one function, traced once; three rounds, each pattern's
median printed beside the float32 matmul peak (2048^3) measured in the same process.

    python -m bench.trace_cost
"""

import statistics
import time

import keras
import tensorflow as tf
from keras import ops

import keras_transformer as kt
from bench.train_step import matmul_peak
from keras_transformer.layers.rows import from_rows, rows_of

CALLS = 100
KERNEL = keras.Variable(tf.random.normal([64, 64]))


def _split_and_merge_tf(x):
    batch_and_length = tf.shape(x)[:2]
    heads = tf.reshape(x, tf.concat([batch_and_length, [4, 16]], 0))
    return tf.reshape(heads, tf.concat([batch_and_length, [64]], 0))


def _split_and_merge_keras(x):
    heads = ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[1], 4, 16))
    return ops.reshape(heads, (ops.shape(x)[0], ops.shape(x)[1], 64))


def _as_rows(x):
    rows, leading = rows_of(x)
    return from_rows(ops.matmul(rows, ops.cast(KERNEL, x.dtype)), leading)


PATTERNS = {
    "tf.identity": tf.identity,
    "tf.matmul(x, tf.cast(kernel))": lambda x: tf.matmul(x, tf.cast(KERNEL.value, x.dtype)),
    "ops.matmul(x, ops.cast(kernel))": lambda x: ops.matmul(x, ops.cast(KERNEL, x.dtype)),
    "the same as rows (keras_transformer.layers.rows)": _as_rows,
    "heads split and merged, tf": _split_and_merge_tf,
    "heads split and merged, keras.ops": _split_and_merge_keras,
}


def milliseconds_a_call(pattern):
    @tf.function
    def repeated(x):
        for _ in range(CALLS):
            x = pattern(x)
        return x

    start = time.perf_counter()
    repeated.get_concrete_function(tf.TensorSpec([None, None, 64]))
    return (time.perf_counter() - start) / CALLS * 1000


def gradient_step_graph():
    """transformer_tiny (2,000 ids) in training: the loss's gradients traced once, from a fresh
    model. (graph ops, seconds to trace)."""
    hp = kt.hparams.get("transformer_tiny")
    model, loss = kt.build_model(hp, 2000), kt.build_loss(hp)

    @tf.function
    def gradients(source, target_input, target):
        with tf.GradientTape() as tape:
            value = loss(target, model((source, target_input), training=True))
        return tape.gradient(value, model.trainable_variables)

    start = time.perf_counter()
    graph = gradients.get_concrete_function(*[tf.TensorSpec([None, None], tf.int32)] * 3).graph
    return len(graph.get_operations()), time.perf_counter() - start


def main():
    peak = matmul_peak(tf.float32) / 1e9
    steps = [gradient_step_graph() for _ in range(3)]
    print(f"transformer_tiny's gradients: {steps[0][0]:,} graph ops, traced in "
          f"{statistics.median(seconds for _, seconds in steps):.2f} s (median of 3)")
    rounds = [{name: milliseconds_a_call(pattern) for name, pattern in PATTERNS.items()}
              for _ in range(3)]
    print(f"float32 matmul peak {peak:.0f} GFLOP/s; ms to trace one call (median of 3 rounds):")
    for name in PATTERNS:
        print(f"  {name}: {statistics.median(r[name] for r in rounds):.2f}")


if __name__ == "__main__":
    main()
