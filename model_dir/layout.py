"""The files and directories of a model_dir (see the package docstring for the picture)."""

from keras_transformer.data import glove

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.model"
CALIBRATION_FILE = "calibration.json"  # kt-calibrate's fit (keras_transformer.search.confidence)
SHORTLIST_FILE = "shortlist.vmap"  # kt-shortlist's candidates (keras_transformer.data.shortlist)
WORDS_FILE = glove.WORDS_FILE  # an mt_lstm run's source words, data.glove.WordVocabulary's
CHECKPOINT_DIR = "checkpoints"
AVERAGED_DIR = "averaged"
BEST_DIR = "best"  # kt-train --keep_best
LOG_DIR = "logs"
