"""The label-smoothed loss and its gradient on TensorFlow: one softmax
(keras_transformer.training.losses, since 2026-11-28) against TensorFlow's fused
SparseSoftmaxCrossEntropyWithLogits (before), alone on logits of [tokens, vocab] and inside a whole
training step of transformer_tiny.

The two are the same function (their largest difference is printed); each arm is traced once,
then the arms run alternately --rounds times; medians in milliseconds, with the float32 matmul
peak before and after. TensorFlow's threads are what TF_NUM_INTRAOP_THREADS says (the test suite
gives each of its two workers one):

    TF_NUM_INTRAOP_THREADS=1 python -m bench.loss_kernel
"""

import argparse
import os
import statistics
import time

import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench.common import append_results, markdown_table, peaks_sentence
from bench.train_step import matmul_peak
from keras_transformer.training import losses

SMOOTHING = 0.1


def fused_smoothed_cross_entropy(labels, logits, label_smoothing):
    """The loss as it was before: the fused kernel's loss and softmax - one_hot, with the
    smoothing terms added, under the same custom gradient."""
    vocab_size = logits.shape[-1]
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)

    @tf.custom_gradient
    def loss_and_gradient(logits):
        flat_logits = tf.reshape(logits, [-1, vocab_size])
        flat_labels = tf.reshape(labels, [-1])
        loss, softmax_minus_one_hot = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=flat_logits, labels=flat_labels)
        loss += (label_smoothing * tf.gather(flat_logits, flat_labels, batch_dims=1)
                 - label_smoothing / vocab_size * tf.reduce_sum(flat_logits, axis=-1))

        def gradient(upstream):
            at_labels = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], axis=1)
            grad = tf.tensor_scatter_nd_add(
                softmax_minus_one_hot - label_smoothing / vocab_size, at_labels,
                tf.fill(tf.shape(flat_labels), label_smoothing))
            return tf.reshape(grad * tf.reshape(upstream, [-1, 1]), tf.shape(logits))

        return tf.reshape(loss, tf.shape(labels)), gradient

    return loss_and_gradient(logits)


class FusedLoss(kt.LabelSmoothedCrossEntropy):
    def call(self, y_true, y_pred):
        return fused_smoothed_cross_entropy(y_true, y_pred, self.label_smoothing)


def loss_block(function, tokens, vocab_size):
    """A traced function: the loss's sum and its gradient on fixed random logits."""
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(scale=3.0, size=(tokens, vocab_size)).astype("float32"))
    labels = tf.constant(rng.integers(0, vocab_size, tokens).astype("int32"))

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = function(labels, logits, SMOOTHING)
            total = tf.reduce_sum(loss)
        return loss, tape.gradient(total, logits)

    return lambda: [value.numpy() for value in run()]


def train_steps(loss, vocab_size, batch, length, steps):
    """A function that trains transformer_tiny `steps` updates on one fixed batch with `loss`."""
    hp = kt.hparams.get("transformer_tiny")
    model = kt.build_model(hp, vocab_size)
    model.compile(optimizer=kt.build_optimizer(hp), loss=loss)
    rng = np.random.default_rng(0)
    source, target = (rng.integers(3, vocab_size, (batch, length)).astype("int32")
                      for _ in range(2))
    data = tf.data.Dataset.from_tensors(((source, target), target)).repeat(steps)
    model.fit(data.take(1), verbose=0)  # trace
    return lambda: model.fit(data, verbose=0)


def time_alternately(arms, rounds):
    times = {name: [] for name in arms}
    for run in arms.values():
        run()
    for _ in range(rounds):
        for name, run in arms.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.loss_kernel",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20, help="updates a training round")
    args = parser.parse_args()
    peaks = [matmul_peak("float32") / 1e9]
    rows = []
    for tokens, vocab_size in [(2944, 2000), (4000, 8000)]:
        fused, one_softmax = (loss_block(function, tokens, vocab_size) for function in
                              (fused_smoothed_cross_entropy, losses.smoothed_cross_entropy))
        difference = max(float(np.abs(a - b).max()) for a, b in zip(fused(), one_softmax()))
        medians = time_alternately({"fused": fused, "one softmax": one_softmax}, args.rounds)
        rows.append([f"loss and gradient, {tokens:,} tokens x {vocab_size:,} ids",
                     f"{medians['fused'] * 1e3:.1f}", f"{medians['one softmax'] * 1e3:.1f}",
                     f"{medians['one softmax'] / medians['fused']:.2f}", f"{difference:.1e}"])
    batch, length = 64, 46
    medians = time_alternately(
        {name: train_steps(loss, 2000, batch, length, args.steps) for name, loss in
         [("fused", FusedLoss(SMOOTHING)), ("one softmax", kt.LabelSmoothedCrossEntropy(
             SMOOTHING))]}, args.rounds)
    rows.append([f"transformer_tiny update, {batch} x {length} tokens, 2,000 ids",
                 f"{medians['fused'] / args.steps * 1e3:.1f}",
                 f"{medians['one softmax'] / args.steps * 1e3:.1f}",
                 f"{medians['one softmax'] / medians['fused']:.2f}", ""])
    peaks.append(matmul_peak("float32") / 1e9)
    table = markdown_table(["work", "fused kernel ms", "one softmax ms", "ratio",
                            "largest difference"], rows)
    threads = os.environ.get("TF_NUM_INTRAOP_THREADS", "all")
    append_results("The smoothed loss: one softmax against the fused kernel",
                   f"{table}\n\nMedians of {args.rounds} alternating rounds, {threads} intra-op "
                   f"thread(s). {peaks_sentence(peaks)}")


if __name__ == "__main__":
    main()
