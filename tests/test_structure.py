"""The house: one installed name, imports that point down, no circles, every command's --help,
and one text -> ids path."""

import ast
import contextlib
import importlib
import io
import os
import pathlib
import runpy
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

ROOT = pathlib.Path(__file__).parent.parent
# Repository folder -> installed package (setup.py's package_dir).
FOLDERS = {"keras_transformer": "keras_transformer", "data": "keras_transformer.data",
           "model_dir": "keras_transformer.model_dir", "trainer": "keras_transformer.trainer",
           "export": "keras_transformer.export", "demo": "keras_transformer.demo"}
# What each floor may import besides itself: the model library and data on the ground floor,
# the model_dir format above them, trainer and export side by side above it, the demo on top.
# (cli, _layout, errors, token_ids and the tree constraint, which reads token sequences as
# trees, are the ground floor's shared, model-free modules.)
SHARED = {"keras_transformer.cli", "keras_transformer._layout", "keras_transformer.errors",
          "keras_transformer.token_ids",
          "keras_transformer.search.constraints.tree"}
MAY_IMPORT = {
    "keras_transformer": set(),
    "keras_transformer.data": SHARED,
    "keras_transformer.model_dir": {"keras_transformer", "keras_transformer.data"},
    "keras_transformer.trainer": {"keras_transformer", "keras_transformer.data",
                                  "keras_transformer.model_dir"},
    "keras_transformer.export": {"keras_transformer", "keras_transformer.data",
                                 "keras_transformer.model_dir"},
    "keras_transformer.demo": {"keras_transformer", "keras_transformer.data",
                               "keras_transformer.model_dir", "keras_transformer.trainer",
                               "keras_transformer.export"},
}
# The model library's own floors (docs/architecture.md): what each sub-package may import
# besides itself and the library's shared modules (SHARED, and the package's face,
# keras_transformer/__init__.py, which imports every floor and which none imports). Layers know
# neither the search nor the training; the search does not know how models are built; the
# models are built from all of them.
LIBRARY_FLOORS = {
    "keras_transformer.runtime": set(),
    "keras_transformer.hparams": set(),
    "keras_transformer.layers": {"keras_transformer.runtime", "keras_transformer.hparams"},
    "keras_transformer.training": {"keras_transformer.runtime", "keras_transformer.hparams",
                                   "keras_transformer.layers"},
    "keras_transformer.search": {"keras_transformer.runtime", "keras_transformer.hparams",
                                 "keras_transformer.layers"},
    "keras_transformer.models": {"keras_transformer.runtime", "keras_transformer.hparams",
                                 "keras_transformer.layers", "keras_transformer.training",
                                 "keras_transformer.search"},
}
DOCUMENTED_MODULES = ["keras_transformer.trainer", "keras_transformer.trainer.task",
                      "keras_transformer.trainer.average", "keras_transformer.trainer.classify",
                      "keras_transformer.export",
                      "keras_transformer.export.translate", "keras_transformer.export.score",
                      "keras_transformer.export.calibrate",
                      "keras_transformer.export.attention_figures",
                      "keras_transformer.export.parse",
                      "keras_transformer.demo", "keras_transformer.data.build_vocab",
                      "keras_transformer.data.inspect", "keras_transformer.hparams",
                      "keras_transformer.trainer.import_model"]


def _modules():
    """{module name: path} of every module of the package, as installed."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _imports(path, modules):
    """The package's modules that `path` imports (at any depth of the file). A relative import
    fails: the floors are checked on absolute names, which the package uses throughout."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(f"{path}:{node.lineno}: a relative import; write it absolute "
                        f"(keras_transformer.<floor>...) so the floors can be checked")
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                     else node.module for alias in node.names]
        else:
            continue
        yield from (name for name in names if name in modules)


def _floor(module):
    """The package a module belongs to, in MAY_IMPORT's terms."""
    return max((package for package in MAY_IMPORT if module == package or
                module.startswith(package + ".")), key=len)


def _graph():
    modules = _modules()
    return {module: set(_imports(path, modules)) for module, path in modules.items()}


def test_every_import_points_down():
    wrong = []
    for module, imported in _graph().items():
        floor = _floor(module)
        for target in imported:
            target_floor = _floor(target)
            allowed = (target_floor == floor or target_floor in MAY_IMPORT[floor]
                       or target in MAY_IMPORT[floor])
            if floor == "keras_transformer.data" and target_floor == "keras_transformer":
                allowed = target in SHARED  # the pipeline does not know about the model
            if not allowed:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def _library_floor(module):
    """The sub-package of the model library `module` belongs to; "keras_transformer" for its
    shared modules and its face; None outside the library."""
    if _floor(module) != "keras_transformer":
        return None
    return next((floor for floor in LIBRARY_FLOORS
                 if module == floor or module.startswith(floor + ".")), "keras_transformer")


def _wrong_library_imports(graph):
    """["A imports B"] for each import inside the model library against LIBRARY_FLOORS. A
    `__main__` module is a command (`python -m keras_transformer.hparams`): it may import any
    floor."""
    wrong = []
    for module, imported in graph.items():
        floor = _library_floor(module)
        if floor is None or module == "keras_transformer" or module.endswith(".__main__"):
            continue
        for target in imported:
            target_floor = _library_floor(target)
            if target_floor is None or target in SHARED:
                continue
            # A shared module (every floor may import it) imports only shared ones.
            if (module in SHARED or floor == "keras_transformer"
                    or (target_floor != floor and target_floor not in LIBRARY_FLOORS[floor])):
                wrong.append(f"{module} imports {target}")
    return wrong


def test_the_model_librarys_floors_point_down():
    wrong = _wrong_library_imports(_graph())
    assert not wrong, "\n".join(wrong)


def test_a_layer_importing_the_search_or_training_fails_the_floors(tmp_path):
    graph = _graph()
    # As the source would say it, parsed as every module is ...
    wrong_layer = tmp_path / "wrong_layer.py"
    wrong_layer.write_text("def f():\n    from keras_transformer.search import beam\n")
    parsed = set(_imports(wrong_layer, graph))
    assert parsed == {"keras_transformer.search.beam"}
    assert _wrong_library_imports({**graph, "keras_transformer.layers.wrong": parsed}) == [
        "keras_transformer.layers.wrong imports keras_transformer.search.beam"]
    # ... and as edges of the graph: a layer, the search, a shared module.
    for layer, target in (("keras_transformer.layers.attention", "keras_transformer.search.beam"),
                          ("keras_transformer.layers.embedding",
                           "keras_transformer.training.losses"),
                          ("keras_transformer.search.decode",
                           "keras_transformer.models.transformer"),
                          ("keras_transformer.errors", "keras_transformer.runtime.backend"),
                          ("keras_transformer.search.constraints.tree",
                           "keras_transformer.search.processors")):
        assert target in graph and layer in graph
        wrong = _wrong_library_imports({**graph, layer: graph[layer] | {target}})
        assert wrong == [f"{layer} imports {target}"]


def _commands():
    """The modules behind the kt-* console scripts (_keras_transformer_commands.py)."""
    source = (ROOT / "_keras_transformer_commands.py").read_text(encoding="utf-8")
    return {node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run"
            and node.args and isinstance(node.args[0], ast.Constant)}


def test_no_module_imports_a_command_for_a_helper():
    commands = _commands()
    assert "keras_transformer.trainer.task" in commands and len(commands) == 13
    # kt-demo runs kt-train itself; `python -m X` is the command X.
    importers = {(module, target) for module, imported in _graph().items()
                 for target in imported & commands
                 if not module.endswith(".__main__") and module != "keras_transformer.demo.demo"}
    assert not importers, importers
    export_imports = {target for module, imported in _graph().items()
                      if module.startswith("keras_transformer.export") for target in imported}
    assert not {t for t in export_imports if t.startswith("keras_transformer.trainer")}


def test_no_import_circle():
    graph = _graph()
    state = {}

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                pytest.fail("import circle: " + " -> ".join(path[path.index(target):] +
                                                              [target]))
            if target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_package_installs_under_one_name(tmp_path, monkeypatch):
    outside = subprocess.run([sys.executable, "-c", "import data"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert outside.returncode == 1 and "No module named 'data'" in outside.stderr
    # From a clone's root the folder is on sys.path, and importing it by its folder's name
    # would load the package twice: refused, naming the right import. (In this process: a
    # fresh one would start TensorFlow, which keras_transformer imports, to say so.)
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(ImportError, match="import it as `from keras_transformer import trainer`"):
        importlib.import_module("trainer")
    assert "trainer" not in sys.modules
    ours = subprocess.run(
        [sys.executable, "-c", "import keras_transformer as kt; "
                               "print(kt.data.pipeline.__module__, kt.model_dir.load.__module__, "
                               "kt.export.Translator.__module__, kt.trainer.__name__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.split() == ["keras_transformer.data.input_pipeline",
                                   "keras_transformer.model_dir.loading",
                                   "keras_transformer.export.translator",
                                   "keras_transformer.trainer"]


def _help_of(run):
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), pytest.raises(SystemExit) as exit_:
        run()
    assert exit_.value.code == 0
    return stdout.getvalue()


def test_every_console_script_prints_its_help():
    scripts = [entry for entry in metadata.entry_points(group="console_scripts")
               if entry.value.startswith("_keras_transformer_commands:")]
    assert {entry.name for entry in scripts} == {
        "kt-vocab", "kt-train", "kt-average", "kt-translate", "kt-score", "kt-export",
        "kt-attention", "kt-parse", "kt-classify", "kt-demo", "kt-calibrate",
        "kt-import", "kt-shortlist"}
    for entry in scripts:
        assert "usage:" in _help_of(lambda: entry.load()(["--help"])), entry.name


@pytest.mark.parametrize("module", DOCUMENTED_MODULES)
def test_every_documented_python_m_form_prints_its_help(module, monkeypatch):
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    assert "usage:" in _help_of(lambda: runpy.run_module(module, run_name="__main__",
                                                         alter_sys=True))


def test_commands_hide_tensorflows_startup_lines_unless_verbose(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    # The console script as pip wrote it (the library's import hides nothing).
    kt_average = pathlib.Path(sys.executable).parent / "kt-average"

    def stderr_of(*flags):
        return subprocess.run([str(kt_average), "--model_dir", str(tmp_path), *flags], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120).stderr

    quiet = stderr_of()
    assert quiet.startswith("kt-average: error: ") and "no config.json" in quiet
    # TensorFlow's C++ start-up log (its oneDNN line is printed only on CPUs it tunes for,
    # e.g. with AVX-512; this one on every CPU).
    assert "absl::InitializeLog" not in quiet
    assert "absl::InitializeLog" in stderr_of("--verbose")


def test_pipeline_evaluation_and_translator_encode_text_alike(bible_vocab, tmp_path):
    from keras_transformer import data
    from keras_transformer.export import Translator
    from keras_transformer.trainer import evaluation

    max_length = 12
    texts = ["And God said, Let there be light: and there was light.",  # longer: cut
             "Jesus wept.", "\u3000 \t", "", "In the beginning God created the heaven and the "
             "earth, and the earth was without form, and void."]
    (tmp_path / "train.en").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (tmp_path / "train.es").write_text("\n".join(texts) + "\n", encoding="utf-8")
    source = data.directory_source(tmp_path, "en", "es")
    model = kt.build_model("transformer_tiny", bible_vocab.vocab_size)
    translator = Translator(model, bible_vocab, max_input_length=max_length)

    def rows(ids):
        return sorted(tuple(int(i) for i in row if i) for row in np.asarray(ids))

    by_translator = rows(translator.tokenize(tf.constant(texts))["source_ids"])
    by_evaluation = rows(evaluation.source_ids(bible_vocab, texts, max_length))
    by_pipeline = rows(np.concatenate([
        np.pad(source_ids, [(0, 0), (0, 64 - source_ids.shape[1])])
        for (source_ids, _), _ in data.pipeline(source, bible_vocab, "train", batch_tokens=64,
                                                max_pair_length=max_length, overlong="truncate",
                                                training=False).as_numpy_iterator()]))
    assert by_translator == by_evaluation
    # The pipeline drops the pairs with an empty side (blank and empty texts).
    assert by_pipeline == [row for row in by_translator if row]
    tokens = bible_vocab.tokenize(tf.constant(texts[:2])).to_list()
    assert len(tokens[0]) >= max_length  # the test's long text is cut
    assert tuple(tokens[0][:max_length - 1]) + (data.EOS_ID,) in by_translator
    assert tuple(tokens[1]) + (data.EOS_ID,) in by_translator
    assert by_translator.count(()) == 2  # blank and empty: no end of sentence


def test_a_crashing_test_fails_the_suite_instead_of_hanging_it(tmp_path):
    """The suite's own pytest configuration over a test that kills its worker (TensorFlow
    aborts so on a oneDNN error): pytest-xdist 3.8, the newest the registry has, hangs for good
    under --dist loadfile once it replaces a crashed worker (pytest-xdist issues 784 and 1323;
    the fixes are not released), so pyproject.toml sets --max-worker-restart 0."""
    (tmp_path / "test_crash.py").write_text("import os\n\n\ndef test_crash():\n    os.abort()\n"
                                            "\n\ndef test_after():\n    pass\n")
    for name in "abc":
        (tmp_path / f"test_{name}.py").write_text("def test_one():\n    pass\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(tmp_path), "-p", "no:cacheprovider", "-n", "2", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "crashed while running 'test_crash.py::test_crash'" in result.stdout, result.stdout
