"""Layer normalization (Ba et al. 2016), the LayerNorm of every residual block (section 3.1),
with its gradient written out.

The forward pass is `keras.layers.LayerNormalization`'s, op for op (equal to the bit). Its
gradient, left to automatic differentiation, is ~70 graph ops a layer under TensorFlow (the
gradient of each broadcasting product and of the moments gathers and reduces shapes): in a
transformer_tiny training step the ten layer normalizations were a third of the traced graph.
Written out it is a dozen: with x^ = (x - mean) / sqrt(variance + epsilon) and g = dy * gamma,

    dx = (g - mean(g) - x^ * mean(g * x^)) / sqrt(variance + epsilon)
    dgamma = sum(dy * x^),  dbeta = sum(dy)

(means over the normalized axis, sums over the others): the same gradient within float32
rounding (tests/test_layers.py).
"""

import keras
from keras import ops


def _normalize(x, gamma, beta, epsilon):
    """x [..., d] (float32) normalized over its last axis, scaled by gamma [d], shifted by beta
    [d]; the gradient with respect to all three written out (module doc)."""

    @ops.custom_gradient
    def normalize(x, gamma, beta):
        mean, variance = ops.moments(x, axes=[-1], keepdims=True)
        scale = ops.rsqrt(variance + epsilon)
        inv = scale * gamma
        outputs = x * inv + (-mean * inv + beta)  # keras.ops.layer_normalization's arithmetic

        def gradients(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            normalized = (x - mean) * scale
            leading = tuple(range(len(x.shape) - 1))
            scaled = upstream * gamma
            dx = scale * (scaled - ops.mean(scaled, axis=-1, keepdims=True)
                          - normalized * ops.mean(scaled * normalized, axis=-1, keepdims=True))
            return (dx, ops.sum(upstream * normalized, axis=leading),
                    ops.sum(upstream, axis=leading))

        return outputs, gradients

    return normalize(x, gamma, beta)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (the same arguments, weights and outputs) whose gradient,
    over the last axis with both gamma and beta, is written out (module doc); any other
    configuration is Keras's own.

    Call arguments:
        inputs: [..., d]; bfloat16 and float16 inputs are normalized in float32, as Keras does.

    Returns:
        `inputs`' shape, in the layer's compute dtype.

    Example:
    >>> LayerNormalization(epsilon=1e-6)(np.array([[1.0, 3.0]])).numpy()
    array([[-0.9999995,  0.9999995]], dtype=float32)
    """

    def call(self, inputs):
        last = len(inputs.shape) - 1
        if [axis % (last + 1) for axis in self.axis] != [last] or self.rms_scaling or not (
                self.center and self.scale):
            return super().call(inputs)
        x = ops.cast(inputs, "float32") if keras.backend.standardize_dtype(inputs.dtype) in (
            "float16", "bfloat16") else inputs
        outputs = _normalize(x, ops.cast(self.gamma, x.dtype), ops.cast(self.beta, x.dtype),
                             self.epsilon)
        return ops.cast(outputs, self.compute_dtype)
