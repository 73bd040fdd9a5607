"""How a model of this library learns under `model.fit` (paper section 5): the token-level
training step (TensorFlow's and JAX's), label-smoothed cross-entropy, the metrics, the learning
rate schedule with Adam, and dynamic loss scaling.

The `trainer/` folder beside the library runs whole training runs (kt-train, model_dirs,
checkpoints); this package is the step those runs take."""
