import contextlib
import fcntl
import gc
import gzip
import io
import itertools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

# Tracing allocates millions of short-lived objects, and Python's cyclic collector at its
# defaults (a young collection every 700 allocations, a full one after 100 of them) took 4-7% of
# a module's time: test_translation_tools, 3.5-5.6 s of 75-106 s, 12 full collections of
# 0.25-0.4 s (gc.callbacks, 2026-11-30). A young collection every 50,000 allocations instead,
# a full one after 200 of them (10 million allocations: cyclic garbage lives longer, the
# workers peaked at 3.6 and 4.6 GB against 4.3 and 4.1). Set before the imports below: set
# after them, that module still made 862-863 young collections (2.0 s, against 0.8), for a
# reason not found. Over a whole run the workers' collections took 30 s and 18 s, now 6 and 15
# (the commands the tests start in fresh processes keep Python's defaults).
gc.set_threshold(50_000, 20, 10)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# --mixed_precision auto's and --dtype auto's measurements (keras_transformer/runtime/
# precision_probe.py) cached for the suite's processes, not in the user's ~/.cache; decoding's
# written below (xdist's workers inherit the variable and the file).
_NEW_CACHE = "KERAS_TRANSFORMER_CACHE" not in os.environ
os.environ.setdefault("KERAS_TRANSFORMER_CACHE", tempfile.mkdtemp(prefix="kt-test-cache-"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# An xdist worker's share of the cores for TensorFlow (and the commands it starts), not all of
# them in each: on 2 cores, 2 workers of 2 threads each took the suite 848 s and one thread each
# 718 s (2026-11-25); the copy task's training 81 s and 23 s. Only in workers: the controller's
# environment is theirs too.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _threads = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(_variable, _threads)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# "ci": the same examples on every run, few enough for the suite's budget; "campaign": the long
# form, new examples each run (--hypothesis-profile campaign).
_SLOW_OK = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                      HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=25, derandomize=True, database=None, **_SLOW_OK)
settings.register_profile("campaign", max_examples=1000, database=None, **_SLOW_OK)
settings.load_profile("ci")



def write_decoding_measurement(directory, float32_gflops, bfloat16_gflops):
    """Writes `directory`/precision.json as the probe would after measuring this machine at
    decoding's shape (`--dtype auto` reads it where KERAS_TRANSFORMER_CACHE names
    `directory`); returns `directory`."""
    from keras_transformer.runtime import devices, precision_probe

    key = precision_probe.machine_key(devices.cpu_flags(), devices.cores_available(),
                                      precision_probe.DECODING_SHAPE, forward_only=True)
    (pathlib.Path(directory) / precision_probe.CACHE_FILE).write_text(json.dumps({key: {
        "float32_gflops": float32_gflops, "bfloat16_gflops": bfloat16_gflops,
        "measured": "2026-12-07"}}), encoding="utf-8")
    return directory


# bfloat16 at 0.6x float32 (the AMX-hidden Xeon's), so that every command and Translator
# decodes in float32 under --dtype auto, as the tests' expectations were written, on every CPU
# kind; the tests of --dtype auto write their own. What the commands say of it:
SUITE_DTYPE_REASON = ("--dtype auto: bfloat16 matmuls ran 0.59x float32 here (166 against 281 "
                      "GFLOP/s at 128x512x2048, forward only, measured 2026-12-07, cached)")
if _NEW_CACHE:
    write_decoding_measurement(os.environ["KERAS_TRANSFORMER_CACHE"], 281.0, 166.0)


# The order xdist (--dist loadfile --no-loadscope-reorder in pyproject.toml) hands out whole
# modules in (each worker gets the next when two or fewer of its tests are left); the suite's
# wall time is its busiest worker's. The longest first (seconds of test time, a run of
# 2026-11-28 on a Cascade Lake Xeon with --durations), so the many short ones even out the end.
_FIRST = ("test_distributed",  # 250, of which the replica report 205
          "test_trainer",  # 330-400
          "test_parsing",  # 200, of which the parser's training 86
          "test_docs", "test_markup_translation", "test_cove_from_runs",  # 130 ... 100
          "test_notebook", "test_jax", "test_translation_tools", "test_export",  # 90 ... 70
          "test_demo", "test_training", "test_fine_tuning", "test_input_pipeline")  # 60 ... 40


# Fixtures that train or trace for 20 s or more (2 workers, Cascade Lake): every test using one is
# `slow` too, so that `pytest -m "not slow"` (the inner loop; CI runs everything) builds none.
_SLOW_FIXTURES = {"replicas_report", "both", "demo_run", "mt_lstm_run", "six_steps"}


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest as found
    for item in items:
        if _SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _seeded():
    keras.utils.set_random_seed(1234)


@contextlib.contextmanager
def made_once(tmp_path_factory, name):
    """A directory shared by the session's pytest-xdist workers: yields (directory, done), done
    True when another worker already made it. The first worker holds a lock while it makes it,
    so the others wait for it instead of making their own copy at the same time."""
    root = pathlib.Path(tmp_path_factory.getbasetemp())
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # the temporary root all workers share
    directory = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = (directory / ".done").exists()
        directory.mkdir(exist_ok=True)
        yield directory, done
        (directory / ".done").touch()


# transformer_tiny trained 300 steps on the bundled corpus, with its 2,000-id vocabulary: made
# by tests/make_trained_tiny.py and committed (training it took the suite's first 90 s).
TRAINED_TINY = pathlib.Path(__file__).with_name("data") / "trained_tiny"
TRAINED_STEPS = 300


@pytest.fixture(scope="session")
def bible_vocab_path():
    """A 2,000-id vocabulary built from the bundled corpus (trained_tiny's; do not write it)."""
    return TRAINED_TINY / "vocab.model"


@pytest.fixture
def bible_vocab(bible_vocab_path, _seeded):
    """Loaded after the test's seeding: tf.random.set_seed drops tensorflow-text's tokenizer."""
    from keras_transformer import data

    return data.Vocabulary.load(bible_vocab_path)


@pytest.fixture(scope="session")
def trained_model_dir(tmp_path_factory):
    """A kt-train model_dir: transformer_tiny trained 300 steps on the bundled corpus (a copy of
    tests/data/trained_tiny, once for all workers, which tests may write beside)."""
    with made_once(tmp_path_factory, "trained") as (directory, done):
        model_dir = directory / "run"
        if not done:
            shutil.copytree(TRAINED_TINY, model_dir)
    return model_dir


@pytest.fixture(scope="session")
def trained(trained_model_dir):
    """`model_dir.load(trained_model_dir)`: the model, vocabulary, run config and checkpoint."""
    from keras_transformer import model_dir

    return model_dir.load(trained_model_dir)


@pytest.fixture(scope="session")
def markup_run(tmp_path_factory):
    """A model_dir of transformer_tiny trained 2 steps with --markup_rate 0.5 on 400 bundled
    verses (enough to decode with), once for all workers."""
    from test_trainer import kt_train

    with made_once(tmp_path_factory, "markup") as (directory, done):
        run = directory / "run"
        if not done:
            (directory / "corpus").mkdir()
            corpus = write_corpus_subset(directory / "corpus", train=400, dev=40)
            trained = kt_train(run, corpus, "--hparams", "transformer_tiny", "--train_steps",
                               "2", "--markup_rate", "0.5")
            assert trained.returncode == 0, trained.stderr
            assert "MarkupAugmentedSource(" in trained.stdout
    return run


# The flags of `production_export`, for kt-translate runs that must translate as it does: inputs
# of 16 tokens at most, so that a sentence of the test document is too long; greedy search.
PRODUCTION_FLAGS = ("--max_input_length", "16", "--beam_size", "1")


CALIBRATION_LINES = 60  # bundled dev pairs kt-calibrate fits `calibrated_run` on


@pytest.fixture(scope="session")
def calibrated_run(trained_model_dir, tmp_path_factory):
    """A copy of the trained model_dir (its checkpoints linked) calibrated by kt-calibrate on
    the first CALIBRATION_LINES bundled dev pairs with PRODUCTION_FLAGS, once for all workers:
    (model_dir, the directory holding dev.en and dev.es)."""
    from keras_transformer.export import calibrate

    with made_once(tmp_path_factory, "calibrated") as (directory, done):
        model_dir = directory / "run"
        if not done:
            model_dir.mkdir()
            for name in ("config.json", "vocab.model"):
                shutil.copy(trained_model_dir / name, model_dir / name)
            (model_dir / "checkpoints").symlink_to(trained_model_dir / "checkpoints")
            for lang in ("en", "es"):
                (directory / f"dev.{lang}").write_text("".join(bundled_lines(
                    "dev", lang, CALIBRATION_LINES)), encoding="utf-8")
            result = run_main(calibrate.main, "--model_dir", model_dir, "--input",
                              directory / "dev.en", "--reference", directory / "dev.es",
                              *PRODUCTION_FLAGS)
            assert result.returncode == 0, result.stderr
            assert f"fitted on {CALIBRATION_LINES} sentences" in result.stderr
    return model_dir, directory


@pytest.fixture(scope="session")
def production_export(calibrated_run, tmp_path_factory):
    """kt-export --documents --glossaries of the calibrated trained model (PRODUCTION_FLAGS,
    at most 3 sentences a request), once for all workers: the version directory."""
    from keras_transformer.export import export_command

    with made_once(tmp_path_factory, "production") as (directory, done):
        output = directory / "export"
        if not done:
            exported = run_main(export_command.main, "--model_dir", calibrated_run[0], "--output",
                                output, "--documents", "--glossaries", "--max_batch_size", "3",
                                *PRODUCTION_FLAGS)
            assert exported.returncode == 0, exported.stderr
            assert ", translate_document, translate_with_glossary; with a confidence" in (
                exported.stdout), exported.stdout
    return output / "1"


def bundled_lines(split, lang, count=None):
    """The first `count` lines (all without it) of the bundled corpus's split, newlines kept."""
    from keras_transformer import data

    path = pathlib.Path(data.__file__).parent / "corpora" / "bible_en_es" / f"{split}.{lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return list(itertools.islice(lines, count))


def write_corpus_subset(directory, **counts):
    """`directory` as a directory source (split.en, split.es) holding the first counts[split]
    verses of each bundled split, e.g. `write_corpus_subset(d, train=400, dev=40)`."""
    for split, count in counts.items():
        for lang in ("en", "es"):
            (directory / f"{split}.{lang}").write_text(
                "".join(bundled_lines(split, lang, count)), encoding="utf-8")
    return directory


@pytest.fixture(scope="session")
def dev_sentences():
    """The first 24 (English, Spanish) dev pairs of the bundled corpus, as str."""
    from keras_transformer import data

    pairs = data.get_source("bible_en_es").pairs("dev").take(24).as_numpy_iterator()
    return [(en.decode("utf-8"), es.decode("utf-8")) for en, es in pairs]


def run_module(*argv, check=True):
    """`python -m argv...` in a fresh process: the CompletedProcess (text); with `check`, a
    non-zero exit fails the test showing both streams."""
    result = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                            timeout=900)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def run_main(main, *argv):
    """A command's `main(argv)` in this process, without a TensorFlow start-up to wait for: a
    CompletedProcess as `run_module` gives (the exit code, returned or argparse's SystemExit;
    what the command wrote to stdout and stderr)."""
    # Text streams over bytes: the commands write raw bytes to sys.stdout.buffer too.
    stdout, stderr = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main([str(arg) for arg in argv])
        except SystemExit as exit_info:
            code = exit_info.code
    texts = []
    for stream in (stdout, stderr):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8", errors="replace"))
    return subprocess.CompletedProcess(argv, code or 0, *texts)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_ids(rng, batch, length, vocab_size, min_id=2):
    """Token ids without pad (0) or eos (1)."""
    return rng.integers(min_id, vocab_size, size=(batch, length)).astype("int32")


def assert_roundtrip(layer, *inputs, **call_kwargs):
    """from_config(get_config()) with the same weights computes the same output."""
    expected = layer(*inputs, **call_kwargs)
    clone = layer.__class__.from_config(layer.get_config())
    clone(*inputs, **call_kwargs)  # builds
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(clone(*inputs, **call_kwargs)), np.asarray(expected),
                               rtol=1e-6, atol=1e-6)
    return clone
