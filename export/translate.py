"""kt-translate: translate lines of text with a trained model_dir (beam search, paper 6.1).

    kt-translate --model_dir runs/demo < input.en > output.es
    kt-translate --model_dir runs/demo --input dev.en --reference dev.es
    kt-translate --model_dir runs/demo --n_best 4 < input.en > nbest.jsonl
    kt-translate --model_dir runs/demo --sampling_temperature 1 --seed 7 < mono.en > sampled.es
    kt-translate --model_dir runs/demo --input dev.en --target_prefix prefixes.es
    kt-translate --model_dir runs/markup --markup < strings.en > strings.es
    kt-translate --model_dir runs/demo --documents --input report.en --output report.es
    kt-translate --model_dir runs/demo --glossary terms.tsv < input.en > output.es
    kt-translate --model_dir runs/demo --checks --alignments < input.en > checked.jsonl
    kt-translate --model_dir runs/demo --min_confidence 0.4 < input.en > output.es
    kt-translate --engine ctranslate2 --ctranslate2_dir ct2/demo --input dev.en
    kt-translate --model_dir runs/wmt --data wmt_t2t_translate/de-en --source_lang en \
        --target_lang de --split test --output newstest2014.de

Lines are translated in batches of similar length (less padding, fewer decoding steps) and
written in input order, one translation a line. With --reference, or with --data (a corpus
split's sources, scored against its targets), sacrebleu's BLEU and chrF and their signatures go
to stderr.
"""

import json
import signal
import sys
import threading
import time

from keras_transformer import cli, data
from keras_transformer.data import glossary, markup
from keras_transformer.errors import UserError
from keras_transformer.export import checks, translate_flags
from keras_transformer.export.ctranslate2_engine import PATIENCE, Ctranslate2Translator
from keras_transformer.export.documents import translate_document
from keras_transformer.export.flags import (
    beam_description,
    checkpoints,
    decoding_from_flags,
    translator_from_flags,
)
from keras_transformer.export.lines import (
    InputError,
    PrefixError,
    Sampling,
    n_best_lines,
    print_scores,
    read_lines,
)
from keras_transformer.export.markup_lines import markup_n_best_lines, masked_lines, unmasked
from keras_transformer.model_dir import ConfigError, RunConfig


def split_lines(source, split):
    """A corpus split's sources (bytes) and references (str), in order.

    Raises:
        data.CorpusError: the source has no such split, or it cannot be read.
    """
    pairs = list(source.pairs(split).as_numpy_iterator())
    return [s for s, _ in pairs], [t.decode("utf-8", errors="replace") for _, t in pairs]


def parse_args(argv=None):
    parser = translate_flags.argument_parser(__doc__.split("\n\n")[0])
    return translate_flags.checked(parser, parser.parse_args(argv))


def input_name(args):
    """What the sources were read from, as messages name it."""
    if args.data:
        return f"--data {args.data} --split {args.split or 'test'}"
    return args.input or "<stdin>"


def one_line(text):
    """One translation a line, even if the model produced a line break (byte-fallback pieces)."""
    return " ".join(text.splitlines())


# Lines translated, then written, at a time: the output grows in input order as it is made,
# and an interrupted run keeps what it translated. Many, so that batches sorted by length stay
# as full as over the whole input.
CHUNK_LINES = 4096
PROGRESS_SECONDS = 10  # between progress lines on stderr


def format_n_best(hypotheses, form, first_line=1):
    """The text of n-best lists (a list of `Hypothesis` lists, one per input line, the first
    being line `first_line`) in `form`: "jsonl" or "moses" (see --n_best_format)."""
    if form == "moses":  # Moses numbers sentences from 0
        return "".join(f"{index} ||| {one_line(h.text)} ||| LogProb= {h.log_prob:.6f} ||| "
                       f"{h.score:.6f}\n" for index, best in enumerate(hypotheses, first_line - 1)
                       for h in best)
    return "".join(json.dumps({"line": number, "hypotheses": [
        {"text": h.text, "score": round(h.score, 6), "log_prob": round(h.log_prob, 6)}
        for h in best]}, ensure_ascii=False) + "\n"
        for number, best in enumerate(hypotheses, first_line))


def engine_from_flags(args):
    """(the translator the flags name, the training run's `RunConfig`, what is
    translating as the summary line says it): a `Translator` over the model_dir's checkpoints,
    or a `Ctranslate2Translator` over an export (its run and, where neither flags nor
    --decode_preset say otherwise, its decoding settings from its export.json)."""
    if args.engine == "ctranslate2":
        translator = Ctranslate2Translator(args.ctranslate2_dir, decoding_from_flags(args),
                                           patience=args.ctranslate2_patience)
        return (translator, RunConfig.from_dict(translator.recorded["run"],
                                                f"{translator.directory}'s export.json"),
                f"CTranslate2 {translator.directory} ({translator.recorded['quantization']})")
    translator, members = translator_from_flags(args, args.batch_size)
    return translator, members[0].run, checkpoints(members)


def check_engine(args, translator, run):
    """Refuses flags the engine's beam or vocabulary cannot honour."""
    beam_size = translator.decoding.beam_size
    if args.n_best and args.n_best > beam_size and not args.sampling_temperature:
        raise ConfigError(f"--n_best {args.n_best} is more than --beam_size {beam_size}: "
                          f"the beam holds only {beam_size} hypotheses")
    if args.sampling_top_k > run.model.vocab_size:
        raise ConfigError(f"--sampling_top_k {args.sampling_top_k} is more than the "
                          f"vocabulary's {run.model.vocab_size} ids")
    if args.target_prefix and getattr(translator, "tree_leaves", None):
        raise ConfigError(f"--target_prefix: {args.model_dir} is a parser, decoded among "
                          f"well-formed trees, which a prefix could leave no way to finish; add "
                          f"--no-tree_constraint to force it")
    if args.min_confidence is not None and translator.calibration is None:
        raise ConfigError(f"--min_confidence: {args.model_dir} has no calibration; fit one with "
                          f"kt-calibrate --model_dir {args.model_dir}")
    if args.markup:
        if getattr(translator, "tree_leaves", None):
            raise ConfigError(f"--markup: {args.model_dir} is a parser; its outputs are trees")
        translator.vocabulary.markup_ids()  # refuses a vocabulary that cuts the tokens


def read_inputs(args, run):
    """(the source lines, bytes; their references, str, or None; the target prefixes, bytes,
    or None) the flags name.

    Raises:
        InputError: the references or prefixes do not pair up with the lines.
    """
    references = None
    if args.data:
        source = data.get_source(
            args.data, args.source_lang or run.data.source_lang,
            args.target_lang or run.data.target_lang, args.tfds_data_dir, args.download,
            args.invalid_utf8)
        lines, references = split_lines(source, args.split or "test")
    else:
        # A document keeps its line ends as they are, "\r\n" too, as translate_document does.
        lines = read_lines(args.input, "--input", "kt-translate", keep_returns=args.documents)
    if args.reference:
        references = [line.decode("utf-8", errors="replace")
                      for line in read_lines(args.reference, "--reference", "kt-translate")]
        if len(references) != len(lines):
            raise InputError(f"--reference {args.reference} has {len(references)} lines but "
                             f"{args.input or '<stdin>'} has {len(lines)}")
    prefixes = None
    if args.target_prefix:
        prefixes = read_lines(args.target_prefix, "--target_prefix", "kt-translate")
        if len(prefixes) != len(lines):
            raise InputError(f"--target_prefix {args.target_prefix} has {len(prefixes)} lines "
                             f"but {input_name(args)} has {len(lines)}")
    return lines, references, prefixes


def summary(args, translator, used, count, seconds):
    """The line that says what translated how many sentences how fast."""
    search = (f"sampling at temperature {args.sampling_temperature}, top-k "
              f"{args.sampling_top_k or 'all'}, --seed {args.seed}" if args.sampling_temperature
              else beam_description(translator))
    if args.engine == "ctranslate2" and translator.patience != PATIENCE:
        search += f", patience {translator.patience}"
    return (f"translated {count} sentence(s) in {seconds:.1f} s "
            f"({count / max(seconds, 1e-9):.1f}/s) with {used}, {search}")


def write_error(args, error, lines_out=0):
    """The stderr line of an OSError writing --output (a full disk, a directory given as
    --output, a closed pipe); `lines_out`: lines already on stdout before it."""
    print(f"kt-translate: error: cannot write --output {args.output or '<stdout>'}: "
          f"{error.strerror or error}; " + (
              f"the first {lines_out} line(s) went out before it" if lines_out and not args.output
              else "nothing was written"), file=sys.stderr)


def translate_whole_document(args, translator, used, lines):
    """--documents: the input `lines` (bytes) as one document, its translation to --output, a
    summary line with the sentence counts to stderr; returns the exit code."""
    start = time.perf_counter()
    text = b"\n".join(lines).decode("utf-8", errors="replace")
    sampling = args.sampling_temperature and Sampling(
        args.sampling_temperature, args.sampling_top_k, args.seed)
    try:
        translated, split = translate_document(translator, text, batch_size=args.batch_size,
                                               sampling=sampling, keep_markup=args.markup)
    except markup.MarkupError as error:
        print(f"kt-translate: error: {input_name(args)}: {error}", file=sys.stderr)
        return 2
    output = None
    try:
        output = cli.PieceWriter(args.output)
        output.write(translated + "\n" if text else "")
        output.finish()
    except OSError as error:
        if output:
            output.discard()
        write_error(args, error)
        return 2
    count = int(split.sentences[0])
    print(summary(args, translator, used, count, time.perf_counter() - start) +
          f"; of them {int(split.split_at_clauses[0])} split after clause marks, "
          f"{int(split.split_into_windows[0])} clause(s) into windows of words", file=sys.stderr)
    return 0


def main(argv=None):
    """kt-translate. Ctrl-C or SIGTERM stop it with exit code 130 and a line saying what was
    written (the lines translated so far, in input order: the output is written CHUNK_LINES
    lines at a time), not a traceback."""
    args = parse_args(argv)
    handled = threading.current_thread() is threading.main_thread()  # signals reach only it
    previous = signal.signal(signal.SIGTERM, _interrupt) if handled else None
    try:
        return _main(args)
    except KeyboardInterrupt:  # before translating (while translating, _main keeps the lines)
        print(f"kt-translate: interrupted; nothing was written to "
              f"{args.output or '<stdout>'}", file=sys.stderr)
        return 130
    finally:
        if handled:
            signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _main(args):
    try:
        translator, run, used = engine_from_flags(args)
        check_engine(args, translator, run)
        lines, references, prefixes = read_inputs(args, run)
        masked = (masked_lines(lines, input_name(args)) if args.markup and not args.documents
                  else None)
        terms = glossary.Glossary.load(args.glossary) if args.glossary else None
    except (UserError, OSError) as error:
        print(f"kt-translate: error: {error}", file=sys.stderr)
        return 2
    if args.documents:
        return translate_whole_document(args, translator, used, lines)
    if args.checks or args.alignments or args.min_confidence is not None:
        checks.warn_if_stale(translator, used)
    start = time.perf_counter()
    try:
        output = cli.PieceWriter(args.output)
    except OSError as error:
        write_error(args, error)
        return 2
    translations = []  # each line's, as its part is written
    try:
        untranslated = write_in_parts(args, translator, (lines, masked, prefixes, terms),
                                      output, translations)
        output.finish()
    except PrefixError as error:
        output.discard()
        print(f"kt-translate: error: --target_prefix {args.target_prefix}: {error}",
              file=sys.stderr)
        return 2
    except UserError as error:  # e.g. glossary terms too long for a line's translation
        output.discard()
        print(f"kt-translate: error: {input_name(args)}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # SIGTERM too (main): what is translated is kept
        (output.finish if translations else output.discard)()
        print("kt-translate: interrupted; " + (
            f"the first {len(translations)} of {len(lines)} line(s) are translated in "
            if translations else "nothing was written to ") + (args.output or "<stdout>"),
            file=sys.stderr)
        return 130
    except OSError as error:  # a full disk, a closed pipe
        output.discard()
        write_error(args, error, len(translations))
        return 2
    if args.min_confidence is not None:
        print(f"kt-translate: {untranslated} of {len(lines)} line(s) left untranslated "
              f"(confidence below {args.min_confidence})", file=sys.stderr)
    print(summary(args, translator, used, len(lines), time.perf_counter() - start),
          file=sys.stderr)
    if references is not None:
        print_scores(translations, references, sys.stderr)
    return 0


def write_in_parts(args, translator, inputs, output, translations):
    """Translates the input CHUNK_LINES lines at a time, writing each part's output to
    `output` (a `cli.PieceWriter`) and appending its lines' translations to `translations`;
    returns how many lines --min_confidence left untranslated.

    Args:
        inputs: (the lines, their `markup.Masked` or None, their target prefixes or None,
            the `data.glossary.Glossary` or None: each part's terms are looked for as it
            comes, so a large input with a large glossary writes as it goes too).
    """
    lines, masked, prefixes, terms = inputs
    untranslated = 0
    for first in range(0, len(lines), CHUNK_LINES):
        part = slice(first, first + CHUNK_LINES)
        hypotheses = chunk_hypotheses(args, translator, lines[part], masked and masked[part],
                                      prefixes and prefixes[part],
                                      part_terms(terms, lines, part), first + 1)
        text, done, left = chunk_output(args, translator, lines[part],
                                        masked and masked[part], hypotheses, first + 1)
        output.write(text)
        translations += done
        untranslated += left
    return untranslated


def part_terms(terms, lines, part):
    """The glossary `terms`' (None: no glossary) required target terms of each line of
    `lines[part]`, said on stderr when looking took longer than a progress line's interval."""
    if terms is None:
        return None
    start = time.perf_counter()
    found = terms.targets_of(lines[part])
    seconds = time.perf_counter() - start
    if seconds > PROGRESS_SECONDS:
        print(f"kt-translate: glossary terms of lines {part.start + 1}-"
              f"{min(part.stop, len(lines))} looked for in {seconds:.0f} s", file=sys.stderr,
              flush=True)
    return found


def chunk_hypotheses(args, translator, lines, masked, prefixes, terms, first_line):
    """Each of `lines`' hypotheses (a list, best first): one part of the input, whose first
    line is line `first_line`, with its part of the markup, prefixes or glossary terms."""
    sampling = args.sampling_temperature and Sampling(
        args.sampling_temperature, args.sampling_top_k, args.seed)
    if masked:
        return unmasked(markup_n_best_lines(
            translator, masked, args.n_best or 1, args.batch_size, progress_every=PROGRESS_SECONDS,
            sampling=sampling, first_line=first_line), masked)
    return n_best_lines(translator, lines, args.n_best or 1, args.batch_size,
                        progress_every=PROGRESS_SECONDS, prefixes=prefixes, sampling=sampling,
                        glossary_terms=terms, first_line=first_line)


def chunk_output(args, translator, lines, masked, hypotheses, first_line):
    """(the output text of one part of the input, as the flags ask; its lines' translations;
    how many of them --min_confidence left untranslated)."""
    translations = [one_line(best[0].text) for best in hypotheses]
    if args.checks or args.alignments or args.min_confidence is not None:
        checked = checks.check_lines(translator, [line.text for line in masked] if masked
                                     else lines, [best[0] for best in hypotheses],
                                     args.batch_size)
        text, untranslated = checks.checked_text(
            lines, translations, hypotheses, checked, as_json=args.checks,
            alignments=args.alignments, min_confidence=args.min_confidence,
            first_line=first_line)
        return text, translations, untranslated
    if args.n_best:
        return format_n_best(hypotheses, args.n_best_format, first_line), translations, 0
    return "".join(f"{best[0].score:.4f}\t{line}\n" if args.scores else f"{line}\n"
                   for line, best in zip(translations, hypotheses)), translations, 0


if __name__ == "__main__":
    sys.exit(main())
