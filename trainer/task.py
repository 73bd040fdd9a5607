"""kt-train (also `python -m keras_transformer.trainer`): flags -> `RunConfig` -> `Trainer.fit`.

Its help text, the flags and their mapping are trainer/flags.py's (`flags.USAGE`).
"""

import sys

from keras_transformer.trainer import callbacks, flags


def main(argv=None):
    parser = flags.argument_parser()
    args = parser.parse_args(argv)
    try:
        flags.trainer_of(args).fit()
    except (*flags.ERRORS, OSError) as error:  # OSError: an unreadable or unwritable path
        print(f"kt-train: error: {flags.in_flags(str(error), flags.flag_names(parser))}",
              file=sys.stderr)
        return 1 if isinstance(error, callbacks.TrainingError) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
