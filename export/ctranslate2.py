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

`Ctranslate2Translator` decodes with such a directory behind the interface `export.lines`
uses (`tokenize`, `translate_n_best_ids`, `detokenize`), so kt-translate's sorting, batching,
n-best lists and scoring run on either engine.
"""

import json
import pathlib
import tempfile

import numpy as np
import tensorflow as tf

from keras_transformer.data import load_vocabulary, vocabulary_file
from keras_transformer.errors import UserError
from keras_transformer.export.translator import Translator, source_ids_of
from keras_transformer.model_dir.decoding_config import DecodingConfig
from keras_transformer.search.beam import length_penalty
from keras_transformer.search.decode import longest_output, output_limits
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


def export_ctranslate2(loaded, path, quantization="float32", settings=None, provenance=None):
    """Writes the CTranslate2 model of `loaded` (a `model_dir.Loaded`) to `path`, a version
    directory that must not exist (`saved_model.version_path` chooses one).

    Args:
        quantization: one of QUANTIZATIONS: the weights' type in the files (CTranslate2 computes
            int8 matrix products with float32 or bfloat16 for the rest).
        settings: the decoding settings to record (`Translator.settings`), which the engine
            decodes with; default: the model's own (`Translator.from_loaded(loaded)`, as
            kt-export records them).
        provenance: JSON-able facts about the checkpoint (`saved_model.provenance`).

    Returns:
        `path`.
    """
    if quantization not in QUANTIZATIONS:
        raise Ctranslate2Error(f"--quantization must be one of {', '.join(QUANTIZATIONS)}, got "
                               f"{quantization!r}")
    spec = transformer_spec(loaded.model, loaded.vocabulary)
    path = pathlib.Path(path)
    if path.exists():
        raise Ctranslate2Error(f"{path} exists; an export is never replaced")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".export-") as scratch:
        model = pathlib.Path(scratch) / "model"
        model.mkdir()
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


def resolve(directory):
    """A CTranslate2 export's version directory: `directory` itself, or its highest version."""
    directory = pathlib.Path(directory)
    if (directory / MODEL_FILE).is_file():
        return directory
    versions = sorted((int(p.name) for p in directory.glob("*")
                       if p.name.isdigit() and (p / MODEL_FILE).is_file()), reverse=True)
    if not versions:
        raise Ctranslate2Error(f"--ctranslate2_dir {directory}: neither a CTranslate2 model "
                               f"({MODEL_FILE}) nor a directory of versions holding one; "
                               f"write one with kt-export --format ctranslate2")
    return directory / str(versions[0])


# CTranslate2's beam stops once beam_size * patience hypotheses have ended; the model's goes on
# while an open one could still outrank the ended ones. Waiting longer (patience 2) helped a
# trained model and hurt a weak one, so CTranslate2's own default stays. Beam 4, alpha 1.0, the
# best hypothesis differing from the TensorFlow engine's: transformer_small on tatoeba_en_es dev
# (2,766 sentences), 38 sentences at patience 1 and 16 at 2 (BLEU 37.43 and 37.51; the
# TensorFlow engine 37.47); the tests' 300-step transformer_tiny on the first 200 bible dev
# sentences, 9 at patience 1 and 76 at 2, patience 2 choosing long repetitions that its
# length ** alpha ranking favours and the model's GNMT penalty does not (2026-11-25).
PATIENCE = 1


class Ctranslate2Translator:
    """Beam search with a CTranslate2 export, behind the `Translator` methods `export.lines`
    calls. Decoding settings default to those the export recorded.

    Args:
        directory: a CTranslate2 export (a version directory, or the directory of versions).
        compute_type: CTranslate2's ("default": the type the weights were saved in).
        intra_threads: threads of one translation (0: CTranslate2's default).
        patience: CTranslate2's beam stops once beam_size * patience hypotheses have ended
            (default `PATIENCE`, 1 as CTranslate2's).
        length_normalization: "gnmt" or "hf" (`beam_search.length_penalty`); default the
            export's.
    """

    def __init__(self, directory, beam_size=None, alpha=None, extra_length=None,
                 max_input_length=None, max_output_length=None, compute_type="default",
                 intra_threads=0, patience=None, length_normalization=None):
        ctranslate2 = _ctranslate2()
        self.directory = resolve(directory)
        try:
            self.settings = json.loads((self.directory / "export.json").read_text())
        except ValueError as error:  # not JSON, or not UTF-8
            raise Ctranslate2Error(f"{self.directory / 'export.json'}: not a kt-export "
                                   f"settings file ({error})") from None
        self.vocabulary = load_vocabulary(vocabulary_file(self.directory))
        self.pieces = self.vocabulary.pieces(list(range(self.vocabulary.vocab_size)))
        self.ids = {piece: index for index, piece in enumerate(self.pieces)}
        for name, given in (("beam_size", beam_size), ("alpha", alpha),
                            ("length_normalization", length_normalization),
                            ("extra_length", extra_length),
                            ("max_input_length", max_input_length)):
            setattr(self, name, self._setting(name) if given is None else given)
        # The export's limit unless the caller changed what it came from.
        recorded = (self.settings.get("max_output_length")
                    if max_input_length is None and extra_length is None else None)
        self.max_output_length = longest_output(
            self.max_input_length, extra_length=self.extra_length,
            max_output_length=max_output_length or recorded,
            # An export before the table's rows were recorded has the sinusoids' POSITIONS,
            # or a learned table its recorded limits already respect.
            max_positions=self.settings.get("max_positions", POSITIONS))
        self.max_input_bytes = 16 * self.max_input_length
        self.patience = PATIENCE if patience is None else patience
        if not 1 <= self.patience < float("inf"):
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        self.engine = ctranslate2.Translator(str(self.directory), device="cpu",
                                             compute_type=compute_type,
                                             intra_threads=intra_threads)

    def _setting(self, name):
        """A decoding setting the export recorded (kt-export records them all; one made before
        it recorded a length normalization ranked as the paper, the only one then)."""
        if name == "length_normalization" and name not in self.settings:
            return "gnmt"
        if name not in self.settings:
            raise Ctranslate2Error(f"{self.directory / 'export.json'} records no {name}; export "
                                   f"the model again (kt-export --format ctranslate2)")
        return self.settings[name]

    @classmethod
    def from_decoding(cls, directory, decoding=None, **engine_settings):
        """The export `directory` decoded as `decoding` (a `DecodingConfig`; its None fields:
        what the export recorded, the settings of the model it came from; a preset fills what
        it says); `engine_settings`: compute_type, intra_threads, patience. A CTranslate2
        export decodes with beam search alone, in its own weights' type: tree_constraint,
        jit_compile, dtype and ema are kt-translate's to refuse
        (`translate_flags.check_engine_flags`)."""
        decoding = decoding or DecodingConfig()
        if decoding.preset:
            decoding = decoding.with_preset()
        return cls(directory, decoding.beam_size, decoding.alpha, decoding.extra_length,
                   decoding.max_input_length, decoding.max_output_length,
                   length_normalization=decoding.length_normalization, **engine_settings)

    def tokenize(self, texts):
        """As `Translator.tokenize`: {"source_ids": int32 [batch, length]}."""
        return {"source_ids": source_ids_of(self.vocabulary, texts, self.max_input_length,
                                            self.max_input_bytes)}

    def detokenize(self, ids):
        return self.vocabulary.detokenize(ids)

    def _search(self, rows, limit):
        """CTranslate2's beam search over source pieces `rows` with output limit `limit`: for
        each row, [(log P, output pieces)].

        CTranslate2 scores log P / length ** alpha (its length counts the end of sentence),
        which gives log P back. Under "hf", as generate's forced_eos_token_id, a hypothesis
        still open one token before the limit ends there, its last token the end of sentence
        at no cost. An immediate end of sentence is allowed, as in the model's search.
        """
        hf = self.length_normalization == "hf"
        results = self.engine.translate_batch(
            rows, beam_size=self.beam_size, num_hypotheses=self.beam_size,
            length_penalty=self.alpha, patience=self.patience,
            max_decoding_length=int(limit) - 1 if hf else int(limit), min_decoding_length=0,
            max_input_length=0, return_scores=True, return_end_token=True,
            suppress_sequences=[[self.pieces[PAD_ID]]])
        end = self.pieces[EOS_ID]
        return [[(score * len(tokens) ** self.alpha,
                  tokens + [end] if hf and tokens[-1:] != [end] else tokens)
                 for tokens, score in zip(result.hypotheses, result.scores)]
                for result in results]

    def translate_n_best_ids(self, source_ids):
        """As `Translator.translate_n_best_ids`, numpy in and tf out: {"ids" int32 [batch,
        beam_size, length], "scores", "log_probs" float32 [batch, beam_size]}."""
        source_ids = np.asarray(source_ids)[:, :self.max_input_length]
        batch = len(source_ids)
        rows = [[self.pieces[i] for i in row if i != PAD_ID] for row in source_ids]
        limits = output_limits(np.count_nonzero(source_ids, axis=1),
                               extra_length=self.extra_length,
                               max_output_length=self.max_output_length)
        found = [[] for _ in range(batch)]
        # One call per output limit: CTranslate2 takes one limit a batch.
        for limit in np.unique(limits[[bool(row) for row in rows]]):
            chosen = [i for i in range(batch) if rows[i] and limits[i] == limit]
            for i, hypotheses in zip(chosen, self._search([rows[i] for i in chosen], limit)):
                found[i] = hypotheses
        width = max([1] + [len(tokens) for hypotheses in found for _, tokens in hypotheses])
        ids = np.zeros([batch, self.beam_size, width], np.int32)
        scores = np.full([batch, self.beam_size], -np.inf, np.float32)
        log_probs = np.full([batch, self.beam_size], -np.inf, np.float32)
        # The length penalty the model's beam search divides by (`kt.length_penalty`), once
        # for every length here rather than once for each hypothesis.
        penalty = length_penalty(np.arange(width + 1), self.alpha,
                                 self.length_normalization).numpy()
        for i, hypotheses in enumerate(found):
            if not rows[i]:  # an empty input: one empty translation, as the model gives
                scores[i, 0] = log_probs[i, 0] = 0.0
            # The model's beam search ranks by log P / its length penalty (GNMT's unless "hf"):
            # CTranslate2's hypotheses are given the model's scores and ranked by them.
            ranked = sorted(hypotheses, key=lambda h: -h[0] / penalty[len(h[1])])
            for j, (log_prob, tokens) in enumerate(ranked):
                ids[i, j, :len(tokens)] = [self.ids[token] for token in tokens]
                log_probs[i, j] = log_prob
                scores[i, j] = log_prob / penalty[len(tokens)]
        return {"ids": tf.constant(ids), "scores": tf.constant(scores),
                "log_probs": tf.constant(log_probs)}
