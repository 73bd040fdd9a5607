import gzip

import numpy as np
import pytest
import tensorflow_datasets as tfds

from keras_transformer import data

PAIRS = [("the house is small", "das Haus ist klein"), ("the cat sleeps", "die Katze schläft"),
         ("Ñandú 😀", "日本語")]


def read(source, split="train"):
    return [(s.decode(), t.decode()) for s, t in source.pairs(split).as_numpy_iterator()]


def write_lines(path, lines, compress=False):
    text = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(text) if compress else text)
    return path


@pytest.fixture
def parallel_files(tmp_path):
    return (write_lines(tmp_path / "train.en", [p[0] for p in PAIRS]),
            write_lines(tmp_path / "train.de.gz", [p[1] for p in PAIRS], compress=True))


def test_bundled_corpus():
    source = data.get_source("bible_en_es")
    assert (source.source_lang, source.target_lang) == ("en", "es")
    assert source.check("train").lines == 29_418 and source.check("dev").lines == 492
    first = read(source, "dev")[0]
    assert first[0].startswith("How the city sits solitary, that was full of people!")
    assert first[1].startswith("¡Como está sentada sola la ciudad populosa!")
    backwards = data.get_source("bible_en_es", source_lang="es", target_lang="en")
    assert read(backwards, "dev")[0] == first[::-1]
    with pytest.raises(data.CorpusError, match="has languages en and es, not en->fr"):
        data.get_source("bible_en_es", target_lang="fr")


def test_the_tatoeba_corpus_ships_with_its_attribution():
    source = data.get_source("tatoeba_en_es")
    assert (source.source_lang, source.target_lang) == ("en", "es")
    for split, lines in (("train", 135_351), ("dev", 2_766)):
        assert source.check(split).lines == lines
        # CC BY 2.0 FR: line n of the attribution file credits pair n.
        attribution = data.sources.BUNDLED_DIR / "tatoeba_en_es" / f"{split}.attribution.gz"
        with gzip.open(attribution, "rt", encoding="utf-8") as file:
            credits = file.read().splitlines()
        assert len(credits) == lines
        assert all(line.startswith("CC-BY 2.0 (France) Attribution: tatoeba.org #")
                   for line in credits)
    assert read(source, "dev")[0] == ("I lost.", read(source, "dev")[0][1])


def test_the_default_shuffle_buffer_holds_every_bundled_corpus_whole():
    # Local corpora are read in file order (the Bible by book, Tatoeba by length).
    for name in data.BUNDLED:
        assert data.get_source(name).check("train").lines <= data.input_pipeline.SHUFFLE_BUFFER


def test_parallel_text_files_plain_and_gzip(parallel_files):
    source = data.get_source(f"text:{parallel_files[0]},{parallel_files[1]}")
    assert read(source) == PAIRS
    with pytest.raises(data.CorpusError, match=r"has no split 'dev'; it has train"):
        source.pairs("dev")


def test_tsv_file(tmp_path):
    path = write_lines(tmp_path / "pairs.tsv", [f"{s}\t{t}" for s, t in PAIRS])
    assert read(data.get_source(f"tsv:{path}")) == PAIRS


def test_directory_with_splits(tmp_path, parallel_files):
    write_lines(tmp_path / "dev.tsv", ["a\tb"])
    source = data.get_source(str(tmp_path), source_lang="en", target_lang="de")
    assert source.splits() == ["train", "dev"]
    assert read(source) == PAIRS and read(source, "dev") == [("a", "b")]
    with pytest.raises(data.CorpusError, match="name its languages"):
        data.get_source(str(tmp_path))
    with pytest.raises(data.CorpusError, match="found neither train.en \\+ train.fr"):
        data.get_source(str(tmp_path), source_lang="en", target_lang="fr")


def test_missing_file_is_named(tmp_path, parallel_files):
    with pytest.raises(data.CorpusError, match=r"nope\.de: no such file"):
        read(data.get_source(f"text:{parallel_files[0]},{tmp_path / 'nope.de'}"))


def test_different_line_counts_name_both_files_and_the_line(tmp_path, parallel_files):
    short = write_lines(tmp_path / "short.de", ["eins", "zwei"])
    with pytest.raises(data.CorpusError, match=r"short\.de has 2 lines but .*train\.en has more "
                                               r"\(line 3 of .*train\.en has no counterpart\)"):
        read(data.get_source(f"text:{parallel_files[0]},{short}"))
    long = write_lines(tmp_path / "long.de", ["1", "2", "3", "4"])
    with pytest.raises(data.CorpusError, match=r"train\.en has 3 lines but .*long\.de has more "
                                               r"\(line 4 of"):
        read(data.get_source(f"text:{parallel_files[0]},{long}"))


def test_invalid_utf8_is_refused_with_file_and_line_or_replaced(tmp_path, parallel_files):
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"gut\nschl\xe4ft\ngut\n")  # Latin-1, not UTF-8, on line 2
    spec = f"text:{parallel_files[0]},{bad}"
    with pytest.raises(data.CorpusError, match=r"bad\.de:2: invalid UTF-8 at byte 5"):
        read(data.get_source(spec))
    replaced = read(data.get_source(spec, invalid_utf8="replace"))
    assert replaced[1][1] == "schl\ufffdft"


def test_binary_empty_and_corrupt_files_are_refused(tmp_path, parallel_files):
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\x01\x02binary\n" * 3)
    with pytest.raises(data.CorpusError, match=r"model\.bin:1: contains a NUL byte"):
        read(data.get_source(f"text:{parallel_files[0]},{binary}"))
    empty_en, empty_de = tmp_path / "e.en", tmp_path / "e.de"
    empty_en.write_text("")
    empty_de.write_text("")
    with pytest.raises(data.CorpusError, match=r"e\.en and .*e\.de are empty"):
        read(data.get_source(f"text:{empty_en},{empty_de}"))
    truncated = tmp_path / "cut.de.gz"
    truncated.write_bytes(parallel_files[1].read_bytes()[:-12])
    with pytest.raises(data.CorpusError, match=r"cut\.de\.gz: unreadable after line"):
        read(data.get_source(f"text:{parallel_files[0]},{truncated}"))


def test_tsv_lines_need_exactly_one_tab(tmp_path):
    path = write_lines(tmp_path / "pairs.tsv", ["a\tb", "no tab here", "c\td"])
    with pytest.raises(data.CorpusError, match=r"pairs\.tsv:2: expected one tab .* found 0"):
        read(data.get_source(f"tsv:{path}"))


def test_specs_that_are_not_sources(tmp_path, parallel_files):
    with pytest.raises(data.CorpusError, match="a path must be a directory"):
        data.get_source(str(parallel_files[0]))
    with pytest.raises(data.CorpusError, match="expected text:SOURCE_FILE,TARGET_FILE"):
        data.get_source("text:only_one_file")
    with pytest.raises(data.CorpusError, match="TFDS dataset 'no_such_dataset_xyz'"):
        data.get_source("no_such_dataset_xyz")


class LocalParallelText(tfds.core.GeneratorBasedBuilder):
    """A real TFDS builder over local sentence pairs: the download path without a network."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.Translation(languages=("en", "de")),
            supervised_keys=("en", "de"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(PAIRS),
                "validation": self._generate_examples(PAIRS[:1])}

    def _generate_examples(self, pairs):
        for index, (en, de) in enumerate(pairs):
            yield index, {"en": en, "de": de}


def test_tfds_source_on_a_locally_built_dataset(tmp_path):
    with pytest.raises(data.CorpusError, match="cannot be read: .*Prepare it with download=True"):
        data.get_source("tfds:local_parallel_text", tfds_data_dir=str(tmp_path)).pairs("train")
    source = data.get_source("tfds:local_parallel_text", tfds_data_dir=str(tmp_path),
                             download=True)
    assert (source.source_lang, source.target_lang) == ("en", "de")
    assert sorted(read(source)) == sorted(PAIRS)
    assert read(source, "dev") == PAIRS[:1]  # our "dev" is TFDS's "validation"
    backwards = data.get_source("local_parallel_text", source_lang="de", target_lang="en",
                                tfds_data_dir=str(tmp_path))
    assert sorted(read(backwards)) == sorted((t, s) for s, t in PAIRS)
    with pytest.raises(data.CorpusError, match="has no language 'fr'; it has en, de"):
        data.get_source("tfds:local_parallel_text", target_lang="fr",
                        tfds_data_dir=str(tmp_path))


@pytest.mark.parametrize("name,languages", [("wmt14_translate/de-en", ("de", "en")),
                                            ("wmt_t2t_translate/de-en", ("de", "en")),
                                            ("ted_hrlr_translate/pt_to_en", ("pt", "en"))])
def test_tfds_translation_datasets_by_name(name, languages, bible_vocab):
    with tfds.testing.mock_data(num_examples=12):
        source = data.get_source(name)
        assert (source.source_lang, source.target_lang) == languages
        texts = sorted(data.normalize_whitespace(t.decode())
                       for _, t in source.pairs("train").as_numpy_iterator())
        batches = list(data.pipeline(source, bible_vocab, "train", batch_tokens=4096,
                                     training=False).as_numpy_iterator())
    (source_ids, target_input_ids), target_ids = batches[0]
    assert source_ids.dtype == target_input_ids.dtype == target_ids.dtype == np.int32
    decoded = sorted(t.decode() for _, target in batches
                     for t in bible_vocab.detokenize(target).numpy())
    assert len(texts) == 12 and decoded == [t for t in texts if t]
