"""Training: `kt-train` (task.py: model.fit under tf.distribute, resume, time limit), its
callbacks (progress, periodic checkpoints, time limit, SIGTERM), dev evaluation, and checkpoint
averaging (`kt-average`, paper section 6.1). It reads and writes the model_dir through
keras_transformer.model_dir."""

from keras_transformer._layout import require_installed_name

require_installed_name(__name__, "trainer")
