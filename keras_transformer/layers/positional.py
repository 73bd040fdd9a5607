"""Positional encodings: the paper's sinusoids (section 3.5) and learned positions (Table 3 E)."""

import keras
import numpy as np
from keras import ops

from keras_transformer.errors import check_one_of
from keras_transformer.hparams import SINUSOID_LAYOUTS
from keras_transformer.runtime import input_checks as checks


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Sines and cosines interleave as in the paper's formula. Any length works: the paper chose
    sinusoids partly so that the model may extrapolate past the training lengths.

    Args:
        max_wavelength: the 10000 of the formula.
        layout: "interleaved" (the paper's) or "split": the same functions with every sine
            first, then every cosine, [sin(pos / 10000^(2i/d)) for i < d/2] + [cos(...)], the
            order of Marian's and Hugging Face's MarianSinusoidalPositionalEmbedding
            (`SINUSOID_LAYOUTS`).

    Call arguments:
        inputs: [batch, length, d_model]; only its length and width are read.
        start_index: position of the first step, for incremental decoding.

    Returns:
        [length, d_model], to be added to `inputs`.

    Example:
    >>> SinusoidalPositionEncoding()(np.zeros((2, 5, 8))).shape
    TensorShape([5, 8])
    """

    def __init__(self, max_wavelength=10000, layout="interleaved", **kwargs):
        super().__init__(**kwargs)
        check_one_of("layout", layout, SINUSOID_LAYOUTS, ValueError)
        self.max_wavelength = max_wavelength
        self.layout = layout

    def call(self, inputs, start_index=0):
        length, d_model = ops.shape(inputs)[1], inputs.shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        # Dimensions 2i and 2i+1 share the frequency 1 / 10000^(2i/d_model). What depends on the
        # width alone is made here in NumPy (the same float32 exponents), not traced as ops; the
        # power stays the backend's, whose float32 results NumPy's do not always equal.
        dims = np.arange(d_model)
        exponents = (dims - dims % 2).astype("float32")[None, :] / np.float32(d_model)
        angles = positions[:, None] / ops.power(np.float32(self.max_wavelength), exponents)
        encoding = ops.where(dims % 2 == 0, ops.sin(angles), ops.cos(angles))
        if self.layout == "split":  # columns 0, 2, 4, ... (sines), then 1, 3, 5, ...
            encoding = ops.concatenate([encoding[:, 0::2], encoding[:, 1::2]], axis=-1)
        return ops.cast(encoding, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_wavelength=self.max_wavelength, layout=self.layout)
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionEmbedding(keras.layers.Layer):
    """A trained vector per position (Table 3 row E, after Gehring et al. 2017).

    Args:
        max_positions: number of positions; longer inputs are an error.

    Call arguments and returns: as `SinusoidalPositionEncoding`.

    Example:
    >>> LearnedPositionEmbedding(max_positions=16)(np.zeros((2, 5, 8))).shape
    TensorShape([5, 8])
    """

    def __init__(self, max_positions, **kwargs):
        super().__init__(**kwargs)
        self.max_positions = max_positions

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_positions, inputs_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=inputs_shape[-1] ** -0.5))

    def call(self, inputs, start_index=0):
        length = inputs.shape[1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.max_positions:
                raise ValueError(
                    f"positions up to {start_index + length} exceed the learned position table "
                    f"of max_positions={self.max_positions}; raise the hparams field "
                    f"'max_positions'")
            return ops.cast(self.position_embeddings[start_index:start_index + length],
                            self.compute_dtype)
        length = ops.shape(inputs)[1]
        table = ops.cast(self.position_embeddings, self.compute_dtype)
        # Out-of-range positions would otherwise be clipped silently by the gather.
        positions = ops.arange(length) + start_index
        positions = checks.guarded(
            positions, ops.all(positions < self.max_positions),
            f"positions exceed the learned position table of max_positions={self.max_positions}")
        return ops.take(table, positions, axis=0)

    def get_config(self):
        config = super().get_config()
        config.update(max_positions=self.max_positions)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**with_positions_renamed(config))


def with_positions_renamed(config):
    """A layer config saved before 0.1.0, whose position table was `max_length`, under today's
    name (`max_positions`); others as they are. (A kt-classify classifier.keras holds one.)"""
    if "max_length" not in config:
        return config
    config = dict(config)
    config["max_positions"] = config.pop("max_length")
    return config
