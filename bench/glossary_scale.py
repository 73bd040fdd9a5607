"""How long kt-translate's glossary look-up takes for a large glossary over a large input: the
terms are word pairs of the bundled corpus's own lines, so most of them occur.

    python -m bench.glossary_scale 5000 20000   # lines, terms; prints one line
"""

import gzip
import itertools
import pathlib
import sys
import time

from keras_transformer import data
from keras_transformer.data import glossary


def corpus_lines(count):
    path = pathlib.Path(data.__file__).parent / "corpora" / "bible_en_es" / "train.en.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in itertools.islice(lines, count)]


def word_pairs(lines, count):
    """Up to `count` (source, target) terms: the lines' adjacent word pairs, each once."""
    pairs, seen = [], set()
    for line in lines:
        words = [word.strip(".,;:!?'\"()") for word in line.split()]
        for first, second in zip(words, words[1:]):
            if first.isalpha() and second.isalpha() and (first, second) not in seen:
                seen.add((first, second))
                pairs.append((f"{first} {second}", f"{first.upper()} {second.upper()}"))
    return pairs[:count]


def main(argv=None):
    line_count, term_count = map(int, (argv or sys.argv[1:]) or (5000, 20000))
    lines = corpus_lines(line_count)
    terms = glossary.Glossary(word_pairs(lines, term_count))
    start = time.perf_counter()
    found = terms.targets_of(lines)
    print(f"{len(terms)} terms, {len(lines)} lines: {time.perf_counter() - start:.1f} s; "
          f"{sum(map(len, found))} target terms required")


if __name__ == "__main__":
    main()
