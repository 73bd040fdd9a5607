"""The models users would otherwise pick, built to this project's configuration for benchmarks.

Each peer is the encoder-decoder of the paper as its own toolkit writes it: N post-norm layers a
stack, d_model, d_ff, h heads, dropout, a shared source/target embedding tied with the output
projection, sinusoidal positions. They need `pip install -e .[bench]` (keras-hub, torch,
transformers); import this module only in benchmarks.
"""

import math

import keras
import numpy as np

from keras_transformer import PAD_ID, SinusoidalPositionEncoding


def keras_hub_transformer(vocab_size, num_layers, d_model, d_ff, num_heads, dropout,
                          dtype=None):
    """keras-hub TransformerEncoder/TransformerDecoder stacks as a functional `keras.Model`.

    Inputs (source_ids, target_input_ids) int [batch, length]; output logits
    [batch, target_length, vocab_size]. Padding masks from id 0, as a keras-hub user passes them.
    """
    import keras_hub

    source = keras.Input((None,), dtype="int32", name="source_ids")
    target = keras.Input((None,), dtype="int32", name="target_input_ids")
    embedding = keras_hub.layers.ReversibleEmbedding(
        vocab_size, d_model, tie_weights=True, dtype=dtype,
        embeddings_initializer=keras.initializers.RandomNormal(stddev=d_model ** -0.5))
    positions = keras_hub.layers.SinePositionEncoding(dtype=dtype)

    def embed(ids):
        x = embedding(ids) * math.sqrt(d_model)
        return keras.layers.Dropout(dropout, dtype=dtype)(x + positions(x))

    source_mask = keras.ops.not_equal(source, PAD_ID)
    target_mask = keras.ops.not_equal(target, PAD_ID)
    x = embed(source)
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(d_ff, num_heads, dropout=dropout, dtype=dtype)(
            x, padding_mask=source_mask)
    y = embed(target)
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(d_ff, num_heads, dropout=dropout, dtype=dtype)(
            y, x, decoder_padding_mask=target_mask, encoder_padding_mask=source_mask)
    logits = keras.layers.Activation("linear", dtype="float32")(embedding(y, reverse=True))
    return keras.Model((source, target), logits, name="keras_hub_transformer")


def torch_transformer(vocab_size, num_layers, d_model, d_ff, num_heads, dropout):
    """`torch.nn.Transformer` (post-norm, batch first) with a tied, sqrt(d_model)-scaled
    embedding and sinusoidal positions; forward(source_ids, target_input_ids) -> logits."""
    import torch

    class TorchTransformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
            torch.nn.init.normal_(self.embedding.weight, std=d_model ** -0.5)
            self.transformer = torch.nn.Transformer(
                d_model, num_heads, num_layers, num_layers, d_ff, dropout, batch_first=True)
            self.dropout = torch.nn.Dropout(dropout)
            table = SinusoidalPositionEncoding()(np.zeros((1, 1024, d_model), "float32"))
            self.register_buffer("sinusoids", torch.from_numpy(np.asarray(table)))

        def embed(self, ids):
            x = self.embedding(ids) * math.sqrt(d_model) + self.sinusoids[:ids.shape[1]]
            return self.dropout(x)

        def forward(self, source_ids, target_input_ids):
            length = target_input_ids.shape[1]
            causal = torch.nn.Transformer.generate_square_subsequent_mask(length)
            hidden = self.transformer(
                self.embed(source_ids), self.embed(target_input_ids), tgt_mask=causal,
                tgt_is_causal=True, src_key_padding_mask=source_ids == PAD_ID,
                tgt_key_padding_mask=target_input_ids == PAD_ID,
                memory_key_padding_mask=source_ids == PAD_ID)
            return hidden @ self.embedding.weight.T

    return TorchTransformer()


def marian_config(vocab_size, num_layers, d_model, d_ff, num_heads, dropout, eos_id,
                  pad_id=PAD_ID):
    """A Hugging Face MarianConfig of the same shape (MarianMT is the paper's architecture:
    post-norm, sinusoidal positions, tied embeddings scaled by sqrt(d_model))."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab_size, d_model=d_model, encoder_layers=num_layers,
        decoder_layers=num_layers, encoder_attention_heads=num_heads,
        decoder_attention_heads=num_heads, encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff,
        dropout=dropout, attention_dropout=0.0, activation_dropout=0.0,
        activation_function="relu", max_position_embeddings=1024, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=pad_id, eos_token_id=eos_id, decoder_start_token_id=pad_id,
        forced_eos_token_id=None)


def hf_marian(vocab_size, num_layers, d_model, d_ff, num_heads, eos_id):
    """A randomly initialised Hugging Face `MarianMTModel` of this shape, in eval mode."""
    from transformers import MarianMTModel

    model = MarianMTModel(marian_config(vocab_size, num_layers, d_model, d_ff, num_heads, 0.1,
                                        eos_id))
    return model.eval()


def hf_generate(model, source_ids, new_tokens, beam_size):
    """`model.generate` producing exactly `new_tokens` tokens (end of sentence suppressed until
    then), beam search or (beam_size 1) greedy. source_ids: int [batch, length] numpy."""
    import torch

    source = torch.from_numpy(np.asarray(source_ids)).long()
    beam = dict(num_beams=beam_size, length_penalty=0.6, early_stopping=True)
    return model.generate(input_ids=source, attention_mask=source != PAD_ID, do_sample=False,
                          max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          **(beam if beam_size > 1 else {}))


def keras_hub_bart(vocab_size, num_layers, d_model, d_ff, num_heads, beam_size, dtype=None):
    """A randomly initialised keras-hub `BartSeq2SeqLM` of this shape compiled with its
    `BeamSampler` (or, beam_size 1, `GreedySampler`), compiled as `compile()` does by default
    (jit_compile="auto"; on this CPU the timings match keras-hub without XLA)."""
    import keras_hub

    backbone = keras_hub.models.BartBackbone(vocab_size, num_layers, num_heads, d_model, d_ff,
                                             dtype=dtype)
    model = keras_hub.models.BartSeq2SeqLM(backbone=backbone, preprocessor=None)
    sampler = (keras_hub.samplers.BeamSampler(num_beams=beam_size) if beam_size > 1 else
               keras_hub.samplers.GreedySampler())
    model.compile(sampler=sampler)
    return model


def keras_hub_generate(model, source_ids, new_tokens):
    """`generate` on token ids: decoder starts from id 0 and runs `new_tokens` steps (no stop
    token); returns the decoder ids [batch, 1 + new_tokens]."""
    source_ids = np.asarray(source_ids)
    batch = source_ids.shape[0]
    decoder = np.zeros((batch, new_tokens + 1), np.int32)
    decoder_mask = np.zeros_like(decoder, bool)
    decoder_mask[:, 0] = True
    return model.generate({"encoder_token_ids": source_ids,
                           "encoder_padding_mask": source_ids != PAD_ID,
                           "decoder_token_ids": decoder, "decoder_padding_mask": decoder_mask},
                          stop_token_ids=None)["decoder_token_ids"]
