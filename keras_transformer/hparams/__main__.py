"""`python -m keras_transformer.hparams`: list the named sets, show one, or compare with Table 3."""

import argparse

from keras_transformer.hparams import (
    TABLE3_VOCAB_SIZE,
    HParamsError,
    get,
    names,
    table3_rows,
)


def format_table3(rows, vocab_size: int) -> str:
    """Formats `table3_rows(vocab_size)` as a text table, ours beside the paper's."""
    header = (f"{'name':22} {'N':>2} {'d_model':>7} {'d_ff':>5} {'h':>3} {'d_k':>4} {'d_v':>4} "
              f"{'P_drop':>6} {'e_ls':>4} {'pos':>10} {'ours(M)':>8} {'paper(M)':>8} "
              f"{'paper PPL':>9} {'paper BLEU':>10}")
    lines = [f"Table 3 with a {vocab_size:,}-token shared vocabulary", header]
    for name, hp, count, paper in rows:
        d_k = hp.d_k or hp.d_model // hp.num_heads
        d_v = hp.d_v or hp.d_model // hp.num_heads
        paper_params = "-" if paper.params_millions is None else f"{paper.params_millions:g}"
        lines.append(
            f"{name:22} {hp.num_layers:>2} {hp.d_model:>7} {hp.d_ff:>5} {hp.num_heads:>3} "
            f"{d_k:>4} {d_v:>4} {hp.dropout:>6} {hp.label_smoothing:>4} "
            f"{hp.position_encoding:>10} {count / 1e6:>8.1f} {paper_params:>8} "
            f"{paper.perplexity:>9.2f} {paper.bleu:>10.1f}")
    return "\n".join(lines)


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
