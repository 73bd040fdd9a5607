"""Scaled dot-product attention and multi-head attention (paper section 3.2)."""

import keras
from keras import ops

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.rows import from_rows, rows_of
from keras_transformer.runtime import backend

# Masking and softmax run in float32 whatever the compute dtype (the Q K^T product itself runs in
# the compute dtype), so a finite large negative hides masked keys without the float16 overflow a
# -1e9 added to half-precision scores would cause.
_MASKED_SCORE = -1e9


def scaled_dot_product_attention(query, key, value, attention_mask=None, dropout_layer=None,
                                 training=None):
    """softmax(Q K^T / sqrt(d_k)) V for every head at once (eq. 1).

    Heads come before positions: both products are then batched matrix products that read their
    operands as they are, which matters in incremental decoding, where keys and values are long
    cached tensors and the query is one position (with [batch, length, heads, d] operands,
    TensorFlow copied every cached tensor into this layout at every step).

    Args:
        query: [batch, heads, query_length, d_k].
        key: [batch, heads, key_length, d_k].
        value: [batch, heads, key_length, d_v].
        attention_mask: optional boolean tensor broadcastable to [batch, query_length, key_length];
            True where a query may attend to a key.
        dropout_layer: optional layer applied to the attention weights (a `Dropout`).
        training: passed to `dropout_layer`.

    Returns:
        (output [batch, heads, query_length, d_v],
         weights [batch, heads, query_length, key_length]).
        The softmax runs in float32; both results come back in `value`'s dtype.
    """
    d_k = query.shape[-1]
    # Scaling the queries before the product touches [batch, heads, q, d_k] values instead of the
    # larger [batch, heads, q, k] score tensor.
    scores = ops.einsum("bhqd,bhkd->bhqk", query * ops.cast(d_k ** -0.5, query.dtype), key)
    scores = ops.cast(scores, "float32")
    if attention_mask is not None:
        # [..., query, key] -> [..., 1, query, key]: one mask for every head.
        mask = ops.expand_dims(ops.cast(attention_mask, "bool"), axis=-3)
        scores = ops.where(mask, scores, _MASKED_SCORE)
    weights = ops.cast(ops.softmax(scores, axis=-1), value.dtype)
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    return ops.einsum("bhqk,bhkd->bhqd", weights, value), weights


def fused_attention(query, key, value, attention_mask=None):
    """softmax(Q K^T / sqrt(d_k)) V by `keras.ops.dot_product_attention`, which JAX runs as
    cuDNN's fused kernel on a GPU where it can (XLA's einsums elsewhere): no attention weights
    come back, so there is nothing to drop out or draw. The logits and softmax are float32.

    Args:
        query: [batch, query_length, heads, d_k].
        key: [batch, key_length, heads, d_k].
        value: [batch, key_length, heads, d_k].
        attention_mask: as `scaled_dot_product_attention`'s.

    Returns:
        [batch, query_length, heads, d_k], in `value`'s dtype.
    """
    mask = None
    if attention_mask is not None:  # [batch or 1, 1, query, key]: one mask for every head
        mask = ops.cast(attention_mask, "bool")
        mask = ops.expand_dims(mask if len(mask.shape) == 3 else mask[None], axis=1)
    return ops.dot_product_attention(query, key, value, mask=mask,
                                     scale=query.shape[-1] ** -0.5)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (section 3.2.2) with d_k and d_v chosen freely.

    MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    with W^Q, W^K in R^{d_in x h*d_k}, W^V in R^{d_mem x h*d_v}, W^O in R^{h*d_v x d_out}. The
    paper's projections have no bias terms, and by default neither do these (`use_bias` adds
    one to each of the four, as Marian's and BART's attention have).

    Args:
        num_heads: h.
        d_k: the query/key width of each head.
        d_v: the value width of each head; defaults to `d_k`.
        output_dim: width of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention weights.
        kernel_initializer: initializer of the four projection matrices.
        use_bias: x W + b for each projection, the biases starting at zero.

    Call arguments:
        query: [batch, query_length, d_in].
        memory: [batch, memory_length, d_mem] that keys and values come from; None means the
            query itself (self-attention).
        attention_mask: boolean, broadcastable to [batch, query_length, key_length]; True = may
            attend. With a cache, key_length is the cache length.
        cache: optional (keys [batch, h, L, d_k], values [batch, h, L, d_v]). With `cache_index`,
            the query's own keys and values are written at positions
            [cache_index, cache_index + query_length) and the query attends over all L positions
            (self-attention during incremental decoding; mask the unwritten ones). Without
            `cache_index`, the cache holds precomputed keys and values of the memory
            (encoder-decoder attention) and `memory` is ignored.
        cache_index: scalar int, where the new keys and values go.
        return_attention_scores: also return the weights [batch, h, query_length, key_length].

    Returns:
        output [batch, query_length, d_out]; `(output, cache)` when a cache is given; the
        attention weights appended last when `return_attention_scores`.

    Off TensorFlow (JAX), a call that needs no weights (none returned, no attention dropout
    in training) and no cache, with d_k = d_v, runs `fused_attention`; the rest, and every
    TensorFlow call, `scaled_dot_product_attention` (equal within float rounding:
    tests/test_jax.py).

    Example:
    >>> layer = MultiHeadAttention(num_heads=2, d_k=16, d_v=8)
    >>> layer(np.zeros((3, 5, 32)), np.zeros((3, 7, 32))).shape
    TensorShape([3, 5, 32])
    """

    def __init__(self, num_heads, d_k, d_v=None, output_dim=None, dropout=0.0,
                 kernel_initializer="glorot_uniform", use_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.use_bias = use_bias
        self.num_heads = num_heads
        self.d_k = d_k
        self.d_v = d_v or d_k
        self.output_dim = output_dim
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dropout_layer = (Dropout(dropout, dtype=self.dtype_policy)
                                 if dropout else None)

    def build(self, query_shape, memory_shape=None):
        query_width = query_shape[-1]
        memory_width = (memory_shape or query_shape)[-1]
        output_width = self.output_dim or query_width
        # Kernels are stored as the paper's 2-D matrices (so Glorot sees the fans of one dense
        # layer) and split into heads by a reshape.
        self.query_kernel = self._kernel("query_kernel", query_width, self.d_k)
        self.key_kernel = self._kernel("key_kernel", memory_width, self.d_k)
        self.value_kernel = self._kernel("value_kernel", memory_width, self.d_v)
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(self.num_heads * self.d_v, output_width),
            initializer=self.kernel_initializer)
        self.query_bias, self.key_bias, self.value_bias, self.output_bias = (
            self.add_weight(name=name, shape=(width,), initializer="zeros") if self.use_bias
            else None for name, width in (
                ("query_bias", self.num_heads * self.d_k), ("key_bias", self.num_heads * self.d_k),
                ("value_bias", self.num_heads * self.d_v), ("output_bias", output_width)))

    def _kernel(self, name, width, head_dim):
        return self.add_weight(name=name, shape=(width, self.num_heads * head_dim),
                               initializer=self.kernel_initializer)

    @staticmethod
    def _affine(rows, kernel, bias):
        """rows [n, width] times kernel [width, units], plus the bias: [n, units]."""
        y = ops.matmul(rows, ops.cast(kernel, rows.dtype))
        return y if bias is None else y + ops.cast(bias, y.dtype)

    def _heads(self, positions, kernel, bias, head_dim):
        """`positions` (see `rows_of`) projected: [batch, length, heads, head_dim]."""
        rows, leading = positions
        return ops.reshape(self._affine(rows, kernel, bias),
                           (*leading, self.num_heads, head_dim))

    def _project(self, positions, kernel, bias, head_dim):
        """`positions` (see `rows_of`) projected: [batch, heads, length, head_dim]."""
        return ops.transpose(self._heads(positions, kernel, bias, head_dim), (0, 2, 1, 3))

    def _merge_heads(self, heads, leading):
        """[batch, length, heads, d_v] -> the output [batch, length, d_out]."""
        rows = ops.reshape(heads, (-1, self.num_heads * self.d_v))
        output = self._affine(rows, self.output_kernel, self.output_bias)
        return from_rows(output, leading)

    def _fusable(self, cache, return_attention_scores, training):
        """Whether this call may run `fused_attention`: off TensorFlow, when nothing needs the
        weights (none returned, no attention dropout to draw) and keys and values come fresh."""
        return (not backend.is_tensorflow() and cache is None and not return_attention_scores
                and (self.dropout_layer is None or not training) and self.d_k == self.d_v)

    def compute_key_value(self, memory):
        """Projects `memory` [batch, length, d_mem] to (keys [b, h, l, d_k], values [b, h, l, d_v]).

        Encoder-decoder attention calls this once per sentence and passes the result as `cache`.
        """
        return self._key_value(rows_of(memory))

    def _key_value(self, positions):
        return (self._project(positions, self.key_kernel, self.key_bias, self.d_k),
                self._project(positions, self.value_kernel, self.value_bias, self.d_v))

    def call(self, query, memory=None, attention_mask=None, cache=None, cache_index=None,
             return_attention_scores=False, training=None):
        queried = rows_of(query)
        memorized = queried if memory is None else rows_of(memory)
        if self._fusable(cache, return_attention_scores, training):
            return self._merge_heads(fused_attention(
                self._heads(queried, self.query_kernel, self.query_bias, self.d_k),
                self._heads(memorized, self.key_kernel, self.key_bias, self.d_k),
                self._heads(memorized, self.value_kernel, self.value_bias, self.d_v),
                attention_mask), queried[1])
        queries = self._project(queried, self.query_kernel, self.query_bias, self.d_k)
        if cache is not None and cache_index is None:
            keys, values = cache
        else:
            keys, values = self._key_value(memorized)
            if cache is not None:
                start = [0, 0, cache_index, 0]
                keys = ops.slice_update(cache[0], start, ops.cast(keys, cache[0].dtype))
                values = ops.slice_update(cache[1], start, ops.cast(values, cache[1].dtype))
                cache = (keys, values)
        heads, weights = scaled_dot_product_attention(
            queries, keys, values, attention_mask, self.dropout_layer, training)
        output = self._merge_heads(ops.transpose(heads, (0, 2, 1, 3)), queried[1])
        results = (output,) + ((cache,) if cache is not None else ())
        results += (weights,) if return_attention_scores else ()
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_k=self.d_k,
            d_v=self.d_v,
            output_dim=self.output_dim,
            dropout=self.dropout,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            use_bias=self.use_bias,
        )
        return config
