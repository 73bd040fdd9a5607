"""The flags that choose a corpus (--data and its languages, TFDS's directory and download,
invalid UTF-8), for the commands that read one: kt-vocab, kt-train, kt-translate and
`python -m keras_transformer.data.inspect`. The library takes a source (`sources.get_source`);
only the commands read parsed flags."""

from keras_transformer.data.sources import INVALID_UTF8_MODES, get_source


def add_flags(parser, default="bible_en_es", *, unset_defaults=False):
    """The flags that choose a source; shared by every command that reads a corpus.

    `unset_defaults`: every flag defaults to None, so that a caller can tell the flags given from
    the rest (kt-train: a resumed run keeps its saved values); the help still names `default`.
    """
    def default_of(value):
        return None if unset_defaults else value

    parser.add_argument("--data", default=default_of(default),
                        help="bible_en_es or tatoeba_en_es (bundled), a directory, "
                             "text:SRC,TGT, tsv:FILE, a TFDS name such as "
                             "wmt14_translate/de-en, or ptb:DIR (a treebank, for parsing)" +
                             (f" (default: {default})" if default else ""))
    parser.add_argument("--source_lang", help="source language code (default: the source's)")
    parser.add_argument("--target_lang", help="target language code (default: the source's)")
    parser.add_argument("--tfds_data_dir", help="TFDS data directory (default: TFDS's)")
    parser.add_argument("--download", action="store_true", default=default_of(False),
                        help="let TFDS download and prepare a dataset (needs network)")
    parser.add_argument("--invalid_utf8", choices=INVALID_UTF8_MODES, default=default_of("error"),
                        help="local files: refuse lines that are not UTF-8 (error) or replace "
                             "bad bytes with U+FFFD (default: error)")


def from_flags(args):
    """The source that `add_flags`' parsed flags name."""
    return get_source(args.data, args.source_lang, args.target_lang, args.tfds_data_dir,
                      args.download, args.invalid_utf8)
