"""The model_dir: everything a trained model needs, in one directory that kt-train writes and
kt-translate, kt-export, kt-average and kt-demo read.

    model_dir/
      config.json                the run's configuration (config.py: RunConfig, in sections;
                                 config_file.py reads and writes it; layout.py: the names)
      vocab.model                the shared SentencePiece vocabulary (data.Vocabulary), or
      vocab.marian               an imported Marian model's (data.MarianVocabulary; kt-import)
      imported.json              where an imported model's weights came from (marian.py)
      words.txt                  an MT-LSTM's source words, GloVe's (data.glove.WordVocabulary)
      checkpoints/ckpt-<step>/   model.weights.h5, rng.npz, manifest.json (checkpoints.py)
      averaged/ckpt-<step>/      averages (kt-average, kt-train --average_last), same format
      best/ckpt-<step>/          the best by a dev metric (kt-train --keep_best), same format
      best/best.json             its metric, value and step (trainer/keep_best.py)
      calibration.json           the confidence's fit on a dev set (kt-calibrate)
      logs/                      TensorBoard

    from keras_transformer import model_dir
    loaded = model_dir.load("runs/demo")       # (model, vocabulary, run, checkpoint)
    cove = model_dir.load_cove("runs/mt_lstm")  # CoVe (cove.py), also load_transformer_cove
"""

from keras_transformer._layout import require_installed_name

require_installed_name(__name__, "model_dir")

from keras_transformer.model_dir.checkpoints import (
    CheckpointDirectory,
    CheckpointError,
    restore,
    step_in_name,
    step_of,
    verify,
)
from keras_transformer.model_dir.config import (
    BatchingConfig,
    CheckpointConfig,
    ComputeConfig,
    ConfigError,
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    OptimizationConfig,
    RunConfig,
)
from keras_transformer.model_dir.cove import LoadedCoVe, load_cove, load_transformer_cove
from keras_transformer.model_dir.layout import (
    AVERAGED_DIR,
    BEST_DIR,
    CALIBRATION_FILE,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    LOG_DIR,
    SHORTLIST_FILE,
    VOCAB_FILE,
    WORDS_FILE,
)
from keras_transformer.model_dir.loading import (
    Loaded,
    ModelDirError,
    best_checkpoint,
    final_average,
    load,
    load_calibration,
    load_shortlist,
)
from keras_transformer.search.settings import DTYPES  # the dtypes a model decodes in

__all__ = [
    "AVERAGED_DIR", "BEST_DIR", "BatchingConfig", "CALIBRATION_FILE", "CHECKPOINT_DIR",
    "CONFIG_FILE", "CheckpointConfig", "CheckpointDirectory", "CheckpointError", "ComputeConfig",
    "ConfigError", "DTYPES", "DataConfig", "EvaluationConfig", "LOG_DIR", "Loaded", "LoadedCoVe",
    "ModelConfig", "ModelDirError", "OptimizationConfig", "RunConfig", "SHORTLIST_FILE",
    "VOCAB_FILE", "WORDS_FILE",
    "best_checkpoint", "final_average", "load", "load_calibration", "load_cove", "load_shortlist",
    "load_transformer_cove", "restore", "step_in_name", "step_of", "verify",
]
