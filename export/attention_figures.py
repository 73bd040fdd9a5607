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
from matplotlib.textpath import TextPath

from keras_transformer.cli import at_least, check_output, replace_atomically
from keras_transformer.errors import UserError
from keras_transformer.export.flags import add_decoding_flags, translator_from_flags
from keras_transformer.token_ids import PAD_ID

PANELS = (("encoder_self_attention", "encoder self-attention"),
          ("decoder_self_attention", "decoder self-attention"),
          ("encoder_decoder_attention", "encoder-decoder attention"))
START = "<s>"  # how the decoder's first input (id 0, the shifted-in padding) is labelled
KEYS_LABEL = "attends to (keys)"
# The figure's measures: points for text, inches for the rest.
TITLE_SIZE, LABEL_SIZE = 12, 10
CELL = 0.25  # a weight's square, in every panel: about a token label's line
GAP = 0.15  # between neighbouring labels and panels
TITLE_GAP = 0.4  # between neighbouring titles (and axis labels), so that each reads alone
MARGIN = 0.15  # around the figure
COLORBAR_WIDTH = 0.15


class AttentionError(UserError):
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
        # Read as a target (an imported Marian model cuts it with its target.spm).
        target_ids = translator.tokenize_targets(tf.constant([target]))["target_ids"][0]
    target_ids = _unpadded(target_ids)
    if not target_ids.size or (target is not None and target_ids.size < 2):  # </s> alone
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
    """A matplotlib Figure of the three heatmaps of `layer` and `head` (both from 1): side by
    side, tops aligned, every weight a square of the same size, labelled by `token_labels`.

    Raises:
        AttentionError: no such layer or head.
    """
    num_layers, num_heads = maps.weights["encoder_self_attention"].shape[:2]
    for name, value, count in (("layer", layer, num_layers), ("head", head, num_heads)):
        if not 1 <= value <= count:
            raise AttentionError(f"--{name} {value} does not exist: the model has {name}s 1 to "
                                 f"{count}")
    source, target = token_labels(maps.source_tokens), token_labels(maps.target_tokens)
    decoder_inputs = token_labels(maps.decoder_inputs)
    axes_labels = {"encoder_self_attention": (source, source),
                   "decoder_self_attention": (decoder_inputs, decoder_inputs),
                   "encoder_decoder_attention": (target, source)}
    panels = [_Panel(title, maps.weights[name][layer - 1, head - 1], *axes_labels[name])
              for name, title in PANELS]
    suptitle = (f"layer {layer} of {num_layers}, head {head} of {num_heads}: "
                f"{_shortened(maps.translation)}")
    size, places = _layout(panels, suptitle)
    fig = Figure(figsize=size)
    for panel, place in zip(panels, places):
        ax = fig.add_axes(place)
        image = ax.imshow(panel.weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(panel.title, fontsize=TITLE_SIZE)
        ax.set_xticks(range(len(panel.keys)), panel.keys, rotation=90, fontsize=LABEL_SIZE)
        ax.set_yticks(range(len(panel.queries)), panel.queries, fontsize=LABEL_SIZE)
        ax.set_xlabel(KEYS_LABEL, fontsize=LABEL_SIZE)
    fig.axes[0].set_ylabel("query", fontsize=LABEL_SIZE)
    fig.colorbar(image, cax=fig.add_axes(places[-1]), label="attention weight")
    fig.suptitle(suptitle, fontsize=TITLE_SIZE, y=1 - MARGIN / size[1], va="top")
    return fig


def token_labels(pieces):
    """Axis labels of SentencePiece pieces, one a piece: a piece that starts a word loses the
    word mark U+2581 (which fonts draw as a low bar beside the word), a piece that continues a
    word (a letter or digit first) is shown as "##piece" (BERT's convention), a bare word mark
    as "␣"; punctuation, "<s>", "</s>" and byte pieces stay as they are."""
    def label(piece):
        if piece == "\u2581":
            return "\u2423"
        if piece.startswith("\u2581"):
            return piece[1:]
        return "##" + piece if piece[:1].isalnum() else piece
    return [label(piece) for piece in pieces]


class _Panel(typing.NamedTuple):
    title: str
    weights: np.ndarray  # [queries, keys]
    queries: list  # row labels
    keys: list  # column labels


def _layout(panels, suptitle):
    """((width, height) of the figure in inches, the rectangles [left, bottom, width, height]
    in figure fractions of each panel's axes, then of the colorbar's).

    Each panel is CELL inches a weight (so cells are equal squares everywhere), its row labels
    to its left and its tops level with the others'; a title or axis label wider than its
    panel is centered on it, and the panels are spaced so that no two of these meet.
    """
    top = MARGIN + 2 * _text_height(TITLE_SIZE) + GAP  # the suptitle, then the titles
    boxes = []  # (left, top, width, height) in inches from the figure's top left
    right = MARGIN + _text_height(LABEL_SIZE)  # room for the first panel's "query"
    reach = MARGIN - TITLE_GAP  # the right end of the titles and axis labels placed so far
    lowest = 0.0  # the bottom of the lowest axis label
    for panel in panels:
        width, height = CELL * len(panel.keys), CELL * len(panel.queries)
        overhang = max(0.0, max(_text_width(panel.title, TITLE_SIZE),
                                _text_width(KEYS_LABEL, LABEL_SIZE)) - width) / 2
        left = max(right + _labels_width(panel.queries) + GAP, reach + TITLE_GAP + overhang)
        right, reach = left + width, left + width + overhang
        boxes.append((left, top, width, height))
        lowest = max(lowest, top + height + GAP + _labels_width(panel.keys)
                     + _text_height(LABEL_SIZE))
    tallest = max(height for *_, height in boxes)
    boxes.append((max(right, reach) + 2 * GAP, top, COLORBAR_WIDTH, min(tallest, 4.0)))
    size = (max(boxes[-1][0] + COLORBAR_WIDTH + 0.8,  # the colorbar's ticks and label
                _text_width(suptitle, TITLE_SIZE) + 2 * MARGIN),
            lowest + MARGIN)
    return size, [[left / size[0], 1 - (top + height) / size[1], width / size[0],
                   height / size[1]] for left, top, width, height in boxes]


def _text_width(text, size):
    """Inches `text` takes drawn at `size` points (matplotlib's own font metrics)."""
    return TextPath((0, 0), text, size=size).get_extents().width / 72 if text else 0.0


def _text_height(size):
    """Inches a line of text at `size` points takes, with its spacing."""
    return 1.4 * size / 72


def _labels_width(labels):
    """Inches the longest of `labels` takes at LABEL_SIZE, beside its tick."""
    return max(_text_width(label, LABEL_SIZE) for label in labels) + 0.1


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
    except (UserError, OSError) as error:
        print(f"kt-attention: error: {error}", file=sys.stderr)
        return 2
    print(f"source:      {' '.join(maps.source_tokens)}\n"
          f"translation: {' '.join(maps.target_tokens)}\n"
          f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
