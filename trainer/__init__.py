"""Training: `Trainer(config, model_dir).fit()` (runner.py: model.fit under tf.distribute,
resume, time limit; `kt-train`, task.py, maps its flags onto it), its callbacks (progress,
periodic checkpoints, time limit, SIGTERM), dev evaluation, and checkpoint averaging
(`kt-average`, paper section 6.1). It reads and writes the model_dir through
keras_transformer.model_dir."""

from keras_transformer._layout import require_installed_name

require_installed_name(__name__, "trainer")


def __getattr__(name):
    """`trainer.Trainer`, `trainer.TrainingResult`: imported when first used, so that the
    commands' `python -m keras_transformer.trainer` starts without TensorFlow."""
    if name in ("Trainer", "TrainingResult"):
        from keras_transformer.trainer import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
