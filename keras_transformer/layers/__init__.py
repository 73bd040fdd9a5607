"""The Transformer's layers (paper sections 3.1-3.5): scaled dot-product and multi-head
attention, the position-wise feed-forward network, the shared embedding and softmax projection,
positions (sinusoidal or learned), layer normalization, dropouts, masks, and the encoder and
decoder layers built from them. Written in `keras.ops`: they run on TensorFlow and JAX.

They import neither the search nor the training (tests/test_structure.py)."""
