"""The Transformer: encoder-decoder stacks over a shared embedding (paper section 3)."""

import keras
from keras import ops

from keras_transformer.errors import check_one_of
from keras_transformer.hparams import EMBEDDING_SHARING, LAYER_NORM_POSITIONS, POSITION_ENCODINGS
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder_decoder import DecoderLayer, EncoderLayer
from keras_transformer.layers.layer_norm import LayerNormalization
from keras_transformer.layers.masks import causal_mask, padding_mask
from keras_transformer.layers.positional import (
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
    with_positions_renamed,
)
from keras_transformer.layers.word_dropout import WordDropout
from keras_transformer.runtime import input_checks as checks
from keras_transformer.training.token_level import TokenLevelTraining


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(TokenLevelTraining, keras.Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Token ids follow tensor2tensor: 0 is padding, 1 is end of sentence; the decoder input is the
    target shifted right by one with 0 in front. One vocabulary serves source and target, and by
    default its embedding matrix is also the pre-softmax projection (section 3.4).

    Args:
        vocab_size: size of the shared vocabulary.
        num_layers: N, layers in each stack.
        d_model: model width.
        d_ff: feed-forward inner width.
        num_heads: h.
        d_k: query/key width per head; None means d_model // num_heads.
        d_v: value width per head; None means d_model // num_heads.
        dropout: residual dropout (P_drop) on sub-layer outputs and on embedding + position sums.
        attention_dropout: dropout on attention weights.
        relu_dropout: dropout inside the feed-forward networks.
        position_encoding: "sinusoidal" or "learned".
        max_positions: positions in the learned table (ignored by sinusoids).
        layer_norm_epsilon: epsilon of every layer normalization.
        layer_norm_position: "post", the paper's LayerNorm(x + Dropout(Sublayer(x))), or "pre",
            x + Dropout(Sublayer(LayerNorm(x))) with each stack's output normalized once more
            (`keras_transformer.layers.encoder_decoder`).
        embedding_sharing: which of the three token matrices are one: "all" (source embedding,
            target embedding and pre-softmax projection; section 3.4), "target" (the target
            embedding and the projection, the source its own; Press & Wolf 2017, fairseq's
            --share-decoder-input-output-embed) or "none" (three matrices, as the keras.io
            recipe). Untied matrices add 2 x vocab_size x d_model parameters at most, and
            almost no computation.
        source_word_dropout: in training, the probability that a real source token is read as
            unknown (`WordDropout`; Sennrich & Zhang 2019). 0 in the paper.
        ffn_activation, attention_bias, sinusoid_layout, output_bias, scale_embeddings: other
            models' choices beside the paper's (defaults: the paper's), which Marian's OPUS-MT
            models make: the feed-forward activation, "relu", "swish" or "gelu"; biases on the
            attention projections; sines and cosines "interleaved" or "split"
            (`SinusoidalPositionEncoding`); a bias on the logits; embeddings x sqrt(d_model)
            or not (`SharedEmbedding`).

    Call arguments:
        inputs: (source_ids [batch, source_length], target_input_ids [batch, target_length]), int.
        training: enables dropout.
        return_attention_scores: also return every attention layer's weights (figures 3-5).

    Returns:
        float32 logits [batch, target_length, vocab_size]. With `return_attention_scores`,
        `(logits, weights)`, where weights is a dict of [batch, num_layers, num_heads, queries,
        keys] tensors: "encoder_self_attention" (source x source), "decoder_self_attention"
        (target x target) and "encoder_decoder_attention" (target x source). They are the
        softmax outputs the layers use, in the compute dtype (after dropout when training).

    Compiled with a `LabelSmoothedCrossEntropy`, `fit` normalizes the loss by the real target
    tokens of the global batch, on one device or under any `tf.distribute` strategy
    (`keras_transformer.training.token_level`).

    Example:
    >>> model = Transformer(vocab_size=100, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    >>> model((np.array([[5, 6, 1]]), np.array([[0, 7]]))).shape
    TensorShape([1, 2, 100])
    """

    def __init__(self, vocab_size, num_layers=6, d_model=512, d_ff=2048, num_heads=8, d_k=None,
                 d_v=None, dropout=0.1, attention_dropout=0.0, relu_dropout=0.0,
                 position_encoding="sinusoidal", max_positions=256, layer_norm_epsilon=1e-6,
                 layer_norm_position="post", embedding_sharing="all", source_word_dropout=0.0,
                 *, ffn_activation="relu", attention_bias=False, sinusoid_layout="interleaved",
                 output_bias=False, scale_embeddings=True, **kwargs):
        super().__init__(**kwargs)
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2 (pad and eos), got {vocab_size}")
        if (d_k is None or d_v is None) and d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                             f"pass d_k and d_v explicitly")
        check_one_of("position_encoding", position_encoding, POSITION_ENCODINGS, ValueError)
        check_one_of("layer_norm_position", layer_norm_position, LAYER_NORM_POSITIONS, ValueError)
        check_one_of("embedding_sharing", embedding_sharing, EMBEDDING_SHARING, ValueError)
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.d_model = d_model
        self.d_ff = d_ff
        self.num_heads = num_heads
        self.d_k = d_k
        self.d_v = d_v
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.position_encoding = position_encoding
        self.max_positions = max_positions
        self.layer_norm_epsilon = layer_norm_epsilon
        self.layer_norm_position = layer_norm_position
        self.embedding_sharing = embedding_sharing
        self.source_word_dropout = source_word_dropout
        self.ffn_activation = ffn_activation
        self.attention_bias = attention_bias
        self.sinusoid_layout = sinusoid_layout
        self.output_bias = output_bias
        self.scale_embeddings = scale_embeddings

        policy = self.dtype_policy
        # The target embedding, and whichever of the other two it stands for ("embedding" keeps
        # the checkpoints of tied models as they were). Keras saves a layer under the first
        # attribute, in alphabetical order, that holds it: these names sort before the model's
        # "layers" list, so each untied table is saved under its own name, not a numbered one.
        scale = dict(scale=scale_embeddings, dtype=policy)
        self.embedding = SharedEmbedding(vocab_size, d_model, **scale, name="embedding",
                                         output_bias=output_bias and embedding_sharing != "none")
        self.encoder_embedding = None if embedding_sharing == "all" else SharedEmbedding(
            vocab_size, d_model, **scale, name="source_embedding")
        self.decoder_projection = None if embedding_sharing != "none" else SharedEmbedding(
            vocab_size, d_model, **scale, output_bias=output_bias, name="output_projection")
        # Encoder and decoder positions are separate tables when learned (as in Gehring et al.
        # 2017, which row E follows, and tensor2tensor); sinusoids have no weights to share.
        self.encoder_positions = self._position_layer("encoder_positions")
        self.decoder_positions = self._position_layer("decoder_positions")
        # Only where used: its random state would change what a checkpoint holds.
        self.source_word_dropout_layer = WordDropout(
            source_word_dropout, dtype=policy, name="source_word_dropout"
        ) if source_word_dropout else None
        self.encoder_input_dropout = Dropout(
            dropout, dtype=policy, name="encoder_input_dropout")
        self.decoder_input_dropout = Dropout(
            dropout, dtype=policy, name="decoder_input_dropout")
        layer_args = dict(
            num_heads=num_heads, d_ff=d_ff, d_k=d_k or d_model // num_heads,
            d_v=d_v or d_model // num_heads, dropout=dropout, attention_dropout=attention_dropout,
            relu_dropout=relu_dropout, layer_norm_epsilon=layer_norm_epsilon,
            layer_norm_position=layer_norm_position, ffn_activation=ffn_activation,
            attention_bias=attention_bias, dtype=policy)
        self.encoder_layers = [EncoderLayer(**layer_args, name=f"encoder_layer_{i}")
                               for i in range(num_layers)]
        self.decoder_layers = [DecoderLayer(**layer_args, name=f"decoder_layer_{i}")
                               for i in range(num_layers)]
        # Pre-norm sums every sub-layer's output into an unnormalized stream: normalized once
        # at the end of each stack (post-norm's last block already did).
        self.encoder_norm, self.decoder_norm = (LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name=name
        ) if layer_norm_position == "pre" else None for name in ("encoder_norm", "decoder_norm"))

    def _position_layer(self, name):
        if self.position_encoding == "learned":
            return LearnedPositionEmbedding(self.max_positions, dtype=self.dtype_policy, name=name)
        return SinusoidalPositionEncoding(layout=self.sinusoid_layout, dtype=self.dtype_policy,
                                          name=name)

    def build(self, inputs_shape=None):
        # Every weight's shape follows from the constructor arguments, so any input shape builds
        # the same model (which is what lets load_model rebuild it before restoring weights).
        hidden = (None, None, self.d_model)
        for table in (self.embedding, self.encoder_embedding,
                      self.decoder_projection):
            if table is not None:
                table.build()
        self.encoder_positions.build(hidden)
        self.decoder_positions.build(hidden)
        for layer in self.encoder_layers:
            layer.build(hidden)
        for layer in self.decoder_layers:
            layer.build(hidden, hidden)
        for norm in (self.encoder_norm, self.decoder_norm):
            if norm is not None:
                norm.build(hidden)

    def call(self, inputs, training=None, return_attention_scores=False):
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ValueError("Transformer inputs must be a pair (source_ids, target_input_ids), "
                             f"got {type(inputs).__name__}")
        source_ids, target_input_ids = inputs
        # encode validates source_ids before padding_mask reads them.
        encoded = self.encode(source_ids, training=training,
                              return_attention_scores=return_attention_scores)
        if not return_attention_scores:
            return self.decode(target_input_ids, encoded, padding_mask(source_ids),
                               training=training)
        memory, encoder_weights = encoded
        logits, weights = self.decode(target_input_ids, memory, padding_mask(source_ids),
                                      training=training, return_attention_scores=True)
        return logits, dict(weights, encoder_self_attention=encoder_weights)

    def logits_spec(self, inputs):
        """What `call` returns for (source_ids, target_input_ids) `inputs` (anything with
        shapes): a `keras.KerasTensor` of float32 logits [batch, target length, vocab_size]."""
        return keras.KerasTensor((*inputs[1].shape, self.vocab_size), "float32")

    def _token_ids(self, ids, name):
        return checks.token_ids(ids, name, self.vocab_size)

    def _ensure_built(self):
        # encode/decode/init_cache may come before any __call__ (beam search, export); building
        # here keeps the model's weights created in one place, in build().
        if not self.built:
            self.build()

    @property
    def source_embedding(self):
        """The `SharedEmbedding` the encoder reads its ids with."""
        if self.encoder_embedding is None:
            return self.embedding
        return self.encoder_embedding

    @property
    def output_projection(self):
        """The `SharedEmbedding` whose matrix, transposed, is the pre-softmax projection."""
        if self.decoder_projection is None:
            return self.embedding
        return self.decoder_projection

    def vocabulary_weights(self):
        """[(variable, axis)]: the weights that hold one slice per vocabulary id along `axis`
        (each embedding table [vocab_size, d_model] and its output bias [vocab_size]), which a
        new vocabulary remaps (kt-train --update_vocab)."""
        self._ensure_built()
        found = []
        for table in (self.embedding, self.encoder_embedding, self.decoder_projection):
            if table is not None:
                found.append((table.embeddings, 0))
                if table.bias is not None:
                    found.append((table.bias, 0))
        return found

    def output_kernel(self, ids=None):
        """The pre-softmax projection [d_model, vocab_size] in the compute dtype, for a search to
        make once and pass to `decode_cached` (`SharedEmbedding.output_kernel`); with `ids`
        (int [k], a vocabulary shortlist), their columns only, [d_model, k]."""
        self._ensure_built()
        return self.output_projection.output_kernel(ids)

    def _embed(self, ids, table, positions, dropout, training, start_index=0):
        x = table(ids)
        x = x + positions(x, start_index=start_index)
        return dropout(x, training=training)

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Runs the encoder stack.

        Args:
            source_ids: int [batch, source_length], 0-padded.
            return_attention_scores: also return the self-attention weights.

        Returns:
            memory [batch, source_length, d_model]. Pass `padding_mask(source_ids)` beside it.
            With `return_attention_scores`, `(memory, weights)`, weights
            [batch, num_layers, num_heads, source_length, source_length].
        """
        self._ensure_built()
        source_ids = self._token_ids(source_ids, "source_ids")
        attention_mask = padding_mask(source_ids)[:, None, :]
        read_ids = source_ids if self.source_word_dropout_layer is None else \
            self.source_word_dropout_layer(source_ids, training=training)
        x = self._embed(read_ids, self.source_embedding, self.encoder_positions,
                        self.encoder_input_dropout, training)
        weights = []
        for layer in self.encoder_layers:
            outputs = layer(x, attention_mask=attention_mask,
                            return_attention_scores=return_attention_scores, training=training)
            if return_attention_scores:
                outputs, layer_weights = outputs
                weights.append(layer_weights)
            x = outputs
        x = _normalized(x, self.encoder_norm)
        return (x, ops.stack(weights, axis=1)) if return_attention_scores else x

    def init_cache(self, memory, source_mask, cache_length=None):
        """Prepares incremental decoding.

        Args:
            memory: encoder output [batch, source_length, d_model].
            source_mask: bool [batch, source_length], `padding_mask(source_ids)`.
            cache_length: number of decoder positions the self-attention buffers hold,
                preallocated, for `decode_cached(..., step=i)` to write into (fixed shapes, as
                XLA needs). None: the buffers start empty and grow with every
                `decode_cached(..., step=i, grow_cache=True)`, which without XLA costs less, as a
                step then copies only the positions so far, not a whole preallocated buffer.

        Returns:
            A dict of tensors, each with batch as its first axis (so beam search can repeat and
            reorder it): "memory_mask" and, per decoder layer, the encoder-decoder keys and values
            (computed here, once) and the self-attention buffers [batch, h, cache_length or 0, d]
            ("self_keys", "self_values"; zeros).
        """
        self._ensure_built()
        # The buffers take memory's dtype; the compute dtype keeps them stable across steps.
        memory = ops.cast(memory, self.compute_dtype)
        return {
            "memory_mask": ops.convert_to_tensor(source_mask, "bool"),
            "layers": [layer.init_cache(memory, cache_length) for layer in self.decoder_layers],
        }

    def decode(self, target_ids, memory, source_mask, training=None,
               return_attention_scores=False):
        """Runs the decoder stack and the output projection over a whole target (training,
        scoring): every position attends to those before it.

        Args:
            target_ids: int [batch, length], the shifted-right target.
            memory: encoder output [batch, source_length, d_model].
            source_mask: bool [batch, source_length], `padding_mask(source_ids)`.
            return_attention_scores: also return the attention weights.

        Returns:
            float32 logits [batch, length, vocab_size]. With `return_attention_scores`,
            `(logits, weights)`: a dict of "decoder_self_attention" [batch, num_layers,
            num_heads, length, length] and "encoder_decoder_attention" [batch, num_layers,
            num_heads, length, source_length].
        """
        states = self.decode_states(target_ids, memory, source_mask, training,
                                    return_attention_scores)
        if not return_attention_scores:
            return self.output_projection(states, reverse=True)
        return self.output_projection(states[0], reverse=True), states[1]

    def decode_states(self, target_ids, memory, source_mask, training=None,
                      return_attention_scores=False):
        """`decode` without the output projection: the decoder's normalized output [batch,
        length, d_model], which `self.output_projection(states, reverse=True)` makes the logits
        of (scoring projects it a few positions at a time, so that the logits of a whole long
        target never exist at once). With `return_attention_scores`, `(states, weights)` as
        `decode` gives them."""
        self._ensure_built()
        target_ids = self._token_ids(target_ids, "target_ids")
        x = self._embed(target_ids, self.embedding, self.decoder_positions,
                        self.decoder_input_dropout, training)
        self_mask = causal_mask(ops.shape(target_ids)[1])
        memory_mask = ops.convert_to_tensor(source_mask, "bool")[:, None, :]
        self_weights, memory_weights = [], []
        for layer in self.decoder_layers:
            outputs = layer(x, memory, self_attention_mask=self_mask, memory_mask=memory_mask,
                            return_attention_scores=return_attention_scores, training=training)
            if return_attention_scores:
                outputs, (layer_self, layer_memory) = outputs
                self_weights.append(layer_self)
                memory_weights.append(layer_memory)
            x = outputs
        states = _normalized(x, self.decoder_norm)
        if not return_attention_scores:
            return states
        return states, {"decoder_self_attention": ops.stack(self_weights, axis=1),
                        "encoder_decoder_attention": ops.stack(memory_weights, axis=1)}

    def decode_cached(self, target_ids, cache, step, grow_cache=False, training=None,
                      output_kernel=None, output_ids=None):
        """Incremental decoding through a cache from `init_cache` (beam search, sampling).

        `target_ids` holds the tokens at positions [step, step + length), usually one; earlier
        positions come from the cache, which also holds the encoder-decoder keys and values.

        Args:
            target_ids: int [batch, length]; batch may be k times the cache's encoder rows
                (beam search's k hypotheses of a sentence, consecutive rows: see
                `DecoderLayer.call_cached`).
            cache: dict from `init_cache`, or a previous call's returned cache.
            step: scalar int, the position of target_ids[:, 0].
            grow_cache: the cache is a growing one (`init_cache(cache_length=None)`): the new
                keys and values are appended to it, and `step` must be the number of positions
                it holds. False: they are written at `step` into its preallocated buffers.
            output_kernel: `self.output_kernel()`, made once before the steps (as
                `steps.cached_step` does): the projection then reads a [d_model, vocab_size]
                matrix, which float32 matmuls read faster than the transposed embedding. None
                makes it in this call.
            output_ids: int [k]: the logits of these ids only (a vocabulary shortlist,
                `data.shortlist`), with `output_kernel(output_ids)`. None: every id's.

        Returns:
            (float32 logits [batch, length, vocab_size], or [batch, length, k] with
            `output_ids`; the updated cache).
        """
        self._ensure_built()
        target_ids = self._token_ids(target_ids, "target_ids")
        rows, sentences = ops.shape(target_ids)[0], ops.shape(cache["memory_mask"])[0]
        target_ids = checks.guarded(
            target_ids, ops.equal(rows % ops.maximum(sentences, 1), 0),
            "decode_cached: target_ids must have k rows per sentence of the cache (a sentence's "
            "hypotheses consecutive); rows and sentences:", rows, sentences)
        length = ops.shape(target_ids)[1]
        cache_length = ops.shape(cache["layers"][0]["self_keys"])[2]
        step = ops.cast(step, "int32")
        if grow_cache:
            step = checks.guarded(
                step, ops.equal(step, cache_length),
                "decode step must be the number of positions a growing cache holds "
                "(grow_cache=True needs a cache from init_cache(cache_length=None)); step and "
                "positions held:", step, cache_length)
        else:
            # The cache writes would clamp silently at the end of the buffers. (Under XLA the
            # check compiles away: callers that jit-compile must size the cache, as beam search
            # does.)
            step = checks.guarded(
                step, step + length <= cache_length,
                "decode step runs past the end of the cache (a cache from init_cache("
                "cache_length=None) grows: pass grow_cache=True); its length is", cache_length)
        x = self._embed(target_ids, self.embedding, self.decoder_positions,
                        self.decoder_input_dropout, training, start_index=step)
        key_length = step + length if grow_cache else cache_length
        self_mask = causal_mask(length, key_length, start_index=step)
        memory_mask = cache["memory_mask"][:, None, :]
        layer_caches = []
        for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
            x, layer_cache = layer.call_cached(
                x, layer_cache, self_attention_mask=self_mask, memory_mask=memory_mask,
                cache_index=None if grow_cache else step, training=training)
            layer_caches.append(layer_cache)
        logits = self.output_projection(_normalized(x, self.decoder_norm), reverse=True,
                                        output_kernel=output_kernel, output_ids=output_ids)
        return logits, dict(cache, layers=layer_caches)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in _CONFIG_FIELDS})
        return config

    @classmethod
    def from_config(cls, config):
        return super().from_config(with_positions_renamed(config))


# The constructor's arguments, each kept as the attribute of its name.
_CONFIG_FIELDS = (
    "vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout",
    "attention_dropout", "relu_dropout", "position_encoding", "max_positions",
    "layer_norm_epsilon", "layer_norm_position", "embedding_sharing", "source_word_dropout",
    "ffn_activation", "attention_bias", "sinusoid_layout", "output_bias", "scale_embeddings")


def _normalized(x, norm):
    """`x` through a stack's final layer normalization, where it has one (pre-norm)."""
    return x if norm is None else norm(x)
