"""The flags that choose a corpus (--data and its languages, TFDS's directory and download,
invalid UTF-8), for the commands that read one: kt-vocab, kt-train, kt-translate and
`python -m keras_transformer.data.inspect`. The library takes a source (`sources.get_source`);
only the commands read parsed flags."""

import argparse

from keras_transformer.data.mixture import WEIGHTS_FLAG, WeightedCorpora
from keras_transformer.data.sources import INVALID_UTF8_MODES, CorpusError, get_source


def add_flags(parser, default="bible_en_es", *, unset_defaults=False, several=False):
    """The flags that choose a source; shared by every command that reads a corpus.

    `unset_defaults`: every flag defaults to None, so that a caller can tell the flags given from
    the rest (kt-train: a resumed run keeps its saved values); the help still names `default`.
    `several`: --data may be repeated, the corpora mixed by --data_weights
    (`data.WeightedCorpora`); args.data is then a list, or None where no --data is given.
    """
    def default_of(value):
        return None if unset_defaults else value

    parser.add_argument("--data", default=None if several else default_of(default),
                        action="append" if several else "store",
                        help="bible_en_es or tatoeba_en_es (bundled), a directory, "
                             "text:SRC,TGT, tsv:FILE, a TFDS name such as "
                             "wmt14_translate/de-en, or ptb:DIR (a treebank, for parsing)" +
                             ("; repeat it to mix several corpora by --data_weights"
                              if several else "") +
                             (f" (default: {default})" if default else ""))
    if several:
        parser.add_argument(WEIGHTS_FLAG, dest="data_weights", type=_weights,
                            help="with several --data: the share of training pairs drawn from "
                                 "each, as numbers separated by commas in --data's order (only "
                                 "their ratios count): --data A --data B --data_weights 1,3 "
                                 "draws a quarter of the pairs from A (default: equal)")
    parser.add_argument("--source_lang", help="source language code (default: the source's)")
    parser.add_argument("--target_lang", help="target language code (default: the source's)")
    parser.add_argument("--tfds_data_dir", help="TFDS data directory (default: TFDS's)")
    parser.add_argument("--download", action="store_true", default=default_of(False),
                        help="let TFDS download and prepare a dataset (needs network)")
    parser.add_argument("--invalid_utf8", choices=INVALID_UTF8_MODES, default=default_of("error"),
                        help="local files: refuse lines that are not UTF-8 (error) or replace "
                             "bad bytes with U+FFFD (default: error)")


def _weights(text):
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas, one "
                                         f"a --data, e.g. 1,3") from None


def from_flags(args, default="bible_en_es"):
    """The source that `add_flags`' parsed flags name: several --data as one
    `WeightedCorpora`; `default` where `several` flags were given no --data."""
    specs = args.data if isinstance(args.data, list) else [args.data or default]
    opened = [get_source(spec, args.source_lang, args.target_lang, args.tfds_data_dir,
                         args.download, args.invalid_utf8) for spec in specs]
    weights = getattr(args, "data_weights", None)
    if len(opened) == 1:
        if weights is not None:
            raise CorpusError(f"{WEIGHTS_FLAG} weighs several corpora; give --data more than "
                              f"once")
        return opened[0]
    return WeightedCorpora(opened, weights, names=specs)
