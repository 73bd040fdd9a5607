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

import sys

from keras_transformer.trainer import callbacks, flags


def main(argv=None):
    parser = flags.argument_parser()
    args = parser.parse_args(argv)
    try:
        flags.trainer_of(args).fit()
    except (*flags.ERRORS, OSError) as error:  # OSError: an unreadable or unwritable path
        print(f"kt-train: error: {flags.in_flags(str(error), flags.flag_names(parser))}",
              file=sys.stderr)
        return 1 if isinstance(error, callbacks.TrainingError) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
