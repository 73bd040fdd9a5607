"""kt-translate's flags: the parser, and the refusals of flags that contradict each other or
the engine (export/translate.py runs the command)."""

import argparse
import random

from keras_transformer import cli, data
from keras_transformer.cli import at_least
from keras_transformer.data import source_flags
from keras_transformer.export import checks
from keras_transformer.export.constrained import combination_error
from keras_transformer.export.ctranslate2_engine import PATIENCE
from keras_transformer.export.flags import add_batch_size_flag, add_decoding_flags, with_batch_size


def positive_float(text):
    value = at_least(0.0, float)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0 (beam search is the default)")
    return value


def seed(text):
    value = at_least(0)(text)
    if value >= 2**31:
        raise argparse.ArgumentTypeError(f"must be below 2**31, got {value}")
    return value


def argument_parser(description):
    """kt-translate's parser (`description`: its --help's first line)."""
    parser = argparse.ArgumentParser(
        prog="kt-translate", description=description,
        epilog="Example: kt-translate --model_dir runs/demo --input dev.en --reference dev.es")
    add_decoding_flags(parser, model_dir_required=False)
    parser.add_argument("--engine", choices=("tensorflow", "ctranslate2"), default="tensorflow",
                        help="tensorflow (the model_dir's checkpoint; default) or ctranslate2 "
                             "(an export of kt-export --format ctranslate2, --ctranslate2_dir)")
    parser.add_argument("--ctranslate2_dir",
                        help="--engine ctranslate2: the export (its directory of versions, or "
                             "one version)")
    parser.add_argument("--ctranslate2_patience", type=at_least(1.0, float),
                        help=f"--engine ctranslate2: its beam stops once beam_size x this many "
                             f"hypotheses have ended (default {PATIENCE}, CTranslate2's; 2 "
                             "brought a trained model's results closer to --engine "
                             "tensorflow's, see docs/serving.md)")
    parser.add_argument("--input", help="file of sentences, one a line (default: stdin)")
    parser.add_argument("--output", help="file for the translations (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run (Ctrl-C, SIGTERM) into its --output: "
                             "the same input and flags; the lines it translated are not "
                             "translated again (its state is in OUTPUT.kt-resume.json)")
    parser.add_argument("--reference", help="reference translations, one a line: print BLEU "
                                            "and chrF (sacrebleu) to stderr")
    corpus = parser.add_argument_group(
        "a corpus split instead of --input and --reference (e.g. a test set from TFDS)")
    source_flags.add_flags(corpus, default=None)
    corpus.add_argument("--split", choices=data.sources.SPLITS,
                        help="which split of --data (default test); the languages default to "
                             "the model's")
    add_batch_size_flag(parser, "sentences translated")
    parser.add_argument("--scores", action="store_true",
                        help="write 'score<TAB>translation' lines")
    parser.add_argument("--n_best", type=at_least(1),
                        help="write the N best hypotheses of each beam (N <= --beam_size) with "
                             "their scores, in --n_best_format (with --markup, a tagged line's "
                             "are placements of one text, at most --beam_size of them)")
    parser.add_argument("--n_best_format", choices=("jsonl", "moses"), default="jsonl",
                        help="jsonl (default): a JSON object a line, {\"line\": L (1-based), "
                             "\"hypotheses\": [{\"text\", \"score\", \"log_prob\"}, ...]}; "
                             "moses: 'i ||| text ||| LogProb= log_prob ||| score' a hypothesis, "
                             "i 0-based as Moses has it")
    sampling = parser.add_argument_group(
        "sampling instead of beam search (e.g. back-translation); --n_best N draws N a line")
    sampling.add_argument("--sampling_temperature", type=positive_float,
                          help="sample each token from softmax(logits / T)")
    sampling.add_argument("--sampling_top_k", type=at_least(0), default=0,
                          help="draw only among the K most probable tokens (default 0: all)")
    sampling.add_argument("--seed", type=seed,
                          help="the same seed, input and --batch_size give the same samples "
                               "(default: a random seed, printed)")
    parser.add_argument("--target_prefix",
                        help="file of target prefixes, one a line (blank: none): each line's "
                             "translation starts with its prefix and the search goes on from "
                             "there")
    parser.add_argument("--markup", action="store_true",
                        help="keep each line's tags (attributes and all), format placeholders "
                             "({0}, %%s, {{name}}), URLs, e-mail addresses and numbers: taken "
                             "out before translating, each written back exactly once, tags "
                             "well nested, where the model puts them (a model trained with "
                             "kt-train --markup_rate places them well)")
    parser.add_argument("--glossary",
                        help="a file of 'source term<TAB>target term' lines: where a source term "
                             "occurs as whole words, its target term must appear in the "
                             "translation (the search is held to it)")
    parser.add_argument("--documents", action="store_true",
                        help="the input is one document: cut into sentences, each translated, "
                             "put back with every line break and space between them; a "
                             "sentence longer than --max_input_length is split after its "
                             "clause marks or into windows of words, never cut (a summary on "
                             "stderr says how many)")
    parser.add_argument("--html", action="store_true",
                        help="the input is a web page: its blocks' text (cut into sentences as "
                             "--documents cuts them) and alt, title and placeholder values "
                             "translated with their inline tags kept as --markup keeps them; "
                             "<script>, <style>, <pre>, <code>, <textarea> and elements with "
                             "translate=\"no\" or class notranslate left byte for byte; <html "
                             "lang> set to the model's target language")
    parser.add_argument("--html_attributes", action=argparse.BooleanOptionalAction,
                        default=True, help="--html: translate alt, title and placeholder "
                                           "values too (default)")
    checks.add_flags(parser)
    return parser


def checked(parser, args):
    """`args` parsed by `parser`, refused (parser.error) where flags contradict each other or
    the engine, with --batch_size (the device's default) and --seed (for sampling) set."""
    check_engine_flags(parser, args)
    check_mode_flags(parser, args)
    if checks_refusal(args):
        parser.error(checks_refusal(args))
    if args.resume and (args.overwrite or args.documents or args.html or not args.output):
        parser.error("--resume continues the lines of an interrupted --output: " + (
            "it needs --output" if not args.output else "drop " + (
                "--overwrite" if args.overwrite else "--documents" if args.documents
                else "--html")))
    if args.output:
        cli.check_output(parser, args.output, args.overwrite or args.resume)
    return with_batch_size(args)


def check_engine_flags(parser, args):
    """Refuses (parser.error) flags the chosen engine cannot honour."""
    if args.engine == "ctranslate2":
        if not args.ctranslate2_dir:
            parser.error("--engine ctranslate2 needs --ctranslate2_dir")
        tensorflow_only = [flag for flag, given in (
            ("--model_dir", args.model_dir), ("--checkpoint", args.checkpoint),
            ("--ensemble", args.ensemble), ("--ema/--no-ema", args.ema is not None),
            ("--dtype", args.dtype != "auto"),
            ("--sampling_temperature", args.sampling_temperature),
            ("--target_prefix", args.target_prefix), ("--markup", args.markup),
            ("--glossary", args.glossary),
            ("--tree_constraint", args.tree_constraint)) if given]
        if tensorflow_only:
            parser.error(f"{tensorflow_only[0]} is for --engine tensorflow; the CTranslate2 "
                         f"export has its own weights and does beam search only")
    elif args.ctranslate2_dir or args.ctranslate2_patience:
        flag = "--ctranslate2_dir" if args.ctranslate2_dir else "--ctranslate2_patience"
        parser.error(f"{flag} needs --engine ctranslate2")
    elif not args.model_dir:
        parser.error("the following arguments are required: --model_dir")


def checks_refusal(args):
    """The first flag the checks (--checks, --alignments, --min_confidence) cannot go with, as
    an error message, or None."""
    if not (args.checks or args.alignments or args.min_confidence is not None):
        return None
    given = "--checks" if args.checks else "--alignments" if args.alignments else (
        "--min_confidence")
    for flag, present in (("--n_best", args.n_best), ("--documents", args.documents),
                          ("--html", args.html),
                          ("--engine ctranslate2", args.engine == "ctranslate2"),
                          ("--scores", args.scores and args.checks),
                          ("--markup", args.markup and args.alignments)):
        if present:
            return f"{given} cannot go with {flag}"
    return None


def check_mode_flags(parser, args):
    """Refuses (parser.error) flags that contradict each other; draws a --seed for sampling
    without one."""
    if not args.sampling_temperature and (args.seed is not None or args.sampling_top_k):
        parser.error("--seed and --sampling_top_k need --sampling_temperature")
    args.seed_drawn = bool(args.sampling_temperature and args.seed is None)
    if args.seed_drawn:  # --resume takes the interrupted run's instead
        args.seed = random.randrange(2**31)
    refusal = combination_error({"--markup": args.markup, "--glossary": args.glossary,
                                 "--target_prefix": args.target_prefix})
    if refusal:
        parser.error(refusal)
    if args.html and (args.documents or args.markup):
        parser.error(f"--html reads the page's markup and sentences itself: drop "
                     f"{'--documents' if args.documents else '--markup'}")
    if not args.html_attributes and not args.html:
        parser.error("--no-html_attributes is for --html")
    if args.documents or args.html:
        mode = "--documents writes the translated document" if args.documents else (
            "--html writes the translated page")
        line_flags = [flag for flag, given in (
            ("--n_best", args.n_best), ("--scores", args.scores), ("--reference", args.reference),
            ("--data", args.data), ("--target_prefix", args.target_prefix),
            ("--glossary", args.glossary),
            ("--engine ctranslate2", args.engine == "ctranslate2")) if given]
        if line_flags:
            parser.error(f"{mode} alone: drop {line_flags[0]}")
    if args.n_best and args.scores:
        parser.error("--n_best writes the scores already: drop --scores")
    if args.data and (args.input or args.reference):
        parser.error("--data reads the sources and references of --split: drop --input and "
                     "--reference")
    corpus_flags = [flag for flag in ("split", "source_lang", "target_lang", "tfds_data_dir",
                                      "download") if getattr(args, flag)]
    if corpus_flags and not args.data:
        parser.error(f"--{corpus_flags[0]} needs --data")
