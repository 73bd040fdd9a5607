"""Where and how the model library runs: the Keras backend (TensorFlow or JAX), the devices and
the precision they compute fastest in (measured, not read from flags), and the checks on what
users pass in. Below every other floor of the library but its shared modules."""
