"""What tracing costs a call: milliseconds to put one call of each op pattern the layers use into
a tf.function's graph, `keras.ops` against `tf`, on a [None, None, 64] input.

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

from bench.train_step import matmul_peak

CALLS = 100
KERNEL = keras.Variable(tf.random.normal([64, 64]))


def _split_and_merge_tf(x):
    batch_and_length = tf.shape(x)[:2]
    heads = tf.reshape(x, tf.concat([batch_and_length, [4, 16]], 0))
    return tf.reshape(heads, tf.concat([batch_and_length, [64]], 0))


def _split_and_merge_keras(x):
    heads = ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[1], 4, 16))
    return ops.reshape(heads, (ops.shape(x)[0], ops.shape(x)[1], 64))


PATTERNS = {
    "tf.identity": tf.identity,
    "tf.matmul(x, tf.cast(kernel))": lambda x: tf.matmul(x, tf.cast(KERNEL.value, x.dtype)),
    "ops.matmul(x, ops.cast(kernel))": lambda x: ops.matmul(x, ops.cast(KERNEL, x.dtype)),
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


def main():
    peak = matmul_peak(tf.float32) / 1e9
    rounds = [{name: milliseconds_a_call(pattern) for name, pattern in PATTERNS.items()}
              for _ in range(3)]
    print(f"float32 matmul peak {peak:.0f} GFLOP/s; ms to trace one call (median of 3 rounds):")
    for name in PATTERNS:
        print(f"  {name}: {statistics.median(r[name] for r in rounds):.2f}")


if __name__ == "__main__":
    main()
