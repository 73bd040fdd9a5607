"""One embedding matrix for source, target and the pre-softmax projection (paper section 3.4)."""

import math

import keras
from keras import ops

from keras_transformer.layers.rows import from_rows, rows_of


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """Token embeddings scaled by sqrt(d_model), and the same matrix as the output projection
    (with an optional bias on the logits).

    "We share the same weight matrix between the two embedding layers and the pre-softmax linear
    transformation [...] In the embedding layers, we multiply those weights by sqrt(d_model)."
    The matrix starts as N(0, d_model^-1/2), so scaled embeddings have unit variance, as in
    tensor2tensor.

    Args:
        vocab_size: number of token ids, including pad (0) and eos (1).
        d_model: embedding width.
        scale: multiply embeddings by sqrt(d_model) (the paper; Marian's scale_embedding).
        output_bias: add a bias over the vocabulary to the logits (Marian's
            final_logits_bias), starting at zero.

    Call arguments:
        inputs: int token ids [batch, length], or with `reverse=True` hidden states
            [batch, length, d_model].
        reverse: False embeds ids to [batch, length, d_model]; True projects hidden states to
            float32 logits [batch, length, vocab_size] with the transposed matrix.
        output_kernel: with `reverse`, that transposed matrix made beforehand by
            `output_kernel()`, as incremental decoding does once per search.

    Example:
    >>> embedding = SharedEmbedding(vocab_size=10, d_model=4)
    >>> embedding(np.array([[2, 3]])).shape, embedding(np.zeros((1, 2, 4)), reverse=True).shape
    (TensorShape([1, 2, 4]), TensorShape([1, 2, 10]))
    """

    def __init__(self, vocab_size, d_model, *, scale=True, output_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale
        self.output_bias = output_bias

    def build(self, inputs_shape=None):
        # Not autocast: under a mixed policy, reading the table would cast all of it to the
        # compute dtype, which a lookup of a few rows does not need (in incremental decoding,
        # every step would).
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5),
            autocast=False)
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros",
                                    autocast=False) if self.output_bias else None

    def output_kernel(self, ids=None):
        """The pre-softmax projection: the matrix transposed, [d_model, vocab_size], in the
        compute dtype; with `ids` (int [k], a vocabulary shortlist), only their columns
        [d_model, k].

        Made inside a step, TensorFlow folds the transpose into the matmul, and oneDNN's float32
        matmul against a matrix it reads transposed is slower: 36 against 22 ms for 128 rows and
        32k ids (bench.optimisations). Searches make the kernel once (`steps.cached_step`)
        and pass it to `Transformer.decode_cached`.
        """
        table = self.embeddings if ids is None else ops.take(self.embeddings, ids, axis=0)
        return ops.transpose(ops.cast(table, self.compute_dtype))

    def call(self, inputs, reverse=False, output_kernel=None, output_ids=None):
        if output_kernel is not None and not reverse:
            raise ValueError("output_kernel is the output projection's: pass it with "
                             "reverse=True")
        if reverse:
            kernel = self.output_kernel(output_ids) if output_kernel is None else output_kernel
            rows, leading = rows_of(ops.cast(inputs, self.compute_dtype))
            logits = from_rows(ops.matmul(rows, kernel), leading)
            # Softmax and loss want float32 even when the layers compute in 16 bits.
            logits = ops.cast(logits, "float32")
            if self.bias is None:
                return logits
            bias = self.bias if output_ids is None else ops.take(self.bias, output_ids)
            return logits + ops.cast(bias, "float32")
        rows = ops.cast(ops.take(self.embeddings, inputs, axis=0), self.compute_dtype)
        return rows * math.sqrt(self.d_model) if self.scale else rows

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, d_model=self.d_model, scale=self.scale,
                      output_bias=self.output_bias)
        return config
