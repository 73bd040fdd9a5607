"""What a run reports while it trains: progress lines, dev metrics, BLEU, TensorBoard scalars."""

import math
import os
import signal
import sys
import threading
import time

import keras
import numpy as np
import sacrebleu
import tensorflow as tf

import data
from keras_transformer.decoding import greedy_decode
from trainer.checkpoints import step_of


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss stopped being a finite number)."""


def scalar(value):
    """A logged value as a float (logs are shape [1] under MultiWorkerMirroredStrategy)."""
    return float(np.ravel(value)[0])


def translate_ids(model, source_ids, extra_length=50, batch_size=64):
    """Greedy translations of int [n, length] source ids, as a list of id arrays."""
    outputs = [None] * len(source_ids)
    for rows, batch in data.length_sorted_batches(source_ids, batch_size):
        ids, _ = greedy_decode(model, batch, extra_length=extra_length)
        for row, row_ids in zip(rows, ids.numpy()):
            outputs[row] = row_ids
    return outputs


def source_ids_of(vocabulary, texts, max_length):
    """Tokenized texts + end of sentence, truncated to max_length, 0-padded: int32 [n, L]."""
    ids = vocabulary.tokenize(tf.constant(texts))[:, :max_length - 1]
    eos = tf.fill([ids.nrows(), 1], data.EOS_ID)
    return tf.concat([ids, tf.RaggedTensor.from_tensor(eos)], axis=1).to_tensor().numpy()


def bleu(model, vocabulary, sources, references, max_length, extra_length=50):
    """sacrebleu corpus BLEU of greedy translations; returns (BLEUScore, signature, hypotheses)."""
    hypotheses = [text.decode("utf-8") for text in vocabulary.detokenize(
        tf.ragged.constant(translate_ids(model, source_ids_of(vocabulary, sources, max_length),
                                         extra_length))).numpy()]
    metric = sacrebleu.BLEU()
    return metric.corpus_score(hypotheses, [references]), str(metric.get_signature()), hypotheses


class TrainingLog(keras.callbacks.Callback):
    """Every `every` steps: learning rate, and loss, accuracy, target tokens and target tokens/s
    over those steps.

    Written to TensorBoard (if `writer`), and printed as one line when `print_lines` (when the
    output is not a terminal, where Keras's progress bar shows the same). Tokens/s count the time
    spent in train steps (input pipeline included; evaluation and checkpoints not). Stops
    training with a TrainingError when the loss is not finite.
    """

    def __init__(self, every, writer=None, print_lines=True):
        super().__init__()
        self.every = every
        self.writer = writer
        self.print_lines = print_lines

    def on_train_begin(self, logs=None):
        # Time inside train steps only (data included, evaluation and checkpoints excluded).
        self._busy, self._busy_at_log, self._tokens, self._tokens_at_log = 0.0, 0.0, 0.0, 0.0
        self._seen = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._batch_start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self._busy += time.monotonic() - self._batch_start
        # Only for the message below (see TokenLevelTraining.report_batch_shape).
        shape = logs.pop("batch_shape", None)
        # The count restarts when an evaluation resets the metrics.
        seen = scalar(logs["target_tokens"])
        self._tokens += seen - self._seen if seen >= self._seen else seen
        self._seen = seen
        step = step_of(self.model)
        loss = scalar(logs["loss"])
        if not math.isfinite(loss):
            if shape is not None:
                sentences, source, target = np.ravel(shape).astype(int)
                batch = (f", on a batch of {sentences} sentences x {source} source x {target} "
                         f"target tokens (per replica; a mean over replicas)")
            raise TrainingError(
                f"the loss became {loss} at step {step}{batch if shape is not None else ''}. "
                f"Lower the learning rate "
                f"(--hparams_override learning_rate_multiplier=0.5), check the data "
                f"(python -m data.inspect), or use float32 (--mixed_precision none); training "
                f"resumes from the last checkpoint")
        if step % self.every:
            return
        tokens = self._tokens - self._tokens_at_log
        tokens_per_second = tokens / max(self._busy - self._busy_at_log, 1e-9)
        self._busy_at_log, self._tokens_at_log = self._busy, self._tokens
        scalars = {"learning_rate": float(self.model.optimizer.learning_rate),
                   "target_tokens": tokens, "target_tokens_per_second": tokens_per_second,
                   "loss": loss,
                   "token_accuracy": scalar(logs["token_accuracy"])}
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in scalars.items():
                    tf.summary.scalar(name, value)
        if self.print_lines:
            print(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in scalars.items()),
                  flush=True)
        # Keras's logs are running means since the last reset: resetting here makes each line
        # (and each point of the TensorBoard curve) the mean of its own `every` steps.
        self.model.reset_metrics()
        self._seen = 0.0


class Evaluation(keras.callbacks.Callback):
    """Every `every` steps: dev loss, perplexity, accuracy and greedy BLEU (`evaluate()` for
    another moment, e.g. the end of training; it does nothing twice at one step).

    Args:
        dev_batches: the dev split's pipeline (one pass), or None.
        vocabulary: for BLEU.
        sources, references: dev sentences (str) for BLEU; may be empty.
        every: steps between evaluations.
        max_length: source truncation for BLEU.
        writer: TensorBoard writer, or None.
    """

    def __init__(self, dev_batches, vocabulary, sources, references, every, max_length,
                 writer=None):
        super().__init__()
        self.dev_batches = dev_batches
        self.vocabulary = vocabulary
        self.sources, self.references = sources, references
        self.every = every
        self.max_length = max_length
        self.writer = writer
        self._last_step = None
        self.history = []

    def evaluate(self):
        step = step_of(self.model)
        if step == self._last_step:
            return
        self._last_step = step
        results = {}
        if self.dev_batches is not None:
            metrics = self.model.evaluate(self.dev_batches, verbose=0, return_dict=True)
            # evaluate shares the training metrics and leaves its dev totals in them.
            self.model.reset_metrics()
            results.update({f"dev_{k}": scalar(v) for k, v in metrics.items()
                            if k != "target_tokens"})
        line = ", ".join(f"{k} {v:.4g}" for k, v in results.items())
        if self.sources:
            score, signature, hypotheses = bleu(self.model, self.vocabulary, self.sources,
                                                self.references, self.max_length)
            results["dev_bleu"] = score.score
            line += (f", dev BLEU {score.score:.2f} on {len(self.sources)} sentences "
                     f"(greedy; sacrebleu {signature})\n  example: {self.sources[0]!r} -> "
                     f"{hypotheses[0]!r}")
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in results.items():
                    tf.summary.scalar(name, value)
        self.history.append((step, results))
        print(f"\nevaluation at step {step}: {line}", file=sys.stdout, flush=True)

    def on_train_batch_end(self, batch, logs=None):
        # A stop asked for at this step (time limit, preemption) leaves the evaluation to
        # whoever stopped training: a preempted run may have seconds left.
        if step_of(self.model) % self.every == 0 and not self.model.stop_training:
            self.evaluate()


class TimeLimit(keras.callbacks.Callback):
    """Ends training after `minutes` (PeriodicCheckpoint still saves at the end)."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            self.model.stop_training = True


class StopOnSignal(keras.callbacks.Callback):
    """Preemption: on SIGTERM (or Ctrl-C, SIGINT) training stops after the current step.

    The other callbacks' `on_train_end` then run (PeriodicCheckpoint writes the final checkpoint);
    `received` names the signal. The first signal puts the previous handlers back, so a second
    one acts as it would without this callback (the default: stop at once). Call `install()`
    before `fit` and `uninstall()` after it (also when it raises); it does nothing outside the
    main thread (Python delivers signals there) or for a signal the process ignores. Not for
    multi-worker runs: workers stopping at different steps would wait for each other forever.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        super().__init__()
        self.received = None
        self._previous = {}

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return
        for number in self.SIGNALS:
            previous = signal.getsignal(number)
            if previous is not signal.SIG_IGN:
                self._previous[number] = signal.signal(number, self._handle)

    def uninstall(self):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def _handle(self, number, frame):
        self.uninstall()
        self.received = signal.Signals(number).name
        if self.model is not None:
            self.model.stop_training = True
        # os.write: print could re-enter a write to stderr that the signal interrupted.
        os.write(2, f"\n{self.received} received: stopping after this step and writing a "
                    f"checkpoint (send it again to stop at once)\n".encode())

    def on_train_batch_end(self, batch, logs=None):
        if self.received is not None:
            self.model.stop_training = True
