"""`python -m keras_transformer.hparams`: list the named sets, show one, or compare with Table 3."""

import argparse

from keras_transformer.hparams import TABLE3_VOCAB_SIZE, HParamsError, get, names
from keras_transformer.models.table3 import format_table3, table3_rows


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.hparams",
        description="List the named hyper-parameter sets or compare them with the paper's Table 3.")
    parser.add_argument("--table3", action="store_true",
                        help="build every Table 3 row; print parameter counts beside the paper's")
    parser.add_argument("--vocab_size", type=int, default=TABLE3_VOCAB_SIZE,
                        help="shared vocabulary size for --table3 (the paper's en-de: 37000)")
    parser.add_argument("--show", metavar="NAME", help="print one named set, field by field")
    args = parser.parse_args(argv)
    if args.show:
        try:
            hparams = get(args.show)
        except HParamsError as error:
            parser.error(str(error))
        for key, value in hparams.to_dict().items():
            print(f"{key} = {value}")
    elif args.table3:
        print(format_table3(table3_rows(args.vocab_size), args.vocab_size))
    else:
        print("\n".join(names()))


if __name__ == "__main__":
    main()
