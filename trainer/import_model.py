"""kt-import --from marian: a Hugging Face Marian checkpoint (an OPUS-MT model) as a model_dir.

    kt-import --from marian opus-mt-en-es --model_dir runs/opus-mt-en-es

The command of `model_dir.marian.import_marian`, beside kt-train's and kt-average's: each
writes a model_dir that kt-translate, kt-export and kt-train --init_from read. What the import
reads and writes, and what it refuses, is model_dir/marian.py's docstring (and
docs/pretrained.md).
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
