"""The run a `Trainer` trains, resolved once: what the user asked for (a `RunConfig`, or
kt-train's flags as changes to model_dir's saved run), the run saved in model_dir, and the run
`model.init_from` starts from, each read once, combined, and checked against each other.

    resolved = resolution.resolve(model_dir, changes={("optimization", "train_steps"): 6})
    resolved.run  # what to train: hparams resolved, the saved run's derivations in, checked

`Trainer.with_changes` and `Trainer.resume` resolve as they build their Trainer, and its first
`fit` trains that resolution if nothing wrote to model_dir since (`is_current`; else it resolves
its run again, checked against what is there now); `Trainer(config, model_dir).fit()` resolves
when it starts (each later `fit` again: the one before wrote config.json and checkpoints).
"""

import pathlib
import typing

import keras_transformer as kt
from keras_transformer.model_dir import checkpoints, config, config_file, layout
from keras_transformer.trainer import init_from, preparation

# What a run derives from its data (the vocabularies' sizes, GloVe's dimensions, the corpus's
# languages), which a configuration may leave open and a resumed run takes from the saved one.
DERIVED_FIELDS = (("model", "vocab_size"), ("model", "source_vocab_size"),
                  ("model", "embedding_dim"), ("data", "source_lang"), ("data", "target_lang"))


class ResolvedRun(typing.NamedTuple):
    """A run to train and what it was resolved from.

    run: the `RunConfig` to train, checked (`RunConfig.check`, what an MT-LSTM cannot do,
        against `saved`, and against `init_source`'s model).
    saved: model_dir's config.json as it was (None: a new run).
    restoring: model_dir holds checkpoints, which the run continues from.
    init_source: the run `run.model.init_from` names, where the run starts from it (not
        `restoring`); else None.
    state: model_dir's `state_of` when it was resolved.
    """

    run: config.RunConfig
    saved: config.RunConfig = None
    restoring: bool = False
    init_source: config.RunConfig = None
    state: tuple = None


def state_of(model_dir):
    """What a resolution read from model_dir, cheaply: config.json's modification time and
    size, and the checkpoints' names. A run resolved before another wrote there is stale."""
    path = pathlib.Path(model_dir) / layout.CONFIG_FILE
    written = (path.stat().st_mtime_ns, path.stat().st_size) if path.exists() else None
    directory = checkpoints.CheckpointDirectory(checkpoints.default_directory(model_dir))
    return written, tuple(checkpoint.name for checkpoint in directory.paths())


def is_current(resolved, model_dir):
    """`resolved` still describes model_dir (nothing wrote there since)."""
    return resolved.state == state_of(model_dir)


def resolve(model_dir, *, run=None, changes=None):
    """The `ResolvedRun` of `run` (a `RunConfig`; model.hparams resolved from hparams_name and
    hparams_override where it has none) or of `changes` to model_dir's saved run
    ({(section, field): value}, kt-train's flags; hparams as `changed` says), not both.

    Raises:
        ConfigError: model_dir is a file; the run is invalid, contradicts the saved run, or
            describes another model than the init_from run's.
        HParamsError: an unknown hparams set or override.
    """
    if (run is None) == (changes is None):
        raise TypeError("resolve takes one of run and changes")
    model_dir = pathlib.Path(model_dir)
    if model_dir.exists() and not model_dir.is_dir():
        raise config.ConfigError(f"model_dir {model_dir} is a file, not a directory")
    state = state_of(model_dir)
    saved = config_file.load(model_dir)
    restoring = bool(state[1])
    requested = run.model.init_from if run is not None else changes.get(
        ("model", "init_from"), saved.model.init_from if saved else None)
    # A new fine-tuning run's hparams default to the init_from run's: read it first. Otherwise
    # it is read after the checks of the run itself, whose errors come first.
    source = (init_from.source_run(requested)
              if run is None and saved is None and requested else None)
    if run is None:
        run = changed(saved, source, changes)
    run = config_file.with_hparams(run)
    if saved is not None:
        run = run.updated({key: saved.get(*key) for key in DERIVED_FIELDS
                           if run.get(*key) is None})
        config_file.check_against_saved(saved, run, model_dir)
    run.check()
    preparation.check_mt_lstm(run, run.model.hparams)
    if not requested or restoring:  # a resumed run starts from its checkpoints
        return ResolvedRun(run, saved, restoring, state=state)
    source = source or init_from.source_run(requested)
    init_from.check_compatible(requested, source.model.hparams, run.model.hparams)
    return ResolvedRun(run, saved, restoring, source, state)


def changed(saved, init_source, changes):
    """The saved run (None: the defaults) with `changes` applied. Its hparams: for a run that
    keeps its set, the saved run's (for a new fine-tuning run, `init_source`'s) with a new
    model.hparams_override applied on top (e.g. a lower learning rate to resume); for a new set,
    that set with the override."""
    changes = dict(changes)
    base = init_source if saved is None and init_source is not None else saved
    base_name = base.model.hparams_name if base else config.ModelConfig.hparams_name
    name = changes.get(("model", "hparams_name")) or base_name
    override = changes.get(("model", "hparams_override"))
    changes[("model", "hparams_name")] = name
    if base is not None and name == base_name:
        if override:
            changes[("model", "hparams")] = base.model.hparams.override_from_string(override)
            changes[("model", "hparams_override")] = ",".join(
                filter(None, (base.model.hparams_override, override)))
        elif saved is None:
            changes[("model", "hparams")] = base.model.hparams
            changes[("model", "hparams_override")] = base.model.hparams_override
    else:
        changes[("model", "hparams")] = kt.hparams.get(name).override_from_string(override or "")
    return (saved or config.RunConfig()).updated(changes)
