"""kt-vocab: a shared SentencePiece vocabulary built from a corpus's train split
(`data.build_vocabulary`, data/vocabulary_training.py).

    kt-vocab --data bible_en_es --vocab_size 8000 --output vocab.model
    python -m keras_transformer.data.build_vocab --data bible_en_es --output vocab.model
"""

import argparse
import sys
import time

from keras_transformer import cli
from keras_transformer.data import markup, source_flags
from keras_transformer.data.vocabulary_training import (
    MODEL_TYPES,
    build_vocabulary,
    corpus_texts,
    corpus_whole_tokens,
    default_vocab_size,
)
from keras_transformer.errors import UserError


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-vocab", description="Build a shared SentencePiece subword vocabulary from the "
                                     "train split of a corpus (both languages); of several "
                                     "corpora, from their sentences drawn by --data_weights.")
    source_flags.add_flags(parser, several=True)
    parser.add_argument("--vocab_size", type=cli.at_least(260),
                        help="number of ids (the paper: ~37000 for WMT en-de; default 16000 "
                             "for a treebank, as section 6.3, else 8000, which suits the "
                             "bundled corpora)")
    parser.add_argument("--model_type", choices=MODEL_TYPES, default="bpe",
                        help="SentencePiece algorithm (default: %(default)s)")
    parser.add_argument("--max_sentences", type=int, default=2_000_000,
                        help="sentences sampled for training (default: %(default)s)")
    parser.add_argument("--num_threads", type=int, default=2,
                        help="training threads; the result depends on it (default: %(default)s)")
    parser.add_argument("--output", required=True, help="path of the .model file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--markup", action="store_true",
                        help="keep markup's placeholder tokens (｟1｠, ｟t1｠, ...) whole, for a "
                             "model trained with kt-train --markup_rate")
    cli.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        source = source_flags.from_flags(args)
        vocab_size = args.vocab_size or default_vocab_size(args.data)
        vocabulary = build_vocabulary(corpus_texts(source), vocab_size, args.output,
                                      args.model_type, args.max_sentences, args.num_threads,
                                      args.overwrite, (*corpus_whole_tokens(source),
                                                       *(markup.TOKENS if args.markup else ())))
    except UserError as error:
        print(f"kt-vocab: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {vocabulary.vocab_size} ids ({args.model_type}) from "
          f"{source!r} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
