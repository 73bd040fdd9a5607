"""Checkpoint averaging (paper section 6.1): `kt-average --model_dir D --last 5`.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints [...]
For the big models, we averaged the last 20 checkpoints." Writes model_dir/averaged/ckpt-<step>,
where <step> is the newest averaged checkpoint's step, in the same format as the run's own
checkpoints. An existing average of that step is replaced only with --overwrite.
"""

import argparse
import sys

from keras_transformer import cli
from keras_transformer.errors import UserError
from keras_transformer.model_dir.averaging import average_last, average_named


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kt-average", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a kt-train model_dir")
    parser.add_argument("--last", type=int, default=5,
                        help="how many of the newest checkpoints (paper: 5 base, 20 big; "
                             "default %(default)s)")
    parser.add_argument("--checkpoint", action="append",
                        help="instead of --last: a checkpoint directory to average, or best "
                             "(the one kt-train --keep_best kept); give it once per checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing average of the same step")
    cli.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    try:
        if args.checkpoint:
            output, chosen = average_named(args.model_dir, args.checkpoint, args.overwrite)
        else:
            output, chosen = average_last(args.model_dir, args.last, args.overwrite)
    except (UserError, OSError) as error:
        print(f"kt-average: error: {error}", file=sys.stderr)
        return 2
    print(f"averaged {', '.join(p.name for p in chosen)} into {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
