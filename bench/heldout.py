"""A test split of our own for the quality bench: whole books taken out of bible_en_es's train
split.

The bundled corpus has train and dev only (its README: some books are kept aside elsewhere, to
judge models on text they never saw). Choosing settings on dev and reporting on dev flatters them,
so bench/quality.py reports on a third split it makes here: four books cut out of the train split,
which then trains without them. The product's corpus stays as it is; only the bench trains on the
smaller train split.

    python -m bench.heldout /tmp/bible_heldout      # writes train/dev/test .en.gz/.es.gz

The books were picked for variety (wisdom poetry, a post-exilic prophet, two epistles), 468
verses in all, about the size of dev (492). Each is found by its line range in train.en.gz and
checked against its first verse, so a change to the corpus fails here rather than moving a test
split silently.
"""

import argparse
import gzip
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


def write_corpus(directory):
    """Writes `directory`/{train,dev,test}.{en,es}.gz: train without the held-out books, dev as
    bundled, test the held-out books; returns the directory (a `--data` value with
    `--source_lang en --target_lang es`)."""
    bundled = pathlib.Path(data.__file__).parent / "corpora" / CORPUS
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    train = {lang: _lines(bundled / f"train.{lang}.gz") for lang in ("en", "es")}
    test = set(held_out_lines(train["en"]))
    for lang, lines in train.items():
        _write(directory / f"train.{lang}.gz", [x for i, x in enumerate(lines) if i not in test])
        _write(directory / f"test.{lang}.gz", [lines[i] for i in sorted(test)])
        _write(directory / f"dev.{lang}.gz", _lines(bundled / f"dev.{lang}.gz"))
    return directory


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.heldout",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    directory = write_corpus(parser.parse_args(argv).directory)
    print(f"wrote {directory}: train without {', '.join(BOOKS)}; dev; test = those books")


if __name__ == "__main__":
    main()
