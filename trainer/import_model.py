"""kt-import --from marian: a Hugging Face Marian checkpoint (an OPUS-MT model) as a model_dir
(`model_dir.marian.import_marian`). Beside kt-train's and kt-average's commands: each writes
a model_dir that kt-translate, kt-export and kt-train --init_from read.

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
(`beam_search.length_penalty`'s "hf"), so that kt-translate gives what `generate` gives.

A config field the model cannot represent is refused by name (a pre-norm or embedding-normalized
BART-style model, separate vocabularies, untied output embeddings, unequal encoder and decoder
shapes, an activation other than swish/silu, gelu or relu).
"""

import argparse
import json
import sys

from keras_transformer import cli
from keras_transformer.errors import UserError
from keras_transformer.model_dir import config_file
from keras_transformer.model_dir.marian import IMPORT_FILE, import_marian


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-import", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_verbose_flag(parser)
    parser.add_argument("--from", dest="source_format", choices=["marian"], required=True,
                        help="the checkpoint's kind: marian (Hugging Face's MarianMTModel, "
                             "the OPUS-MT models)")
    parser.add_argument("directory", help="the checkpoint directory (config.json, "
                                          "model.safetensors or pytorch_model.bin, source.spm, "
                                          "target.spm, vocab.json)")
    parser.add_argument("--model_dir", required=True, help="the model_dir to write (new)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        path = import_marian(args.directory, args.model_dir)
    except (UserError, OSError) as error:
        print(f"kt-import: error: {error}", file=sys.stderr)
        return 2
    run = config_file.load(path)
    hp = run.model.hparams
    print(f"imported {args.directory} into {path}: {hp.num_layers}+{hp.num_layers} layers, "
          f"d_model {hp.d_model}, {run.model.vocab_size:,} ids; decoding beam "
          f"{hp.decode_beam_size}, alpha {hp.decode_alpha} (Hugging Face's normalization), "
          + (f"up to {hp.decode_max_output_length} tokens" if hp.decode_max_output_length
             else "up to the input's length + 50 tokens"), flush=True)
    ignored = json.loads((path / IMPORT_FILE).read_text(encoding="utf-8"))["not_followed"]
    if ignored:
        print(f"kt-import: warning: generation settings kt-translate does not follow: "
              f"{', '.join(ignored)}; its outputs may differ from generate's", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
