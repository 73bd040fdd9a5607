"""`TokenLevelTraining`'s train step on JAX (keras_transformer/training/token_level.py): Keras's JAX
`train_step(state, data)`, plus token-exact gradient accumulation.

With `accumulate_steps` K the batch's rows split into K micro-batches (all-padding rows make up
a remainder: they carry no loss), and a `lax.scan` runs forward and backward on one at a time
(the activations of one micro-batch live at once), adding up the gradients; each micro-batch's
token-loss sum is divided by the real target tokens of the whole batch, so the one update that
follows is the batch's in one piece. The dropout seed generators (non-trainable state) advance
from one micro-batch to the next. Under a `keras.distribution` mesh the jitted step sees the
global batch, so the token count is already global. Uses Keras's `compute_loss_and_updates`,
`_loss_tracker` and `StatelessScope` (keras is pinned).
"""

import jax
import keras
from keras import ops, tree

from keras_transformer.training.losses import token_weights


def _split(tensor, steps):
    """[rows, ...] -> [steps, ceil(rows / steps), ...], zero rows added at the end (zero ids
    are padding; a zero sample weight weighs nothing)."""
    missing = -tensor.shape[0] % steps
    tensor = ops.pad(tensor, [[0, missing]] + [[0, 0]] * (len(tensor.shape) - 1))
    return ops.reshape(tensor, (steps, -1, *tensor.shape[1:]))


class JaxSteps:
    """The train step `TokenLevelTraining` gives `model.fit` under the JAX backend."""

    def train_step(self, state, data):
        self.train_step_traces += 1
        if self.accumulate_steps > 1:
            logs, state = self._accumulating_train_step(state, data)
        else:
            logs, state = super().train_step(state, data)
        if self.report_batch_shape:
            (source_ids, _), target_ids, _ = keras.utils.unpack_x_y_sample_weight(data)
            logs = {**logs, "batch_shape": ops.convert_to_tensor(
                [*source_ids.shape[:2], target_ids.shape[1]], "int32")}
        return logs, state

    def _stateless_metrics(self, metrics_variables, update):
        """Runs `update()` (which updates metrics) on `metrics_variables`; returns (its result,
        the metrics variables' new values)."""
        with keras.StatelessScope(
                state_mapping=list(zip(self.metrics_variables, metrics_variables))) as scope:
            result = update()
        new_values = [scope.get_current_value(variable) for variable in self.metrics_variables]
        return result, [value if value is not None else old
                        for value, old in zip(new_values, metrics_variables)]

    def _accumulating_train_step(self, state, data):
        """Keras's JAX train step over `accumulate_steps` micro-batches of the batch's rows
        (module doc). `data`: ((source [rows, S], target input [rows, T]), target [rows, T][,
        sample weight]); each micro-batch [ceil(rows / K), ...]. Returns (logs, new state)."""
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        steps = self.accumulate_steps
        total_weight = ops.sum(token_weights(y, sample_weight, self.loss.pad_id))
        # jax's tree_map leaves None (no sample weight) as it is.
        micro_batches = jax.tree_util.tree_map(lambda t: _split(t, steps), (x, y, sample_weight))
        gradient_of = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)

        def micro_step(carry, micro_batch):
            gradients, non_trainable, metrics_variables, loss = carry
            x_i, y_i, weight_i = micro_batch
            (_, (micro_loss, y_pred, non_trainable, metrics_variables)), new = gradient_of(
                trainable, non_trainable, metrics_variables, x_i, y_i, weight_i, training=True,
                optimizer_variables=optimizer_variables)
            _, metrics_variables = self._stateless_metrics(
                metrics_variables, lambda: self.compute_metrics(x_i, y_i, y_pred, weight_i))
            gradients = [total + gradient for total, gradient in zip(gradients, new)]
            return (gradients, non_trainable, metrics_variables, loss + micro_loss), None

        self._accumulation = (total_weight, 1.0 / steps)
        try:
            (gradients, non_trainable, metrics_variables, loss), _ = jax.lax.scan(
                micro_step, ([ops.zeros_like(v) for v in trainable], non_trainable,
                             metrics_variables, ops.zeros((), "float32")), micro_batches)
        finally:
            self._accumulation = None
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, gradients, trainable)

        def report():  # as Keras's step reports the loss of a whole batch
            self._loss_tracker.update_state(loss, sample_weight=tree.flatten(x)[0].shape[0])
            return self.get_metrics_result()

        logs, metrics_variables = self._stateless_metrics(metrics_variables, report)
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)
