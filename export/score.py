"""kt-score: the model's log-probability of given translations (reranking, corpus filtering,
quality estimation).

    kt-score --model_dir runs/demo --source dev.en --target dev.es > scores.tsv
    kt-score --model_dir runs/demo --source dev.en --target dev.es --per_token

One line per pair, in input order: `score<TAB>log_prob<TAB>tokens`, where log_prob is log P(target
| source) summed over the target's subwords and its end of sentence (`tokens` of them) and score
is log_prob / ((5 + tokens) / 6) ** alpha, the number beam search ranks translations by; with
--per_token a fourth column holds each token's log-probability, space-separated. Pairs are
scored in batches of similar length. A source longer than --max_input_length is cut as
kt-translate cuts it, and a target longer than its translation could be (source tokens +
--extra_length, at most --max_output_length) is scored up to that limit without its end of
sentence, as beam search would have stopped it there; each cut pair is named on stderr.
"""

import argparse
import sys
import time

import numpy as np
import tensorflow as tf

from keras_transformer import cli
from keras_transformer.errors import UserError
from keras_transformer.export.flags import (
    add_batch_size_flag,
    add_decoding_flags,
    checkpoints,
    translator_from_flags,
    with_batch_size,
)
from keras_transformer.export.lines import InputError, read_lines, sorted_batches, token_ids

PROG = "kt-score"
# A cut pair is named on stderr; past this many, only counted.
NAMED_CUTS = 10


def score_lines(translator, sources, targets, batch_size):
    """`Translator.score_ids` of each (source, target) pair of lines (bytes or str), in input
    order, in batches of similar source length: a dict of numpy arrays "scores",
    "log_probs", "lengths", "truncated" [pairs] and "token_log_probs", a list of float32
    arrays, one per pair, of its `lengths` tokens' log-probabilities."""
    if len(sources) != len(targets):
        raise InputError(f"{len(sources)} sources but {len(targets)} targets")
    results = {"scores": np.zeros(len(sources), np.float32),
               "log_probs": np.zeros(len(sources), np.float32),
               "lengths": np.zeros(len(sources), np.int32),
               "truncated": np.zeros(len(sources), bool),
               "token_log_probs": [None] * len(sources)}
    source_ids = token_ids(translator.tokenize, sources, batch_size,
                           translator.decoding.max_input_length)
    for rows, batch in sorted_batches(source_ids, batch_size, progress_every=10):
        target_ids = translator.tokenize_targets(tf.constant([targets[row] for row in rows]))
        result = {name: value.numpy() for name, value in translator.score_ids(
            tf.constant(batch), target_ids["target_ids"]).items()}
        for name in ("scores", "log_probs", "lengths", "truncated"):
            results[name][rows] = result[name]
        for row, tokens, length in zip(rows, result["token_log_probs"], result["lengths"]):
            results["token_log_probs"][row] = tokens[:length]
    return results


def format_scores(results, per_token):
    """The output lines of `score_lines`' results (see the module docstring)."""
    lines = []
    for index in range(len(results["scores"])):
        columns = [f"{results['scores'][index]:.6f}", f"{results['log_probs'][index]:.6f}",
                   str(results["lengths"][index])]
        if per_token:
            columns.append(" ".join(f"{value:.4f}"
                                    for value in results["token_log_probs"][index]))
        lines.append("\t".join(columns) + "\n")
    return "".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    add_decoding_flags(parser, beam=False, dtype="float32")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--target", required=True,
                        help="their translations, one a line (as many lines as --source)")
    parser.add_argument("--output", help="file for the scores (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--per_token", action="store_true",
                        help="add a column of each token's log-probability")
    add_batch_size_flag(parser, "pairs scored")
    args = parser.parse_args(argv)
    if args.output:
        cli.check_output(parser, args.output, args.overwrite)
    return with_batch_size(args)


def main(argv=None):
    args = parse_args(argv)
    try:
        sources = read_lines(args.source, "--source", PROG)
        targets = read_lines(args.target, "--target", PROG)
        if len(sources) != len(targets):
            raise InputError(f"--source {args.source} has {len(sources)} lines but --target "
                             f"{args.target} has {len(targets)}")
        translator, members = translator_from_flags(args, args.batch_size)
    except (UserError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    results = score_lines(translator, sources, targets, args.batch_size)
    seconds = time.perf_counter() - start
    text = format_scores(results, args.per_token)
    cli.write_text(args.output, text)
    cut = np.flatnonzero(results["truncated"]) + 1
    for line in cut[:NAMED_CUTS]:
        print(f"{PROG}: warning: line {line}: cut to the limits of a translation (source "
              f"{translator.decoding.max_input_length} tokens; target its source's tokens + "
              f"{translator.decoding.extra_length}, at most "
              f"{translator.decoding.max_output_length}); the cut pair was scored",
              file=sys.stderr)
    if len(cut) > NAMED_CUTS:
        print(f"{PROG}: warning: {len(cut) - NAMED_CUTS} more pair(s) cut", file=sys.stderr)
    print(f"scored {len(sources)} pair(s) in {seconds:.1f} s with {checkpoints(members)}, alpha "
          f"{translator.decoding.alpha}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
