"""The flags kt-translate, kt-score, kt-calibrate, kt-parse, kt-attention and kt-export share:
which model, and how to decode (a `DecodingConfig`)."""

import argparse
import functools

from keras_transformer import cli, model_dir
from keras_transformer.export.translator import Translator
from keras_transformer.hparams import LENGTH_NORMALIZATIONS
from keras_transformer.model_dir.decoding_config import load_members
from keras_transformer.runtime import devices
from keras_transformer.search.settings import (
    DTYPE_CHOICES,
    EXTRA_LENGTH,
    PARSING_EXTRA_LENGTH,
    PRESETS,
    DecodingConfig,
    bound_problem,
)

MODELS_PRESET = "parsing for a model trained on a treebank, else translation"


def setting(name, kind=int):
    """The argparse type of the `DecodingConfig` field `name`: a number of `kind` within the
    bound DecodingConfig checks (`settings.MINIMUMS`), refused with its words."""
    return cli.checked(kind, functools.partial(bound_problem, name))


def add_batch_size_flag(parser, what):
    """--batch_size, `what` decoded together; `with_batch_size` fills in the device's default."""
    parser.add_argument("--batch_size", type=setting("batch_size"),
                        help=f"{what} together (default: 32 on a CPU, 128 on a GPU)")


def with_batch_size(args):
    """`args` with --batch_size set: the user's, or `devices.decode_batch_size()` (as
    `model_dir.decoding_config.resolved` sets it)."""
    if args.batch_size is None:
        args.batch_size = devices.decode_batch_size()
    return args


def add_decoding_flags(parser, beam=True, preset=None, model_dir_required=True, dtype="auto"):
    """The model_dir, beam search and request-bound flags of kt-translate, kt-export,
    kt-attention, kt-parse and (without --beam_size and --tree_constraint: `beam` False)
    kt-score, and --verbose; `preset` is the default --decode_preset (None: the model's, see
    `model_dir.decoding_config.preset_of`); `dtype` the default --dtype (kt-score and
    kt-calibrate: float32, whose numbers do not move with the machine)."""
    cli.add_verbose_flag(parser)
    parser.add_argument("--model_dir", required=model_dir_required,
                        help="a kt-train model_dir")
    parser.add_argument("--checkpoint", action="append",
                        help="a checkpoint directory to use, or best: the one kt-train "
                             "--keep_best kept (default: the average of the final checkpoints "
                             "if kt-train --average_last or kt-average wrote one, else the "
                             "newest); given several times, an ensemble of them")
    parser.add_argument("--ensemble",
                        help="more model_dirs, comma-separated (each with its default "
                             "checkpoint), ensembled with --model_dir's: each step averages the "
                             "members' probabilities; all must share one vocabulary")
    parser.add_argument("--decode_preset", choices=sorted(PRESETS), default=preset,
                        help=f"translation: the model's decode_beam_size and decode_alpha "
                             f"(4 and 0.6 unless it says otherwise), input + "
                             f"{EXTRA_LENGTH} tokens (paper 6.1); parsing: beam 21, alpha 0.3, "
                             f"input + {PARSING_EXTRA_LENGTH} (paper 6.3); --beam_size, --alpha "
                             f"and --extra_length override it (default: {preset or MODELS_PRESET})")
    if beam:
        parser.add_argument("--beam_size", type=setting("beam_size"),
                            help="(default: the preset's; translation: the model's hparams "
                                 "decode_beam_size, 4 unless it says otherwise; parsing 21)")
    parser.add_argument("--alpha", type=setting("alpha", float),
                        help="length penalty exponent (default: the preset's; translation: the "
                             "model's hparams decode_alpha, 0.6 unless the run overrode it)")
    parser.add_argument("--length_normalization", choices=LENGTH_NORMALIZATIONS,
                        help="gnmt: log P / ((5 + length) / 6) ** alpha (the paper's); hf: log "
                             "P / length ** alpha with Hugging Face generate's stopping rule, "
                             "to match an imported model's outputs there (default: the model's "
                             "hparams decode_length_normalization)")
    parser.add_argument("--extra_length", type=setting("extra_length"),
                        help=f"output tokens allowed beyond the input's (default: the "
                             f"preset's, {EXTRA_LENGTH} for translation)")
    if beam:
        parser.add_argument("--tree_constraint", action=argparse.BooleanOptionalAction,
                            default=None,
                            help="for a parser (a model trained on ptb: data): decode only "
                                 "well-formed trees over the sentence's words (the default for a "
                                 "parser); --no-tree_constraint decodes as the paper did, any "
                                 "sequence, repaired when read back")
    if beam:
        parser.add_argument("--shortlist", action="store_true",
                            help="each batch's logits over its candidates alone: the target "
                                 "pieces the model_dir's shortlist.vmap (made by kt-shortlist) "
                                 "lists for its source pieces, the pieces always kept, and what "
                                 "a prefix, glossary or markup forces; a candidate's "
                                 "probability is the softmax over the candidates (not with "
                                 "--jit_compile)")
        parser.add_argument("--jit_compile", action="store_true",
                            help="beam search compiled with XLA, for GPUs (on a CPU it is "
                                 "slower): inputs are padded to a few shapes, one compilation "
                                 "each; a SavedModel exported so needs XLA where it is served "
                                 "(TF Serving on a CPU: --xla_cpu_compilation_enabled)")
    parser.add_argument("--max_input_length", type=setting("max_input_length"),
                        help="longest input in tokens; longer ones are truncated (default: the "
                             "model_dir's training --max_pair_length)")
    parser.add_argument("--max_output_length", type=setting("max_output_length"),
                        help="longest output in tokens (default: max_input_length + "
                             "extra_length)")
    parser.add_argument("--ema", action=argparse.BooleanOptionalAction, default=None,
                        help="for a run trained with --ema_decay: its moving averages of the "
                             "weights (the default where the checkpoint holds them) or, with "
                             "--no-ema, the trained weights")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default=dtype,
                        help="auto: bfloat16 where this machine's bfloat16 matmuls run at "
                             f"least {devices.DECODING_SPEEDUP_NEEDED:g}x float32's at "
                             "decoding's shape (measured in about a second, cached per "
                             "machine; the closing line says what it chose and why), else "
                             "float32; float32 (as trained), mixed_bfloat16 (bfloat16 compute "
                             "on float32 weights) or bfloat16 (the same arithmetic with the "
                             "weights stored in bfloat16: half the memory, no weight casts "
                             f"each step) by name (default: {dtype})")


def decoding_from_flags(args):
    """The `DecodingConfig` the decoding flags say (unset ones None: the model's defaults)."""
    return DecodingConfig(
        preset=args.decode_preset, beam_size=getattr(args, "beam_size", 1), alpha=args.alpha,
        length_normalization=args.length_normalization, extra_length=args.extra_length,
        max_input_length=args.max_input_length, max_output_length=args.max_output_length,
        tree_constraint=getattr(args, "tree_constraint", False),
        jit_compile=getattr(args, "jit_compile", False),
        batch_size=getattr(args, "batch_size", None),
        dtype=args.dtype, ema=args.ema)


def translator_from_flags(args, max_batch_size, max_search_positions=None):
    """(a `Translator` of the model or ensemble the flags name, the list of its members'
    `model_dir.Loaded`): what `Translator.from_model_dir` does, with the flags' `DecodingConfig`,
    their checkpoints and ensemble, the members kept for the commands' summaries."""
    decoding = decoding_from_flags(args)
    members = load_members(args.model_dir, decoding, checkpoints=args.checkpoint,
                           ensemble=[path.strip() for path in (args.ensemble or "").split(",")
                                     if path.strip()])
    calibration = model_dir.load_calibration(args.model_dir) if len(members) == 1 else None
    shortlist = (model_dir.load_shortlist(args.model_dir, members[0].vocabulary)
                 if getattr(args, "shortlist", False) else None)
    return Translator.from_loaded(members, decoding, max_batch_size=max_batch_size,
                                  max_search_positions=max_search_positions,
                                  calibration=calibration, shortlist=shortlist), members


def beam_description(translator):
    """"beam 4, alpha 0.6" of a `Translator` (or `Ctranslate2Translator`), naming Hugging
    Face's length normalization where it ranks the hypotheses."""
    decoding = translator.decoding
    hf = " (Hugging Face's length normalization)" if decoding.length_normalization == "hf" else ""
    shortlist = ", over the shortlist's candidates" if getattr(translator, "shortlist",
                                                                None) else ""
    return f"beam {decoding.beam_size}, alpha {decoding.alpha}{hf}{shortlist}"


def checkpoints(members):
    """The members' checkpoints, as the commands print them and a calibration records them ("A"
    or "A + B"), then their dtype where it is not float32 (", in bfloat16")."""
    named = " + ".join(f"{member.checkpoint}{' (moving averages)' if member.ema else ''}"
                       for member in members)
    dtype = members[0].model.dtype_policy.name
    return named if dtype == "float32" else f"{named}, in {dtype}"
