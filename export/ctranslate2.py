"""CTranslate2: the model_dir's model in OpenNMT's C++ inference engine, for fast CPU serving.

    kt-export --model_dir runs/demo --format ctranslate2 --quantization int8 --output ct2/demo
    kt-translate --engine ctranslate2 --ctranslate2_dir ct2/demo --input dev.en

CTranslate2 runs Transformer models converted to its own format, with int8 weights on CPUs, and
is what OpenNMT-tf, fairseq and Marian models are served with. `export_ctranslate2` writes a
CTranslate2 model directory through its specification API (`ctranslate2.specs.TransformerSpec`),
weight for weight:

- post-norm layers (`pre_norm=False`: LayerNorm(x + Sublayer(x))), or pre-norm ones with each
  stack's final normalization, the feed-forward activation (ReLU, swish or GELU), the run's
  layer count, heads and layer-norm epsilon;
- the token matrices (one shared, or the model's untied ones) as the encoder's and the decoder's
  embeddings (scaled by sqrt(d_model) where the model scales them) and as the output
  projection, with the model's logits bias where it has one;
- each side's position table written out as the model computes it: the sinusoids of section
  3.5, interleaved or split (`positional.py`), or the learned tables;
- the attention projections, with their biases where the model has them: query, key and value
  fused for self-attention, the query and the fused key and value for encoder-decoder
  attention;
- the vocabulary's pieces, in id order; the decoder starts from id 0, as the
  model's shifted-right input does, and padding is never generated (`suppress_sequences`, the
  model's beam search masks it too).

Beside the model files: the vocabulary (`vocab.model`, the SentencePiece model, or an imported
model's `vocab.marian`) and `export.json` (the checkpoint, the run's configuration, the decoding
settings and the quantization). Each export is a numbered version under --output, as for
SavedModels; an existing one is never replaced.

export/ctranslate2_engine.py's `Ctranslate2Translator` decodes with such a directory.
"""

import json
import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from keras_transformer.errors import UserError, check_one_of
from keras_transformer.export.translator import Translator
from keras_transformer.search.settings import DecodingConfig
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID

QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16", "int8_bfloat16")
POSITIONS = 2048  # sinusoid rows written; inputs and outputs are limited to this many tokens
MODEL_FILE = "model.bin"


class Ctranslate2Error(UserError):
    """A model CTranslate2 cannot represent, or a directory that is not a CTranslate2 export."""


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise Ctranslate2Error("the ctranslate2 package is not installed: pip install -e "
                               "\".[ctranslate2]\" (or keras-transformer[ctranslate2])") from None
    return ctranslate2


def _kernel(weight):
    """A Keras kernel [in, out] as CTranslate2's linear weight [out, in], float32."""
    return np.ascontiguousarray(np.asarray(weight, np.float32).T)


def _positions(layer, length, d_model):
    """The position table [length, d_model] that `layer` adds to embeddings."""
    table = np.asarray(layer(tf.zeros([1, length, d_model])), np.float32)
    return table.reshape(length, d_model)  # the layers give [length, d] or [1, length, d]


def check_representable(model):
    """Raises Ctranslate2Error naming the field CTranslate2 has no room for."""
    d_k, d_v = model.d_k or model.d_model // model.num_heads, model.d_v or \
        model.d_model // model.num_heads
    if d_k != d_v:
        raise Ctranslate2Error(f"hparams d_k={d_k} and d_v={d_v} differ: CTranslate2's "
                               f"attention has one head width")
    if model.position_encoding == "learned" and model.max_positions > POSITIONS:
        raise Ctranslate2Error(f"hparams max_positions={model.max_positions}: learned positions "
                               f"beyond {POSITIONS} are not exported")



def _layer_norm(norm_spec, layer):
    norm_spec.gamma = np.asarray(layer.gamma, np.float32)
    norm_spec.beta = np.asarray(layer.beta, np.float32)


def _attention(attention_spec, layer, block, fused_query):
    """One attention sublayer, and its projections' biases where it has them."""
    names = ("query", "key", "value", "output")
    _fused(attention_spec.linear, "weight",
           [_kernel(getattr(layer, f"{name}_kernel")) for name in names], fused_query)
    if layer.use_bias:
        _fused(attention_spec.linear, "bias",
               [np.asarray(getattr(layer, f"{name}_bias"), np.float32) for name in names],
               fused_query)
    _layer_norm(attention_spec.layer_norm, block.norm)


def _fused(linears, field, values, fused_query):
    """Q, K, V and output `values` into CTranslate2's linears, which fuse Q, K and V
    (self-attention) or K and V (encoder-decoder attention)."""
    q, k, v, output = values
    if fused_query:
        setattr(linears[0], field, np.concatenate([q, k, v]))
    else:
        setattr(linears[0], field, q)
        setattr(linears[1], field, np.concatenate([k, v]))
    setattr(linears[-1], field, output)


def _feed_forward(ffn_spec, layer):
    for linear, dense in ((ffn_spec.linear_0, layer.feed_forward.inner),
                          (ffn_spec.linear_1, layer.feed_forward.outer)):
        linear.weight = _kernel(dense.kernel)
        linear.bias = np.asarray(dense.bias, np.float32)
    _layer_norm(ffn_spec.layer_norm, layer.feed_forward_block.norm)


def position_rows(model):
    """The rows of the position tables the export of `model` holds."""
    return model.max_positions if model.position_encoding == "learned" else POSITIONS


def _embeddings(spec, model):
    """Both sides' token tables and position encodings, and the output projection."""
    def table(embedding):
        return np.asarray(embedding.embeddings, np.float32)

    limit = position_rows(model)
    for side, positions, embedding in (
            (spec.encoder, model.encoder_positions, model.source_embedding),
            (spec.decoder, model.decoder_positions, model.embedding)):
        embedding_specs = side.embeddings if isinstance(side.embeddings, list) else \
            [side.embeddings]
        embedding_specs[0].weight = table(embedding)
        side.scale_embeddings = model.scale_embeddings
        side.position_encodings.encodings = _positions(positions, limit, model.d_model)
    spec.decoder.projection.weight = table(model.output_projection)
    if model.output_projection.bias is not None:
        spec.decoder.projection.bias = np.asarray(model.output_projection.bias, np.float32)


def _layers(spec, model):
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_block,
                   True)
        _feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_block,
                   True)
        _attention(layer_spec.attention, layer.encoder_decoder_attention,
                   layer.encoder_decoder_attention_block, False)
        _feed_forward(layer_spec.ffn, layer)
    if model.layer_norm_position == "pre":  # each stack's final normalization
        _layer_norm(spec.encoder.layer_norm, model.encoder_norm)
        _layer_norm(spec.decoder.layer_norm, model.decoder_norm)


def transformer_spec(model, vocabulary):
    """The `ctranslate2.specs.TransformerSpec` of a `keras_transformer.Transformer`."""
    _ctranslate2()
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as specs

    check_representable(model)
    d_model, heads = model.d_model, model.num_heads
    head_dim = model.d_k or d_model // heads
    # head_dim only where it is not d_model / heads: CTranslate2 reads it as a special case.
    head_dim = None if head_dim * heads == d_model else head_dim
    pre_norm = model.layer_norm_position == "pre"
    activation = {"relu": common_spec.Activation.RELU, "swish": common_spec.Activation.SWISH,
                  "gelu": common_spec.Activation.GELU}[model.ffn_activation]
    spec = specs.TransformerSpec(
        specs.TransformerEncoderSpec(model.num_layers, heads, pre_norm=pre_norm,
                                     head_dim=head_dim, activation=activation),
        specs.TransformerDecoderSpec(model.num_layers, heads, pre_norm=pre_norm,
                                     head_dim=head_dim, activation=activation))
    _embeddings(spec, model)
    _layers(spec, model)
    pieces = vocabulary.pieces(list(range(vocabulary.vocab_size)))
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.add_source_eos = False  # the ids carry their end of sentence
    spec.config.bos_token = pieces[PAD_ID]
    spec.config.decoder_start_token = pieces[PAD_ID]
    spec.config.eos_token = pieces[EOS_ID]
    spec.config.unk_token = pieces[UNK_ID]
    spec.config.layer_norm_epsilon = model.layer_norm_epsilon
    return spec


def export_ctranslate2(loaded, path, quantization="float32", settings=None, provenance=None,
                       vmap=None):
    """Writes the CTranslate2 model of `loaded` (a `model_dir.Loaded`) to `path`, a version
    directory that must not exist (`saved_model.version_path` chooses one).

    Args:
        quantization: one of QUANTIZATIONS: the weights' type in the files (CTranslate2 computes
            int8 matrix products with float32 or bfloat16 for the rest).
        settings: the decoding settings to record (`Translator.settings`), which the engine
            decodes with; default: the model's own (`Translator.from_loaded(loaded)`, as
            kt-export records them).
        provenance: JSON-able facts about the checkpoint (`saved_model.provenance`).
        vmap: a vocabulary shortlist file (model_dir/shortlist.vmap, kt-shortlist's: already
            CTranslate2's format) for the engine's use_vmap, which decodes over each batch's
            candidates as the `Translator` with that shortlist does; the engine uses it where
            `settings` say "shortlist".

    Returns:
        `path`.
    """
    check_one_of("--quantization", quantization, QUANTIZATIONS, Ctranslate2Error)
    spec = transformer_spec(loaded.model, loaded.vocabulary)
    path = pathlib.Path(path)
    if path.exists():
        raise Ctranslate2Error(f"{path} exists; an export is never replaced")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".export-") as scratch:
        model = pathlib.Path(scratch) / "model"
        model.mkdir()
        if vmap is not None:
            spec.register_vocabulary_mapping(str(vmap))
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(model))
        (model / loaded.vocabulary.FILE_NAME).write_bytes(loaded.vocabulary.serialized)
        # The engine decodes by beam search alone: a parser's without its tree constraint.
        settings = settings or Translator.from_loaded(
            loaded, DecodingConfig(tree_constraint=False)).settings()
        facts = dict(settings, **(provenance or {}), engine="ctranslate2",
                     quantization=quantization, max_positions=position_rows(loaded.model),
                     ctranslate2=_ctranslate2().__version__)
        (model / "export.json").write_text(json.dumps(facts, indent=2) + "\n")
        model.rename(path)  # whole, or not at all
    return path
