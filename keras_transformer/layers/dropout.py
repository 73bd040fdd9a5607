"""Dropout whose masks differ across the replicas of a tf.distribute strategy (paper section 5.4).

Keras's `SeedGenerator` keeps its state in one variable that `MirroredStrategy` mirrors on every
replica, so Keras's own dropout draws the same mask on every replica: a batch split over N devices
would be regularized with N copies of one mask, not as the same batch is on one device. Here each
draw folds the replica's index in the sync group (global across workers) into the generator's
seed (`tf.random.experimental.stateless_fold_in`): replicas draw independent masks, the same ones
for the same seed on every run and after a resume (the state is checkpointed, the fold is a
function of it). With one replica the seed is Keras's own, so single-device training draws
exactly the masks `keras.layers.Dropout` draws.

Under JAX this is `keras.layers.Dropout`: a jitted step over a `keras.distribution` mesh draws
one mask for the whole global batch, of which each device applies its rows, so N devices
regularize a batch exactly as one device does (there are no per-replica programs to differ).
"""

import keras
from keras import ops

from keras_transformer.runtime import backend


def replica_seed(seed_generator):
    """The generator's next seed for this replica: int32 [2], what TF's stateless ops take
    (TensorFlow only).

    Advances `seed_generator` once (as any Keras random op does).
    """
    import tensorflow as tf

    # As Keras's TensorFlow backend maps the int64 state into int32 (the seeds XLA compiles).
    seed = tf.cast(tf.math.floormod(seed_generator.next(), tf.int32.max - 1), tf.int32)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        seed = tf.random.experimental.stateless_fold_in(seed, context.replica_id_in_sync_group)
    return seed


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, same masks on one device) whose masks differ
    across replicas (module doc).

    Args:
        rate: fraction of the inputs to drop, in [0, 1].
        noise_shape: optional shape of the mask (None entries: the input's size there), e.g.
            (None, 1, None): one mask for every position along axis 1.
        seed: seeds the layer's random stream (`keras.random.SeedGenerator`).

    Call arguments:
        inputs: any float tensor.
        training: drop only when True.

    Returns:
        `inputs` with each element (or each slice `noise_shape` names) zeroed with probability
        `rate` and the rest scaled by 1 / (1 - rate); `inputs` unchanged outside training.

    Example:
    >>> Dropout(0.5, seed=1)(np.ones((1, 4)), training=False).numpy()
    array([[1., 1., 1., 1.]], dtype=float32)
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.rate == 1:
            return ops.zeros_like(inputs)
        if not backend.is_tensorflow():
            return super().call(inputs, training=training)
        import tensorflow as tf

        shape = tf.shape(inputs)
        noise_shape = shape if self.noise_shape is None else [
            shape[axis] if size is None else size for axis, size in enumerate(self.noise_shape)]
        # tf.nn.experimental.stateless_dropout's draw and mask, written with fewer graph ops:
        # its uniform draw is scaled to [0, 1) by `* 1 + 0`, and its mask applied by a select
        # whose gradient reduces over broadcast axes; a product by the scaled mask is the same
        # outputs (to the bit, but for a dropped -x giving -0, and a dropped inf NaN: under
        # float16 loss scaling, a step whose only overflow is dropped is now skipped) with a
        # cheaper gradient.
        key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(
            seed=replica_seed(self.seed_generator))
        uniform = tf.raw_ops.StatelessRandomUniformV2(
            shape=noise_shape, key=key, counter=counter, dtype=inputs.dtype,
            alg=tf.random.Algorithm.AUTO_SELECT.value)
        kept = tf.cast(uniform >= tf.cast(self.rate, inputs.dtype), inputs.dtype)
        return inputs * (kept * tf.cast(1 / (1 - self.rate), inputs.dtype))
