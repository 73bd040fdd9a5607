"""Padding efficiency of token-budget batching on the bundled corpus.

Real tokens / padded slots (both sides) over one epoch of the train split, for several batch
budgets and vocabulary sizes, and the largest padded side of any batch (must not exceed the budget);
with the default buckets, and with the few, fixed shapes kt-train --jit_compile uses
(`data.XLA_BUCKET_GROWTH`, `static_shapes`).

    python -m bench.padding_efficiency
"""

import argparse
import pathlib
import tempfile

from bench.common import append_results, markdown_table
from keras_transformer import data
from keras_transformer.data.inspect import describe


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.padding_efficiency",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab_sizes", default="2000,8000,16000")
    parser.add_argument("--batch_tokens", default="4096,25000")
    parser.add_argument("--buckets", choices=("default", "xla", "both"), default="both")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for vocab_size in map(int, args.vocab_sizes.split(",")):
            vocabulary = data.build_vocabulary(
                data.corpus_texts(data.get_source("bible_en_es")), vocab_size,
                pathlib.Path(tmp) / f"v{vocab_size}.model")
            for batch_tokens in map(int, args.batch_tokens.split(",")):
                for buckets in BUCKETS[args.buckets]:
                    rows.append([vocab_size, batch_tokens, buckets,
                                 *report_cells(vocabulary, batch_tokens, buckets)])
    append_results("Padding efficiency, bundled corpus, train split, max_pair_length 256",
                   markdown_table(["vocab", "batch_tokens", "buckets", "distinct batch shapes",
                                   "batches/epoch", "real tokens/batch (src, tgt)",
                                   "largest padded side", "padding efficiency"], rows))


BUCKETS = {"default": ["default"], "xla": ["xla"], "both": ["default", "xla"]}


def report_cells(vocabulary, batch_tokens, buckets):
    """Default buckets (growth 1.1) or kt-train --jit_compile's (growth 1.5, static shapes)."""
    xla = buckets == "xla"
    report = describe("bible_en_es", vocabulary, "train", batch_tokens,
                      bucket_growth=data.XLA_BUCKET_GROWTH if xla else data.BUCKET_GROWTH,
                      static_shapes=xla)
    return [report.batch_shapes, report.batches,
            f"{report.mean_source_tokens:,.0f}, {report.mean_target_tokens:,.0f}",
            report.max_padded_tokens, f"{report.padding_efficiency:.3f}"]


if __name__ == "__main__":
    main()
