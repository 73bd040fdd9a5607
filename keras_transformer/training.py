"""How the Transformer trains under `model.fit`, on one device or many (paper section 5).

The mixin gives `model.fit` two things Keras 3.15 does not do on its own for this model:

- Token-level loss normalization. Batches hold a token budget, not a number of sentences, so the
  loss is the sum of label-smoothed token losses divided by the number of real target tokens in
  the global batch. Under a `tf.distribute` strategy each replica divides its local sum by the
  token count summed over all replicas; Keras then sums the replicas' gradients, which gives
  exactly the single-device gradient of the same global batch.
- Building under a distribution strategy. Keras 3.15 builds a model from a batch it first averages
  across replicas, which turns int token ids into floats and fails on batches that do not split
  evenly. Any one replica's batch has the right structure and dtypes, and building needs no more.
  Under `MultiWorkerMirroredStrategy`, Keras also fails reducing scalar logs
  (tensorflow/tensorflow#72388); they are returned with shape [1] there.

With `report_batch_shape` set to True (kt-train does), the logs of each train step also carry
`batch_shape`, int32 [3]: the step's sentences, source length and target length (one replica's
batch, a mean over replicas), so that a failure can name the batch. Off by default: Keras's
progress bar and History would show it.

These override Keras internals (`_maybe_symbolic_build`): keras is pinned, and
tests/test_distributed.py checks the behaviour.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.losses import LabelSmoothedCrossEntropy, token_weights


class TokenLevelTraining:
    """Mixin for a `keras.Model` whose compiled loss is a `LabelSmoothedCrossEntropy`."""

    report_batch_shape = False

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if not isinstance(self.loss, LabelSmoothedCrossEntropy):
            return super().compute_loss(x, y, y_pred, sample_weight, training=training)
        weights = token_weights(y, sample_weight, self.loss.pad_id)
        local_sum = ops.sum(self.loss.call(y, y_pred) * weights)
        total_weight = ops.sum(weights)
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            total_weight = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, total_weight)
        loss = local_sum / ops.maximum(total_weight, 1.0)
        for extra in self.losses:  # e.g. weight regularizers
            loss += self._aggregate_additional_loss(extra)
        return loss

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None and self._distribute_strategy is not None:
            # Only the batch's structure, shapes and dtypes matter here; a fresh iterator leaves
            # the one training reads untouched.
            first = next(iter(iterator._get_iterator()))
            data_batch = tf.nest.map_structure(self._one_replica, first)
        return super()._maybe_symbolic_build(data_batch=data_batch)

    def _one_replica(self, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return self.distribute_strategy.experimental_local_results(value)[0]
        return value

    def _logs_for_strategy(self, logs):
        if isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # Keras reduces each log over axis 0 there: one more axis keeps the vectors whole.
            return {name: ops.expand_dims(value, 0) if name == "batch_shape" else
                    ops.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def train_step(self, data):
        # Python runs once per trace (per replica), so this counts how often variable batch
        # shapes made TensorFlow retrace the step.
        self.train_step_traces = getattr(self, "train_step_traces", 0) + 1
        logs = super().train_step(data)
        if self.report_batch_shape:
            (source_ids, _), target_ids, _ = keras.utils.unpack_x_y_sample_weight(data)
            logs = {**logs, "batch_shape": tf.concat([tf.shape(source_ids)[:2],
                                                      tf.shape(target_ids)[1:2]], 0)}
        return self._logs_for_strategy(logs)

    def test_step(self, data):
        return self._logs_for_strategy(super().test_step(data))
