"""Encoder and decoder layers: residual blocks, post-norm as in the paper (sections 3.1 and 5.4).

Every sub-layer's output goes through dropout, is added to its input and layer-normalized:
LayerNorm(x + Dropout(Sublayer(x))). With `layer_norm_position="pre"` the sub-layer reads its
input normalized and the sum is not: x + Dropout(Sublayer(LayerNorm(x))) (Wang et al. 2019, Xiong
et al. 2020: trains without warmup; fairseq's --encoder-normalize-before); the model then
normalizes each stack's output once more.
"""

import keras
from keras import ops

from keras_transformer.errors import check_one_of
from keras_transformer.hparams import LAYER_NORM_POSITIONS
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.layer_norm import LayerNormalization
from keras_transformer.runtime import backend


def _residual_sum(inputs, sublayer_output):
    """inputs + sublayer_output, tensors of one shape. Under TensorFlow an AddN, whose gradient
    hands each input the upstream gradient as it is: AddV2's, with the batch and length unknown
    until the step runs, reduces over broadcast axes it then finds empty (7 more graph ops a
    residual connection to trace and run). The same sum to the bit."""
    if backend.is_tensorflow():
        import tensorflow as tf

        return tf.math.add_n([inputs, sublayer_output])
    return inputs + sublayer_output


class _ResidualBlock(keras.layers.Layer):
    """The residual connection around one sub-layer and its layer normalization: post-norm,
    LayerNorm(x + Dropout(y)) of the sub-layer's output y; pre-norm, x + Dropout(y), the
    sub-layer having read `sublayer_input(x)` = LayerNorm(x)."""

    def __init__(self, dropout, epsilon, pre_norm=False, **kwargs):
        super().__init__(**kwargs)
        self.pre_norm = pre_norm
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)
        self.norm = LayerNormalization(epsilon=epsilon, dtype=self.dtype_policy,
                                       name="layer_norm")

    def build(self, inputs_shape):
        self.norm.build(inputs_shape)

    def sublayer_input(self, inputs):
        """What the sub-layer reads: `inputs`, or (pre-norm) `inputs` normalized."""
        return self.norm(inputs) if self.pre_norm else inputs

    def call(self, inputs, sublayer_output, training=None):
        added = _residual_sum(inputs, self.dropout_layer(sublayer_output, training=training))
        return added if self.pre_norm else self.norm(added)


class _TransformerLayer(keras.layers.Layer):
    """What encoder and decoder layers share: their arguments and the feed-forward block."""

    def __init__(self, num_heads, d_ff, d_k, d_v=None, dropout=0.1, attention_dropout=0.0,
                 relu_dropout=0.0, layer_norm_epsilon=1e-6, layer_norm_position="post", *,
                 ffn_activation="relu", attention_bias=False, **kwargs):
        super().__init__(**kwargs)
        check_one_of("layer_norm_position", layer_norm_position, LAYER_NORM_POSITIONS,
                     ValueError)
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.d_k = d_k
        self.d_v = d_v or d_k
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.layer_norm_position = layer_norm_position
        self.ffn_activation = ffn_activation
        self.attention_bias = attention_bias
        self.feed_forward = PositionwiseFeedForward(
            d_ff, relu_dropout, activation=ffn_activation, dtype=self.dtype_policy,
            name="feed_forward")
        self.feed_forward_block = self._residual_block("feed_forward_block")

    def _attention(self, name):
        return MultiHeadAttention(self.num_heads, self.d_k, self.d_v,
                                  dropout=self.attention_dropout, use_bias=self.attention_bias,
                                  dtype=self.dtype_policy, name=name)

    def _residual_block(self, name):
        return _ResidualBlock(self.dropout, self.layer_norm_epsilon,
                              pre_norm=self.layer_norm_position == "pre",
                              dtype=self.dtype_policy, name=name)

    def _build_feed_forward(self, inputs_shape):
        self.feed_forward.build(inputs_shape)
        self.feed_forward_block.build(inputs_shape)

    def _feed_forward(self, x, training):
        transformed = self.feed_forward(self.feed_forward_block.sublayer_input(x),
                                        training=training)
        return self.feed_forward_block(x, transformed, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            d_k=self.d_k,
            d_v=self.d_v,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            relu_dropout=self.relu_dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            layer_norm_position=self.layer_norm_position,
            ffn_activation=self.ffn_activation,
            attention_bias=self.attention_bias,
        )
        return config


def _with_weights(results, with_weights):
    """`MultiHeadAttention`'s results -> (output, the weights or None): the weights are asked
    for only where used (without them, JAX may fuse the attention)."""
    if not isinstance(results, tuple):
        return results, None
    return results[0], results[-1] if with_weights else None


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(_TransformerLayer):
    """Self-attention, then the position-wise feed-forward network; each in a residual block.

    Args:
        num_heads: h.
        d_ff: inner width of the feed-forward network.
        d_k: query/key width per head.
        d_v: value width per head; defaults to d_k.
        dropout: residual dropout on each sub-layer output (P_drop).
        attention_dropout: dropout on attention weights.
        relu_dropout: dropout inside the feed-forward network.
        layer_norm_epsilon: epsilon of the layer normalizations.
        layer_norm_position: "post" (the paper's) or "pre" (see the module's docstring).
        ffn_activation: the feed-forward network's, "relu" (the paper's), "swish" or "gelu".
        attention_bias: biases on the attention projections (off in the paper).

    Call arguments:
        inputs: [batch, length, d_model].
        attention_mask: boolean, broadcastable to [batch, length, length]; True = may attend
            (usually the source padding mask, [batch, 1, length]).
        return_attention_scores: also return the self-attention weights.

    Returns:
        [batch, length, d_model]; with `return_attention_scores`, `(output, weights)`, weights
        [batch, heads, length, length].

    Example:
    >>> EncoderLayer(num_heads=2, d_ff=32, d_k=8)(np.zeros((2, 5, 16))).shape
    TensorShape([2, 5, 16])
    """

    def __init__(self, num_heads, d_ff, d_k, d_v=None, **kwargs):
        super().__init__(num_heads, d_ff, d_k, d_v, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.self_attention_block = self._residual_block("self_attention_block")

    def build(self, inputs_shape):
        self.self_attention.build(inputs_shape)
        self.self_attention_block.build(inputs_shape)
        self._build_feed_forward(inputs_shape)

    def call(self, inputs, attention_mask=None, return_attention_scores=False, training=None):
        attended, weights = _with_weights(self.self_attention(
            self.self_attention_block.sublayer_input(inputs), attention_mask=attention_mask,
            return_attention_scores=return_attention_scores, training=training),
            return_attention_scores)
        x = self.self_attention_block(inputs, attended, training=training)
        x = self._feed_forward(x, training)
        return (x, weights) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(_TransformerLayer):
    """Masked self-attention, encoder-decoder attention, feed-forward; each in a residual block.

    Args: as `EncoderLayer`.

    Call arguments:
        inputs: [batch, target_length, d_model].
        memory: encoder output [batch, source_length, d_model].
        self_attention_mask: boolean, broadcastable to [batch, target_length, target_length]
            (causal).
        memory_mask: boolean, broadcastable to [batch, target_length, source_length] (the
            source padding mask).
        return_attention_scores: also return the attention weights.

    Returns:
        [batch, target_length, d_model]. With `return_attention_scores`,
        `(output, (self_weights, memory_weights))`: self_weights
        [batch, heads, target_length, target_length], memory_weights
        [batch, heads, target_length, source_length].

    Incremental decoding: `init_cache(memory)` once, then `call_cached` a step at a time.

    Example:
    >>> layer = DecoderLayer(num_heads=2, d_ff=32, d_k=8)
    >>> layer(np.zeros((2, 4, 16)), np.zeros((2, 6, 16))).shape
    TensorShape([2, 4, 16])
    """

    def __init__(self, num_heads, d_ff, d_k, d_v=None, **kwargs):
        super().__init__(num_heads, d_ff, d_k, d_v, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.self_attention_block = self._residual_block("self_attention_block")
        self.encoder_decoder_attention = self._attention("encoder_decoder_attention")
        self.encoder_decoder_attention_block = self._residual_block(
            "encoder_decoder_attention_block")

    def build(self, inputs_shape, memory_shape=None):
        self.self_attention.build(inputs_shape)
        self.self_attention_block.build(inputs_shape)
        self.encoder_decoder_attention.build(inputs_shape, memory_shape or inputs_shape)
        self.encoder_decoder_attention_block.build(inputs_shape)
        self._build_feed_forward(inputs_shape)

    def init_cache(self, memory, cache_length=None):
        """Returns this layer's decoding cache for `memory` [batch, source_length, d_model].

        The encoder-decoder keys and values [batch, h, source_length, d_k|d_v] are computed
        here, once per sentence; the self-attention buffers [batch, h, cache_length, d_k|d_v]
        start at zero and are filled one step at a time (`call_cached` with `cache_index`), or,
        with `cache_length=None`, start empty and grow a step at a time (`call_cached` without
        it).
        """
        memory_keys, memory_values = self.encoder_decoder_attention.compute_key_value(memory)
        batch = ops.shape(memory)[0]
        cache_length = 0 if cache_length is None else cache_length
        dtype = memory_keys.dtype
        return {
            "self_keys": ops.zeros((batch, self.num_heads, cache_length, self.d_k), dtype),
            "self_values": ops.zeros((batch, self.num_heads, cache_length, self.d_v), dtype),
            "memory_keys": memory_keys,
            "memory_values": memory_values,
        }

    def call(self, inputs, memory, self_attention_mask=None, memory_mask=None,
             return_attention_scores=False, training=None):
        attended, self_weights = _with_weights(self.self_attention(
            self.self_attention_block.sublayer_input(inputs), attention_mask=self_attention_mask,
            return_attention_scores=return_attention_scores, training=training),
            return_attention_scores)
        x = self.self_attention_block(inputs, attended, training=training)
        x, memory_weights = self._attend_to_memory(x, memory, memory_mask, None, training,
                                                   return_attention_scores)
        x = self._feed_forward(x, training)
        return (x, (self_weights, memory_weights)) if return_attention_scores else x

    def call_cached(self, inputs, cache, self_attention_mask=None, memory_mask=None,
                    cache_index=None, training=None):
        """One decoding step (or a few) through this layer's cache from `init_cache`.

        Args:
            inputs: [batch, length, d_model], the new positions.
            cache: dict from `init_cache` (or from the previous step). Its "memory_keys" and
                "memory_values" may hold one row per k consecutive rows of `inputs` (the k
                hypotheses of a sentence in beam search), its self-attention buffers one per row.
            self_attention_mask: boolean, broadcastable to [batch, length, key_length], causal
                over the positions held (all of a preallocated buffer's).
            memory_mask: boolean, broadcastable to [memory rows, k * length, source_length].
            cache_index: scalar int, where `inputs`' keys and values go in preallocated
                buffers; None appends them to a growing cache (`init_cache(memory, None)`).

        Returns:
            (output [batch, length, d_model], the updated cache).
        """
        # Not __call__, so Keras opens no name scope for this layer: this one keeps the ops of
        # the step itself (the new keys and values, the cache append) under the layer's name
        # in graphs and profiles (bench/op_profile.py).
        with keras.name_scope(self.name):
            buffers = (cache["self_keys"], cache["self_values"])
            read = self.self_attention_block.sublayer_input(inputs)
            if cache_index is None:  # a growing cache: append this step's keys and values
                keys, values = (
                    ops.concatenate([old, ops.cast(new, old.dtype)], axis=2) for old, new in
                    zip(buffers, self.self_attention.compute_key_value(read)))
                attended, _ = self.self_attention(read, attention_mask=self_attention_mask,
                                                  cache=(keys, values), training=training)
            else:
                attended, (keys, values) = self.self_attention(
                    read, attention_mask=self_attention_mask, cache=buffers,
                    cache_index=cache_index, training=training)
            x = self.self_attention_block(inputs, attended, training=training)
            # Where the memory's keys and values hold one row per sentence and `inputs` several
            # (beam search's hypotheses, consecutive rows), a sentence's rows attend as one longer
            # query: each batched product reads the sentence's keys once, not once per hypothesis.
            rows_shape = ops.shape(x)
            sentences = ops.shape(cache["memory_keys"])[0]
            x, _ = self._attend_to_memory(ops.reshape(x, (sentences, -1, x.shape[-1])), None,
                                          memory_mask,
                                          (cache["memory_keys"], cache["memory_values"]), training)
            x = self._feed_forward(ops.reshape(x, rows_shape), training)
            return x, dict(cache, self_keys=keys, self_values=values)

    def _attend_to_memory(self, x, memory, memory_mask, memory_cache, training,
                          return_weights=False):
        """Encoder-decoder attention and its residual block; returns (output, the weights or
        None)."""
        attended, weights = _with_weights(self.encoder_decoder_attention(
            self.encoder_decoder_attention_block.sublayer_input(x), memory,
            attention_mask=memory_mask, cache=memory_cache,
            return_attention_scores=return_weights, training=training), return_weights)
        return self.encoder_decoder_attention_block(x, attended, training=training), weights
