"""kt-attention: a sentence's attention as heatmaps, like the paper's figures 3-5.

    kt-attention --model_dir runs/demo --text "And God said, Let there be light." \\
        --layer 3 --head 1 --output attention.png

For one layer and head, three heatmaps: encoder self-attention (source x source), decoder
self-attention and encoder-decoder attention (the translation's tokens x the keys they attend
to). Each row is a query and sums to 1. The translation is the model's own (beam search with
the settings kt-translate uses), or --target's text. Layers and heads count from 1, as in the
paper.
"""

import argparse
import sys
import typing

import numpy as np
import tensorflow as tf
from matplotlib.figure import Figure

from keras_transformer.cli import at_least, check_output, replace_atomically
from keras_transformer.export.flags import add_decoding_flags, translator_from_flags
from keras_transformer.model_dir import ConfigError, ModelDirError
from keras_transformer.token_ids import PAD_ID

PANELS = (("encoder_self_attention", "encoder self-attention"),
          ("decoder_self_attention", "decoder self-attention"),
          ("encoder_decoder_attention", "encoder-decoder attention"))
START = "<s>"  # how the decoder's first input (id 0, the shifted-in padding) is labelled


class AttentionError(ValueError):
    """A sentence, layer or head that cannot be drawn, naming the flag."""


class AttentionMaps(typing.NamedTuple):
    """Every attention weight of one sentence pair, with the tokens that label them.

    weights maps each PANELS name to float32 [num_layers, num_heads, queries, keys]. Encoder
    queries and keys are `source_tokens`. Decoder position i holds `decoder_inputs[i]` (the
    target shifted right: "<s>" first) and predicts `target_tokens[i]`: `figure` labels
    decoder self-attention with the tokens the positions hold (so a position attending to
    itself is on the diagonal), and encoder-decoder attention's rows with the token each
    position predicts (so the picture reads as an alignment).
    """
    source_tokens: list
    target_tokens: list
    decoder_inputs: list
    weights: dict
    translation: str


def _unpadded(ids):
    ids = np.asarray(ids)
    return ids[:len(np.trim_zeros(ids, "b"))]


def attention_maps(translator, text, target=None):
    """Attention of `translator.model` on `text` and its translation (or `target`).

    Args:
        translator: an `export.Translator`: its bounds cut the text, its beam search translates.
        text: the source sentence, str.
        target: a translation to show instead of the model's own, str.

    Returns:
        AttentionMaps.

    Raises:
        AttentionError: `text` or `target` has no tokens.
    """
    source_ids = _unpadded(translator.tokenize(tf.constant([text]))["source_ids"][0])
    if not source_ids.size:
        raise AttentionError("--text has no tokens to attend to")
    if target is None:
        target_ids = translator.translate_ids(tf.constant(source_ids[None]))["ids"][0]
    else:
        target_ids = translator.tokenize(tf.constant([target]))["source_ids"][0]
    target_ids = _unpadded(target_ids)
    if not target_ids.size:
        raise AttentionError("--target has no tokens to attend from")
    decoder_inputs = np.concatenate([[PAD_ID], target_ids[:-1]]).astype(np.int32)
    _, weights = translator.model((source_ids[None], decoder_inputs[None]),
                                  return_attention_scores=True)
    vocabulary = translator.vocabulary
    return AttentionMaps(
        source_tokens=vocabulary.pieces(source_ids),
        target_tokens=vocabulary.pieces(target_ids),
        decoder_inputs=[START] + vocabulary.pieces(target_ids[:-1]),
        weights={name: np.asarray(tf.cast(value[0], tf.float32)) for name, value in
                 weights.items()},
        translation=vocabulary.detokenize(target_ids).numpy().decode("utf-8"))


def figure(maps, layer, head):
    """A matplotlib Figure of the three heatmaps of `layer` and `head` (both from 1).

    Raises:
        AttentionError: no such layer or head.
    """
    num_layers, num_heads = maps.weights["encoder_self_attention"].shape[:2]
    for name, value, count in (("layer", layer, num_layers), ("head", head, num_heads)):
        if not 1 <= value <= count:
            raise AttentionError(f"--{name} {value} does not exist: the model has {name}s 1 to "
                             f"{count}")
    axes_labels = {
        "encoder_self_attention": (maps.source_tokens, maps.source_tokens),
        "decoder_self_attention": (maps.decoder_inputs, maps.decoder_inputs),
        "encoder_decoder_attention": (maps.target_tokens, maps.source_tokens),
    }
    widths = [len(axes_labels[name][1]) for name, _ in PANELS]
    height = max(len(maps.source_tokens), len(maps.target_tokens))
    # About a quarter inch a token, so every label stays readable.
    fig = Figure(figsize=(2.5 + 0.25 * sum(widths), 2.5 + 0.25 * height), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=widths)
    for ax, (name, title) in zip(axes, PANELS):
        queries, keys = axes_labels[name]
        image = ax.imshow(maps.weights[name][layer - 1, head - 1], cmap="viridis", vmin=0.0,
                          vmax=1.0)
        ax.set_title(title)
        ax.set_xticks(range(len(keys)), keys, rotation=90)
        ax.set_yticks(range(len(queries)), queries)
        ax.set_xlabel("attends to (keys)")
    axes[0].set_ylabel("query")
    fig.colorbar(image, ax=list(axes), shrink=0.6, label="attention weight")
    fig.suptitle(f"layer {layer} of {num_layers}, head {head} of {num_heads}: "
                 f"{_shortened(maps.translation)}")
    return fig


def _shortened(text, limit=80):
    return text if len(text) <= limit else text[:limit - 1] + "…"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-attention", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_flags(parser)
    parser.add_argument("--text", required=True, help="the source sentence")
    parser.add_argument("--target", help="a translation to show instead of the model's own")
    parser.add_argument("--layer", type=at_least(1),
                        help="which layer, from 1 (default: the last, N)")
    parser.add_argument("--head", type=at_least(1), default=1,
                        help="which head, from 1 (default %(default)s)")
    parser.add_argument("--output", required=True, help="the PNG file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    args = parser.parse_args(argv)
    check_output(parser, args.output, args.overwrite)
    return args


def write_png(fig, output):
    """Saves `fig` as a PNG at `output` (whole or not at all)."""
    replace_atomically(output, lambda path: fig.savefig(path, format="png", dpi=100))


def main(argv=None):
    args = parse_args(argv)
    try:
        translator, members = translator_from_flags(args, max_batch_size=1)
        if len(members) > 1:
            raise AttentionError("attention figures are of one model: give one --checkpoint "
                                 "and no --ensemble")
        loaded = members[0]
        maps = attention_maps(translator, args.text, args.target)
        fig = figure(maps, args.layer or loaded.model.num_layers, args.head)
        write_png(fig, args.output)
    except (ModelDirError, ConfigError, AttentionError, OSError) as error:
        print(f"kt-attention: error: {error}", file=sys.stderr)
        return 2
    print(f"source:      {' '.join(maps.source_tokens)}\n"
          f"translation: {' '.join(maps.target_tokens)}\n"
          f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
