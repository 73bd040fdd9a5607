"""A tensor's positions as the rows of one matrix, for the model's position-wise products.

Every projection in the model (the attention's four, the feed-forward network's two, the output
projection) multiplies each position's vector by one matrix: [batch, length, width] times
[width, units]. Keras's `ops.matmul`, which `Dense` calls, writes that product under TensorFlow as
a `tensordot`: about 20 graph ops (the shapes gathered, multiplied and concatenated, a transpose,
two reshapes) around its one MatMul. Written as the MatMul of [batch * length, width] rows between
two reshapes, it is the same kernel on the same rows (equal to the bit), and transformer_tiny's
forward pass traces ~40% fewer ops (its training step ~25%), which tracing (a fit's first step,
every search) and running a small model's graph both pay for. Under JAX both forms compile to one
dot.
"""

from keras import ops


def rows_of(x):
    """x [..., width] as (rows [n, width], leading): n the product of the leading sizes, and
    `leading` those sizes (ints where static, scalar tensors where not) for `from_rows`."""
    shape = ops.shape(x)
    return ops.reshape(x, (-1, shape[-1])), tuple(shape[:-1])


def from_rows(rows, leading):
    """rows [n, units] back to [*leading, units]."""
    units = rows.shape[-1]
    return ops.reshape(rows, (*leading, ops.shape(rows)[-1] if units is None else units))
