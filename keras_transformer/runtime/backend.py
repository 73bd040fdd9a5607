"""Which Keras backend runs the model library.

The layers, the model, the loss, the metrics, the schedule and `model.fit` (with token-exact
accumulation) run on TensorFlow and on JAX. Where TensorFlow does something better and only it
can, the TensorFlow path is kept: fused kernels (the loss's gradient, Adam's update), masks that
differ across `tf.distribute` replicas, graph-mode checks. TensorFlow is imported only on those
paths, so under JAX the model library needs no TensorFlow (a GPU machine with JAX alone trains
it). Searching (beam, greedy, sampling), scoring and the SavedModel are TensorFlow's.
"""

import keras

SUPPORTED = ("tensorflow", "jax")


def name():
    """The backend Keras was loaded with: "tensorflow" or "jax"."""
    return keras.backend.backend()


def is_tensorflow():
    return name() == "tensorflow"


def is_traced(value):
    """True for a JAX tracer (a value inside `jax.jit` or `jax.grad`), whose contents are
    unknown until the program runs; False for any concrete value, and always on TensorFlow."""
    if is_tensorflow():
        return False
    import jax

    return isinstance(value, jax.core.Tracer)


def require_tensorflow(what):
    """Raises ImportError saying that `what` needs the TensorFlow backend, unless it runs."""
    if not is_tensorflow():
        raise ImportError(
            f"{what} runs on Keras's TensorFlow backend (KERAS_BACKEND=tensorflow); this process "
            f"loaded Keras with {name()!r}, which trains and runs the model but does not "
            f"search, score or export")
