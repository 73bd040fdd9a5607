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
import os
import pathlib
import sys
import time

import numpy as np
import sacrebleu
import tensorflow as tf

import data
from export import loading
from export.translator import Translator
from trainer import config
from trainer.task import at_least


class InputError(ValueError):
    """Input or reference text that cannot be used, naming the file."""


def add_decoding_flags(parser):
    """The model_dir, beam search and request-bound flags of kt-translate, kt-export and
    kt-attention."""
    parser.add_argument("--model_dir", required=True, help="a kt-train model_dir")
    parser.add_argument("--checkpoint", help="a checkpoint directory to use instead of the "
                                             "newest (e.g. MODEL_DIR/averaged/ckpt-N)")
    parser.add_argument("--beam_size", type=at_least(1), default=4,
                        help="(paper: 4; default %(default)s)")
    parser.add_argument("--alpha", type=at_least(0.0, float), default=0.6,
                        help="length penalty exponent (paper: 0.6; default %(default)s)")
    parser.add_argument("--extra_length", type=at_least(0), default=50,
                        help="output tokens allowed beyond the input's (paper: 50; default "
                             "%(default)s)")
    parser.add_argument("--max_input_length", type=at_least(2),
                        help="longest input in tokens; longer ones are truncated (default: the "
                             "model_dir's training --max_length)")
    parser.add_argument("--max_output_length", type=at_least(1),
                        help="longest output in tokens (default: max_input_length + "
                             "extra_length)")
    parser.add_argument("--dtype", choices=loading.DTYPES, default="float32",
                        help="float32 (as trained; default), mixed_bfloat16 (bfloat16 compute "
                             "on float32 weights) or bfloat16 (the same arithmetic with the "
                             "weights stored in bfloat16: half the memory, no weight casts "
                             "each step; the fastest where the CPU has bfloat16 instructions)")


def translator_from_flags(args, max_batch_size):
    loaded = loading.load(args.model_dir, args.checkpoint, args.dtype)
    translator = Translator(
        loaded.model, loaded.vocabulary, beam_size=args.beam_size, alpha=args.alpha,
        extra_length=args.extra_length,
        max_input_length=args.max_input_length or loaded.run.max_length,
        max_output_length=args.max_output_length, max_batch_size=max_batch_size)
    return translator, loaded


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


def print_scores(translations, references, file):
    """sacrebleu's corpus BLEU and chrF, each with its signature, one line each."""
    for metric in (sacrebleu.BLEU(), sacrebleu.CHRF()):
        score = metric.corpus_score(translations, [references])
        print(f"{score} {metric.get_signature()}", file=file)


def split_lines(source, split):
    """A corpus split's sources (bytes) and references (str), in order.

    Raises:
        data.CorpusError: the source has no such split, or it cannot be read.
    """
    pairs = list(source.pairs(split).as_numpy_iterator())
    return [s for s, _ in pairs], [t.decode("utf-8", errors="replace") for _, t in pairs]


def translate_lines(translator, lines, batch_size, progress_every=None):
    """Translations (str) and scores of `lines` (bytes or str), in input order.

    Lines are tokenized, sorted by length and translated `batch_size` at a time; with
    `progress_every` (seconds), a progress line goes to stderr that often.
    """
    if not lines:
        return [], np.zeros([0], np.float32)
    ids = np.concatenate([
        _padded(translator.tokenize(tf.constant(lines[start:start + batch_size]))["source_ids"],
                translator.max_input_length)
        for start in range(0, len(lines), batch_size)])
    translations, scores = [None] * len(lines), np.zeros(len(lines), np.float32)
    began = reported = time.perf_counter()
    done = 0
    for rows, batch in data.length_sorted_batches(ids, batch_size):
        if progress_every and time.perf_counter() - reported > progress_every:
            reported = time.perf_counter()
            print(f"translated {done}/{len(lines)} sentences "
                  f"({done / (reported - began):.1f}/s)", file=sys.stderr, flush=True)
        done += len(rows)
        result = translator.translate_ids(tf.constant(batch))
        texts = translator.detokenize(result["ids"]).numpy()
        for row, text, score in zip(rows, texts, result["scores"].numpy()):
            translations[row], scores[row] = text.decode("utf-8"), score
    return translations, scores


def _padded(ids, width):
    return np.pad(ids, [(0, 0), (0, width - ids.shape[1])])


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
        check_output(parser, args.output, args.overwrite)
    return args


def check_output(parser, output, overwrite):
    """Refuses (as a usage error) an --output that exists without --overwrite, or that cannot
    be written."""
    output = pathlib.Path(output)
    if output.exists() and not overwrite:
        parser.error(f"--output {output} exists; pass --overwrite to replace it")
    if not output.parent.is_dir() or not os.access(output.parent, os.W_OK):
        parser.error(f"--output {output}: {output.parent} is not a writable directory")


def replace_atomically(output, write):
    """Calls write(path) on a hidden file beside `output`, then renames it over `output`: never
    half a file, nothing else touched."""
    output = pathlib.Path(output)
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    try:
        write(partial)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


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
    except (InputError, loading.ModelDirError, config.ConfigError, data.CorpusError,
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
        replace_atomically(args.output, lambda path: path.write_bytes(text.encode("utf-8")))
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
