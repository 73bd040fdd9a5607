"""kt-parse: constituency parsing with a model_dir trained on a treebank (paper section 6.3).

    kt-parse --model_dir runs/wsj --input sentences.txt --output trees.txt
    kt-parse --model_dir runs/wsj --gold treebank_3/parsed/mrg/wsj/23 --output 23.tst
    kt-parse --model_dir runs/wsj --data ptb:treebank_3 --split test

A sentence is its words separated by spaces (the treebank's tokenization). Each is decoded with
section 6.3's settings (--decode_preset parsing: beam 21, alpha 0.3, input + 300 tokens), among
well-formed trees over its words only (`keras_transformer.search.constraints.tree`;
--no-tree_constraint decodes any sequence, as the paper did), and the output is read back into a
tree (`data.trees.delinearize`: a malformed one repaired, the sentence's words in order), written
one tree a line as `(TOP ...)`; an empty line stays empty. With gold trees (--gold, or --data and
--split), the trees are scored as EVALB scores them with COLLINS.prm (`data.evalb`) and its
summary goes to stderr. A model trained on ptb-tags: writes part-of-speech tags, and the trees
carry them (EVALB's tagging accuracy is the model's); one trained on ptb: (words) or ptb-xx:
predicts brackets only, and its trees carry `XX`, or with gold trees the gold tags, so that
EVALB itself reads them as it reads the gold.
"""

import argparse
import pathlib
import sys
import time

from keras_transformer import cli, data
from keras_transformer.data import evalb, trees
from keras_transformer.errors import UserError
from keras_transformer.export.flags import (
    add_batch_size_flag,
    add_decoding_flags,
    checkpoints,
    translator_from_flags,
    with_batch_size,
)
from keras_transformer.export.lines import InputError, read_lines, translate_lines
from keras_transformer.model_dir import ConfigError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-parse", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_flags(parser, preset="parsing")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--input", help="file of sentences, words separated by spaces, one a "
                                       "line (default: stdin)")
    given.add_argument("--gold", help="gold trees to parse the words of and score against: a "
                                      "file of bracketed trees or a directory of .mrg files "
                                      "(e.g. a WSJ section)")
    given.add_argument("--data", help="a treebank, ptb:DIR, whose --split is parsed and scored")
    parser.add_argument("--split", choices=data.sources.SPLITS,
                        help="which split of --data (default test)")
    parser.add_argument("--output", help="file for the trees (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    add_batch_size_flag(parser, "sentences parsed")
    args = parser.parse_args(argv)
    if args.split and not args.data:
        parser.error("--split needs --data")
    if args.data and not data.is_treebank(args.data):
        parser.error(f"--data {args.data}: kt-parse reads a treebank, ptb:DIR (or ptb-tags:, "
                     f"ptb-xx:)")
    if args.output:
        cli.check_output(parser, args.output, args.overwrite)
    return with_batch_size(args)


class Sentence:
    """One line to parse: its words, where it came from (for messages), its gold tree if any."""

    def __init__(self, words, where, gold=None):
        self.words, self.where, self.gold = words, where, gold


def gold_sentences(path):
    """Sentences of a file of trees, or of the sorted .mrg files of a directory."""
    path = pathlib.Path(path)
    files = sorted(path.glob("*.mrg")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"--gold {path}: a directory without .mrg files")
    return [Sentence(tree.words(), f"{file}:{line}", tree) for file in files
            for line, raw in trees.read_trees(file)
            for tree in [trees.normalize(raw)] if tree is not None]


def sentences_from_flags(args):
    if args.gold:
        return gold_sentences(args.gold)
    if args.data:
        split = args.split or "test"
        return [Sentence(tree.words(), f"{path}:{line}", tree) for path, line, tree in
                data.get_source(args.data).trees(split)]
    name = args.input or "<stdin>"
    return [Sentence(line.decode("utf-8", errors="replace").split(), f"{name}:{number}")
            for number, line in enumerate(read_lines(args.input, "--input", "kt-parse"), 1)]


def check_lengths(translator, sentences):
    """Refuses, naming the first, sentences with more tokens than the model reads: cutting one
    would leave words without a place in its tree."""
    texts = [" ".join(sentence.words) for sentence in sentences]
    for start in range(0, len(texts), 1024):
        lengths = translator.vocabulary.encode(texts[start:start + 1024]).row_lengths().numpy()
        for sentence, length in zip(sentences[start:start + 1024], lengths):
            if length > translator.decoding.max_input_length:
                raise InputError(
                    f"{sentence.where}: the sentence has {length} tokens, more than the "
                    f"{translator.decoding.max_input_length} the model reads (--max_input_length); "
                    f"split it, or parse with a larger --max_input_length if the model's "
                    f"positions allow")


def main(argv=None):
    args = parse_args(argv)
    try:
        translator, members = translator_from_flags(args, args.batch_size)
        run = members[0].run
        if not data.is_treebank(run.data.corpus):
            raise ConfigError(
                f"{args.model_dir} was trained on --data {run.data.corpus}, a translation corpus: "
                f"kt-parse needs a model trained on a treebank (kt-train --data ptb:DIR); "
                f"kt-translate translates with this one")
        sentences = sentences_from_flags(args)
        check_lengths(translator, sentences)
    except (UserError, OSError) as error:
        print(f"kt-parse: error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    outputs, _ = translate_lines(translator, [" ".join(s.words) for s in sentences],
                                 args.batch_size, progress_every=10)
    tagged = data.treebank.leaves_of(run.data.corpus) == "tags"
    parsed = [trees.parsed(output.split(), sentence.words, sentence.gold, tagged)
              for sentence, output in zip(sentences, outputs)]
    seconds = time.perf_counter() - start
    cli.write_text(args.output, "".join(
        f"{tree}\n" if sentence.words else "\n" for sentence, tree in zip(sentences, parsed)))
    print(f"parsed {len(sentences)} sentence(s) in {seconds:.1f} s with {checkpoints(members)}, "
          f"beam {translator.decoding.beam_size}, alpha {translator.decoding.alpha}, output up to "
          f"input + {translator.decoding.extra_length} tokens, "
          f"{'trees only' if translator.tree_leaves else 'unconstrained'}", file=sys.stderr)
    if sentences and sentences[0].gold:
        every, short, _ = evalb.evaluate([s.gold for s in sentences], parsed)
        print(every.format("All"), file=sys.stderr)
        print(short.format(f"len<={evalb.CUTOFF_LENGTH}"), file=sys.stderr)
        if not tagged:
            print("(tagging accuracy: the tags are the gold ones; the model predicts brackets)",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
