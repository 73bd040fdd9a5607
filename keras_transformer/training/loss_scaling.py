"""float16 loss scaling whose overflow check covers every replica (mixed_float16 training).

Keras's `LossScaleOptimizer` decides whether an update's gradients are finite, under a
`MirroredStrategy`, from the first replica's own gradients, before the replicas' gradients are
summed (its comment assumes they already are). A float16 overflow on any other replica then
passes the check, and its inf or nan reaches every weight through the sum, while the loss scale
stays where it was (measured on logical CPU devices: tests/test_distributed.py). Here every
replica first learns, through one all-reduce of a scalar, whether any replica overflowed, and
then all of them skip the update (and halve the scale) together, as one device would.
Under JAX one program sees every device's gradients, and Keras's check covers them all; there
this class only keeps a `TransformerSchedule`'s window out of weights files (`WindowNotSaved`).
"""

import keras

from keras_transformer.runtime import backend
from keras_transformer.training.schedules import WindowNotSaved


def _scaled(gradient, factor):
    """`gradient` times a scalar: dense tensors and the IndexedSlices of embedding lookups."""
    import tensorflow as tf

    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype),
                                gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LossScaleOptimizer(WindowNotSaved, keras.optimizers.LossScaleOptimizer):
    """`keras.optimizers.LossScaleOptimizer` (same arguments and state) whose finite check spans
    all replicas (module doc); `compile` wraps an optimizer in it under mixed_float16."""

    def apply(self, grads, trainable_variables=None):
        if not backend.is_tensorflow():
            return super().apply(grads, trainable_variables)
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            overflowed = context.all_reduce(
                tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(self.check_finite(grads), tf.float32))
            # nan on every replica when any overflowed: each then fails Keras's own check.
            keep = tf.where(overflowed > 0, float("nan"), 1.0)
            grads = [None if gradient is None else _scaled(gradient, keep) for gradient in grads]
        return super().apply(grads, trainable_variables)


def agreeing_loss_scale(optimizer):
    """`optimizer` in a `LossScaleOptimizer` of this module: a plain optimizer wrapped, a Keras
    `LossScaleOptimizer` not yet built re-made with its settings, anything else unchanged."""
    optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, LossScaleOptimizer):
        return optimizer
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        if optimizer.built:
            return optimizer
        return LossScaleOptimizer(optimizer.inner_optimizer, initial_scale=optimizer.initial_scale,
                                  dynamic_growth_steps=optimizer.dynamic_growth_steps,
                                  name=optimizer.name)
    return LossScaleOptimizer(optimizer, name="loss_scale_optimizer")
