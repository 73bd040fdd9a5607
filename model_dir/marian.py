"""A Hugging Face Marian checkpoint (an OPUS-MT model) as a model_dir: `import_marian`, which
the kt-import command runs (trainer/import_model.py).

    kt-import --from marian opus-mt-en-es --model_dir runs/opus-mt-en-es

The OPUS-MT models (Tiedemann & Thottingal 2020, trained with Marian) are the paper's
Transformer with a few choices of their own, each an hparams option here (the paper's sets
unchanged): the swish activation, biases on the attention projections, sinusoids laid out as
every sine then every cosine, a bias on the logits (final_logits_bias), layer normalization's
epsilon 1e-5, and two SentencePiece models with one id space (`data.MarianVocabulary`). The
import reads config.json (and generation_config.json, for the decoding defaults), the weights
(model.safetensors or pytorch_model.bin, `hf_checkpoint`), source.spm, target.spm and
vocab.json, and writes a model_dir that kt-translate, kt-score, kt-export, kt-attention and
`kt-train --init_from` read as any other:

    config.json            hparams (transformer_base overridden with what the config says),
                           vocab_size, data.max_pair_length (= max_positions, the table's rows)
    vocab.marian           the vocabulary, ids moved so that <pad> is 0 and </s> 1 (the
                           embedding rows and the logits' bias moved alike)
    checkpoints/ckpt-0/    the weights
    imported.json          where they came from, and the checkpoint's decoding defaults

Decoding defaults come with it (hparams decode_*): generate's num_beams, length_penalty and
max_length (less the start token), and Hugging Face's length normalization
(`search.beam.length_penalty`'s "hf"), so that kt-translate gives what `generate` gives.

A config field the model cannot represent is refused by name (a pre-norm or embedding-normalized
BART-style model, separate vocabularies, untied output embeddings, unequal encoder and decoder
shapes, an activation other than swish/silu, gelu or relu).
"""

import json
import pathlib
import tempfile

import numpy as np

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.errors import UserError, check_one_of
from keras_transformer.model_dir import checkpoints, config, config_file
from keras_transformer.model_dir.hf_checkpoint import (
    PYTORCH_FILE,
    SAFETENSORS_FILE,
    read_json,
    read_weights,
)

IMPORT_FILE = "imported.json"
# Hugging Face's activation names -> the hparams' ffn_activation ("gelu" is the exact one).
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
# Config fields of older (BART-era) Marian configs and the one value each may have here.
_FIXED_FIELDS = {"normalize_before": False, "add_final_layer_norm": False,
                 "normalize_embedding": False, "static_position_embeddings": True,
                 "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
                 "is_encoder_decoder": True}
# Our layer names for Hugging Face's, inside each encoder/decoder layer.
_SUBLAYERS = {"self_attn": "self_attention", "encoder_attn": "encoder_decoder_attention"}
_PROJECTIONS = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "out_proj": "output"}
_NORMS = {"self_attn_layer_norm": "self_attention_block",
          "encoder_attn_layer_norm": "encoder_decoder_attention_block",
          "final_layer_norm": "feed_forward_block"}
# Generation settings whose other values kt-translate does not follow, with the value it does
# (num_beams, length_penalty and max_length become the model's defaults; end of sentence at the
# limit and <pad> never written are how "hf" decodes).
_GENERATION_FOLLOWED = {"early_stopping": False, "renormalize_logits": True, "do_sample": False,
                        "no_repeat_ngram_size": 0, "repetition_penalty": 1.0,
                        "num_beam_groups": 1, "min_length": 0, "diversity_penalty": 0.0,
                        "max_new_tokens": None, "min_new_tokens": None,
                        "encoder_no_repeat_ngram_size": 0, "suppress_tokens": None,
                        "forced_bos_token_id": None, "exponential_decay_length_penalty": None}
# generate's value for a setting a checkpoint leaves out (transformers 5.23's GenerationConfig).
_GENERATION_DEFAULTS = dict(_GENERATION_FOLLOWED, renormalize_logits=False)
# Hugging Face's sinusoid tables hold float64-computed values; ours are computed in float32.
_POSITION_TOLERANCE = 1e-3


class MarianImportError(UserError):
    """A checkpoint the import cannot represent or read, naming the file and field."""


def _check_generation(generation, path):
    """Refuses decoding settings the model's decoding cannot take, naming the field."""
    for name, lowest in (("num_beams", 1), ("max_length", 2)):
        value = generation.get(name)
        if value is not None and (type(value) is not int or value < lowest):
            raise MarianImportError(f"{path}: {name} must be an integer >= {lowest}, got "
                                    f"{value!r}")
    penalty = generation.get("length_penalty", 1.0)
    if type(penalty) not in (int, float) or not 0 <= penalty < float("inf"):
        raise MarianImportError(f"{path}: length_penalty {penalty!r} is not supported (a "
                                f"finite number >= 0)")


def _pairs_equal(config_json, path, pairs):
    for first, second in pairs:
        for name in (first, second):
            if name not in config_json:
                raise MarianImportError(f"{path}: no {name} field")
        if config_json.get(first) != config_json.get(second):
            raise MarianImportError(
                f"{path}: {first} {config_json.get(first)!r} differs from {second} "
                f"{config_json.get(second)!r}; the model has one value for both")


def marian_hparams(config_json, generation, path, generation_path=None):
    """The `kt.HParams` of a Marian config (dict of config.json at `path`) and its decoding
    defaults (`generation`: generation_config.json's dict at `generation_path`, or
    config.json's).

    Raises:
        MarianImportError: a field the model cannot represent, named.
    """
    if config_json.get("model_type") != "marian":
        raise MarianImportError(f"{path}: model_type is {config_json.get('model_type')!r}, "
                                f"not 'marian'")
    for name, wanted in _FIXED_FIELDS.items():
        if name in config_json and config_json[name] != wanted:
            raise MarianImportError(f"{path}: {name} {config_json[name]!r} is not supported "
                                    f"(only {wanted!r})")
    if config_json.get("decoder_vocab_size") not in (None, config_json.get("vocab_size")):
        raise MarianImportError(f"{path}: decoder_vocab_size {config_json['decoder_vocab_size']}"
                                f" differs from vocab_size: separate vocabularies are not "
                                f"supported")
    _pairs_equal(config_json, path, [("encoder_layers", "decoder_layers"),
                                     ("encoder_ffn_dim", "decoder_ffn_dim"),
                                     ("encoder_attention_heads", "decoder_attention_heads")])
    activation = config_json.get("activation_function", "gelu")
    check_one_of(f"{path}: activation_function", activation, ACTIVATIONS, MarianImportError)
    _check_generation(generation, generation_path or path)
    max_length = generation.get("max_length")
    try:
        return kt.hparams.get("transformer_base").override(
            num_layers=config_json["encoder_layers"], d_model=config_json["d_model"],
            d_ff=config_json["encoder_ffn_dim"],
            num_heads=config_json["encoder_attention_heads"],
            dropout=float(config_json.get("dropout", 0.1)),
            attention_dropout=float(config_json.get("attention_dropout", 0.0)),
            relu_dropout=float(config_json.get("activation_dropout", 0.0)),
            max_positions=config_json.get("max_position_embeddings", 512),
            layer_norm_epsilon=1e-5, ffn_activation=ACTIVATIONS[activation],
            attention_bias=True, sinusoid_layout="split", output_bias=True,
            scale_embeddings=bool(config_json.get("scale_embedding", False)),
            decode_beam_size=int(generation.get("num_beams") or 1),
            decode_alpha=float(generation.get("length_penalty", 1.0)),
            decode_length_normalization="hf",
            decode_max_output_length=max_length - 1 if max_length and max_length > 1 else None)
    except KeyError as error:
        raise MarianImportError(f"{path}: no {error.args[0]} field") from None
    except (kt.hparams.HParamsError, TypeError, ValueError) as error:
        raise MarianImportError(f"{path}: {error}") from None


def _check_special_ids(config_json, path, order, vocabulary):
    """Refuses config ids of <pad>, </s> and the decoder's start that are not vocab.json's
    (the model starts from <pad>'s zero row and ends at </s>, as Marian's do)."""
    marian_id = dict(zip(vocabulary.pieces(range(len(order))), order))
    pad, eos = marian_id["<pad>"], marian_id["</s>"]
    for name, wanted in (("pad_token_id", pad), ("eos_token_id", eos),
                         ("decoder_start_token_id", pad)):
        if config_json.get(name, wanted) != wanted:
            raise MarianImportError(f"{path}: {name} is {config_json[name]}, but vocab.json "
                                    f"gives {'</s>' if wanted == eos else '<pad>'} id {wanted}")
    if config_json.get("vocab_size", len(order)) != len(order):
        raise MarianImportError(f"{path}: vocab_size is {config_json['vocab_size']}, but "
                                f"vocab.json holds {len(order)} pieces")


def _override_string(hp):
    """The hparams_override that turns transformer_base into `hp` (for config.json)."""
    base = kt.hparams.get("transformer_base").to_dict()
    return ",".join(f"{name}={value}" for name, value in hp.to_dict().items()
                    if value != base[name])


def _embedding(weights, path):
    """The (vocab, d_model) embedding matrix: the first of the names a Marian save may use;
    an lm_head that differs from it is an untied output projection, refused."""
    names = ["shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    found = [name for name in names if name in weights]
    if not found:
        raise MarianImportError(f"{path}: no embedding matrix ({' or '.join(names)})")
    matrix = weights[found[0]]
    for name in found[1:] + [n for n in ("lm_head.weight",) if n in weights]:
        if weights[name].shape != matrix.shape or not np.array_equal(weights[name], matrix):
            raise MarianImportError(f"{path}: {name} differs from {found[0]}: untied or "
                                    f"separate embeddings are not supported")
    return matrix


def _check_positions(weights, hp, path):
    """Refuses stored position tables that are not the split sinusoids the model computes."""
    for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        if name not in weights:
            continue  # recent transformers no longer save them (they are recomputed)
        table = weights[name]
        if table.ndim != 2 or table.shape[1] != hp.d_model:
            raise MarianImportError(f"{path}: {name} is {table.shape}, not [positions, "
                                    f"{hp.d_model}]")
        ours = np.asarray(kt.SinusoidalPositionEncoding(layout="split")(
            np.zeros((1, table.shape[0], hp.d_model), np.float32)))
        if np.abs(table - ours).max() > _POSITION_TOLERANCE:
            raise MarianImportError(f"{path}: {name} is not the sinusoid table the model "
                                    f"computes (learned positions are not supported)")


def keras_weights(weights, order, hp, path):
    """{our weight path inside the model: value} from Hugging Face's {name: value} (prefix
    "model." optional):
    kernels transposed, the vocabulary's rows in `order` (`data.import_marian_vocabulary`).

    Raises:
        MarianImportError: a missing weight, or one the model has no place for (named).
    """
    weights = {name.removeprefix("model."): value for name, value in weights.items()}
    embedding = _embedding(weights, path)
    if embedding.shape[0] != len(order):
        raise MarianImportError(f"{path}: the embedding has {embedding.shape[0]} rows, the "
                                f"vocabulary {len(order)} pieces; vocab.json is not this model's")
    _check_positions(weights, hp, path)
    bias = weights.get("final_logits_bias", np.zeros((1, len(order)), np.float32))
    if bias.size != len(order):
        raise MarianImportError(f"{path}: final_logits_bias has {bias.size} values, the "
                                f"vocabulary {len(order)} pieces")
    ours = {"embedding/embeddings": embedding[order],
            "embedding/bias": bias.reshape(-1)[order]}
    handled = {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
               "lm_head.weight", "final_logits_bias", "encoder.embed_positions.weight",
               "decoder.embed_positions.weight"}
    for name, value in weights.items():
        if name in handled:
            continue
        target = _layer_weight_path(name)
        if target is None:
            raise MarianImportError(f"{path}: weight {name} {value.shape} has no place in the "
                                    f"model (an option it does not have)")
        ours[target] = value.T if target.endswith("kernel") else value
    return ours


def _layer_weight_path(name):
    """Our weight path inside the model for a Hugging Face layer weight name, or None."""
    parts = name.split(".")
    if len(parts) < 5 or parts[0] not in ("encoder", "decoder") or parts[1] != "layers":
        return None
    layer = f"{parts[0]}_layer_{parts[2]}"
    sublayer, rest = parts[3], parts[4:]
    kind = {"weight": "kernel", "bias": "bias"}.get(rest[-1])
    if sublayer in _SUBLAYERS and len(rest) == 2 and rest[0] in _PROJECTIONS and kind:
        return f"{layer}/{_SUBLAYERS[sublayer]}/{_PROJECTIONS[rest[0]]}_{kind}"
    if sublayer in ("fc1", "fc2") and len(rest) == 1 and kind:
        return f"{layer}/feed_forward/{'inner' if sublayer == 'fc1' else 'outer'}/{kind}"
    if sublayer in _NORMS and len(rest) == 1:
        norm = {"weight": "gamma", "bias": "beta"}.get(rest[0])
        return f"{layer}/{_NORMS[sublayer]}/layer_norm/{norm}" if norm else None
    return None


def load_weights_into(model, ours, path):
    """Sets every weight of `model` from {weight path inside the model: value} (Keras names a
    process's second model "transformer_1"); refuses a missing, unused or misshapen one,
    naming it."""
    inside = {weight.path.removeprefix(f"{model.name}/"): weight for weight in model.weights}
    missing, unused = sorted(set(inside) - set(ours)), sorted(set(ours) - set(inside))
    if missing or unused:
        raise MarianImportError(f"{path}: the checkpoint does not fit the model its config "
                                f"describes (missing {missing[:5]}, left over {unused[:5]})")
    for name, weight in inside.items():
        value = ours[name]
        if tuple(value.shape) != tuple(weight.shape):
            raise MarianImportError(f"{path}: {name} is {tuple(value.shape)} in the "
                                    f"checkpoint, {tuple(weight.shape)} in the model")
        weight.assign(value)


def read_marian(directory):
    """(model, vocabulary, run config, facts for imported.json) of a Marian checkpoint
    directory.

    Raises:
        MarianImportError, data.VocabularyError, CheckpointFormatError: what is wrong, named.
    """
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise MarianImportError(f"{directory} is not a directory")
    config_path = directory / "config.json"
    config_json = read_json(config_path)
    generation_path = directory / "generation_config.json"
    if not generation_path.exists():
        generation_path = config_path
    generation = read_json(generation_path)
    hp = marian_hparams(config_json, generation, config_path, generation_path)
    vocabulary, order = data.import_marian_vocabulary(
        directory / "source.spm", directory / "target.spm", directory / "vocab.json")
    _check_special_ids(config_json, config_path, order, vocabulary)
    weights = read_weights(directory)
    model = kt.build_model(hp, vocabulary.vocab_size)
    load_weights_into(model, keras_weights(weights, order, hp, directory), directory)
    languages = read_json(directory / "tokenizer_config.json") \
        if (directory / "tokenizer_config.json").exists() else {}
    run = config.RunConfig(
        model=config.ModelConfig(hparams_name="transformer_base",
                                 hparams_override=_override_string(hp), hparams=hp,
                                 vocab_size=vocabulary.vocab_size),
        data=config.DataConfig(corpus=str(directory.resolve()),
                               source_lang=languages.get("source_lang"),
                               target_lang=languages.get("target_lang"),
                               max_pair_length=hp.max_positions),
        versions=config_file.versions())
    weights_file = next(directory / name for name in (SAFETENSORS_FILE, PYTORCH_FILE)
                        if (directory / name).is_file())
    facts = {"from": "marian", "directory": str(directory.resolve()),
             "weights": {"file": weights_file.name, "sha256": checkpoints.sha256_of(weights_file)},
             "config": config_json, "generation": generation,
             "not_followed": not_followed(generation)}
    return model, vocabulary, run, facts


def not_followed(generation):
    """The generation settings (dict) kt-translate decodes otherwise, as "name value" strings:
    e.g. "renormalize_logits False" (beam scores then keep <pad>'s share of the probability in
    generate; kt-translate never counts <pad>), also where generate's default for a setting
    left out is not what kt-translate does."""
    found = [f"{name} {generation.get(name, _GENERATION_DEFAULTS[name])!r}"
             + ("" if name in generation else " (generate's default)")
             for name, followed in _GENERATION_FOLLOWED.items()
             if generation.get(name, _GENERATION_DEFAULTS[name]) != followed]
    pad, eos = generation.get("pad_token_id"), generation.get("eos_token_id")
    if generation.get("forced_eos_token_id", eos) != eos:
        found.append(f"forced_eos_token_id {generation.get('forced_eos_token_id')!r}")
    if generation.get("bad_words_ids", [[pad]]) not in ([[pad]], None):
        found.append(f"bad_words_ids {generation['bad_words_ids']!r}")
    return found


def import_marian(directory, model_dir):
    """Writes the model_dir of Marian checkpoint `directory` at `model_dir` (which must not
    exist: it is written beside and renamed into place whole); returns its path."""
    model_dir = pathlib.Path(model_dir)
    if model_dir.exists():
        raise MarianImportError(f"--model_dir {model_dir} exists; an import never replaces one")
    model, vocabulary, run, facts = read_marian(directory)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_dir.parent, prefix=".import-") as scratch:
        written = pathlib.Path(scratch) / "model_dir"
        written.mkdir()
        config_file.save(run, written)
        (written / vocabulary.FILE_NAME).write_bytes(vocabulary.serialized)
        (written / IMPORT_FILE).write_text(json.dumps(facts, indent=2, ensure_ascii=False)
                                           + "\n", encoding="utf-8")
        checkpoints.CheckpointDirectory(checkpoints.default_directory(written)).save(model, 0)
        written.rename(model_dir)
    return model_dir


__all__ = ["IMPORT_FILE", "MarianImportError", "import_marian", "keras_weights",
           "marian_hparams", "read_marian"]
