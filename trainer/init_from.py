"""Fine-tuning: `kt-train --init_from MODEL_DIR_OR_CHECKPOINT` starts a new run from another
run's weights and vocabulary.

The new run has its own model_dir, data and step count; its optimizer and learning-rate schedule
start afresh (eq. 3's warmup again, and a fresh Adam, whose first steps move every weight by
about the learning rate: fine-tuning wants a much lower rate, e.g. `--hparams_override
learning_rate_multiplier=0.05,warmup_steps=100`), unless `--init_optimizer` also takes the
optimizer's state and step, which continues the schedule where the other run left it;
`--update_vocab` takes a new vocabulary (trainer/vocab_update.py). The hparams
default to the other run's; the fields that make the model (builders.ARCHITECTURE_FIELDS) must
match theirs, except dropout rates (source_word_dropout among them), which only act in training
(with `--init_optimizer`, adding or removing source word dropout is refused when the checkpoint
is read: its random streams no longer match the model's). In Python the same is
`model.load_weights(checkpoint / "model.weights.h5")` on a model built with the other run's
hparams and vocabulary size, before `compile` (docs/training.md).
"""

import pathlib

from keras_transformer import data
from keras_transformer import model_dir as model_dir_lib
from keras_transformer.model_dir import checkpoints, config, config_file, layout
from keras_transformer.models.builders import ARCHITECTURE_FIELDS
from keras_transformer.trainer import vocab_update

# Model fields a fine-tuning run may change: they shape no weight and change no computation
# outside training.
FREE_FIELDS = ("dropout", "attention_dropout", "relu_dropout", "source_word_dropout")


def resolve(path):
    """(the model_dir, the checkpoint or None for its default) that --init_from `path` names.

    Raises:
        ConfigError: `path` is neither a kt-train model_dir nor one of its checkpoints.
    """
    path = pathlib.Path(path)
    if (path / layout.CONFIG_FILE).is_file():
        return path, None
    if (path / checkpoints.WEIGHTS_FILE).is_file():
        # model_dir/checkpoints/ckpt-N, model_dir/averaged/ckpt-N or model_dir/best/ckpt-N.
        if (path.parent.parent / layout.CONFIG_FILE).is_file():
            return path.parent.parent, path
        raise config.ConfigError(f"--init_from {path} is a checkpoint outside a kt-train "
                                 f"model_dir (no {path.parent.parent / layout.CONFIG_FILE})")
    raise config.ConfigError(f"--init_from {path} is neither a kt-train model_dir (no "
                             f"{layout.CONFIG_FILE}) nor a checkpoint directory (no "
                             f"{checkpoints.WEIGHTS_FILE})")


def source_run(path):
    """The RunConfig of the run --init_from `path` names."""
    directory, _ = resolve(path)
    return config_file.load(directory)


def check_compatible(path, source_hparams, hparams):
    """Refuses hparams whose model differs from the --init_from run's, naming the fields."""
    theirs, ours = source_hparams.to_dict(), hparams.to_dict()
    differing = [f"{name}: {path} has {theirs[name]!r}, this run {ours[name]!r}"
                 for name in ARCHITECTURE_FIELDS
                 if name not in FREE_FIELDS and theirs[name] != ours[name]]
    if differing:
        raise config.ConfigError(f"--init_from: the model differs from the one it starts from "
                                 f"({'; '.join(differing)}); drop those hparams")


def check_vocabulary(path, vocab, update_vocab=False):
    """The vocabulary of a run --init_from `path`: the other run's, or with `update_vocab`
    `vocab` (None: one this run builds). Refuses a --vocab other than the other run's without
    `update_vocab`, naming both files and the flag."""
    if update_vocab:
        return vocab
    directory, _ = resolve(path)
    theirs = data.vocabulary_file(directory)
    if vocab is not None and pathlib.Path(vocab).read_bytes() != theirs.read_bytes():
        raise config.ConfigError(f"--vocab {vocab} differs from {theirs}, the vocabulary of "
                                 f"--init_from {path}; a fine-tuned model keeps its vocabulary "
                                 f"unless --update_vocab (the rows of the pieces both hold "
                                 f"copied, new pieces initialized afresh)")
    return theirs


def initialize(model, path, with_optimizer, new_vocabulary=None, model_dir=None):
    """Loads the weights --init_from `path` names into compiled `model` (and the optimizer's
    state and step, `with_optimizer`); returns (the checkpoint they came from, a line on the
    vocabulary's update or None).

    With `new_vocabulary` (--update_vocab, the vocabulary of `model`), the rows of the pieces
    both vocabularies hold are the other run's and the rest `model`'s own (`vocab_update`),
    recorded in `model_dir`.

    Raises:
        ModelDirError: the checkpoint cannot be read.
    """
    directory, checkpoint = resolve(path)
    loaded = model_dir_lib.load(directory, checkpoint)
    if new_vocabulary is not None:
        mapping = vocab_update.piece_mapping(loaded.vocabulary, new_vocabulary)
        vocab_update.transfer(loaded.model, model, mapping)
        return loaded.checkpoint, vocab_update.record(model_dir, loaded.checkpoint,
                                                      loaded.vocabulary, new_vocabulary, mapping)
    if with_optimizer:
        try:
            checkpoints.restore(model, loaded.checkpoint)
        except (checkpoints.CheckpointError, OSError, ValueError, KeyError) as error:
            raise model_dir_lib.ModelDirError(
                f"--init_optimizer: cannot take the optimizer of {loaded.checkpoint}: "
                f"{error}") from None
    else:
        model.set_weights(loaded.model.get_weights())
    return loaded.checkpoint, None
