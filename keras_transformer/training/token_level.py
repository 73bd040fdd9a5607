"""How the Transformer trains under `model.fit`, on one device or many (paper section 5).

The mixin gives `model.fit` three things Keras 3.15 does not do on its own for this model:

- Token-level loss normalization. Batches hold a token budget, not a number of sentences, so the
  loss is the sum of label-smoothed token losses divided by the number of real target tokens in
  the global batch. Under a `tf.distribute` strategy each replica divides its local sum by the
  token count summed over all replicas; Keras then sums the replicas' gradients, which gives
  exactly the single-device gradient of the same global batch.
- Gradient accumulation, token-exact (`compile(..., accumulate_steps=K)`). Each batch `fit`
  gets is split by rows into K micro-batches that run forward and backward one after another
  (the activations of one at a time); their gradients add up and the optimizer updates once. Every
  micro-batch's token-loss sum is divided by the real target tokens of the whole batch (all K, all
  replicas), so the update is exactly that of the batch in one piece, whatever the micro-batches'
  token counts; Keras's optimizer `gradient_accumulation_steps` instead averages K batches with
  equal weights. One `fit` step stays one update: the learning-rate schedule, `steps_per_epoch`,
  callbacks and checkpoints count updates, and no state outlives a step. Give it batches K times
  as large (rows that do not split evenly are made up with all-padding rows, which carry no loss).
  Under float16 loss scaling every micro-batch's loss is scaled alike and the optimizer checks
  the sum once, so an overflow in any micro-batch skips the update; `compile` makes the loss
  scaling `kt.LossScaleOptimizer`'s, whose check covers every replica (Keras's reads the first
  replica's gradients only).
- Building before the first trace. Under a distribution strategy Keras 3.15 builds a model from a
  batch it first averages across replicas, which turns int token ids into floats and fails on
  batches that do not split evenly. The distributed dataset's element spec (one replica's) has the
  right structure, shapes and dtypes, and building needs no more. Without a strategy Keras
  builds the metrics, loss and optimizer inside the step's first trace, which makes tf.function
  trace the step twice; the mixin builds them from the element spec there too. Keras would
  also trace the whole model once more to learn its output's shape; the models' `logits_spec`
  gives it.
  Under `MultiWorkerMirroredStrategy`, Keras also fails reducing scalar logs
  (tensorflow/tensorflow#72388); they are returned with shape [1] there.

With `compile(..., report_batch_shape=True)` (kt-train's), the logs of each train step also carry
`batch_shape`, int32 [3]: the step's sentences, source length and target length (TensorFlow:
one replica's batch, a mean over replicas; JAX: the global batch), so that a failure can name
the batch. Off by default: Keras's
progress bar and History would show it.

The train and test steps are the backend's: keras_transformer/training/tensorflow_steps.py
(tf.distribute, a `tf.while_loop` over micro-batches) and keras_transformer/training/jax_steps.py
(Keras's JAX `train_step(state, data)`, a `lax.scan` over micro-batches; one jitted program over a
`keras.distribution` mesh sums the whole global batch, so nothing is reduced by hand there).
They override or use Keras internals: keras (and tensorflow) are pinned, and
tests/test_training.py, tests/test_distributed.py and tests/test_jax.py check the behaviour.
"""

import keras
from keras import ops, tree
from keras.src.backend import compute_output_spec

from keras_transformer.runtime import backend
from keras_transformer.training.loss_scaling import agreeing_loss_scale
from keras_transformer.training.losses import LabelSmoothedCrossEntropy, token_weights

if backend.is_tensorflow():
    from keras_transformer.training.tensorflow_steps import TensorFlowSteps as _BackendSteps
else:
    from keras_transformer.training.jax_steps import JaxSteps as _BackendSteps


class TokenLevelTraining(_BackendSteps):
    """Mixin for a `keras.Model` whose compiled loss is a `LabelSmoothedCrossEntropy`."""

    report_batch_shape = False
    accumulate_steps = 1
    # Python runs train_step once per trace (per replica): how often variable batch shapes made
    # the backend retrace the step.
    train_step_traces = 0
    # While an accumulating JAX step is traced: (the whole batch's real target tokens, each
    # micro-batch's share of the additional losses); None otherwise.
    _accumulation = None

    def compile(self, optimizer="rmsprop", *args, accumulate_steps=1, report_batch_shape=False,
                **kwargs):
        """`keras.Model.compile`, plus `accumulate_steps`: micro-batches per update, and
        `report_batch_shape`: each train step's logs carry its batch's shape (module doc).
        Under mixed_float16 the optimizer's loss scaling is `kt.LossScaleOptimizer`'s, whose
        overflow check covers every replica.

        Raises:
            ValueError: accumulate_steps is not a positive integer, or is used without a
                `LabelSmoothedCrossEntropy` loss or together with the optimizer's own
                `gradient_accumulation_steps`.
        """
        if isinstance(accumulate_steps, bool) or not isinstance(accumulate_steps, int) or \
                accumulate_steps < 1:
            raise ValueError(f"accumulate_steps must be an integer >= 1, got "
                             f"{accumulate_steps!r}")
        if self.dtype_policy.name == "mixed_float16" and optimizer is not None and \
                kwargs.get("auto_scale_loss", True):
            optimizer = agreeing_loss_scale(optimizer)
        super().compile(optimizer, *args, **kwargs)
        if accumulate_steps > 1:
            if not isinstance(self.loss, LabelSmoothedCrossEntropy):
                raise ValueError(f"accumulate_steps needs the loss kt.build_loss gives (a "
                                 f"LabelSmoothedCrossEntropy), got {self.loss!r}")
            if getattr(self.optimizer, "gradient_accumulation_steps", None):
                raise ValueError("accumulate_steps and the optimizer's "
                                 "gradient_accumulation_steps would both accumulate; use one "
                                 "(accumulate_steps weighs micro-batches by their tokens)")
        self.accumulate_steps = accumulate_steps
        self.report_batch_shape = bool(report_batch_shape)
        self._compile_config.config.update(accumulate_steps=accumulate_steps,
                                           report_batch_shape=self.report_batch_shape)

    def compile_from_config(self, config):
        # Keras skips compiling a model whose compile() is overridden; this one's takes the
        # config get_compile_config wrote.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def _symbolic_build(self, iterator=None, data_batch=None):
        # Keras traces the whole model once more, in a scratch graph, to learn its output's
        # shape before it builds the compiled loss and metrics; `logits_spec` (the models')
        # says it without tracing: 0.21 s for that build against 0.93-1.50 (transformer_tiny, one
        # thread, 2026-11-29), paid by every first fit, evaluate and kt-train start.
        if data_batch is not None and all(layer.built for layer in self._flatten_layers()):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(tree.map_structure(
                lambda t: None if t is None else keras.KerasTensor(
                    t.shape, keras.backend.standardize_dtype(t.dtype)),
                data_batch))
            y_pred = self.logits_spec(x)
            if self._compile_metrics is not None and not self._compile_metrics.built:
                compute_output_spec(self.compute_metrics, x, y, y_pred,
                                    sample_weight=sample_weight)
            if self._compile_loss is not None and not self._compile_loss.built:
                compute_output_spec(self._compute_loss, x, y, y_pred,
                                    sample_weight=sample_weight, training=False)
        super()._symbolic_build(iterator, data_batch)

    def _token_loss_sum(self, y, y_pred, sample_weight):
        """(sum of the real target tokens' losses, their count), both float32 scalars."""
        weights = token_weights(y, sample_weight, self.loss.pad_id)
        return ops.sum(self.loss.call(y, y_pred) * weights), ops.sum(weights)

    @staticmethod
    def _over_replicas(value):
        """`value` summed over a tf.distribute strategy's replicas (JAX: `value`)."""
        if not backend.is_tensorflow():
            return value
        import tensorflow as tf

        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            return replica_context.all_reduce(tf.distribute.ReduceOp.SUM, value)
        return value

    def _normalized(self, local_sum, total_weight, share=1.0):
        """The loss of a replica's tokens: `local_sum` over the global token count, plus
        `share` of the model's additional losses (regularizers)."""
        loss = local_sum / ops.maximum(total_weight, 1.0)
        for extra in self.losses:
            loss += share * self._aggregate_additional_loss(extra)
        return loss

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if not isinstance(self.loss, LabelSmoothedCrossEntropy):
            return super().compute_loss(x, y, y_pred, sample_weight, training=training)
        if self._compile_loss is not None and not self._compile_loss.built:
            # Unused with this loss, but until it is built Keras (under a strategy) traces the
            # whole model again at the start of every fit and evaluate (kt-train: every
            # evaluation) to build it.
            self._compile_loss.build(y, y_pred)
        local_sum, weight = self._token_loss_sum(y, y_pred, sample_weight)
        if self._accumulation is not None:
            return self._normalized(local_sum, *self._accumulation)
        return self._normalized(local_sum, self._over_replicas(weight))
