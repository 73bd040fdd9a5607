"""A trained model from a kt-train model_dir: its configuration, vocabulary and a checkpoint."""

import pathlib
import typing

import h5py

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import shortlist
from keras_transformer.errors import UserError
from keras_transformer.model_dir import checkpoints, config, config_file, layout
from keras_transformer.search.confidence import Calibration


class ModelDirError(UserError):
    """A model_dir (or checkpoint) that cannot be loaded, with the reason and the path."""


class Loaded(typing.NamedTuple):
    model: kt.Transformer  # or an MTLSTM, from load(..., model="mt_lstm")
    vocabulary: data.Vocabulary  # or a data.MarianVocabulary (an imported model's)
    run: config.RunConfig
    checkpoint: pathlib.Path
    ema: bool = False  # the weights are the run's moving averages (kt-train --ema_decay)
    # Why the model computes in its dtype where `--dtype auto` chose it
    # (`decoding_config.load_members`), for the commands' closing lines and export.json.
    dtype_reason: str | None = None

    @property
    def hparams(self):
        """The run's `kt.HParams` (e.g. `decode_alpha`, the default length penalty)."""
        return self.run.model.hparams


# Where a model_dir of each kind is read, for the refusal of one read as another kind.
_WHAT_READS = {
    "mt_lstm": "an MT-LSTM is read as CoVe (kt-classify --inputs glove+cove, "
               "model_dir.load_cove); kt-translate and kt-export serve Transformers",
    "transformer": "a Transformer translates (kt-translate, kt-export), and its encoder is read "
                   "by kt-classify --inputs glove+transformer (model_dir.load_transformer_cove)",
}


def build(run, **kwargs):
    """The untrained model of a run's configuration (`kt.build_model`'s `kwargs`, e.g. dtype)."""
    return kt.build_model(run.model.hparams, run.model.vocab_size,
                          run.model.source_vocab_size, run.model.embedding_dim, **kwargs)


def final_average(model_dir):
    """model_dir/averaged/ckpt-S when S is the step of the run's newest checkpoint (what
    `kt-train --average_last` or `kt-average` wrote as the run ended), else None: an average of
    older checkpoints, or one a resumed run has moved past, is not the run's result."""
    newest = checkpoints.CheckpointDirectory(checkpoints.default_directory(model_dir)).paths()
    if not newest:
        return None
    average = pathlib.Path(model_dir) / layout.AVERAGED_DIR / newest[-1].name
    return average if (average / checkpoints.WEIGHTS_FILE).exists() else None


def best_checkpoint(model_dir):
    """model_dir/best/ckpt-<step>, the checkpoint `kt-train --keep_best` kept, or None."""
    kept = checkpoints.CheckpointDirectory(pathlib.Path(model_dir) / layout.BEST_DIR).paths()
    return kept[-1] if kept else None


def has_optimizer_state(checkpoint):
    """True if the checkpoint holds an optimizer's state (kt-train's do; averages do not)."""
    with h5py.File(pathlib.Path(checkpoint) / checkpoints.WEIGHTS_FILE, "r") as file:
        return "optimizer" in file


def moving_averages(run, checkpoint):
    """The moving averages of the weights a checkpoint of an --ema_decay run holds in its
    optimizer's state, as `model.get_weights()` would list them (float32)."""
    hp = run.model.hparams
    # Under mixed_float16 the optimizer was a LossScaleOptimizer, whose state differs.
    float16 = run.compute.mixed_precision == "mixed_float16"
    model = build(run, dtype="mixed_float16" if float16 else None)
    model.compile(optimizer=kt.build_optimizer(hp, ema_decay=run.optimization.ema_decay),
                  loss=kt.build_loss(hp))
    checkpoints.restore(model, checkpoint)
    model.optimizer.finalize_variable_values(model.trainable_variables)
    return model.get_weights()


def named_checkpoint(model_dir, checkpoint):
    """The checkpoint directory --checkpoint `checkpoint` names: "best" (unless a directory of
    that name exists) is `best_checkpoint`'s; anything else is a path.

    Raises:
        ModelDirError: "best" when kt-train --keep_best kept none.
    """
    if checkpoint == "best" and not pathlib.Path(checkpoint).exists():
        best = best_checkpoint(model_dir)
        if best is None:
            raise ModelDirError(f"--checkpoint best: {pathlib.Path(model_dir) / layout.BEST_DIR} "
                                f"holds no checkpoint; kt-train --keep_best bleu|chrf|loss keeps "
                                f"one")
        return best
    return pathlib.Path(checkpoint)


def load(model_dir, checkpoint=None, dtype="float32", ema=None, model="transformer"):
    """The model of `model_dir` with the weights of `checkpoint` (default: the average of its
    final checkpoints if there is one, `final_average`, else its newest readable checkpoint).

    Args:
        model_dir: a directory written by kt-train.
        checkpoint: a checkpoint directory (e.g. model_dir/averaged/ckpt-N from kt-average), or
            "best": the one `kt-train --keep_best` kept.
        dtype: the Keras dtype policy of the model (`DecodingConfig` offers `DTYPES`:
            float32, mixed_bfloat16, bfloat16); the checkpoint's float32
            weights are rounded to it.
        ema: for a run trained with --ema_decay, its moving averages of the weights (None: when
            the checkpoint holds them, as kt-train's own do; averaged checkpoints do not) or the
            trained weights (False).
        model: the kind of model the caller reads (an `HParams.model`): "transformer" for the
            commands that translate; "mt_lstm" for CoVe.

    Raises:
        ModelDirError: no config.json, no vocabulary, no checkpoint, an unreadable one, or a
            model_dir of another kind of model.
        config.ConfigError: a config.json that is damaged or from a newer version.
        data.VocabularyError: a vocabulary that is not one, or not the model's size.
    """
    model_dir = pathlib.Path(model_dir)
    if not model_dir.is_dir():
        raise ModelDirError(f"--model_dir {model_dir} is not a directory")
    run = config_file.load(model_dir)
    if run is None:
        raise ModelDirError(f"{model_dir}: no {layout.CONFIG_FILE}; is it a kt-train model_dir?")
    try:
        vocab_path = data.vocabulary_file(model_dir)
    except data.VocabularyError as error:
        raise ModelDirError(str(error)) from None
    vocabulary = data.load_vocabulary(vocab_path)
    vocabulary.check_size(run.model.vocab_size, f"{model_dir / layout.CONFIG_FILE}")
    kind = run.model.hparams.model
    if kind != model:
        raise ModelDirError(f"{model_dir} holds a model of kind {kind!r} "
                            f"({run.model.hparams_name}), "
                            f"not {model!r}: {_WHAT_READS[kind]}")
    model = build(run, dtype=dtype)
    if checkpoint is not None:
        checkpoint = named_checkpoint(model_dir, checkpoint)
        if not (checkpoint / checkpoints.WEIGHTS_FILE).exists():
            raise ModelDirError(f"--checkpoint {checkpoint} holds no {checkpoints.WEIGHTS_FILE}")
    if checkpoint is None:
        checkpoint = final_average(model_dir)
    try:
        if checkpoint is None:
            checkpoint = checkpoints.CheckpointDirectory(
                checkpoints.default_directory(model_dir)).restore_latest(model)
        else:
            checkpoints.restore(model, checkpoint)
    except (checkpoints.CheckpointError, OSError, ValueError, KeyError) as error:
        raise ModelDirError(f"cannot load {checkpoint or model_dir}: {error}") from None
    if checkpoint is None:
        raise ModelDirError(f"{checkpoints.default_directory(model_dir)} has no checkpoint yet; "
                            f"train first")
    use_ema = bool(run.optimization.ema_decay) and ema is not False
    if use_ema and not has_optimizer_state(checkpoint):
        if ema:
            raise ModelDirError(f"--ema: {checkpoint} holds no moving averages (it is not one "
                                f"of kt-train's checkpoints)")
        use_ema = False
    if use_ema:
        try:
            model.set_weights(moving_averages(run, checkpoint))
        except (checkpoints.CheckpointError, OSError, ValueError, KeyError) as error:
            raise ModelDirError(f"cannot read the moving averages of {checkpoint}: "
                                f"{error}") from None
    elif ema:
        raise ModelDirError(f"--ema: {model_dir} was trained without --ema_decay")
    return Loaded(model, vocabulary, run, pathlib.Path(checkpoint), use_ema)


def load_calibration(model_dir):
    """The `Calibration` kt-calibrate wrote in `model_dir`, or None if it has none.

    Raises:
        ModelDirError: a calibration file that cannot be read or used, naming it.
    """
    path = pathlib.Path(model_dir) / layout.CALIBRATION_FILE
    if not path.exists():
        return None
    try:
        return Calibration.from_json(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelDirError(f"{path}: {error}" if isinstance(error, OSError) else str(error)) \
            from None


def load_shortlist(model_dir, vocabulary):
    """The `data.shortlist.Shortlist` kt-shortlist wrote in `model_dir`, for its `vocabulary`.

    Raises:
        ModelDirError: there is none (naming kt-shortlist), or it cannot be read with this
            vocabulary (naming the file and line).
    """
    path = pathlib.Path(model_dir) / layout.SHORTLIST_FILE
    if not path.exists():
        raise ModelDirError(f"{model_dir} has no {layout.SHORTLIST_FILE}; make one with "
                            f"kt-shortlist --model_dir {model_dir}")
    try:
        return shortlist.read_vmap(path, *shortlist.pieces_of(vocabulary))
    except shortlist.ShortlistError as error:
        raise ModelDirError(str(error)) from None
