"""Train a Transformer: `kt-train` or `python -m keras_transformer.trainer`.

    kt-train --model_dir runs/small --hparams transformer_small --data bible_en_es \\
        --batch_tokens 4096 --train_steps 20000

Steps count optimizer updates; with --accumulate_steps K each update is K micro-batches of
--batch_tokens.

CoVe's MT-LSTM trains the same way over fixed GloVe vectors of the source words:

    kt-train --model_dir runs/mt_lstm --hparams cove_mt_lstm --data bible_en_es \
        --glove glove.6B.50d.txt.bz2 --glove_words 100000 --batch_tokens 4096

The run's configuration goes to model_dir/config.json, the vocabulary to model_dir/vocab.model,
checkpoints to model_dir/checkpoints/, TensorBoard logs to model_dir/logs/. Running the same
command again resumes from the last checkpoint with the same step count and learning rate;
`--model_dir` alone is enough to resume, and flags that contradict the saved model or data are
refused.
"""

import argparse
import dataclasses
import os
import pathlib
import shutil
import sys

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import cli, data, devices
from keras_transformer.cli import at_least
from keras_transformer.data import glove
from keras_transformer.decoding import EXTRA_LENGTH
from keras_transformer.model_dir import averaging, checkpoints, config
from keras_transformer.trainer import callbacks, distribute, evaluation, init_from, keep_best

PRECISIONS = {"none": "float32", "mixed_float16": "mixed_float16",
              "mixed_bfloat16": "mixed_bfloat16", "auto": None}


def policy_of(mixed_precision):
    """The Keras dtype policy of a --mixed_precision value; "auto" asks the devices
    (`devices.auto_policy`)."""
    if mixed_precision == "auto":
        return devices.auto_policy()
    return PRECISIONS[mixed_precision]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-train", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    # Every flag defaults to None: a resumed run takes the saved value, a new run the default.
    defaults = config.RunConfig()
    add("--model_dir", required=True, help="where the run's files go (and are resumed from)")
    add("--hparams", dest="hparams_name",
        help=f"named hyper-parameter set (default {defaults.hparams_name}); "
             f"python -m keras_transformer.hparams lists them")
    add("--hparams_override", help='comma-separated overrides, e.g. "dropout=0.2,num_layers=4"')
    add("--data", help=f"data source (default {defaults.data}): bible_en_es, tatoeba_en_es, "
                       "a directory, text:SRC,TGT, tsv:FILE, a TFDS name such as "
                       "wmt14_translate/de-en, or ptb:DIR, a treebank to learn to parse "
                       "(data/treebank.py)")
    add("--source_lang", help="source language (default: the source's)")
    add("--target_lang", help="target language (default: the source's)")
    add("--tfds_data_dir", help="TFDS data directory")
    add("--download", action="store_true", default=None,
        help="let TFDS download and prepare the dataset (needs network)")
    add("--invalid_utf8", choices=data.sources.INVALID_UTF8_MODES,
        help="local files: refuse (error, default) or replace bytes that are not UTF-8")
    add("--vocab", help="SentencePiece model to use; built here from the training data if the "
                        "file does not exist (default: model_dir/vocab.model)")
    add("--vocab_size", dest="build_vocab_size", type=at_least(260),
        help="ids in a vocabulary built by this run (default 8000, or the paper's 16000 for a "
             "treebank; the paper's WMT en-de: ~37000)")
    add("--glove", help="an mt_lstm run (--hparams cove_mt_lstm): the GloVe text file (.txt, .gz, "
                        ".bz2) of the source words and their fixed vectors; the words go to "
                        f"model_dir/{config.WORDS_FILE}, the vectors into the checkpoints")
    add("--glove_words", type=at_least(1),
        help="with --glove: keep its first (most frequent) N words only (default: all)")
    add("--init_from",
        help="fine-tune: start this new run from another run's weights and vocabulary (its "
             "model_dir, for its default checkpoint, or a checkpoint directory); hparams default "
             "to its, and must describe the same model")
    add("--init_optimizer", action=argparse.BooleanOptionalAction, default=None,
        help="with --init_from: also take its optimizer state and step, continuing its "
             "learning-rate schedule (default: a fresh optimizer and schedule)")
    add("--max_length", type=at_least(2),
        help=f"longest pair in tokens (default {defaults.max_length})")
    add("--overlong", choices=("drop", "truncate"), help="longer pairs (default drop)")
    add("--batch_tokens", type=at_least(1),
        help=f"padded tokens per batch, each side, all replicas (default {defaults.batch_tokens})")
    add("--accumulate_steps", type=at_least(1),
        help=f"micro-batches of --batch_tokens per optimizer update, their gradients added up "
             f"token-exactly: an update sees accumulate_steps x batch_tokens tokens in the memory "
             f"of one micro-batch (default {defaults.accumulate_steps}; e.g. 25000 tokens on one "
             f"GPU: --batch_tokens 6250 --accumulate_steps 4)")
    add("--bucket_growth", type=at_least(1.0, float),
        help=f"growth factor (> 1) of the length buckets' boundaries, to which pairs are padded "
             f"(default {data.BUCKET_GROWTH}: {len(data.bucket_boundaries(256))} buckets up to "
             f"256 tokens; with --jit_compile {data.XLA_BUCKET_GROWTH}: "
             f"{len(data.bucket_boundaries(256, step=data.XLA_BUCKET_GROWTH))}, as XLA compiles "
             f"the step once for each)")
    add("--train_steps", type=at_least(1),
        help="total training steps (default: the hparams set's)")
    add("--eval_every", type=at_least(1),
        help=f"steps between dev evaluations (default {defaults.eval_every})")
    add("--eval_sentences", type=at_least(0),
        help=f"dev sentences translated for BLEU, spread evenly over the dev split (default "
             f"{defaults.eval_sentences}; 0: none)")
    add("--eval_beam_size", type=at_least(1),
        help=f"beam size of the dev BLEU (default {defaults.eval_beam_size}: greedy; beam "
             f"search uses the hparams' decode_alpha)")
    add("--keep_best", choices=sorted(keep_best.METRICS),
        help=f"keep the checkpoint with the best dev BLEU, chrF, loss or (a run on a treebank) "
             f"EVALB F1 in model_dir/"
             f"{config.BEST_DIR}/ (--keep_checkpoints never deletes it; kt-translate "
             f"--checkpoint best loads it)")
    add("--early_stopping", type=at_least(0),
        help="stop after this many evaluations without a better --keep_best metric (default "
             "0: never)")
    add("--keep_checkpoints", type=at_least(0),
        help=f"checkpoints kept (default {defaults.keep_checkpoints}; 0: all)")
    add("--checkpoint_every_steps", type=at_least(0),
        help=f"steps between checkpoints (default {defaults.checkpoint_every_steps}; 0: off)")
    add("--checkpoint_every_minutes", type=at_least(0, float),
        help=f"minutes between checkpoints (default {defaults.checkpoint_every_minutes}; 0: off)")
    add("--average_last", type=at_least(0),
        help=f"at the end, average the newest N checkpoints (paper 6.1: 5 for base models) into "
             f"model_dir/{config.AVERAGED_DIR}/, which kt-translate and kt-export then load "
             f"(default {defaults.average_last}: none)")
    add("--ema_decay", type=at_least(0.0, float),
        help="keep an exponential moving average of the weights with this decay (e.g. 0.9999; "
             "default 0: none); dev evaluation, kt-translate and kt-export then use the averaged "
             "weights (their --no-ema: the trained ones)")
    add("--mixed_precision", choices=sorted(PRECISIONS),
        help="compute dtype policy (default none: float32); auto: mixed_bfloat16 where the "
             "devices compute bfloat16 natively (GPUs from Ampere on, CPUs with AVX512_BF16 or "
             "AMX), else float32")
    add("--jit_compile", action=argparse.BooleanOptionalAction, default=None,
        help="compile the train step with XLA")
    add("--seed", type=int, help=f"random seed (default {defaults.seed})")
    add("--deterministic", action=argparse.BooleanOptionalAction, default=None,
        help="same batches and dropout on every run, also across a resume (slower)")
    add("--log_every", type=at_least(1), default=100,
        help="steps between progress lines (default 100)")
    add("--max_minutes", type=at_least(0, float),
        help="stop (with a checkpoint and an evaluation) after this many minutes of training; "
             "running the command again continues")
    cli.add_verbose_flag(parser)
    return parser.parse_args(argv)


def run_config(args):
    """Merges the flags the user set with model_dir's saved configuration."""
    given = {name: value for name, value in vars(args).items()
             if value is not None and name in config.field_names()}
    saved = config.load(args.model_dir)
    # The run whose hparams this one starts from: its own, or for a new fine-tuning run the
    # --init_from run's.
    base = saved
    if saved is None and given.get("init_from"):
        base = init_from.source_run(given["init_from"])
    name = given.get("hparams_name", base.hparams_name if base else
                     config.RunConfig.hparams_name)
    given["hparams_name"] = name
    if base is not None and name == base.hparams_name:
        # New overrides apply on top of the run's own (e.g. a lower learning rate to resume).
        if "hparams_override" in given:
            given["hparams"] = kt.HParams(**base.hparams).override_from_string(
                given["hparams_override"]).to_dict()
            given["hparams_override"] = ",".join(
                filter(None, (base.hparams_override, given["hparams_override"])))
        elif saved is None:
            given["hparams"], given["hparams_override"] = base.hparams, base.hparams_override
    else:
        given["hparams"] = kt.hparams.get(name).override_from_string(
            given.get("hparams_override", "")).to_dict()
    return config.merge(saved, given, args.model_dir)


def prepare_vocabulary(args, run, source, write):
    """model_dir/vocab.model: copied from --vocab, or built from the training data.

    Only the task that writes model_dir (`write`) builds or copies; the other workers of a
    multi-worker run read --vocab, or model_dir's vocabulary if it is already there.
    """
    target = pathlib.Path(args.model_dir) / config.VOCAB_FILE
    given = pathlib.Path(args.vocab) if args.vocab else target
    if not target.exists() and write:
        if not given.exists():
            size = args.build_vocab_size or data.default_vocab_size(run.data)
            print(f"building a {size}-id vocabulary from {source!r} into {given}",
                  flush=True)
            data.build_vocabulary(data.corpus_texts(source), size, given,
                                  whole_tokens=data.corpus_whole_tokens(source))
        if given != target:
            data.Vocabulary.load(given)  # refuse a bad file before it becomes the run's
            partial = target.with_name(target.name + ".partial")
            shutil.copyfile(given, partial)
            os.replace(partial, target)
    vocabulary = data.Vocabulary.load(target if target.exists() else given)
    if args.vocab and target.exists() and given.exists() and \
            given.read_bytes() != target.read_bytes():
        raise config.ConfigError(f"--vocab {given} differs from {target}, the vocabulary this "
                                 f"run was started with; drop --vocab to continue the run")
    if run.vocab_size is not None:
        vocabulary.check_size(run.vocab_size, f"{args.model_dir}/{config.CONFIG_FILE}")
    return vocabulary


def prepare_words(run, model_dir, restoring, write):
    """An mt_lstm run's source words: (a `glove.WordVocabulary`, its GloVe matrix or None).

    A run that starts reads --glove and writes its words to model_dir/words.txt (only the task
    that writes model_dir, `write`); a run restoring a checkpoint reads the words back, the
    vectors being in the checkpoint.
    """
    path = model_dir / config.WORDS_FILE
    if restoring and path.exists():
        return glove.WordVocabulary.load(path), None
    if not run.glove:
        raise config.ConfigError(
            f"--hparams {run.hparams_name} trains an MT-LSTM over fixed GloVe vectors of the "
            f"source words: give --glove PATH (a GloVe text file such as glove.6B.50d.txt.bz2)")
    print(f"reading {run.glove}"
          f"{f' (its first {run.glove_words:,} words)' if run.glove_words else ''}", flush=True)
    words = glove.WordVocabulary(*glove.read_glove(run.glove, run.glove_words))
    if write:
        partial = path.with_name(path.name + ".partial")
        words.save(partial)
        os.replace(partial, path)
    return words, words.embedding_matrix()


def check_mt_lstm(run, hp):
    """Refuses what an mt_lstm run cannot do, naming the flag."""
    if run.glove_words and not run.glove:
        raise config.ConfigError("--glove_words keeps the first words of --glove, which is not "
                                 "given")
    if hp.model != "mt_lstm":
        if run.glove:
            raise config.ConfigError(f"--glove: {run.hparams_name} is a Transformer, which "
                                     f"learns its own embeddings; --glove is for cove_mt_lstm")
        return
    if data.is_treebank(run.data):
        raise config.ConfigError(f"--data {run.data}: an MT-LSTM translates; parsing is the "
                                 f"Transformer's")
    if run.eval_beam_size > 1:
        raise config.ConfigError("--eval_beam_size: an MT-LSTM's dev BLEU is of greedy "
                                 "translations (1)")
    if run.init_from:
        raise config.ConfigError("--init_from: an MT-LSTM starts from GloVe, not from "
                                 "another run")


def update_batches(run, distribution):
    """How an update's tokens are cut into this worker's pipeline batches
    (`data.update_batches`); refused when the longest bucket's batches would hold no pair."""
    share = data.update_batches(run.batch_tokens, accumulate_steps=run.accumulate_steps,
                                replicas=distribution.num_replicas_in_sync,
                                per_replica=distribute.is_multi_worker(distribution),
                                local_replicas=len(distribution.extended.worker_devices))
    try:
        share.check(run.max_length)
    except ValueError as error:
        raise config.ConfigError(f"--batch_tokens {run.batch_tokens:,} with --accumulate_steps "
                                 f"{run.accumulate_steps} and --max_length {run.max_length}: "
                                 f"{error}") from None
    return share


def bucket_growth(run):
    """The growth factor of the length buckets: few shapes for XLA, which compiles each."""
    if run.bucket_growth is not None and not run.bucket_growth > 1:
        raise config.ConfigError(f"--bucket_growth must be above 1, got {run.bucket_growth}")
    return run.bucket_growth or (data.XLA_BUCKET_GROWTH if run.jit_compile else
                                 data.BUCKET_GROWTH)


def train(args):
    model_dir = pathlib.Path(args.model_dir)
    run = run_config(args)
    hp = kt.HParams(**run.hparams)
    if model_dir.exists() and not model_dir.is_dir():
        raise config.ConfigError(f"--model_dir {model_dir} is a file, not a directory")
    if run.average_last and 0 < run.keep_checkpoints < run.average_last:
        raise config.ConfigError(f"--average_last {run.average_last} needs at least as many "
                                 f"kept checkpoints; --keep_checkpoints is {run.keep_checkpoints}")
    if not run.ema_decay < 1:
        raise config.ConfigError(f"--ema_decay must be below 1, got {run.ema_decay}")
    if run.init_optimizer and not run.init_from:
        raise config.ConfigError("--init_optimizer needs --init_from")
    check_mt_lstm(run, hp)
    if run.init_from and not checkpoints.CheckpointDirectory(
            checkpoints.default_directory(model_dir)).paths():  # a resumed run needs it no more
        init_from.check_compatible(run.init_from, init_from.source_run(run.init_from).hparams,
                                   run.hparams)
        args.vocab = init_from.check_vocabulary(run.init_from, args.vocab)
    if run.early_stopping and not run.keep_best:
        raise config.ConfigError("--early_stopping needs --keep_best bleu|chrf|loss: the metric "
                                 "whose improvement it waits for")
    distribution = distribute.strategy()
    chief = distribute.is_chief(distribution)
    # First, before anything that could fail on one worker alone: the others would wait for it.
    if distribute.is_multi_worker(distribution):
        unshared = distribute.check_shared_model_dir(distribution, model_dir)
        if unshared:
            raise config.ConfigError(
                f"--model_dir {model_dir}: worker(s) {', '.join(map(str, unshared))} cannot read "
                f"what the chief writes there, so they would not resume from its checkpoints; "
                f"give every worker the same directory on a shared file system (e.g. NFS)")
    if run.keep_best and distribute.is_multi_worker(distribution):
        raise config.ConfigError("--keep_best: several workers evaluate after training only; "
                                 "keep the best with one worker")
    if args.max_minutes and distribute.is_multi_worker(distribution):
        raise config.ConfigError("--max_minutes would stop workers at different steps (each "
                                 "has its own clock); use --train_steps with several workers")
    share = update_batches(run, distribution)
    growth = bucket_growth(run)
    warning = devices.missing_gpu_warning(cli.STARTUP_LINES)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    if run.jit_compile and distribution.num_replicas_in_sync > 1:
        print(f"warning: --jit_compile over {distribution.num_replicas_in_sync} replicas puts "
              f"every replica's step in one XLA program, which Keras's own default avoids under "
              f"tf.distribute and which has not run where this project could test it (on "
              f"logical CPU devices XLA cannot reach the other devices' variables); if it fails, "
              f"train without --jit_compile (docs/gpus.md)", file=sys.stderr, flush=True)
    keras.utils.set_random_seed(run.seed)
    keras.mixed_precision.set_global_policy(policy_of(run.mixed_precision))
    source = run.source(bool(args.download))
    model_dir.mkdir(parents=True, exist_ok=True)
    vocabulary = prepare_vocabulary(args, run, source, write=chief)
    words, glove_matrix = None, None
    if hp.model == "mt_lstm":
        words, glove_matrix = prepare_words(run, model_dir, restoring=bool(
            checkpoints.CheckpointDirectory(checkpoints.default_directory(model_dir)).paths()),
            write=chief)
        run = dataclasses.replace(run, source_vocab_size=words.vocab_size, embedding_dim=(
            run.embedding_dim if glove_matrix is None else glove_matrix.shape[1]))
    run = dataclasses.replace(run, vocab_size=vocabulary.vocab_size,
                              source_lang=source.source_lang, target_lang=source.target_lang,
                              versions=config.versions())
    if chief:
        config.save(run, model_dir)

    train_steps = run.train_steps or hp.train_steps
    with distribution.scope():
        model = kt.build_model(hp, vocabulary.vocab_size, run.source_vocab_size,
                               run.embedding_dim, source_embedding=glove_matrix)
        model.report_batch_shape = True  # named in the message of a non-finite loss
        optimizer = kt.build_optimizer(hp, train_steps, run.ema_decay)
        model.compile(optimizer=optimizer, loss=kt.build_loss(hp),
                      metrics=[kt.TokenAccuracy(), kt.Perplexity(), kt.TargetTokens()],
                      jit_compile=run.jit_compile, accumulate_steps=run.accumulate_steps)
        saved = checkpoints.CheckpointDirectory(checkpoints.default_directory(model_dir),
                                                run.keep_checkpoints)
        restored = saved.restore_latest(model)
        initialized = None
        if restored is None and run.init_from:
            initialized = init_from.initialize(model, run.init_from, run.init_optimizer)
            print(f"initialized from {initialized}"
                  f"{' with its optimizer' if run.init_optimizer else ''}", flush=True)
    step = checkpoints.step_of(model)
    print(f"{'resuming from ' + str(restored) if restored else 'starting'} at step {step} of "
          f"{train_steps}: {run.hparams_name} ({model.count_params():,} parameters), "
          f"{source!r}, vocabulary {vocabulary.vocab_size}, {distribution.num_replicas_in_sync} "
          f"replica(s) on {devices.describe_devices()}, "
          f"{keras.mixed_precision.global_policy().name}"
          f"{', XLA' if run.jit_compile else ''}, model_dir {model_dir}", flush=True)
    replicas = distribution.num_replicas_in_sync
    print(f"each update: {run.accumulate_steps} micro-batch(es) x {run.batch_tokens:,} padded "
          f"tokens a side over {replicas} replica(s) = {share.update_tokens:,} padded tokens a "
          f"side" + (f"; a replica's batches hold {share.batch_tokens:,}"
                     if distribute.is_multi_worker(distribution) else ""), flush=True)
    if run.jit_compile:
        shapes = data.batch_shapes(run.max_length, share.batch_tokens, share.size_multiple,
                                   step=growth)
        print(f"XLA compiles the train step once for each of {len(shapes)} batch shapes (padded "
              f"lengths {', '.join(str(width) for _, width in shapes)}; --bucket_growth "
              f"{growth:g})", flush=True)
    if step >= train_steps:
        print(f"nothing to do: step {step} >= --train_steps {train_steps}")
        return 0
    best = None
    if run.keep_best:
        if "dev" not in source.splits():
            raise config.ConfigError(f"--keep_best needs a dev split to evaluate on; {source!r} "
                                     f"has none")
        if run.keep_best in ("bleu", "chrf", "f1") and not run.eval_sentences:
            raise config.ConfigError(f"--keep_best {run.keep_best} needs dev sentences to "
                                     f"translate; --eval_sentences is 0")
        if run.keep_best == "f1" and not data.is_treebank(run.data):
            raise config.ConfigError(f"--keep_best f1 scores parses: --data {run.data} is not "
                                     f"a treebank (ptb:DIR)")
        best = keep_best.KeepBest(model_dir, run.keep_best, run.early_stopping)
        if best.stopped:
            print(f"nothing to do: early stopping ended this run ({best.since} evaluations "
                  f"without improvement; {best.describe()}); raise --early_stopping to go on")
            return 0

    def pipeline(split, training, input_context=None, seed=run.seed):
        # A training batch holds an update's micro-batches (data.update_batches, as `share`).
        return data.pipeline(source, vocabulary, split, run.batch_tokens, run.max_length,
                             run.overlong, training=training, seed=seed,
                             deterministic=run.deterministic,
                             batch_size_multiple=1 if input_context else replicas,
                             input_context=input_context, source_vocabulary=words,
                             accumulate_steps=run.accumulate_steps if training else 1,
                             bucket_growth=growth, static_shapes=run.jit_compile)

    if run.deterministic:  # exactly the batches an uninterrupted run would see next
        def train_batches(context=None):
            return pipeline("train", True, context).skip(step * share.per_update)
    else:  # a fresh shuffle, cheaper than skipping
        def train_batches(context=None):
            return pipeline("train", True, context, seed=run.seed + step)
    if distribute.is_multi_worker(distribution):
        batches = distribution.distribute_datasets_from_function(train_batches)
        dev = None  # Workers would disagree on the number of dev batches; evaluate afterwards.
    else:
        batches = train_batches()
        dev = pipeline("dev", False) if "dev" in source.splits() else None
        if dev is not None:
            dev = data.counted(dev)

    writer = tf.summary.create_file_writer(str(model_dir / config.LOG_DIR)) if chief else None
    sources, references = data.spread_pairs(source, "dev",
                                            run.eval_sentences if chief and dev else 0)
    interactive = sys.stdout.isatty()
    saver = callbacks.PeriodicCheckpoint(saved if chief else None, run.checkpoint_every_steps,
                                         run.checkpoint_every_minutes)
    fit_callbacks = [callbacks.TrainingLog(args.log_every, writer, print_lines=not interactive),
                     saver, callbacks.KeepTrainedWeights()]
    stop = callbacks.StopOnSignal()
    if not distribute.is_multi_worker(distribution):  # workers would stop at different steps
        fit_callbacks.insert(0, stop)
        stop.install()
    if args.max_minutes:
        fit_callbacks.append(callbacks.TimeLimit(args.max_minutes, hp.cooldown_fraction,
                                                 optimizer.learning_rate_schedule, train_steps))
    evaluator = None
    if dev is not None:
        parsing = data.is_treebank(run.data)
        leaves = data.treebank.leaves_of(run.data) if parsing else None
        evaluator = evaluation.Evaluation(
            dev, vocabulary, sources, references, run.eval_every, run.max_length, writer,
            run.eval_beam_size, hp.decode_alpha, best,
            [tree for _, _, tree in data.spread(source.trees("dev"), len(sources))]
            if parsing else None,
            data.treebank.EXTRA_LENGTH if parsing else EXTRA_LENGTH,
            leaves == "tags", words,
            data.treebank.tree_constraints(vocabulary, leaves) if leaves else None)
        fit_callbacks.append(evaluator)
        if initialized:  # where fine-tuning starts from, on the new data
            evaluator.set_model(model)
            evaluator.evaluate()
    try:
        model.fit(batches, epochs=1, steps_per_epoch=train_steps - step, callbacks=fit_callbacks,
                  verbose=1 if interactive else 0, shuffle=False)
    finally:
        stop.uninstall()
    if stop.received:  # preempted: the checkpoint is written, the time left may be short
        print(f"stopped by {stop.received} at step {checkpoints.step_of(model)}"
              f"{', checkpoint ' + str(saver.last_saved) if saver.last_saved else ''}; run the "
              f"same command to continue", flush=True)
        return 0
    if evaluator is not None:
        evaluator.evaluate()
    # Workers of a multi-worker run print the same checksum when they agree.
    checksum = sum(float(np.abs(w).sum()) for w in model.get_weights())
    local_replicas = len(distribution.extended.worker_devices)
    traces = model.train_step_traces // local_replicas
    print(f"done: step {checkpoints.step_of(model)}, weights checksum {checksum:.9e}, train step "
          f"traced {traces} time(s), checkpoints in {checkpoints.default_directory(model_dir)}",
          flush=True)
    if run.average_last and chief:
        kept = len(saved.paths())
        output, chosen = averaging.average_last(model_dir, min(run.average_last, kept),
                                              overwrite=True)
        print(f"averaged {', '.join(p.name for p in chosen)} into {output}"
              f"{f' (only {kept} checkpoint(s) exist)' if kept < run.average_last else ''}",
              flush=True)
    return 0


ERRORS = (config.ConfigError, kt.HParamsError, data.CorpusError, data.VocabularyError,
          checkpoints.CheckpointError, callbacks.TrainingError, glove.GloveError)


def main(argv=None):
    args = parse_args(argv)
    try:
        return train(args)
    except (*ERRORS, OSError) as error:  # OSError: an unreadable or unwritable path
        print(f"kt-train: error: {error}", file=sys.stderr)
        return 1 if isinstance(error, callbacks.TrainingError) else 2


if __name__ == "__main__":
    sys.exit(main())
