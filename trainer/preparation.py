"""What `Trainer.fit` prepares and checks before it builds the model: the vocabularies in
model_dir, the configuration checks that need the model kind or the devices, and how an update's
tokens become batches."""

import pathlib
import shutil
import sys

from keras_transformer import cli, data
from keras_transformer.data import glove
from keras_transformer.model_dir import layout
from keras_transformer.model_dir.config import ConfigError
from keras_transformer.runtime import devices
from keras_transformer.trainer import distribute


def prepare_vocabulary(model_dir, corpus, *, vocab, vocab_size, build_size, write):
    """model_dir/vocab.model: copied from `vocab`, or built (`build_size` ids) from the corpus's
    training data; or model_dir/vocab.marian, copied from an imported model's `vocab` (a
    fine-tuning run's). Returns the vocabulary (`data.load_vocabulary`).

    Only the task that writes model_dir (`write`) builds or copies; the other workers of a
    multi-worker run read `vocab`, or model_dir's vocabulary if it is already there.
    """
    given = pathlib.Path(vocab) if vocab else None
    try:
        existing = data.vocabulary_file(model_dir)
    except data.VocabularyError:
        existing = None
    if given is not None:
        target = model_dir / (data.MarianVocabulary.FILE_NAME if given.suffix == ".marian"
                              else layout.VOCAB_FILE)
        if existing is not None and existing != target:
            raise ConfigError(f"--vocab {given} is not the kind of vocabulary this run was "
                              f"started with ({existing}); drop --vocab to continue the run")
    else:
        target = existing or model_dir / layout.VOCAB_FILE
        given = target
    if not target.exists() and write:
        if not given.exists():
            print(f"building a {build_size}-id vocabulary from {corpus!r} into {given}",
                  flush=True)
            data.build_vocabulary(data.corpus_texts(corpus), build_size, given,
                                  whole_tokens=data.corpus_whole_tokens(corpus))
        if given != target:
            data.load_vocabulary(given)  # refuse a bad file before it becomes the run's
            cli.replace_atomically(target, lambda path: shutil.copyfile(given, path))
    vocabulary = data.load_vocabulary(target if target.exists() else given)
    if vocab and target.exists() and given.exists() and \
            given.read_bytes() != target.read_bytes():
        raise ConfigError(f"--vocab {given} differs from {target}, the vocabulary this run was "
                          f"started with; drop --vocab to continue the run")
    if vocab_size is not None:
        vocabulary.check_size(vocab_size, f"{model_dir}/{layout.CONFIG_FILE}")
    if isinstance(corpus, data.MarkupAugmentedSource):
        vocabulary.markup_ids()  # refuses one that would cut the tokens into pieces
    return vocabulary


def prepare_words(model, model_dir, *, restoring, write):
    """An mt_lstm run's source words: (a `glove.WordVocabulary`, its GloVe matrix or None).

    A run that starts reads model.glove and writes its words to model_dir/words.txt (only the
    task that writes model_dir, `write`); a run restoring a checkpoint reads the words back, the
    vectors being in the checkpoint.
    """
    path = model_dir / layout.WORDS_FILE
    if restoring and path.exists():
        return glove.WordVocabulary.load(path), None
    if not model.glove:
        raise ConfigError(
            f"model.hparams_name {model.hparams_name} trains an MT-LSTM over fixed GloVe "
            f"vectors of the source words: give model.glove (a GloVe text file such as "
            f"glove.6B.50d.txt.bz2)")
    print(f"reading {model.glove}"
          f"{f' (its first {model.glove_words:,} words)' if model.glove_words else ''}",
          flush=True)
    words = glove.WordVocabulary(*glove.read_glove(model.glove, model.glove_words))
    if write:
        cli.replace_atomically(path, words.save)
    return words, words.embedding_matrix()


def check_mt_lstm(run, hp):
    """Refuses what an mt_lstm run cannot do, naming the field."""
    if hp.model != "mt_lstm":
        if run.model.glove:
            raise ConfigError(f"model.glove: {run.model.hparams_name} is a Transformer, which "
                              f"learns its own embeddings; model.glove is for cove_mt_lstm")
        return
    if data.is_treebank(run.data.corpus):
        raise ConfigError(f"data.corpus {run.data.corpus}: an MT-LSTM translates; parsing is "
                          f"the Transformer's")
    if run.evaluation.beam_size > 1:
        raise ConfigError("evaluation.beam_size: an MT-LSTM's dev BLEU is of greedy "
                          "translations (1)")
    if run.model.init_from:
        raise ConfigError("model.init_from: an MT-LSTM starts from GloVe, not from another run")


def check_workers(run, distribution, model_dir, max_minutes):
    """Refuses what several workers cannot do; first, before anything that could fail on one
    worker alone (the others would wait for it)."""
    if not distribute.is_multi_worker(distribution):
        return
    unshared = distribute.check_shared_model_dir(distribution, model_dir)
    if unshared:
        raise ConfigError(
            f"model_dir {model_dir}: worker(s) {', '.join(map(str, unshared))} cannot read what "
            f"the chief writes there, so they would not resume from its checkpoints; give every "
            f"worker the same directory on a shared file system (e.g. NFS)")
    if run.evaluation.keep_best:
        raise ConfigError("evaluation.keep_best: several workers evaluate after training only; "
                          "keep the best with one worker")
    if max_minutes:
        raise ConfigError("max_minutes would stop workers at different steps (each has its own "
                          "clock); use optimization.train_steps with several workers")


def update_batches(run, distribution):
    """How an update's tokens are cut into this worker's pipeline batches
    (`data.update_batches`); refused when the longest bucket's batches would hold no pair."""
    batching = run.batching
    share = data.update_batches(batching.batch_tokens, accumulate_steps=batching.accumulate_steps,
                                replicas=distribution.num_replicas_in_sync,
                                per_replica=distribute.is_multi_worker(distribution),
                                local_replicas=distribute.local_replicas(distribution))
    try:
        share.check(run.data.max_pair_length)
    except ValueError as error:
        raise ConfigError(f"batching.batch_tokens {batching.batch_tokens:,} with "
                          f"batching.accumulate_steps {batching.accumulate_steps} and "
                          f"data.max_pair_length {run.data.max_pair_length}: {error}") from None
    return share


def bucket_growth(run):
    """The growth factor of the length buckets: few shapes for XLA, which compiles each."""
    return run.batching.bucket_growth or (data.XLA_BUCKET_GROWTH if run.compute.jit_compile
                                          else data.BUCKET_GROWTH)


def warn_about_devices(distribution, jit_compile):
    warning = devices.missing_gpu_warning(cli.STARTUP_LINES)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    if jit_compile and distribution.num_replicas_in_sync > 1:
        print(f"warning: XLA (jit_compile) over {distribution.num_replicas_in_sync} replicas "
              f"puts every replica's step in one XLA program, which Keras's own default avoids "
              f"under tf.distribute and which has not run where this project could test it (on "
              f"logical CPU devices XLA cannot reach the other devices' variables); if it fails, "
              f"train without it (docs/gpus.md)", file=sys.stderr, flush=True)
