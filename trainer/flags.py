"""kt-train's flags: the parser, the mapping of the flags onto a `RunConfig` and a `Trainer`,
and the Trainer's error messages written back in flag names. kt-train (task.py) and kt-demo,
which passes kt-train's flags on, both use it."""

import argparse
import functools
import re

from keras_transformer import cli, data
from keras_transformer.cli import at_least, renamed
from keras_transformer.data import source_flags
from keras_transformer.errors import UserError
from keras_transformer.hparams import decoding_bound_problem
from keras_transformer.model_dir import config, layout
from keras_transformer.runtime import devices
from keras_transformer.trainer import callbacks, runner

# The flags that set no field of the configuration: the Trainer's own arguments, and --verbose.
TRAINER_FLAGS = ("model_dir", "vocab", "build_vocab_size", "download", "log_every",
                 "max_minutes", "verbose")


# kt-train --help's text.
USAGE = """Train a Transformer: `kt-train` or `python -m keras_transformer.trainer`.

    kt-train --model_dir runs/small --hparams transformer_small --data bible_en_es \\
        --batch_tokens 4096 --train_steps 20000

Steps count optimizer updates; with --accumulate_steps K each update is K micro-batches of
--batch_tokens.

CoVe's MT-LSTM trains the same way over fixed GloVe vectors of the source words:

    kt-train --model_dir runs/mt_lstm --hparams cove_mt_lstm --data bible_en_es \
        --glove glove.6B.50d.txt.bz2 --glove_words 100000 --batch_tokens 4096

The run's configuration goes to model_dir/config.json, the vocabulary to model_dir/vocab.model
(vocab.marian when fine-tuning an imported model),
checkpoints to model_dir/checkpoints/, TensorBoard logs to model_dir/logs/. Running the same
command again resumes from the last checkpoint with the same step count and learning rate;
`--model_dir` alone is enough to resume, and flags that contradict the saved model or data are
refused.
"""


def argument_parser():
    parser = argparse.ArgumentParser(
        prog="kt-train", description=USAGE.split("\n\n")[0],
        epilog=USAGE.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    # Every flag defaults to None: a resumed run takes the saved value, a new run the default.
    defaults = flag_defaults()
    add("--model_dir", required=True, help="where the run's files go (and are resumed from)")
    add("--hparams", dest="hparams_name",
        help=f"named hyper-parameter set (default {defaults.hparams_name}); "
             f"python -m keras_transformer.hparams lists them")
    add("--hparams_override", help='comma-separated overrides, e.g. "dropout=0.2,num_layers=4"')
    source_flags.add_flags(parser, config.DataConfig.corpus, unset_defaults=True, several=True)
    add("--vocab", help="SentencePiece model to use; built here from the training data if the "
                        "file does not exist (default: model_dir/vocab.model), or an imported "
                        "model's vocab.marian")
    add("--vocab_size", dest="build_vocab_size", type=at_least(260),
        help="ids in a vocabulary built by this run (default 8000, or the paper's 16000 for a "
             "treebank; the paper's WMT en-de: ~37000)")
    add("--glove", help="an mt_lstm run (--hparams cove_mt_lstm): the GloVe text file (.txt, .gz, "
                        ".bz2) of the source words and their fixed vectors; the words go to "
                        f"model_dir/{layout.WORDS_FILE}, the vectors into the checkpoints")
    add("--glove_words", type=at_least(1),
        help="with --glove: keep its first (most frequent) N words only (default: all)")
    add("--init_from",
        help="fine-tune: start this new run from another run's weights and vocabulary (its "
             "model_dir, for its default checkpoint, or a checkpoint directory); hparams default "
             "to its, and must describe the same model")
    add("--init_optimizer", action=argparse.BooleanOptionalAction, default=None,
        help="with --init_from: also take its optimizer state and step, continuing its "
             "learning-rate schedule (default: a fresh optimizer and schedule)")
    add("--subword_alpha", type=float,
        help="subword regularization: each training pair's pieces drawn anew whenever it is "
             "read (a unigram vocabulary: SentencePiece's sampling with this smoothing, e.g. "
             "0.1; BPE: BPE-dropout at this rate, e.g. 0.1), reproducible per --seed; dev, "
             "kt-translate and exports read one segmentation (default 0: off)")
    add("--update_vocab", action=argparse.BooleanOptionalAction, default=None,
        help="with --init_from: train with a new vocabulary (--vocab, or one built from --data "
             "with --vocab_size): the embedding and output rows of the pieces both vocabularies "
             "hold are the other run's, new pieces start as a fresh model's, the others are "
             "dropped; model_dir/vocab_update.json records the mapping")
    add("--max_pair_length", type=at_least(2),
        help=f"longest pair in tokens (default {defaults.max_pair_length})")
    add("--max_length", type=renamed("--max_pair_length", "the longest training pair"),
        help=argparse.SUPPRESS)
    add("--overlong", choices=("drop", "truncate"), help="longer pairs (default drop)")
    add("--markup_rate", type=at_least(0.0, float),
        help="share of the training pairs shown with their markup as placeholder tokens, so "
             "that kt-translate --markup places tags, placeholders, URLs and numbers where they "
             f"belong (below 1; e.g. {data.markup_pairs.DEFAULT_RATE}; default 0: none); a "
             "vocabulary the run builds keeps the tokens whole")
    add("--batch_tokens", type=at_least(1),
        help=f"padded tokens per batch, each side, all replicas (default {defaults.batch_tokens})")
    add("--accumulate_steps", type=at_least(1),
        help=f"micro-batches of --batch_tokens per optimizer update, their gradients added up "
             f"token-exactly: an update sees accumulate_steps x batch_tokens tokens in the memory "
             f"of one micro-batch (default {defaults.accumulate_steps}; e.g. 25000 tokens on one "
             f"GPU: --batch_tokens 6250 --accumulate_steps 4)")
    add("--bucket_growth", type=at_least(1.0, float),
        help=f"growth factor (> 1) of the length buckets' boundaries, to which pairs are padded "
             f"(default {data.BUCKET_GROWTH}: {len(data.bucket_boundaries(256))} buckets up to "
             f"256 tokens; with --jit_compile {data.XLA_BUCKET_GROWTH}: "
             f"{len(data.bucket_boundaries(256, step=data.XLA_BUCKET_GROWTH))}, as XLA compiles "
             f"the step once for each)")
    add("--train_steps", type=at_least(1),
        help="total training steps (default: the hparams set's)")
    add("--eval_every", type=at_least(1),
        help=f"steps between dev evaluations (default {defaults.eval_every})")
    add("--eval_sentences", type=at_least(0),
        help=f"dev sentences translated for BLEU, spread evenly over the dev split (default "
             f"{defaults.eval_sentences}; 0: none)")
    add("--eval_beam_size", type=cli.checked(int, functools.partial(decoding_bound_problem,
                                                                     "beam_size")),
        help=f"beam size of the dev BLEU (default {defaults.eval_beam_size}: greedy); the "
             f"rest decodes as kt-translate decodes the model")
    add("--keep_best", metavar="{" + ",".join(sorted(config.KEEP_BEST_METRICS)) + "}[:CORPUS]",
        help=f"keep the checkpoint with the best dev BLEU, chrF, loss or (a run on a treebank) "
             f"EVALB F1 in model_dir/"
             f"{layout.BEST_DIR}/ (--keep_checkpoints never deletes it; kt-translate "
             f"--checkpoint best loads it); with several --data, the mean of the corpora's, "
             f"or one corpus's: bleu:CORPUS (CORPUS as its --data gives it)")
    add("--early_stopping", type=at_least(0),
        help="stop after this many evaluations without a better --keep_best metric (default "
             "0: never)")
    add("--keep_checkpoints", type=at_least(0),
        help=f"checkpoints kept (default {defaults.keep_checkpoints}; 0: all)")
    add("--checkpoint_every_steps", type=at_least(0),
        help=f"steps between checkpoints (default {defaults.checkpoint_every_steps}; 0: off)")
    add("--checkpoint_every_minutes", type=at_least(0, float),
        help=f"minutes between checkpoints (default {defaults.checkpoint_every_minutes}; 0: off)")
    add("--average_last", type=at_least(0),
        help=f"at the end, average the newest N checkpoints (paper 6.1: 5 for base models) into "
             f"model_dir/{layout.AVERAGED_DIR}/, which kt-translate and kt-export then load "
             f"(default {defaults.average_last}: none)")
    add("--ema_decay", type=at_least(0.0, float),
        help="keep an exponential moving average of the weights with this decay (e.g. 0.9999; "
             "default 0: none); dev evaluation, kt-translate and kt-export then use the averaged "
             "weights (their --no-ema: the trained ones)")
    add("--mixed_precision", choices=sorted(config.PRECISIONS),
        help="compute dtype policy (default none: float32); auto: on GPUs by compute "
             "capability (mixed_bfloat16 from Ampere on, mixed_float16 on Volta and Turing), on "
             "a CPU by measuring bfloat16 against float32 matmuls at the model's widths (about "
             "a second, cached per machine): mixed_bfloat16 where it ran at least "
             f"{devices.CPU_SPEEDUP_NEEDED:g}x faster")
    add("--jit_compile", action=argparse.BooleanOptionalAction, default=None,
        help="compile the train step with XLA")
    add("--seed", type=int, help=f"random seed (default {defaults.seed})")
    add("--deterministic", action=argparse.BooleanOptionalAction, default=None,
        help="same batches and dropout on every run, also across a resume (slower)")
    add("--log_every", type=at_least(1), default=100,
        help="steps between progress lines (default 100)")
    add("--max_minutes", type=at_least(0, float),
        help="stop (with a checkpoint and an evaluation) after this many minutes of training; "
             "running the command again continues")
    cli.add_verbose_flag(parser)
    return parser


def parse_args(argv=None):
    return argument_parser().parse_args(argv)


def flag_defaults():
    """The defaults of the configuration's fields, by flag name (the help texts quote them)."""
    run = config.RunConfig()
    return argparse.Namespace(**{flag: run.get(*key) for flag, key in config.FLAT_NAMES.items()})


def changes_of(args):
    """{(section, field): value} of the configuration flags the user set."""
    return {config.FLAT_NAMES[name]: value for name, value in vars(args).items()
            if value is not None and name in config.FLAT_NAMES}


def trainer_of(args):
    """The `runner.Trainer` the flags describe (`Trainer.with_changes`)."""
    return runner.Trainer.with_changes(
        args.model_dir, changes_of(args), vocab=args.vocab,
        build_vocab_size=args.build_vocab_size, download=bool(args.download),
        log_every=args.log_every, max_minutes=args.max_minutes)


def flag_names(parser):
    """{a configuration field "section.field", or a Trainer argument: its flag}."""
    names = {}
    for action in parser._actions:
        flag = next((option for option in action.option_strings if option.startswith("--")),
                    None)
        if flag and action.dest in config.FLAT_NAMES:
            names[".".join(config.FLAT_NAMES[action.dest])] = flag
        elif flag and action.dest in TRAINER_FLAGS:
            names[action.dest] = flag
    return names


def in_flags(message, names):
    """An error message of the Trainer with its field names written as kt-train's flags."""
    fields = sorted((name for name in names if "." in name), key=len, reverse=True)
    message = re.sub(r"\b(" + "|".join(map(re.escape, fields)) + r")\b",
                     lambda match: names[match.group(1)], message)
    first, _, rest = message.partition(" ")  # a Trainer argument opens the messages naming one
    return f"{names.get(first, first)} {rest}" if rest else message


# What kt-train reports as one error line: what the user gave, and a training that cannot go on.
ERRORS = (UserError, callbacks.TrainingError)
