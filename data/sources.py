"""Where sentence pairs come from: the bundled corpus, local files, tensorflow-datasets.

Every source gives, for a split ("train", "dev", "test"), a `tf.data.Dataset` of
(source_text, target_text) scalar `tf.string` pairs, via `source.pairs(split, shuffle_files=False,
seed=None)`; `shuffle_files` reads a TFDS dataset's files in a shuffled order (local files are
read in order: the pipeline's shuffle buffer is all the shuffling they get).

`get_source(spec, ...)` turns a command-line `--data` value into a source:

| spec | source |
| --- | --- |
| `bible_en_es` | the bundled English->Spanish Bible corpus (train 29,418 / dev 492 verses) |
| `tatoeba_en_es` | the bundled Tatoeba sentences (train 135,351 / dev 2,766; CC BY 2.0 FR) |
| `DIR` (an existing directory) | `{split}.{lang}` file pairs (plain or gzip), or `{split}.tsv` |
| `text:SRC_FILE,TGT_FILE` | two aligned files, one sentence a line, as the train split |
| `tsv:FILE` | one `source<TAB>target` pair a line, as the train split |
| `tfds:NAME` or a bare TFDS name | a TFDS translation dataset, e.g. `wmt14_translate/de-en` |
| `ptb:DIR` (`ptb-tags:`, `ptb-xx:`) | a treebank: sentences -> linearized trees (`data.treebank`) |

Local files are read as strict UTF-8 and checked before training starts: a missing file, a line
that is not valid UTF-8 or holds a NUL byte, files of different line counts, or an empty corpus
raise `CorpusError` naming the file and line. `invalid_utf8="replace"` turns bad bytes into
U+FFFD instead (in the graph) for corpora you cannot clean.
"""

import dataclasses
import gzip
import os
import pathlib

import tensorflow as tf

from keras_transformer.data import treebank
from keras_transformer.data.dataset_options import without_autotuning
from keras_transformer.data.errors import CorpusError
from keras_transformer.errors import check_one_of

SPLITS = ("train", "dev", "test")
BUNDLED_DIR = pathlib.Path(__file__).parent / "corpora"
# Bundled corpora: name -> (directory under BUNDLED_DIR, source language, target language).
BUNDLED = {"bible_en_es": ("bible_en_es", "en", "es"),
           "tatoeba_en_es": ("tatoeba_en_es", "en", "es")}
# Our split names -> TFDS's.
TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
INVALID_UTF8_MODES = ("error", "replace")


@dataclasses.dataclass(frozen=True)
class FileReport:
    """What a check of one local split found."""

    paths: tuple
    lines: int


def _open_binary(path):
    """Opens plain or gzip files alike (by their magic bytes, not their name)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CorpusError(f"{path}: no such file")
    with open(path, "rb") as probe:
        is_gzip = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if is_gzip else open(path, "rb")


def _compression(path):
    with open(path, "rb") as probe:
        return "GZIP" if probe.read(2) == b"\x1f\x8b" else ""


def _check_lines(path, invalid_utf8):
    """Yields each line's number; raises CorpusError at the first line that is not text."""
    with _open_binary(path) as stream:
        line_number = 0
        try:
            for line_number, raw in enumerate(stream, 1):
                if b"\x00" in raw:
                    raise CorpusError(
                        f"{path}:{line_number}: contains a NUL byte; is this a text file?")
                if invalid_utf8 == "error":
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError as error:
                        context = raw[max(0, error.start - 10):error.start + 10]
                        raise CorpusError(
                            f"{path}:{line_number}: invalid UTF-8 at byte {error.start + 1} of "
                            f"the line ({context!r}); clean the file or pass "
                            f"invalid_utf8='replace' (--invalid_utf8 replace)") from None
                yield line_number, raw
        except (OSError, EOFError) as error:  # e.g. a truncated or corrupt gzip stream
            raise CorpusError(f"{path}: unreadable after line {line_number}: {error}") from None


def _check_parallel(source_path, target_path, invalid_utf8):
    source_lines = _check_lines(source_path, invalid_utf8)
    target_lines = _check_lines(target_path, invalid_utf8)
    count = 0
    for count, _ in source_lines:
        if next(target_lines, None) is None:
            raise CorpusError(
                f"{target_path} has {count - 1} lines but {source_path} has more (line {count} "
                f"of {source_path} has no counterpart); the files must be aligned line by line")
    extra = next(target_lines, None)
    if extra is not None:
        raise CorpusError(
            f"{source_path} has {count} lines but {target_path} has more (line {extra[0]} of "
            f"{target_path} has no counterpart); the files must be aligned line by line")
    if count == 0:
        raise CorpusError(f"{source_path} and {target_path} are empty")
    return count


def _check_tsv(path, invalid_utf8):
    count = 0
    for count, raw in _check_lines(path, invalid_utf8):
        tabs = raw.count(b"\t")
        if tabs != 1:
            raise CorpusError(
                f"{path}:{count}: expected one tab between source and target, found {tabs}")
    if count == 0:
        raise CorpusError(f"{path} is empty")
    return count


def _text_lines(path, invalid_utf8):
    lines = without_autotuning(tf.data.TextLineDataset(os.fspath(path),
                                                       compression_type=_compression(path)))
    if invalid_utf8 == "replace":
        lines = lines.map(lambda s: tf.strings.unicode_transcode(
            s, "UTF-8", "UTF-8", errors="replace"))
    return lines


class LocalSource:
    """Sentence pairs from local files, checked once per split before their first use.

    Args:
        files: split -> (source_path, target_path) for aligned files, or split -> path for TSV.
        source_lang, target_lang: language codes, for reports.
        name: for messages.
        invalid_utf8: "error" (default) or "replace".
    """

    def __init__(self, files, source_lang, target_lang, name=None, invalid_utf8="error"):
        check_one_of("invalid_utf8", invalid_utf8, INVALID_UTF8_MODES, ValueError)
        self.files = dict(files)
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.name = name or ", ".join(str(f) for f in self.files.values())
        self.invalid_utf8 = invalid_utf8
        self._reports = {}

    def splits(self):
        return list(self.files)

    def check(self, split):
        """Reads the split's files once; returns a FileReport or raises CorpusError."""
        if split not in self.files:
            raise CorpusError(f"source {self.name!r} has no split {split!r}; it has "
                              f"{', '.join(self.files)}")
        if split not in self._reports:
            paths = self.files[split]
            if isinstance(paths, tuple):
                lines = _check_parallel(*paths, self.invalid_utf8)
            else:
                lines = _check_tsv(paths, self.invalid_utf8)
                paths = (paths,)
            self._reports[split] = FileReport(tuple(os.fspath(p) for p in paths), lines)
        return self._reports[split]

    def pairs(self, split, shuffle_files=False, seed=None):
        del shuffle_files, seed  # One file a side: nothing to shuffle at the file level.
        self.check(split)
        paths = self.files[split]
        if isinstance(paths, tuple):
            return tf.data.Dataset.zip(*(_text_lines(p, self.invalid_utf8) for p in paths))
        fields = _text_lines(paths, self.invalid_utf8).map(
            lambda line: tf.strings.split(line, "\t", maxsplit=1))
        return fields.map(lambda f: (f[0], f[1]))

    def __repr__(self):
        return f"LocalSource({self.name!r}, {self.source_lang}->{self.target_lang})"


def directory_source(directory, source_lang, target_lang, name=None, invalid_utf8="error"):
    """A LocalSource over `{split}.{lang}[.gz]` pairs or `{split}.tsv[.gz]` files in `directory`."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise CorpusError(f"{directory}: no such directory")

    def find(stem):
        return next((directory / f"{stem}{ext}" for ext in ("", ".gz")
                     if (directory / f"{stem}{ext}").is_file()), None)

    files = {}
    for split in SPLITS:
        pair = (find(f"{split}.{source_lang}"), find(f"{split}.{target_lang}"))
        if all(pair):
            files[split] = pair
        elif find(f"{split}.tsv"):
            files[split] = find(f"{split}.tsv")
    if "train" not in files:
        raise CorpusError(
            f"{directory}: found neither train.{source_lang} + train.{target_lang} (optionally "
            f".gz) nor train.tsv; name the languages with source_lang/target_lang")
    return LocalSource(files, source_lang, target_lang, name=name or str(directory),
                       invalid_utf8=invalid_utf8)


class TfdsSource:
    """A tensorflow-datasets translation dataset, e.g. `wmt14_translate/de-en`.

    Args:
        name: TFDS name with config.
        source_lang, target_lang: default to the dataset's supervised keys.
        data_dir: TFDS data directory (default ~/tensorflow_datasets).
        download: download and prepare the dataset if it is not prepared yet (needs network).
    """

    def __init__(self, name, source_lang=None, target_lang=None, data_dir=None, download=False):
        import tensorflow_datasets as tfds  # Heavy; only TFDS sources pay for it.

        self.name = name
        try:
            self.builder = tfds.builder(name, data_dir=data_dir)
        except Exception as error:  # TFDS raises several types for unknown names
            raise CorpusError(f"TFDS dataset {name!r}: {error}") from None
        keys = self.builder.info.supervised_keys or (None, None)
        self.source_lang = source_lang or keys[0]
        self.target_lang = target_lang or keys[1]
        languages = list(self.builder.info.features.keys())
        for lang in (self.source_lang, self.target_lang):
            if lang not in languages:
                raise CorpusError(f"TFDS dataset {name!r} has no language {lang!r}; it has "
                                  f"{', '.join(languages)} (set source_lang/target_lang)")
        self.download = download

    def splits(self):
        return [ours for ours, theirs in TFDS_SPLITS.items() if theirs in self.builder.info.splits]

    def pairs(self, split, shuffle_files=False, seed=None):
        import tensorflow_datasets as tfds

        if self.download:
            self.builder.download_and_prepare()
        try:
            examples = self.builder.as_dataset(
                split=TFDS_SPLITS.get(split, split), shuffle_files=shuffle_files,
                read_config=tfds.ReadConfig(shuffle_seed=seed))
        except Exception as error:  # not prepared (AssertionError), unknown split (ValueError)
            raise CorpusError(
                f"TFDS dataset {self.name!r}, split {split!r} (TFDS "
                f"{TFDS_SPLITS.get(split, split)!r}) cannot be read: {error}. Prepare it with "
                f"download=True (--download, needs network) or `tfds build`") from None
        source_lang, target_lang = self.source_lang, self.target_lang
        return without_autotuning(examples).map(
            lambda example: (example[source_lang], example[target_lang]),
            num_parallel_calls=tf.data.AUTOTUNE)

    def __repr__(self):
        return f"TfdsSource({self.name!r}, {self.source_lang}->{self.target_lang})"


def bundled_source(name="bible_en_es", source_lang=None, target_lang=None):
    """A corpus shipped inside the package; the languages may be swapped to translate back."""
    directory, default_source, default_target = BUNDLED[name]
    source_lang, target_lang = source_lang or default_source, target_lang or default_target
    if {source_lang, target_lang} != {default_source, default_target}:
        raise CorpusError(f"bundled corpus {name!r} has languages {default_source} and "
                          f"{default_target}, not {source_lang}->{target_lang}")
    return directory_source(BUNDLED_DIR / directory, source_lang, target_lang, name=name)


def get_source(spec, source_lang=None, target_lang=None, tfds_data_dir=None, download=False,
               invalid_utf8="error"):
    """Resolves a `--data` value (see the module docstring) to a source."""
    if not isinstance(spec, str):
        return spec  # Already a source.
    if spec in BUNDLED:
        return bundled_source(spec, source_lang, target_lang)
    kind, _, rest = spec.partition(":")
    if treebank.is_treebank(spec):
        return treebank.TreebankSource(rest, treebank.leaves_of(spec))
    if kind == "tfds":
        return TfdsSource(rest, source_lang, target_lang, tfds_data_dir, download)
    if kind == "text":
        paths = rest.split(",")
        if len(paths) != 2:
            raise CorpusError(f"--data {spec!r}: expected text:SOURCE_FILE,TARGET_FILE")
        return LocalSource({"train": tuple(paths)}, source_lang, target_lang, name=spec,
                           invalid_utf8=invalid_utf8)
    if kind == "tsv":
        return LocalSource({"train": rest}, source_lang, target_lang, name=spec,
                           invalid_utf8=invalid_utf8)
    if os.path.isdir(spec):
        if not (source_lang and target_lang):
            raise CorpusError(f"--data {spec!r} is a directory: name its languages with "
                              f"source_lang and target_lang (--source_lang, --target_lang)")
        return directory_source(spec, source_lang, target_lang, invalid_utf8=invalid_utf8)
    if os.path.exists(spec) or spec.startswith((".", os.sep)):
        raise CorpusError(f"--data {spec!r}: a path must be a directory; for single files use "
                          f"text:SOURCE_FILE,TARGET_FILE or tsv:FILE")
    return TfdsSource(spec, source_lang, target_lang, tfds_data_dir, download)


def first_pairs(source, split, count):
    """The first `count` pairs of a split as (sources, references) lists of str; empty lists when
    the source has no such split (or count is 0)."""
    if count <= 0 or split not in source.splits():
        return [], []
    pairs = list(source.pairs(split).take(count).as_numpy_iterator())
    return [s.decode() for s, _ in pairs], [t.decode() for _, t in pairs]


# Dev pairs are spread over at most this many of a split's first pairs.
MAX_SPREAD_OVER = 100_000


def spread(items, count):
    """`count` of a list's items evenly spaced from its first to its last (all of a shorter
    list), in order: the same positions for any list of the same length."""
    taken = min(count, len(items))
    if taken <= 0:
        return []
    picked = sorted({round(i * (len(items) - 1) / max(taken - 1, 1)) for i in range(taken)})
    return [items[i] for i in picked]


def spread_pairs(source, split, count):
    """`count` pairs spread evenly over a split (over its first `MAX_SPREAD_OVER`), as
    `first_pairs` returns them: a split may be ordered (tatoeba_en_es' dev starts with its
    shortest sentences, the Bible's with Genesis), and its first few are not a sample of it."""
    sources, references = first_pairs(source, split, MAX_SPREAD_OVER if count > 0 else 0)
    return spread(sources, count), spread(references, count)
