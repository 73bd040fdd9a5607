"""kt-shortlist: build a model_dir's vocabulary shortlist from its training corpus.

    kt-shortlist --model_dir runs/demo
    kt-translate --model_dir runs/demo --shortlist < in.txt

For each source piece, the target pieces IBM Model 1 finds it translates to most often, and the
target pieces most frequent in the corpus (`keras_transformer.data.shortlist` says why Model 1):
written to model_dir/shortlist.vmap in CTranslate2's vocabulary-map format, replacing an older
one. kt-translate --shortlist, kt-export --shortlist and `Translator.from_model_dir(path,
shortlist=True)` then compute each batch's logits over its candidates alone. It reports how many
candidates a batch of the dev split has and how many of its reference pieces they hold.
"""

import argparse
import sys
import time

import numpy as np
import tensorflow as tf

from keras_transformer import cli, data, model_dir
from keras_transformer.data import shortlist as shortlists
from keras_transformer.data.sources import SPLITS
from keras_transformer.errors import UserError
from keras_transformer.model_dir import config_file, layout

PROG = "kt-shortlist"
TOKENIZED_AT_ONCE = 4096  # texts a tokenizer call reads


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     epilog="Example: kt-shortlist --model_dir runs/demo")
    parser.add_argument("--model_dir", required=True, help="the kt-train (or kt-import) run")
    parser.add_argument("--per_source", type=cli.at_least(1), default=shortlists.PER_SOURCE,
                        help=f"candidates of each source piece (default "
                             f"{shortlists.PER_SOURCE})")
    parser.add_argument("--frequent", type=cli.at_least(0), default=shortlists.FREQUENT,
                        help=f"the most frequent target pieces, always candidates (default "
                             f"{shortlists.FREQUENT})")
    parser.add_argument("--max_pairs", type=cli.at_least(1), default=shortlists.MAX_PAIRS,
                        help=f"read the first N pairs (default {shortlists.MAX_PAIRS})")
    parser.add_argument("--split", choices=SPLITS, default="train",
                        help="the run's corpus split to build from (default train)")
    cli.add_verbose_flag(parser)
    return parser.parse_args(argv)


def tokenized(vocabulary, texts):
    """int32 arrays: each text's pieces, without end of sentence."""
    found = []
    for start in range(0, len(texts), TOKENIZED_AT_ONCE):
        ragged = vocabulary.tokenize(tf.constant(texts[start:start + TOKENIZED_AT_ONCE]))
        found += [np.asarray(row, np.int32) for row in ragged.numpy()]
    return found


def read_run(path):
    """(run, vocabulary) of the model_dir `path`, without its model."""
    run = config_file.load(path)
    if run is None:
        raise model_dir.ModelDirError(f"{path}: no {layout.CONFIG_FILE}; is it a kt-train "
                                      f"model_dir?")
    return run, data.load_vocabulary(data.vocabulary_file(path))


def tokenized_pairs(run, vocabulary, split, max_pairs):
    """[(source pieces, target pieces)] of the first `max_pairs` pairs of the run's `split`."""
    pairs = list(run.data.open().pairs(split).take(max_pairs).as_numpy_iterator())
    if not pairs:
        raise UserError(f"the {split} split of {' + '.join(run.data.corpora)} has no pairs")
    return list(zip(tokenized(vocabulary, [s for s, _ in pairs]),
                    tokenized(vocabulary.target, [t for _, t in pairs])))


def coverage(shortlist, pairs, batch_size=32):
    """(mean candidates a batch, the share of the references' pieces among their batch's
    candidates) over `pairs` in batches of `batch_size`, as a search would see them."""
    sizes, held, total = [], 0, 0
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start:start + batch_size]
        candidates = shortlist.candidates(np.concatenate([s for s, _ in batch] + [[0]]))
        references = np.concatenate([t for _, t in batch] + [np.zeros(0, np.int32)])
        sizes.append(len(candidates))
        held += np.isin(references, candidates).sum()
        total += len(references)
    return float(np.mean(sizes)), held / max(total, 1)


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        run, vocabulary = read_run(args.model_dir)
        pairs = tokenized_pairs(run, vocabulary, args.split, args.max_pairs)
        dev = (tokenized_pairs(run, vocabulary, "dev", 1000)
               if "dev" in run.data.open().splits() else [])
    except (UserError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    shortlist = shortlists.build(pairs, per_source=args.per_source, frequent=args.frequent)
    path = f"{args.model_dir}/{layout.SHORTLIST_FILE}"
    shortlists.write_vmap(path, shortlist, *shortlists.pieces_of(vocabulary))
    report = ""
    if dev:
        size, held = coverage(shortlist, dev)
        report = (f"; on {len(dev)} dev pairs in batches of 32, {size:,.0f} candidates a batch "
                  f"({size / vocabulary.target.vocab_size:.0%} of "
                  f"{vocabulary.target.vocab_size:,}) holding {held:.1%} of the references' "
                  f"pieces")
    print(f"{PROG}: wrote {path} from {len(pairs):,} {args.split} pairs in "
          f"{time.perf_counter() - start:.0f} s: {len(shortlist.by_source):,} source pieces, up "
          f"to {args.per_source} candidates each, {len(shortlist.always):,} always{report}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
