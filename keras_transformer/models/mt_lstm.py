"""CoVe's MT-LSTM and the contextualized vectors it gives (McCann et al. 2017, section 3).

The MT-LSTM is an attentional sequence-to-sequence translation model:

    encoder   H = MT-LSTM(GloVe(w^x))                a two-layer bidirectional LSTM over fixed
                                                     GloVe vectors of the source words
    decoder   h_t = LSTM([z_{t-1}; h~_{t-1}], h_{t-1})   a two-layer LSTM fed the previous target
                                                     embedding and the previous attentional state
    attention a_t = softmax(H (W1 h_t + b1))
              h~_t = tanh(W2 [H^T a_t; h_t] + b2)
    output    p(w^z_t | X, w^z_<t) = softmax(W_out h~_t + b_out)

and CoVe(w) = MT-LSTM(GloVe(w)), the top encoder layer's outputs, which downstream models read
as [GloVe(w); CoVe(w)] (keras_transformer/models/cove.py). Ids follow the package's convention on
both sides (0 pads, 1 ends a sentence; the source side's are word ids over GloVe's words,
data/glove.py; the target side's a subword vocabulary); the decoder input is the target
shifted right with 0 in front, as for the Transformer, so the same pipelines, loss and `fit`
serve both models.

The decoder starts from zero states and a zero attentional state (the paper does not say how it
is initialized).
"""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dropout import Dropout
from keras_transformer.models.recurrent import bidirectional_lstm
from keras_transformer.search.contract import graph_function
from keras_transformer.training.token_level import TokenLevelTraining


@keras.saving.register_keras_serializable(package="keras_transformer")
class MTLSTM(TokenLevelTraining, keras.Model):
    """The MT-LSTM: GloVe word ids in, target subword logits out.

    Args:
        source_vocab_size: word ids of the source side (GloVe's words + 3).
        target_vocab_size: subword ids of the target side.
        embedding_dim: GloVe's dimensions.
        hidden_size: width of every LSTM (each direction of the encoder's); CoVe vectors have
            2 x hidden_size dimensions.
        num_layers: layers of the encoder and of the decoder (the paper: 2).
        dropout: dropout on the inputs and outputs of every LSTM layer and on h~.
        source_embedding: optional float [source_vocab_size, embedding_dim] GloVe matrix; it
            is not trained.

    Call arguments:
        inputs: (source_ids [batch, source_length], target_input_ids [batch, target_length]).
        training: enables dropout.

    Returns:
        float32 logits [batch, target_length, target_vocab_size].
    """

    def __init__(self, source_vocab_size, target_vocab_size, embedding_dim=50, hidden_size=300,
                 num_layers=2, dropout=0.2, source_embedding=None, **kwargs):
        super().__init__(**kwargs)
        self.source_vocab_size = source_vocab_size
        self.target_vocab_size = target_vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dropout = dropout
        initializer = "zeros" if source_embedding is None else keras.initializers.Constant(
            np.asarray(source_embedding, np.float32))
        self.glove = keras.layers.Embedding(source_vocab_size, embedding_dim, trainable=False,
                                            embeddings_initializer=initializer, name="glove")
        self.encoder_layers = [bidirectional_lstm(hidden_size, name=f"encoder_{i}")
                               for i in range(num_layers)]
        self.target_embedding = keras.layers.Embedding(target_vocab_size, hidden_size,
                                                       name="target_embedding")
        self.decoder_cells = [keras.layers.LSTMCell(hidden_size, name=f"decoder_{i}")
                              for i in range(num_layers)]
        self.attention_query = keras.layers.Dense(2 * hidden_size, name="attention_query")  # W1
        self.attentional_state = keras.layers.Dense(hidden_size, activation="tanh",
                                                    name="attentional_state")  # W2
        self.output_projection = keras.layers.Dense(target_vocab_size, name="output")  # W_out
        self.dropout_layer = Dropout(dropout)

    def build(self, inputs_shape=None):
        # Every weight's shape follows from the constructor, so load_model can rebuild it.
        self.glove.build()
        words = (None, None, self.embedding_dim)
        for layer in self.encoder_layers:
            layer.build(words)
            words = (None, None, 2 * self.hidden_size)
        self.target_embedding.build()
        width = 2 * self.hidden_size  # [z_{t-1}; h~_{t-1}]
        for cell in self.decoder_cells:
            cell.build((None, width))
            width = self.hidden_size
        self.attention_query.build((None, self.hidden_size))
        self.attentional_state.build((None, 3 * self.hidden_size))
        self.output_projection.build((None, self.hidden_size))

    def encode(self, source_ids, training=None, layers=None):
        """source_ids [batch, n] -> (H: [batch, n, 2 hidden], mask: bool [batch, n]).

        `layers`: how many encoder layers to run (default all; CoVe is the top one's output).
        Padding positions of H are zero.
        """
        mask = ops.not_equal(source_ids, 0)
        x = self.glove(source_ids)
        for layer in self.encoder_layers[:layers]:
            x = layer(self.dropout_layer(x, training=training), mask=mask, training=training)
        return x * ops.cast(mask, x.dtype)[..., None], mask

    def initial_state(self, batch_size):
        """The decoder's state before the first target token: (h~, [(h, c) per layer])."""
        zeros = ops.zeros((batch_size, self.hidden_size))
        return zeros, [(zeros, zeros) for _ in self.decoder_cells]

    def decode_step(self, state, embedded, memory, memory_mask, training=None):
        """One target position: (h~_{t-1}, layer states), z_{t-1} [batch, hidden] ->
        (the new state, h~_t [batch, hidden])."""
        feed, layer_states = state
        x = ops.concatenate([embedded, feed], axis=-1)
        new_states = []
        for cell, (h, c) in zip(self.decoder_cells, layer_states):
            x, (h, c) = cell(self.dropout_layer(x, training=training), [h, c], training=training)
            new_states.append((h, c))
        scores = ops.einsum("bnd,bd->bn", memory, self.attention_query(x))
        scores = ops.where(memory_mask, scores, ops.full_like(scores, -1e9))
        context = ops.einsum("bn,bnd->bd", ops.softmax(scores, axis=-1), memory)
        attended = self.attentional_state(ops.concatenate([context, x], axis=-1))
        attended = self.dropout_layer(attended, training=training)
        return (attended, new_states), attended

    def vocabulary_weights(self):
        """[(variable, axis)]: the weights that hold one slice per target subword id along
        `axis` (the target embedding, the output projection's kernel and bias), which a new
        vocabulary remaps (kt-train --update_vocab); GloVe's source words are not subwords."""
        return [(self.target_embedding.embeddings, 0), (self.output_projection.kernel, 1),
                (self.output_projection.bias, 0)]

    def logits_spec(self, inputs):
        """What `call` returns for (source_ids, target_ids) `inputs` (anything with shapes): a
        `keras.KerasTensor` of logits [batch, target length, target_vocab_size]."""
        return keras.KerasTensor((*inputs[1].shape, self.target_vocab_size),
                                 self.output_projection.compute_dtype)

    def call(self, inputs, training=None):
        source_ids, target_ids = inputs
        memory, memory_mask = self.encode(source_ids, training=training)
        embedded = self.target_embedding(target_ids)

        def step(state, z):
            return self.decode_step(state, z, memory, memory_mask, training=training)[0]

        # The state's first part is h~_t: scanning over the states stacks every position's.
        states = tf.scan(step, tf.transpose(embedded, (1, 0, 2)),
                         initializer=self.initial_state(tf.shape(target_ids)[0]))
        return self.output_projection(tf.transpose(states[0], (1, 0, 2)))

    @graph_function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                     tf.TensorSpec([], tf.int32)])
    def greedy_translate(self, source_ids, output_length):
        """int32 [batch, output_length]: each source's most likely next token at each step, fed
        back; after the end of sentence (1), padding (0). Compiled once for every shape.

        Args:
            source_ids: int32 [batch, n], 0-padded.
            output_length: int32 scalar, the output length."""
        memory, memory_mask = self.encode(source_ids)
        batch = tf.shape(source_ids)[0]

        def step(carry, _):
            state, previous, ended = carry
            state, attended = self.decode_step(state, self.target_embedding(previous), memory,
                                               memory_mask)
            token = tf.argmax(self.output_projection(attended), axis=-1, output_type=tf.int32)
            token = tf.where(ended, tf.zeros_like(token), token)
            return state, token, ended | tf.equal(token, 1)

        start = tf.zeros((batch,), tf.int32)
        _, tokens, _ = tf.scan(step, tf.range(output_length),
                               initializer=(self.initial_state(batch), start, start > 0))
        return tf.transpose(tokens)

    def get_config(self):
        config = super().get_config()
        config.update(source_vocab_size=self.source_vocab_size,
                      target_vocab_size=self.target_vocab_size,
                      embedding_dim=self.embedding_dim, hidden_size=self.hidden_size,
                      num_layers=self.num_layers, dropout=self.dropout)
        return config
