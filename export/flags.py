"""The flags kt-translate, kt-export and kt-attention share: which model, and how to decode."""

from keras_transformer import cli, model_dir
from keras_transformer.cli import at_least
from keras_transformer.export.translator import Translator


def add_decoding_flags(parser, beam=True):
    """The model_dir, beam search and request-bound flags of kt-translate, kt-export,
    kt-attention and (without --beam_size: `beam` False) kt-score, and --verbose."""
    cli.add_verbose_flag(parser)
    parser.add_argument("--model_dir", required=True, help="a kt-train model_dir")
    parser.add_argument("--checkpoint", help="a checkpoint directory to use (default: the "
                                             "average of the final checkpoints if kt-train "
                                             "--average_last or kt-average wrote one, else the "
                                             "newest)")
    if beam:
        parser.add_argument("--beam_size", type=at_least(1), default=4,
                            help="(paper: 4; default %(default)s)")
    parser.add_argument("--alpha", type=at_least(0.0, float),
                        help="length penalty exponent (paper: 0.6; default: the model's hparams "
                             "decode_alpha, 0.6 unless the run overrode it)")
    parser.add_argument("--extra_length", type=at_least(0), default=50,
                        help="output tokens allowed beyond the input's (paper: 50; default "
                             "%(default)s)")
    parser.add_argument("--max_input_length", type=at_least(2),
                        help="longest input in tokens; longer ones are truncated (default: the "
                             "model_dir's training --max_length)")
    parser.add_argument("--max_output_length", type=at_least(1),
                        help="longest output in tokens (default: max_input_length + "
                             "extra_length)")
    parser.add_argument("--dtype", choices=model_dir.DTYPES, default="float32",
                        help="float32 (as trained; default), mixed_bfloat16 (bfloat16 compute "
                             "on float32 weights) or bfloat16 (the same arithmetic with the "
                             "weights stored in bfloat16: half the memory, no weight casts "
                             "each step; the fastest where the CPU has bfloat16 instructions)")


def translator_from_flags(args, max_batch_size):
    loaded = model_dir.load(args.model_dir, args.checkpoint, args.dtype)
    if args.alpha is None:
        args.alpha = loaded.hparams.decode_alpha
    translator = Translator(
        loaded.model, loaded.vocabulary, beam_size=getattr(args, "beam_size", 1),
        alpha=args.alpha,
        extra_length=args.extra_length,
        max_input_length=args.max_input_length or loaded.run.max_length,
        max_output_length=args.max_output_length, max_batch_size=max_batch_size)
    return translator, loaded
