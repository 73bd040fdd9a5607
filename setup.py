"""keras-transformer: the Transformer of "Attention Is All You Need" for TensorFlow/Keras."""

import pathlib

from setuptools import setup

HERE = pathlib.Path(__file__).parent
SUBPACKAGES = ("data", "model_dir", "trainer", "export", "demo")
# The model library's own sub-packages, under keras_transformer/ (docs/architecture.md).
LIBRARY_FLOORS = ("runtime", "hparams", "layers", "training", "search", "search.constraints",
                  "models")

# tensorflow, tensorflow-text and keras move in step: tensorflow-text 2.21.x is built against
# tensorflow 2.21.x, and keras 3.15.1 is the version tensorflow 2.21.0 resolves to. Bump together.
INSTALL_REQUIRES = [
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "keras==3.15.1",
    "sentencepiece==0.2.3",
    "sacrebleu==2.6.0",
    # TensorFlow 2.21 no longer installs it; tf.summary needs it to write logs.
    "tensorboard==2.21.0",
    "tensorflow-datasets==4.9.10",
    # tensorflow-datasets imports it but declares it only for Python < 3.9.
    "importlib_resources==7.1.0",
    # kt-attention and the demo draw attention heatmaps.
    "matplotlib==3.11.2",
    # trainer/checkpoints.py writes HDF5 through h5py's Python-file driver (a full disk is then
    # an OSError, not a crash): pinned with keras, which installs it.
    "h5py==3.14.0",
]

# The model library and model.fit run under KERAS_BACKEND=jax
# (keras_transformer/runtime/backend.py). 0.10.2 is the newest jax with Python 3.11 wheels on the
# registry this project installs from; the lent GPU machines have 0.11.2 and no TensorFlow, which
# bench/jax_step.py does without.
JAX = ["jax==0.10.2", "jaxlib==0.10.2"]
CTRANSLATE2 = "ctranslate2==4.8.5"
# kt-import --from marian reads model.safetensors with it (model_dir/hf_checkpoint.py; PyTorch's
# pytorch_model.bin needs nothing more).
SAFETENSORS = "safetensors==0.8.0"
EXTRAS_REQUIRE = {
    # kt-export --format ctranslate2 and kt-translate --engine ctranslate2 (export/ctranslate2.py).
    "ctranslate2": [CTRANSLATE2],
    "marian": [SAFETENSORS],
    "jax": JAX,
    # papermill and ipykernel execute notebooks/quickstart.ipynb in tests/test_notebook.py;
    # hypothesis generates hostile inputs in tests/test_hostile_input.py; tests/test_ctranslate2.py
    # checks the CTranslate2 export against the model; tests/test_marian.py imports a Marian
    # checkpoint; tests/test_jax.py trains under JAX beside TensorFlow; html5lib reads the pages
    # of tests/test_html_pages.py as browsers do (HTML5's tree building). pytest-xdist runs the
    # suite on every core (pyproject.toml's addopts).
    "test": ["pytest==9.2.0", "pytest-timeout==2.4.0", "pytest-xdist==3.8.0", "papermill==2.7.0",
             "ipykernel==7.4.0", "nbformat==5.11.1", "hypothesis==6.170.15", "html5lib==1.1",
             CTRANSLATE2, SAFETENSORS, *JAX],
    # bench/ compares against the peers users would pick instead (bench/peers.py). torch 2.13.0
    # is pinned exactly: a looser range pulls the newest build with GBs of CUDA packages.
    "bench": ["torch==2.13.0", "keras-hub==0.32.0", "transformers==5.23.0"],
}

setup(
    name="keras-transformer",
    version="0.1.0",
    description='The Transformer of "Attention Is All You Need" as Keras 3 layers on TensorFlow',
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    # Tested on 3.11; every pinned package has 3.12 wheels (Colab's Python), checked with pip
    # download --python-version 3.12.
    python_requires=">=3.11,<3.13",
    # One installed name: the repository keeps data/, model_dir/, trainer/, export/ and demo/ at
    # its root (the project's layout), and they install as keras_transformer.data, .model_dir,
    # .trainer, .export and .demo, so no top-level `data`, `trainer` or `export` lands in
    # site-packages beside users' own.
    packages=["keras_transformer", *(f"keras_transformer.{name}" for name in LIBRARY_FLOORS),
              *(f"keras_transformer.{name}" for name in SUBPACKAGES)],
    package_dir={"keras_transformer": "keras_transformer",
                 **{f"keras_transformer.{name}": name for name in SUBPACKAGES}},
    package_data={"keras_transformer.data": ["corpora/*/*"]},
    # The kt-* scripts start in a module beside the package, which hides TensorFlow's start-up
    # lines before anything under keras_transformer (and so TensorFlow) is imported.
    py_modules=["_keras_transformer_commands"],
    entry_points={"console_scripts": [
        "kt-vocab=_keras_transformer_commands:kt_vocab",
        "kt-train=_keras_transformer_commands:kt_train",
        "kt-average=_keras_transformer_commands:kt_average",
        "kt-translate=_keras_transformer_commands:kt_translate",
        "kt-export=_keras_transformer_commands:kt_export",
        "kt-attention=_keras_transformer_commands:kt_attention",
        "kt-score=_keras_transformer_commands:kt_score",
        "kt-calibrate=_keras_transformer_commands:kt_calibrate",
        "kt-parse=_keras_transformer_commands:kt_parse",
        "kt-classify=_keras_transformer_commands:kt_classify",
        "kt-demo=_keras_transformer_commands:kt_demo",
        "kt-import=_keras_transformer_commands:kt_import",
        "kt-shortlist=_keras_transformer_commands:kt_shortlist",
    ]},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
