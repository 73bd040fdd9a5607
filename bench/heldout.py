"""A test split of our own for the quality bench, cut out of a bundled corpus's train split:
whole books of bible_en_es, whole groups of sentences of tatoeba_en_es.

The bundled corpora have train and dev only (their READMEs: a test set is kept aside elsewhere, to
judge models on text they never saw). Choosing settings on dev and reporting on dev flatters them,
so bench/quality.py reports on a third split it makes here, cut out of the train split, which then
trains without it. The product's corpora stay as they are; only the bench trains on the smaller
train split.

    python -m bench.heldout /tmp/bible_heldout      # writes train/dev/test .en.gz/.es.gz
    python -m bench.heldout /tmp/tatoeba_heldout --data tatoeba_en_es

bible_en_es: four books picked for variety (wisdom poetry, a post-exilic prophet, two epistles),
468 verses in all, about the size of dev (492). Each is found by its line range in train.en.gz
and checked against its first verse, so a change to the corpus fails here rather than moving a
test split silently.

tatoeba_en_es: one English sentence often has several Spanish translations (and a Spanish one
several English), so single pairs held out would be scored on sentences train holds. The pairs
are grouped as the corpus's own splits were (its README): two pairs sharing a sentence on either
side, case-insensitively, are in one group, transitively. Groups are taken in the order of an MD5
of their first pair until they hold dev's size (2,766 pairs); the count of groups and pairs is
checked, so a changed corpus fails here too. Its attribution lines follow each pair.
"""

import argparse
import gzip
import hashlib
import pathlib

from keras_transformer import data

# Book: (first line, last line), 1-based and inclusive, in train.{en,es}.gz; the first verse's
# opening words.
BOOKS = {
    "Ecclesiastes": (17143, 17364, "The words of the Preacher, the son of David"),
    "Haggai": (22331, 22368, "In the second year of Darius the king"),
    "Philippians": (27993, 28095, "Paul and Timothy, servants of Jesus Christ"),
    "1 Peter": (28823, 28927, "Peter, an apostle of Jesus Christ"),
}
CORPUS = "bible_en_es"
TATOEBA = "tatoeba_en_es"
CORPORA = (CORPUS, TATOEBA)
# tatoeba_en_es's held-out split: pairs wanted (dev's size), and the groups and pairs the rule
# above takes from the bundled train split, checked on every build.
TATOEBA_TEST_SIZE = 2766
TATOEBA_TEST_EXPECTED = (2207, 2766)


class HeldOutError(RuntimeError):
    """The bundled corpus no longer has the held-out books where this module expects them."""


def _lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return file.read().splitlines()


def _write(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in lines))


def held_out_lines(english):
    """0-based indices of the held-out verses in the train split, checked against each book's
    first verse."""
    indices = []
    for book, (first, last, opening) in BOOKS.items():
        if not english[first - 1].startswith(opening):
            raise HeldOutError(f"{CORPUS} train.en line {first} should open {book} with "
                               f"{opening!r}, found {english[first - 1][:60]!r}")
        indices.extend(range(first - 1, last))
    return indices


def sentence_groups(english, spanish):
    """The group of each pair (a list, one representative index a pair): pairs sharing a
    sentence on either side, compared case-insensitively, are in one group, transitively."""
    parent = list(range(len(english)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_pair = {}
    for i, sentences in enumerate(zip(english, spanish)):
        for side, sentence in enumerate(sentences):
            j = first_pair.setdefault((side, sentence.casefold()), i)
            parent[root(i)] = root(j)
    return [root(i) for i in range(len(english))]


def held_out_groups(english, spanish, size=TATOEBA_TEST_SIZE):
    """0-based indices of tatoeba_en_es's held-out pairs: whole groups (`sentence_groups`), taken
    in the order of the MD5 of their representative pair until `size` pairs are held."""
    members = {}
    for i, group in enumerate(sentence_groups(english, spanish)):
        members.setdefault(group, []).append(i)

    def digest(group):
        pair = f"{english[group]}\t{spanish[group]}".encode("utf-8")
        return hashlib.md5(pair).hexdigest()

    indices, groups = [], 0
    for group in sorted(members, key=digest):
        if len(indices) >= size:
            break
        indices.extend(members[group])
        groups += 1
    if (groups, len(indices)) != TATOEBA_TEST_EXPECTED:
        raise HeldOutError(f"{TATOEBA} train: the held-out rule took {groups} groups of "
                           f"{len(indices)} pairs, {TATOEBA_TEST_EXPECTED} expected; the "
                           "corpus changed")
    return sorted(indices)


def write_corpus(directory, corpus=CORPUS):
    """Writes `directory`/{train,dev,test}.{en,es}.gz (and .attribution.gz where the corpus has
    them): train without the held-out lines, dev as bundled, test the held-out lines; returns the
    directory (a `--data` value with `--source_lang en --target_lang es`)."""
    bundled = pathlib.Path(data.__file__).parent / "corpora" / corpus
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    streams = [s for s in ("en", "es", "attribution") if (bundled / f"train.{s}.gz").exists()]
    train = {stream: _lines(bundled / f"train.{stream}.gz") for stream in streams}
    if corpus == CORPUS:
        test = set(held_out_lines(train["en"]))
    else:
        test = set(held_out_groups(train["en"], train["es"]))
    for stream, lines in train.items():
        _write(directory / f"train.{stream}.gz",
               [x for i, x in enumerate(lines) if i not in test])
        _write(directory / f"test.{stream}.gz", [lines[i] for i in sorted(test)])
        _write(directory / f"dev.{stream}.gz", _lines(bundled / f"dev.{stream}.gz"))
    return directory


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.heldout",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--data", choices=CORPORA, default=CORPUS)
    args = parser.parse_args(argv)
    directory = write_corpus(args.directory, args.data)
    held_out = ", ".join(BOOKS) if args.data == CORPUS else "the held-out sentence groups"
    print(f"wrote {directory}: train without {held_out}; dev; test = those lines")


if __name__ == "__main__":
    main()
