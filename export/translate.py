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

import sys
import time

from keras_transformer import cli, data
from keras_transformer.data import glossary
from keras_transformer.errors import UserError
from keras_transformer.export import checks, resume, translate_flags
from keras_transformer.export.ctranslate2_engine import PATIENCE, Ctranslate2Translator
from keras_transformer.export.document_stream import translate_stream
from keras_transformer.export.flags import (
    beam_description,
    checkpoints,
    decoding_from_flags,
    translator_from_flags,
)
from keras_transformer.export.html_pages import translate_page
from keras_transformer.export.lines import (
    InputError,
    PrefixError,
    Sampling,
    open_input,
    print_scores,
    read_bytes,
    read_lines,
)
from keras_transformer.export.markup_lines import masked_lines
from keras_transformer.export.translate_parts import PROGRESS_SECONDS, write_in_parts
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
    if args.markup or args.html:
        flag = "--markup" if args.markup else "--html"
        if getattr(translator, "tree_leaves", None):
            raise ConfigError(f"{flag}: {args.model_dir} is a parser; its outputs are trees")
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
    elif args.html:  # the page whole, one "line"
        lines = [read_bytes(args.input, "--input")]
    elif args.documents:  # read as it is translated (translate_whole_document)
        with open_input(args.input, "--input"):
            lines = []
    else:
        lines = read_lines(args.input, "--input", "kt-translate")
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
    reason = getattr(translator, "dtype_reason", None)  # --dtype auto's choice, and why
    return (f"translated {count} sentence(s) in {seconds:.1f} s "
            f"({count / max(seconds, 1e-9):.1f}/s) with {used}, {search}"
            f"{f'; {reason}' if reason else ''}")


def write_error(args, error, lines_out=0):
    """The stderr line of an OSError writing --output (a full disk, a directory given as
    --output, a closed pipe); `lines_out`: lines already on stdout before it."""
    print(f"kt-translate: error: cannot write --output {args.output or '<stdout>'}: "
          f"{error.strerror or error}; " + (
              f"the first {lines_out} line(s) went out before it" if lines_out and not args.output
              else "nothing was written"), file=sys.stderr)


def translate_whole_document(args, translator, used):
    """--documents: the input as one document, read, translated and written to --output a
    piece at a time (`export.document_stream`), a summary line with the sentence counts to
    stderr; returns the exit code."""
    start = time.perf_counter()
    sampling = args.sampling_temperature and Sampling(
        args.sampling_temperature, args.sampling_top_k, args.seed)
    output = None
    try:
        output = cli.PieceWriter(args.output)
        with open_input(args.input, "--input") as stream:
            counts = translate_stream(
                translator, stream, output.write, batch_size=args.batch_size,
                sampling=sampling, keep_markup=args.markup, progress_every=PROGRESS_SECONDS)
        output.finish()
    except UserError as error:  # a sentence with too many markup items, an unreadable input
        output.discard()
        print(f"kt-translate: error: {input_name(args)}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if output:
            output.discard()
        write_error(args, error)
        return 2
    except KeyboardInterrupt:  # SIGTERM too (main): the pieces written are kept
        output.finish()
        print(f"kt-translate: interrupted; the document is translated up to where "
              f"{args.output or '<stdout>'} ends", file=sys.stderr)
        return 130
    print(summary(args, translator, used, counts[0], time.perf_counter() - start) +
          f"; of them {counts[1]} split after clause marks, {counts[2]} clause(s) into "
          f"windows of words", file=sys.stderr)
    return 0


def translate_html(args, translator, engine, lines):
    """--html: the input (`lines`: [the page, bytes]), the page translated to --output
    (`export.html_pages.translate_page`), a summary line to stderr; returns the exit code.
    `engine`: (the run's `RunConfig`, what translates, as the summary says it)."""
    run, used = engine
    start = time.perf_counter()
    sampling = args.sampling_temperature and Sampling(
        args.sampling_temperature, args.sampling_top_k, args.seed)
    try:
        source = lines[0].decode("utf-8")
    except UnicodeDecodeError as error:
        print(f"kt-translate: warning: {input_name(args)}: not UTF-8 at byte {error.start}; "
              f"undecodable bytes are read as U+FFFD", file=sys.stderr)
        source = lines[0].decode("utf-8", errors="replace")
    translated, page, left = translate_page(
        translator, source, batch_size=args.batch_size, attributes=args.html_attributes,
        lang=run.data.target_lang or None, sampling=sampling)
    output = None
    try:
        output = cli.PieceWriter(args.output)
        output.write(translated)
        output.finish()
    except OSError as error:
        if output:
            output.discard()
        write_error(args, error)
        return 2
    print(summary(args, translator, used, len(page.texts), time.perf_counter() - start) +
          f"; a page of {len(page.blocks)} block(s)" +
          (f", {left} text(s) left as they were (more items than --markup takes)"
           if left else ""), file=sys.stderr)
    return 0


def main(argv=None):
    """kt-translate. Ctrl-C or SIGTERM stop it with exit code 130 and a line saying what was
    kept, not a traceback: every line translated so far, the in-order ones in the output and,
    with --output, the rest in its state file for --resume (export/resume.py)."""
    args = parse_args(argv)
    with cli.stopped_by_signals():
        try:
            return _main(args)
        except KeyboardInterrupt:  # before translating (while translating, _main keeps lines)
            print(f"kt-translate: interrupted; nothing was written to "
                  f"{args.output or '<stdout>'}", file=sys.stderr)
            return 130


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
        return translate_whole_document(args, translator, used)
    if args.html:
        return translate_html(args, translator, (run, used), lines)
    if args.checks or args.alignments or args.min_confidence is not None:
        checks.warn_if_stale(translator, used)
    start = time.perf_counter()
    try:
        progress, written = (resume.load(args, lines) if args.resume
                             else (resume.Progress(), ""))
        output = cli.PieceWriter(args.output)
        output.write(written)
    except UserError as error:
        print(f"kt-translate: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        write_error(args, error)
        return 2
    resumed_from = progress.lines_done + progress.lines_in_runs()
    translations = []  # each line's translated in this run, as its part is written
    try:
        untranslated = write_in_parts(args, translator, (lines, masked, prefixes, terms),
                                      output, translations, progress)
        output.finish()
        resume.remove(args)
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
        return keep_interrupted(args, lines, output, progress)
    except OSError as error:  # a full disk, a closed pipe
        output.discard()
        write_error(args, error, len(translations))
        return 2
    if args.min_confidence is not None:
        print(f"kt-translate: {untranslated} of {len(lines) - resumed_from} line(s) left "
              f"untranslated (confidence below {args.min_confidence})"
              + (" in this run" if resumed_from else ""), file=sys.stderr)
    print(summary(args, translator, used, len(lines) - resumed_from,
                  time.perf_counter() - start), file=sys.stderr)
    if references is not None and resumed_from:
        print("kt-translate: --resume: no scores (the lines of the interrupted run are not "
              "read again); score the whole --output with sacrebleu", file=sys.stderr)
    elif references is not None:
        print_scores(translations, references, sys.stderr)
    return 0


def keep_interrupted(args, lines, output, progress):
    """Keeps what an interrupted run translated (the output's in-order lines, and with
    --output, the rest in its state file) and says so; returns the exit code, 130."""
    if not (progress.lines_done or progress.runs):
        output.discard()
        print(f"kt-translate: interrupted; nothing was written to {args.output or '<stdout>'}",
              file=sys.stderr)
        return 130
    output.finish()
    message = (f"kt-translate: interrupted; the first {progress.lines_done} of {len(lines)} "
               f"line(s) are translated in {args.output or '<stdout>'}")
    if args.output:
        resume.save(args, lines, progress)
        state = resume.state_path(args.output)
        message += (f", {progress.lines_in_runs()} more (out of order) in {state}; add "
                    f"--resume to continue" if progress.runs
                    else f"; add --resume to continue ({state})")
    elif progress.runs:
        message += (f"; {progress.lines_in_runs()} more translated out of order are lost "
                    f"(stdout takes lines in order only; --output FILE keeps them for --resume)")
    print(message, file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
