"""`python -m keras_transformer.data.inspect`: what the input pipeline makes of a corpus.

Prints the number of pairs, what was dropped or truncated and why, length percentiles, batches per
epoch, tokens per batch, and padding efficiency (real tokens / padded slots, both sides).

    python -m keras_transformer.data.inspect --data bible_en_es --vocab vocab.model \\
        --batch_tokens 25000
"""

import argparse
import dataclasses
import sys

import numpy as np
import tensorflow as tf

from keras_transformer import cli
from keras_transformer.data import batching, input_pipeline, source_flags
from keras_transformer.data.mixture import WeightedCorpora
from keras_transformer.data.vocabularies import load_vocabulary
from keras_transformer.errors import UserError

PERCENTILES = (50, 90, 95, 99, 100)


@dataclasses.dataclass
class Report:
    split: str
    batch_tokens: int
    max_pair_length: int
    overlong: str
    pairs: int  # read from the source
    empty: int  # dropped: a side with no tokens
    overlong_pairs: int  # longer than max_pair_length (dropped or truncated)
    kept: int
    source_lengths: dict  # percentile -> tokens, end of sentence included, before limiting
    target_lengths: dict
    batches: int
    batch_shapes: int  # distinct [rows, length] of the batches (XLA compiles each)
    mean_source_tokens: float  # real tokens per batch
    mean_target_tokens: float
    max_padded_tokens: int  # the most padded slots on one side of any batch
    padding_efficiency: float  # real tokens / padded slots, both sides

    def format(self):
        def lengths(values):
            return "  ".join(f"p{p}={values[p]}" for p in PERCENTILES)

        return "\n".join([
            f"split {self.split}: {self.pairs} pairs read, {self.empty} with an empty side "
            f"dropped, {self.overlong_pairs} longer than max_pair_length={self.max_pair_length} "
            f"({'truncated' if self.overlong == 'truncate' else 'dropped'}), {self.kept} kept",
            f"source tokens per sentence: {lengths(self.source_lengths)}",
            f"target tokens per sentence: {lengths(self.target_lengths)}",
            f"batches per epoch at batch_tokens={self.batch_tokens}: {self.batches}, of "
            f"{self.batch_shapes} shapes",
            f"real tokens per batch: source {self.mean_source_tokens:.0f}, target "
            f"{self.mean_target_tokens:.0f}; most padded tokens on one side of a batch: "
            f"{self.max_padded_tokens} (budget {self.batch_tokens})",
            f"padding efficiency (real tokens / padded slots): {self.padding_efficiency:.3f}",
        ])


def describe(source, vocabulary, split="train", batch_tokens=25_000, max_pair_length=256,
             overlong="drop", *, bucket_growth=batching.BUCKET_GROWTH, static_shapes=False):
    """One pass over a split, unshuffled, through the same stages as `pipeline` (whose
    `bucket_growth` and `static_shapes` these are)."""
    pair_lengths = input_pipeline.tokenized_pairs(source, vocabulary, split).map(
        lambda s, t: tf.stack([tf.size(s), tf.size(t)])).batch(8192)
    lengths = np.concatenate(list(pair_lengths.as_numpy_iterator()) or [np.zeros((0, 2), int)])
    empty = np.any(lengths == 0, axis=1)
    overlong_pairs = ~empty & np.any(lengths > max_pair_length, axis=1)
    real = slots = max_padded = 0
    source_tokens, target_tokens, shapes = [], [], set()
    batches = input_pipeline.pipeline(source, vocabulary, split, batch_tokens=batch_tokens,
                                    max_pair_length=max_pair_length, overlong=overlong,
                                    training=False, deterministic=True,
                                    bucket_growth=bucket_growth, static_shapes=static_shapes)
    for (source_ids, _), target_ids in batches.as_numpy_iterator():
        source_tokens.append(np.count_nonzero(source_ids))
        target_tokens.append(np.count_nonzero(target_ids))
        slots += source_ids.size + target_ids.size
        max_padded = max(max_padded, source_ids.size, target_ids.size)
        shapes.add(source_ids.shape)
    real = sum(source_tokens) + sum(target_tokens)

    def percentiles(values):
        return {p: int(np.percentile(values, p)) if len(values) else 0 for p in PERCENTILES}

    return Report(
        split=split, batch_tokens=batch_tokens, max_pair_length=max_pair_length, overlong=overlong,
        pairs=len(lengths), empty=int(empty.sum()), overlong_pairs=int(overlong_pairs.sum()),
        kept=int(len(lengths) - empty.sum() - (overlong_pairs.sum() if overlong == "drop" else 0)),
        source_lengths=percentiles(lengths[:, 0]), target_lengths=percentiles(lengths[:, 1]),
        batches=len(source_tokens), batch_shapes=len(shapes),
        mean_source_tokens=float(np.mean(source_tokens or [0])),
        mean_target_tokens=float(np.mean(target_tokens or [0])), max_padded_tokens=max_padded,
        padding_efficiency=real / slots if slots else 0.0)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.data.inspect", description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    source_flags.add_flags(parser, several=True)
    cli.add_verbose_flag(parser)
    parser.add_argument("--vocab", required=True, help="SentencePiece .model file (kt-vocab)")
    parser.add_argument("--split", default="train", help="train, dev or test (default: train)")
    parser.add_argument("--batch_tokens", type=int, default=25_000,
                        help="padded tokens per batch on each side (default: %(default)s)")
    parser.add_argument("--max_pair_length", type=int, default=256,
                        help="longest pair in tokens (default: %(default)s)")
    parser.add_argument("--max_length", help=argparse.SUPPRESS,
                        type=cli.renamed("--max_pair_length", "the longest pair"))
    parser.add_argument("--overlong", choices=input_pipeline.OVERLONG_MODES, default="drop",
                        help="what happens to longer pairs (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        batching.update_batches(args.batch_tokens).check(args.max_pair_length)
    except ValueError as error:  # the library's refusal of its arguments: here, of two flags
        parser.error(f"--batch_tokens {args.batch_tokens} with --max_pair_length "
                     f"{args.max_pair_length}: {error}")
    try:
        source, vocabulary = source_flags.from_flags(args), load_vocabulary(args.vocab)
        settings = (args.batch_tokens, args.max_pair_length, args.overlong)
        report = describe(source, vocabulary, args.split, *settings)
        if isinstance(source, WeightedCorpora):
            print(mixture_lines(source, [describe(corpus, vocabulary, args.split, *settings)
                                         for corpus in source.corpora], args.split))
    except UserError as error:
        print(f"data.inspect: error: {error}", file=sys.stderr)
        return 2
    print(report.format())
    return 0


def mixture_lines(corpora, reports, split):
    """What `WeightedCorpora` draws: each corpus's weight, share of the pairs drawn, pairs kept,
    and how much more (or less) often than its size alone says each of its pairs is drawn;
    `reports` are each corpus's `describe`."""
    kept = sum(report.kept for report in reports)
    lines = [f"{len(reports)} corpora" + (", training pairs drawn by weight:"
                                          if split == "train" else f", their {split} splits "
                                          f"one after the other (training draws by weight):")]
    for name, weight, share, report in zip(corpora.names, corpora.weights,
                                           corpora.probabilities(), reports):
        often = share / (report.kept / kept) if report.kept else float("inf")
        lines.append(f"  {name}: weight {weight:g}, {100 * share:.1f}% of the pairs drawn, "
                     f"{report.kept} pairs kept, each drawn {often:.2f}x as often as in the "
                     f"corpora read one after the other")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
