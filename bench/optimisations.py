"""Candidate optimisations measured in isolation, before and after side by side.

- Adam: one update of every trainable variable of the base model (32k vocabulary) with
  `keras.optimizers.Adam` against `kt.FusedAdam` (TensorFlow's one-pass `ResourceApplyAdam`),
  the same random gradients, alternating.
- Fused QKV: self-attention's three input projections as three [d, d] matmuls (what
  `MultiHeadAttention` does) against one matmul with the kernels concatenated to [d, 3d] and the
  result split, forward and backward at a training batch's rows (64 x 32 tokens) and forward at
  a beam-search step's rows (beam 4 x 32 sentences).
- int8 weights in a SavedModel: a beam step's matmuls ([128, 512] by the feed-forward's
  [512, 2048] and the output projection's [512, 32000]) in float32 against int8 operands with
  int32 results (`tf.matmul(..., output_type=tf.int32)`, what stock TensorFlow and so TF Serving
  offer).
- The output projection of a beam step's rows (beam 4 x 32 sentences, and beam 4 x 1) onto a
  32k vocabulary: `SharedEmbedding(reverse=True)` transposing its matrix inside the step (what
  graph mode then runs as one matmul reading the matrix transposed) against the transposed
  matrix made once beforehand (`output_kernel`, as `Transformer.init_cache` does).
- Top-k of a beam-search step: the 2 x beam best logits of each of its rows (beam 4 x 32
  sentences, and the parser's beam 21 x 32) over the vocabulary, `tf.math.top_k` against
  `search.contract.vocabulary_top_k` (the best chunks' maxima first, then top-k among their ids);
  and over a vocabulary one id smaller (31,999 has no divisor in [16, 64]: padded to chunks).

Each figure is the median of --repeats timed rounds, the variants alternating within a round.

    python -m bench.optimisations
"""

import argparse
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench.common import append_results, markdown_table
from keras_transformer.search import contract

ADAM = dict(learning_rate=1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def alternate(functions, repeats, calls):
    """{name: [milliseconds per call]}: each round times `calls` calls of every function."""
    for function in functions.values():
        function()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(calls):
                function()
            times[name].append((time.perf_counter() - start) / calls * 1e3)
    return times


def adam_updates(vocab_size):
    model = kt.build_model("transformer_base", vocab_size)
    model((np.ones((1, 4), "int32"), np.ones((1, 4), "int32")))
    variables = model.trainable_variables
    gradients = [tf.random.normal(v.shape, stddev=1e-3) for v in variables]
    functions = {}
    for name, optimizer in (("keras.optimizers.Adam", keras.optimizers.Adam(**ADAM)),
                            ("kt.FusedAdam", kt.FusedAdam(**ADAM))):
        optimizer.build(variables)
        apply = tf.function(lambda optimizer=optimizer: optimizer.apply(gradients, variables))
        # .numpy() waits for the update: reading a variable orders after its assignment.
        functions[name] = lambda apply=apply: (apply(), variables[-1].numpy())
    parameters = sum(int(np.prod(v.shape)) for v in variables)
    return f"Adam update, {parameters / 1e6:.1f}M parameters", functions, 1


def qkv(rows, training, d=512):
    kernels = [tf.Variable(tf.random.normal([d, d], stddev=0.05)) for _ in range(3)]
    x = tf.random.normal([rows, d])

    def separate():
        return [tf.matmul(x, kernel) for kernel in kernels]

    def fused():
        return tf.split(tf.matmul(x, tf.concat(kernels, axis=1)), 3, axis=1)

    def with_gradient(project):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(tf.square(y)) for y in project()])
        return tape.gradient(loss, kernels)

    functions = {}
    for name, project in (("three matmuls", separate), ("one fused matmul", fused)):
        compiled = tf.function(lambda p=project: with_gradient(p) if training else p())
        functions[name] = lambda compiled=compiled: compiled()[0].numpy()
    what = "forward + backward" if training else "forward"
    title = f"Q, K, V projections of {rows} rows of width {d}, {what}"
    return title, functions, 20 if training else 200


def int8_matmul(rows, width, d=512):
    x, kernel = tf.random.normal([rows, d]), tf.random.normal([d, width], stddev=0.05)
    quantized = [tf.cast(tf.clip_by_value(tf.round(t / tf.reduce_max(tf.abs(t)) * 127), -127,
                                          127), tf.int8) for t in (x, kernel)]
    functions = {}
    for name, operands, kwargs in (("float32", (x, kernel), {}),
                                   ("int8, int32 result", quantized, dict(output_type=tf.int32))):
        compiled = tf.function(lambda a=operands[0], b=operands[1], kwargs=kwargs:
                               tf.matmul(a, b, **kwargs))
        functions[name] = lambda compiled=compiled: compiled().numpy()
    return f"[{rows}, {d}] x [{d}, {width}] matmul", functions, 20


def output_projection(rows, vocab_size, d=512):
    embedding = kt.SharedEmbedding(vocab_size, d)
    x = tf.random.normal([rows, d])
    embedding(x, reverse=True)
    kernel = embedding.output_kernel()
    functions = {}
    for name, kwargs in (("transposed in the step", {}),
                         ("transposed once (output_kernel)", dict(output_kernel=kernel))):
        compiled = tf.function(lambda kwargs=kwargs: embedding(x, reverse=True, **kwargs))
        functions[name] = lambda compiled=compiled: compiled().numpy()
    return f"output projection of {rows} rows onto {vocab_size:,} ids, float32", functions, 20


def beam_step_top_k(rows, k, vocab_size):
    logits = tf.random.normal([rows, vocab_size], stddev=3.0)
    functions = {}
    for name, top_k in (("tf.math.top_k", tf.math.top_k),
                        ("search.contract.vocabulary_top_k", contract.vocabulary_top_k)):
        compiled = tf.function(lambda top_k=top_k: top_k(logits, k)[1])
        functions[name] = lambda compiled=compiled: compiled().numpy()
    return f"top-{k} of {rows} rows over a {vocab_size:,}-id vocabulary", functions, 50


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.optimisations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab_size", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    rows = []
    for title, functions, calls in (adam_updates(args.vocab_size), qkv(64 * 32, True),
                                    qkv(4 * 32, False), int8_matmul(4 * 32, 2048),
                                    int8_matmul(4 * 32, args.vocab_size),
                                    output_projection(4 * 32, args.vocab_size),
                                    output_projection(4, args.vocab_size),
                                    beam_step_top_k(4 * 32, 8, args.vocab_size),
                                    beam_step_top_k(4 * 32, 8, args.vocab_size - 1),
                                    beam_step_top_k(21 * 32, 42, args.vocab_size)):
        times = alternate(functions, args.repeats, calls)
        (before, before_times), (after, after_times) = times.items()
        for name, values in times.items():
            rows.append([title, name, f"{statistics.median(values):.3f}",
                         f"{min(values):.3f}-{max(values):.3f}", ""])
        rows[-1][-1] = f"{statistics.median(before_times) / statistics.median(after_times):.2f}x"
        print(*rows[-2:], sep="\n", flush=True)
    append_results("Optimisations in isolation", (
        f"Medians of {args.repeats} alternating rounds; the speed-up is before / after.\n\n"
        + markdown_table(["what", "variant", "ms (median)", "min-max", "speed-up"], rows)))


if __name__ == "__main__":
    main()
