"""`TokenLevelTraining`'s train and test steps on TensorFlow
(keras_transformer/training/token_level.py): building from the distributed dataset's element spec,
MultiWorkerMirroredStrategy's logs, and token-exact gradient accumulation in a `tf.while_loop`. They
override or use Keras internals (`_maybe_symbolic_build`, `_symbolic_build`, `_loss_tracker`,
`unscale_loss_for_distribution`) and TensorFlow's `PerReplicaSpec`: both are pinned."""

import keras
import tensorflow as tf
from keras import ops
from keras.src.losses import loss as loss_module
from tensorflow.python.distribute import values

from keras_transformer.training.losses import token_weights


def _one_replica(spec):
    """The first replica's TypeSpec of a distributed dataset's element spec (a PerReplicaSpec, which
    has no public accessor), or `spec` itself (one replica a worker)."""
    return spec._value_specs[0] if isinstance(spec, values.PerReplicaSpec) else spec


class TensorFlowSteps:
    """The steps `TokenLevelTraining` gives `model.fit` under the TensorFlow backend."""

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None:
            # Building reads only the structure, shapes and dtypes of a batch: the distributed
            # dataset's element spec has them (a PerReplicaSpec where a worker has several
            # replicas). Keras would read (and average) a batch of the iterator instead; a batch
            # from a fresh iterator started the whole input pipeline again (with the retrace
            # compute_loss now spares, ~3 s of a 19 s 6-step kt-train run on the bundled corpus).
            data_batch = tf.nest.map_structure(_one_replica,
                                               iterator._get_iterator().element_spec)
        if self._distribute_strategy is None and data_batch is not None:
            # Without a strategy Keras leaves the metrics, the compiled loss and the optimizer
            # to the step's first trace, and tf.function traces a step that creates variables
            # twice. Built here, as under a strategy, one device traces it once.
            self._symbolic_build(data_batch=data_batch)
            return None
        return super()._maybe_symbolic_build(data_batch=data_batch)

    def _logs_for_strategy(self, logs):
        if isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # Keras reduces each log over axis 0 there: one more axis keeps the vectors whole.
            return {name: ops.expand_dims(value, 0) if name == "batch_shape" else
                    ops.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def train_step(self, data):
        self.train_step_traces += 1
        if self.accumulate_steps > 1:
            logs = self._accumulating_train_step(data)
        else:
            logs = super().train_step(data)
        if self.report_batch_shape:
            (source_ids, _), target_ids, _ = keras.utils.unpack_x_y_sample_weight(data)
            logs = {**logs, "batch_shape": tf.concat([tf.shape(source_ids)[:2],
                                                      tf.shape(target_ids)[1:2]], 0)}
        return self._logs_for_strategy(logs)

    def test_step(self, data):
        return self._logs_for_strategy(super().test_step(data))

    def _accumulating_train_step(self, data):
        """Keras's train step, over `accumulate_steps` micro-batches of the batch's rows."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        steps = self.accumulate_steps
        total_weight = self._over_replicas(
            ops.sum(token_weights(y, sample_weight, self.loss.pad_id)))

        def split(tensor):  # [rows, ...] -> [steps, rows / steps, ...]
            if tensor is None:
                return None
            missing = -tf.shape(tensor)[0] % steps
            tensor = tf.pad(tensor, [[0, missing]] + [[0, 0]] * (tensor.shape.rank - 1))
            return tf.reshape(tensor, tf.concat([[steps, -1], tf.shape(tensor)[1:]], 0))

        micro_batches = tf.nest.map_structure(split, (x, y, sample_weight))
        variables = self.trainable_weights

        def micro_step(i, loss, gradients):
            x_i, y_i, weight_i = tf.nest.map_structure(
                lambda t: None if t is None else t[i], micro_batches)
            with tf.GradientTape() as tape:
                y_pred = self(x_i, training=True)
                local_sum, _ = self._token_loss_sum(y_i, y_pred, weight_i)
                micro_loss = self._normalized(local_sum, total_weight, 1.0 / steps)
                scaled = self.optimizer.scale_loss(micro_loss)
            new = tape.gradient(scaled, variables,
                                unconnected_gradients=tf.UnconnectedGradients.ZERO)
            self.compute_metrics(x_i, y_i, y_pred, sample_weight=weight_i)
            return (i + 1, loss + micro_loss,
                    [total + tf.convert_to_tensor(g) for total, g in zip(gradients, new)])

        _, loss, gradients = tf.while_loop(
            lambda i, *_: i < steps, micro_step,
            (tf.constant(0), tf.constant(0.0), [tf.zeros_like(v) for v in variables]),
            parallel_iterations=1)  # one micro-batch's activations at a time
        # As Keras's train step reports and applies the loss of a whole batch.
        self._loss_tracker.update_state(loss_module.unscale_loss_for_distribution(loss),
                                        sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
        self.optimizer.apply_gradients(zip(gradients, variables))
        return self.get_metrics_result()
