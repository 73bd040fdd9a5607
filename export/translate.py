"""kt-translate: translate lines of text with a trained model_dir (beam search, paper 6.1).

    kt-translate --model_dir runs/demo < input.en > output.es
    kt-translate --model_dir runs/demo --input dev.en --reference dev.es
    kt-translate --model_dir runs/wmt --data wmt_t2t_translate/de-en --source_lang en \
        --target_lang de --split test --output newstest2014.de

Lines are translated in batches of similar length (less padding, fewer decoding steps) and
written in input order, one translation a line. With --reference, or with --data (a corpus
split's sources, scored against its targets), sacrebleu's BLEU and chrF and their signatures go
to stderr.
"""

import argparse
import pathlib
import sys
import time

from keras_transformer import cli, data
from keras_transformer.cli import at_least
from keras_transformer.export.flags import add_decoding_flags, translator_from_flags
from keras_transformer.export.lines import print_scores, translate_lines
from keras_transformer.model_dir import ConfigError, ModelDirError


class InputError(ValueError):
    """Input or reference text that cannot be used, naming the file."""


def read_lines(path, what):
    """Lines of a file (or stdin for None) as bytes without their newline, warning on stderr
    about lines that are not UTF-8 (their bad bytes are translated as U+FFFD)."""
    name = "<stdin>" if path is None else str(path)
    try:
        raw = sys.stdin.buffer.read() if path is None else pathlib.Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {what} {name}: {error.strerror}") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    for number, line in enumerate(lines, 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            print(f"kt-translate: warning: {name}:{number}: not UTF-8 at byte {error.start}; "
                  f"undecodable bytes are read as U+FFFD", file=sys.stderr)
    return lines


def split_lines(source, split):
    """A corpus split's sources (bytes) and references (str), in order.

    Raises:
        data.CorpusError: the source has no such split, or it cannot be read.
    """
    pairs = list(source.pairs(split).as_numpy_iterator())
    return [s for s, _ in pairs], [t.decode("utf-8", errors="replace") for _, t in pairs]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-translate", description=__doc__.split("\n\n")[0],
        epilog="Example: kt-translate --model_dir runs/demo --input dev.en --reference dev.es")
    add_decoding_flags(parser)
    parser.add_argument("--input", help="file of sentences, one a line (default: stdin)")
    parser.add_argument("--output", help="file for the translations (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--reference", help="reference translations, one a line: print BLEU "
                                            "and chrF (sacrebleu) to stderr")
    corpus = parser.add_argument_group(
        "a corpus split instead of --input and --reference (e.g. a test set from TFDS)")
    data.sources.add_flags(corpus, default=None)
    corpus.add_argument("--split", choices=data.sources.SPLITS,
                        help="which split of --data (default test); the languages default to "
                             "the model's")
    parser.add_argument("--batch_size", type=at_least(1), default=32,
                        help="sentences translated together (default %(default)s)")
    parser.add_argument("--scores", action="store_true",
                        help="write 'score<TAB>translation' lines")
    args = parser.parse_args(argv)
    if args.data and (args.input or args.reference):
        parser.error("--data reads the sources and references of --split: drop --input and "
                     "--reference")
    corpus_flags = [flag for flag in ("split", "source_lang", "target_lang", "tfds_data_dir",
                                      "download") if getattr(args, flag)]
    if corpus_flags and not args.data:
        parser.error(f"--{corpus_flags[0]} needs --data")
    if args.output:
        cli.check_output(parser, args.output, args.overwrite)
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        translator, loaded = translator_from_flags(args, args.batch_size)
        references = None
        if args.data:
            source = data.get_source(
                args.data, args.source_lang or loaded.run.source_lang,
                args.target_lang or loaded.run.target_lang, args.tfds_data_dir, args.download,
                args.invalid_utf8)
            lines, references = split_lines(source, args.split or "test")
        else:
            lines = read_lines(args.input, "--input")
        if args.reference:
            references = [line.decode("utf-8", errors="replace")
                          for line in read_lines(args.reference, "--reference")]
            if len(references) != len(lines):
                raise InputError(f"--reference {args.reference} has {len(references)} lines "
                                 f"but {args.input or '<stdin>'} has {len(lines)}")
    except (InputError, ModelDirError, ConfigError, data.CorpusError,
            ValueError) as error:
        print(f"kt-translate: error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    translations, scores = translate_lines(translator, lines, args.batch_size,
                                           progress_every=10)
    seconds = time.perf_counter() - start
    # One translation a line, even if the model produced a line break (byte-fallback pieces).
    translations = [" ".join(line.splitlines()) for line in translations]
    text = "".join(f"{score:.4f}\t{line}\n" if args.scores else f"{line}\n"
                   for line, score in zip(translations, scores))
    if args.output:
        cli.replace_atomically(args.output, lambda path: path.write_bytes(text.encode("utf-8")))
    else:
        sys.stdout.buffer.write(text.encode("utf-8"))  # UTF-8 whatever the locale
        sys.stdout.flush()
    print(f"translated {len(lines)} sentence(s) in {seconds:.1f} s "
          f"({len(lines) / max(seconds, 1e-9):.1f}/s) with {loaded.checkpoint}, beam "
          f"{args.beam_size}, alpha {args.alpha}", file=sys.stderr)
    if references is not None:
        print_scores(translations, references, sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
