"""`Trainer(config, model_dir).fit()`: everything kt-train does, from Python.

    from keras_transformer import model_dir, trainer

    config = model_dir.RunConfig(
        model=model_dir.ModelConfig(hparams_name="transformer_small"),
        data=model_dir.DataConfig(corpus="tatoeba_en_es"),
        batching=model_dir.BatchingConfig(batch_tokens=4096),
        optimization=model_dir.OptimizationConfig(train_steps=2000))
    result = trainer.Trainer(config, "runs/small", max_minutes=10).fit()
    print(result.step, result.evaluations[-1])

The run writes model_dir as kt-train does (config.json, vocab.model, checkpoints/, logs/; best/
and averaged/ as configured) under the devices' tf.distribute strategy (trainer/distribute.py).
Calling `fit` again, or `Trainer.resume(model_dir).fit()`, continues from the last checkpoint;
a configuration that contradicts the saved model or data is refused (`model_dir.ConfigError`).
"""

import dataclasses
import pathlib
import typing

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import glove
from keras_transformer.model_dir import checkpoints, config, config_file, layout
from keras_transformer.model_dir.config_file import with_hparams
from keras_transformer.runtime import devices
from keras_transformer.trainer import distribute, init_from, keep_best, preparation, resolution
from keras_transformer.trainer.loop import TrainingLoop
from keras_transformer.trainer.preparation import bucket_growth, update_batches

ConfigError = config.ConfigError


class TrainingResult(typing.NamedTuple):
    """What a `Trainer.fit` did (kt-train prints it).

    status: "done", "stopped" (by `stopped_by`, a signal's name), or "nothing to do" (the step
        budget reached, or early stopping ended the run before).
    """

    status: str
    step: int
    train_steps: int
    model: keras.Model
    resumed_from: pathlib.Path = None  # the checkpoint this fit started from, if any
    checksum: float = None  # the sum of the weights' absolute values, at the end
    train_step_traces: int = 0  # how often the train step was traced (a replica's)
    evaluations: list = []  # [(step, {result name: value})] of this fit's dev evaluations
    stopped_by: str = None
    averaged: pathlib.Path = None  # checkpoints.average_last's output


def policy_of(mixed_precision, *, measure_cpu=None):
    """The `devices.PolicyChoice` of a compute.mixed_precision value; "auto" asks the devices
    (`devices.choose_policy`, which calls `measure_cpu` on a CPU)."""
    if mixed_precision == "auto":
        return devices.choose_policy(measure_cpu=measure_cpu)
    return devices.PolicyChoice("float32" if mixed_precision == "none" else mixed_precision,
                                f"--mixed_precision {mixed_precision}")


def cpu_measurement(distribution, hp, batch_tokens):
    """bfloat16 against float32 on this CPU at the model's widths (`devices.cpu_measurement`);
    with several workers, the slowest worker's speed in each dtype (a synchronous step waits
    for it), so that all choose the same precision, and the faster for the cluster."""
    width = 4 * hp.d_model if hp.model == "mt_lstm" else hp.d_ff  # an LSTM's four gates
    measurement = devices.cpu_measurement(hp.d_model, width, batch_tokens)
    if not distribute.is_multi_worker(distribution):
        return measurement
    workers = distribute.cluster_workers()
    speeds = [0.0] * (2 * workers)  # each worker fills its own pair; the sum gathers them
    index = distribute.worker_index(distribution)
    speeds[2 * index:2 * index + 2] = measurement.float32_gflops, measurement.bfloat16_gflops
    gathered = distribute.sum_over_workers(distribution, speeds)
    return measurement._replace(float32_gflops=float(min(gathered[0::2])),
                                bfloat16_gflops=float(min(gathered[1::2])), workers=workers)


@dataclasses.dataclass
class _Setup:
    """What `Trainer.fit` prepares before training: the resolved run and its parts."""

    run: config.RunConfig
    hp: kt.HParams
    distribution: tf.distribute.Strategy
    chief: bool
    corpus: object  # a data.sources source
    vocabulary: data.Vocabulary
    batches: data.UpdateBatches  # how an update's tokens are cut into this worker's batches
    words: glove.WordVocabulary = None
    glove_matrix: np.ndarray = None
    precision: devices.PolicyChoice = None  # the dtype policy, and why


class Trainer:
    """Trains the model a `model_dir.RunConfig` describes into `model_dir` (module docstring).

    Args:
        config: the run's `model_dir.RunConfig`; model.hparams is resolved from
            model.hparams_name and model.hparams_override when empty.
        model_dir: where the run's files go, and are resumed from.
        vocab: a SentencePiece model to use (built there from the training data if the file does
            not exist); default: model_dir/vocab.model, built with `build_vocab_size` ids.
        build_vocab_size: ids in a vocabulary this run builds (default: the corpus's,
            `data.default_vocab_size`).
        download: let TFDS download and prepare the dataset (needs network).
        log_every: steps between progress lines.
        max_minutes: stop (with a checkpoint and an evaluation) after this many minutes of
            training; `fit` again continues.

    As kt-train does, `fit` sets Keras's global random seed (optimization.seed) and dtype policy
    (compute.mixed_precision) for the run.
    """

    def __init__(self, config, model_dir, *, vocab=None, build_vocab_size=None, download=False,
                 log_every=100, max_minutes=None):
        self.config = with_hparams(config)
        self.model_dir = pathlib.Path(model_dir)
        self.vocab, self.build_vocab_size, self.download = vocab, build_vocab_size, download
        self.log_every, self.max_minutes = log_every, max_minutes
        self._resolved = None  # a resolution made with the Trainer, for its first fit

    @classmethod
    def _of(cls, resolved, model_dir, kwargs):
        trainer = cls(resolved.run, model_dir, **kwargs)
        trainer._resolved = resolved
        return trainer

    @classmethod
    def with_changes(cls, model_dir, changes, **kwargs):
        """A Trainer of the run kt-train trains given the flags `changes` ({(section, field):
        value}, what the user set): model_dir's saved run (a new one: the defaults) with them
        applied, resolved and checked now (`resolution.resolve`). `kwargs` as for `Trainer`."""
        return cls._of(resolution.resolve(model_dir, changes=changes), model_dir, kwargs)

    @classmethod
    def resume(cls, model_dir, **kwargs):
        """A Trainer that continues the run saved in model_dir, with its configuration."""
        resolved = resolution.resolve(model_dir, changes={})
        if resolved.saved is None:
            raise ConfigError(f"{model_dir} holds no run to resume (no {layout.CONFIG_FILE})")
        return cls._of(resolved, model_dir, kwargs)

    def fit(self):
        """Trains to optimization.train_steps (or the time limit, a signal, early stopping);
        returns a `TrainingResult`."""
        setup = self._setup()
        run, hp = setup.run, setup.hp
        train_steps = run.optimization.train_steps or hp.train_steps
        with setup.distribution.scope():
            model, optimizer = self._compiled_model(setup, train_steps)
            saved = checkpoints.CheckpointDirectory(
                checkpoints.default_directory(self.model_dir), run.checkpoints.keep)
            restored = saved.restore_latest(model)
            initialized = None
            if restored is None and run.model.init_from:
                initialized, update = init_from.initialize(
                    model, run.model.init_from, run.model.init_optimizer,
                    setup.vocabulary if run.model.update_vocab else None, self.model_dir)
                print(f"initialized from {initialized}"
                      f"{' with its optimizer' if run.model.init_optimizer else ''}"
                      f"{', ' + update if update else ''}", flush=True)
        step = checkpoints.step_of(model)
        self._print_start(setup, model, restored, step, train_steps)
        result = TrainingResult("nothing to do", step, train_steps, model, restored)
        if step >= train_steps:
            print(f"nothing to do: step {step} >= train_steps {train_steps}")
            return result
        best = self._keep_best(setup)
        if best is not None and best.stopped:
            print(f"nothing to do: early stopping ended this run ({best.since} evaluations "
                  f"without improvement; {best.describe()}); raise early_stopping to go on")
            return result
        loop = TrainingLoop(self, setup, model=model, optimizer=optimizer, saved=saved,
                            best=best, train_steps=train_steps, step=step)
        return loop.run_fit(result, evaluate_first=initialized is not None)

    def _setup(self):
        model_dir = self.model_dir
        resolved = self._resolved
        if (resolved is None or resolved.run is not self.config  # none, or config replaced
                or not resolution.is_current(resolved, model_dir)):  # another run wrote there
            resolved = resolution.resolve(model_dir, run=self.config)
        self._resolved = None  # this fit writes config.json and checkpoints: resolve anew
        run = resolved.run
        hp = run.model.hparams
        vocab = self.vocab
        if resolved.init_source is not None:
            vocab = init_from.check_vocabulary(run.model.init_from, vocab,
                                               run.model.update_vocab)
        distribution = distribute.strategy()
        preparation.check_workers(run, distribution, model_dir, self.max_minutes)
        batches = update_batches(run, distribution)  # refused here, before anything is built
        preparation.warn_about_devices(distribution, run.compute.jit_compile)
        keras.utils.set_random_seed(run.optimization.seed)
        precision = policy_of(run.compute.mixed_precision, measure_cpu=lambda: cpu_measurement(
            distribution, hp, run.batching.batch_tokens))
        keras.mixed_precision.set_global_policy(precision.policy)
        corpus = run.data.open(self.download)
        model_dir.mkdir(parents=True, exist_ok=True)
        chief = distribute.is_chief(distribution)
        vocabulary = preparation.prepare_vocabulary(
            model_dir, corpus, vocab=vocab, vocab_size=run.model.vocab_size,
            build_size=self.build_vocab_size or data.default_vocab_size(run.data.corpus),
            write=chief)
        setup = _Setup(run, hp, distribution, chief, corpus, vocabulary, batches,
                       precision=precision)
        self._prepare_words(setup, resolved.restoring)
        setup.run = dataclasses.replace(setup.run.updated({
            ("model", "vocab_size"): vocabulary.vocab_size,
            ("data", "source_lang"): corpus.source_lang,
            ("data", "target_lang"): corpus.target_lang}), versions=config_file.versions())
        if chief:
            config_file.save(setup.run, model_dir)
        return setup

    def _prepare_words(self, setup, restoring):
        if setup.hp.model != "mt_lstm":
            return
        setup.words, setup.glove_matrix = preparation.prepare_words(
            setup.run.model, self.model_dir, restoring=restoring, write=setup.chief)
        setup.run = setup.run.updated({
            ("model", "source_vocab_size"): setup.words.vocab_size,
            ("model", "embedding_dim"): (setup.run.model.embedding_dim
                                         if setup.glove_matrix is None
                                         else setup.glove_matrix.shape[1])})

    def _compiled_model(self, setup, train_steps):
        run, hp = setup.run, setup.hp
        model = kt.build_model(hp, setup.vocabulary.vocab_size, run.model.source_vocab_size,
                               run.model.embedding_dim, source_embedding=setup.glove_matrix)
        optimizer = kt.build_optimizer(hp, train_steps, run.optimization.ema_decay)
        model.compile(optimizer=optimizer, loss=kt.build_loss(hp),
                      metrics=[kt.TokenAccuracy(), kt.Perplexity(), kt.TargetTokens()],
                      jit_compile=run.compute.jit_compile,
                      accumulate_steps=run.batching.accumulate_steps,
                      report_batch_shape=True)  # named in the message of a non-finite loss
        return model, optimizer

    def _print_start(self, setup, model, restored, step, train_steps):
        run, distribution = setup.run, setup.distribution
        replicas = distribution.num_replicas_in_sync
        multi_worker = distribute.is_multi_worker(distribution)
        chosen = (f" (--mixed_precision auto: {setup.precision.reason})"
                  if run.compute.mixed_precision == "auto" else "")
        print(f"{'resuming from ' + str(restored) if restored else 'starting'} at step {step} "
              f"of {train_steps}: {run.model.hparams_name} ({model.count_params():,} "
              f"parameters), {setup.corpus!r}, vocabulary {setup.vocabulary.vocab_size}, "
              f"{replicas} replica(s) on {devices.describe_devices()}, "
              f"{keras.mixed_precision.global_policy().name}{chosen}"
              f"{', XLA' if run.compute.jit_compile else ''}, model_dir {self.model_dir}",
              flush=True)
        share = setup.batches
        batching = run.batching
        print(f"each update: {batching.accumulate_steps} micro-batch(es) x "
              f"{batching.batch_tokens:,} padded tokens a side over {replicas} replica(s) = "
              f"{share.update_tokens:,} padded tokens a side"
              + (f"; a replica's batches hold {share.batch_tokens:,}" if multi_worker else ""),
              flush=True)
        if run.compute.jit_compile:
            growth = bucket_growth(run)
            shapes = data.batch_shapes(run.data.max_pair_length, share.batch_tokens,
                                       share.size_multiple, step=growth)
            print(f"XLA compiles the train step once for each of {len(shapes)} batch shapes "
                  f"(padded lengths {', '.join(str(width) for _, width in shapes)}; "
                  f"bucket_growth {growth:g})", flush=True)

    def _keep_best(self, setup):
        metric = setup.run.evaluation.keep_best
        if not metric:
            return None
        if "dev" not in setup.corpus.splits():
            raise ConfigError(f"evaluation.keep_best needs a dev split to evaluate on; "
                              f"{setup.corpus!r} has none")
        return keep_best.KeepBest(self.model_dir, metric, setup.run.evaluation.early_stopping)
