"""Word dropout on the source: real tokens become unknown at random while training.

Sennrich & Zhang (2019, "Revisiting Low-Resource Neural Machine Translation", section 3.2) drop
whole source words in training (after Gal & Ghahramani 2016 and Sennrich et al. 2016) and count
it among what helps most when the corpus is small and read many times over, as the bundled
corpora are in a CPU hour. Here a dropped token becomes the unknown id, so the encoder learns to
translate around words it cannot read, as it must with rare words at test time.
"""

import keras
from keras import ops

from keras_transformer.layers.dropout import replica_seed
from keras_transformer.runtime import backend
from keras_transformer.token_ids import EOS_ID, UNK_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class WordDropout(keras.layers.Layer):
    """Replaces each real token id with `unk_id`, with probability `rate`, in training only.

    Padding and end of sentence stay (the masks and the sentence's end depend on them); so do ids
    at or below `unk_id`.

    Args:
        rate: probability of replacing a token, in [0, 1).
        unk_id: the id that replaces it (the project's vocabularies: 2).
        seed: seeds the layer's own random stream (`keras.random.SeedGenerator`), drawn per
            replica under a distribution strategy (keras_transformer/layers/dropout.py).

    Call arguments:
        ids: int token ids [batch, length].
        training: replace only when True.

    Returns:
        ids of the same shape and dtype.

    Example:
    >>> WordDropout(0.5, seed=1)(np.array([[5, 6, 7, 1, 0]]), training=False).numpy()
    array([[5, 6, 7, 1, 0]])
    """

    def __init__(self, rate, unk_id=UNK_ID, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"WordDropout rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.unk_id = unk_id
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, ids, training=None):
        if not training or self.rate == 0.0:
            return ids
        # Under TensorFlow each replica its own draw (keras_transformer/layers/dropout.py).
        if backend.is_tensorflow():
            import tensorflow as tf

            draw = tf.random.stateless_uniform(tf.shape(ids),
                                               seed=replica_seed(self.seed_generator))
        else:
            draw = keras.random.uniform(ops.shape(ids), seed=self.seed_generator)
        dropped = ops.logical_and(draw < self.rate, ids > max(EOS_ID, self.unk_id))
        return ops.where(dropped, ops.cast(self.unk_id, ids.dtype), ids)

    def compute_output_spec(self, ids, training=None):
        return keras.KerasTensor(ids.shape, ids.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, unk_id=self.unk_id, seed=self.seed)
        return config
