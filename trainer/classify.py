"""kt-classify: the biattentive classification network on a CoVe downstream task.

    kt-classify --task trec6 --inputs glove --glove glove.6B.50d.txt.bz2 --seed 1
    kt-classify --task trec6 --inputs glove+cove --cove_model_dir runs/mt_lstm --seed 1

McCann et al. (2017) compare the inputs of one classifier, the BCN (section 5), on the same
tasks: random word vectors (trained with the classifier), fixed GloVe vectors, and [GloVe; CoVe].
This command trains the BCN on a task's training split with one of them and prints its accuracy
on the task's evaluation split (TREC: test, polarity: dev) after a fixed number of epochs, with
the seed, so that runs over seeds and inputs make a table like the paper's Table 2. Words are
found as data/glove.py finds them; the random vectors' vocabulary is the training split's words.

glove+cove reads the GloVe vectors and words of the MT-LSTM run --cove_model_dir (kt-train
--hparams cove_mt_lstm) and its encoder's; compare it with --inputs glove over the same words
(its --glove_words). glove+transformer puts a translation Transformer's encoder (the run
--cove_model_dir) in the MT-LSTM's place: it reads each sentence as it was trained to, in
subword pieces, and each word gets the mean of its pieces' vectors (data.glove.word_pieces).
"""

import argparse
import json
import pathlib
import sys

from keras_transformer import cli
from keras_transformer.errors import UserError

INPUTS = ("random", "glove", "glove+cove", "glove+transformer")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="kt-classify", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--task", required=True,
        help="trec6, trec50 or polarity (bundled), or name:DIR for the same files in DIR")
    add("--inputs", choices=INPUTS, default="glove",
        help="word vectors the BCN reads: random (trained with it), glove (fixed), "
             "glove+cove ([GloVe; CoVe] of an MT-LSTM) or glove+transformer ([GloVe; a "
             "Transformer encoder's]) (default %(default)s)")
    add("--glove", help="a GloVe text file (.txt, .gz, .bz2); needed by --inputs glove and "
                        "glove+transformer")
    add("--cove_model_dir", help="the kt-train run whose encoder --inputs glove+cove (an "
                                 "MT-LSTM's) or glove+transformer (a Transformer's) reads")
    add("--glove_words", type=cli.at_least(1), default=None,
        help="keep GloVe's first (most frequent) words only (default: all)")
    add("--embedding_dim", type=cli.at_least(1), default=50,
        help="dimensions of --inputs random (default %(default)s, GloVe 6B's smallest)")
    add("--hidden_size", type=cli.at_least(1), default=100,
        help="BCN feed-forward and LSTM width (default %(default)s)")
    add("--dropout", type=float, default=0.2, help="BCN dropout (default %(default)s)")
    add("--epochs", type=cli.at_least(1), default=5, help="default %(default)s")
    add("--batch_size", type=cli.at_least(1), default=64, help="default %(default)s")
    add("--learning_rate", type=float, default=1e-3, help="Adam's (default %(default)s)")
    add("--seed", type=int, default=1, help="default %(default)s")
    add("--output", help="a directory to write the trained classifier (classifier.keras) and "
                         "results.json to")
    cli.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    if args.inputs in ("glove", "glove+transformer") and not args.glove:
        parser.error(f"--inputs {args.inputs} needs --glove PATH (a GloVe text file)")
    if args.inputs.startswith("glove+") and not args.cove_model_dir:
        parser.error(f"--inputs {args.inputs} needs --cove_model_dir (a kt-train run)")
    if args.cove_model_dir and not args.inputs.startswith("glove+"):
        parser.error(f"--cove_model_dir: --inputs {args.inputs} reads no trained encoder")
    if args.inputs == "glove+cove" and (args.glove or args.glove_words):
        parser.error("--inputs glove+cove reads the GloVe vectors and words the MT-LSTM was "
                     "trained with; drop --glove and --glove_words")
    return args


class Inputs:
    """The word vectors `args.inputs` names: the classifier's inputs, the vectors they give, and
    how texts become them.

    Attributes:
        vocabulary: the `glove.WordVocabulary` whose ids the classifier reads.
        inputs: keras.Input list: word ids, and for glove+transformer its subword pieces and
            the word of each (`data.glove.word_pieces`).
        vectors: [batch, words, dimensions], masked at padding.
        source: the trained encoder's description (glove+cove, glove+transformer) or None.
    """

    def __init__(self, args, train_texts):
        import keras

        from keras_transformer.model_dir import cove

        self.name = args.inputs
        words = keras.Input((None,), dtype="int32", name="word_ids")
        self.inputs, self.source, self.encoder = [words], None, None
        if args.inputs == "glove+cove":
            self.encoder = _encoder(cove.load_cove, args.cove_model_dir)
            self.vocabulary = self.encoder.words
            self.vectors = self.encoder.layer(words)
            self.source = self.encoder.describe()
            return
        self.vocabulary, embedding = word_vocabulary(args, train_texts)
        self.vectors = embedding(words)
        if args.inputs == "glove+transformer":
            self.encoder = _encoder(cove.load_transformer_cove, args.cove_model_dir)
            pieces = [keras.Input((None,), dtype="int32", name="piece_ids"),
                      keras.Input((None, 2), dtype="int32", name="word_spans")]
            self.inputs += pieces
            self.vectors = keras.layers.Concatenate()(
                [self.vectors, self.encoder.layer([words, *pieces])])
            self.source = self.encoder.describe()

    def arrays(self, texts):
        """The classifier's input arrays for `texts`."""
        from keras_transformer.data import glove

        arrays = [word_ids(self.vocabulary, texts)]
        if self.name == "glove+transformer":
            transformer = self.encoder.layer.transformer
            arrays += glove.word_pieces(self.encoder.vocabulary, texts, max_length=(
                transformer.max_positions if transformer.position_encoding == "learned" else None))
        return arrays


def _encoder(load, model_dir):
    """`load(model_dir)`, its refusal naming the flag."""
    from keras_transformer.model_dir import loading

    try:
        return load(model_dir)
    except loading.ModelDirError as error:
        raise loading.ModelDirError(f"--cove_model_dir: {error}") from None


def word_vocabulary(args, texts):
    """(the WordVocabulary, the embedding layer) for --inputs random or glove."""
    import keras
    import tensorflow as tf

    from keras_transformer.data import glove

    if args.inputs != "random":
        vocabulary = glove.WordVocabulary(*glove.read_glove(args.glove, args.glove_words))
        matrix = vocabulary.embedding_matrix()
        return vocabulary, keras.layers.Embedding(
            *matrix.shape, embeddings_initializer=keras.initializers.Constant(matrix),
            trainable=False, mask_zero=True, name="glove")
    seen = {}  # the training words, in order of first use
    for row in glove.tokenize_words(tf.constant(texts)).to_list():
        for word in row:
            seen[word.decode("utf-8")] = None
    vocabulary = glove.WordVocabulary(list(seen))
    return vocabulary, keras.layers.Embedding(vocabulary.vocab_size, args.embedding_dim,
                                              mask_zero=True, name="random")


def word_ids(vocabulary, texts):
    """int32 [examples, longest]: each text's word ids without the end of sentence, 0-padded."""
    import tensorflow as tf

    ids = vocabulary.encode(tf.constant(texts))
    return ids[:, :-1].to_tensor().numpy()


def main(argv=None):
    args = parse_args(argv)
    import keras
    import numpy as np

    from keras_transformer import BiattentiveClassificationNetwork
    from keras_transformer.data import classification, glove
    from keras_transformer.data.vocab import normalize_whitespace

    try:
        task = classification.ClassificationTask(args.task)
        # As a subword vocabulary reads them, so that every input finds the same words.
        train_texts, train_labels = task.examples("train")
        eval_texts, eval_labels = task.examples(task.evaluation_split)
        train_texts = [normalize_whitespace(text) for text in train_texts]
        eval_texts = [normalize_whitespace(text) for text in eval_texts]
        keras.utils.set_random_seed(args.seed)
        inputs = Inputs(args, train_texts)
    except (UserError, OSError) as error:
        print(f"kt-classify: error: {error}", file=sys.stderr)
        return 2
    bcn = BiattentiveClassificationNetwork(len(task.labels), hidden_size=args.hidden_size,
                                           maxout_units=args.hidden_size, dropout=args.dropout)
    model = keras.Model(inputs.inputs, bcn(inputs.vectors))
    model.compile(optimizer=keras.optimizers.Adam(args.learning_rate), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train, x_eval = inputs.arrays(train_texts), inputs.arrays(eval_texts)
    y_train = np.asarray(task.label_ids(train_labels))
    # Without a strategy Keras builds the optimizer and the metrics in fit's first trace, and
    # tf.function traces a step that creates variables twice; built first, it is traced once.
    model._symbolic_build(data_batch=(x_train, y_train))
    y_eval = np.asarray(task.label_ids(eval_labels))
    unknown = float(np.mean(x_eval[0][x_eval[0] > 0] == glove.UNK_ID))
    print(f"{task.name}: {len(train_texts):,} training and {len(eval_texts):,} "
          f"{task.evaluation_split} sentences, {len(task.labels)} labels; inputs {args.inputs} "
          f"({inputs.vocabulary.vocab_size:,} ids, {unknown:.1%} of {task.evaluation_split} "
          f"words unknown{'; ' + inputs.source if inputs.source else ''}); seed {args.seed}",
          flush=True)
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=0,
              shuffle=True)
    accuracy = float(model.evaluate(x_eval, y_eval, batch_size=256, verbose=0)[1])
    print(f"{task.name} {task.evaluation_split} accuracy {accuracy:.4f} after {args.epochs} "
          f"epoch(s): inputs {args.inputs}, seed {args.seed}", flush=True)
    if args.output:
        output = pathlib.Path(args.output)
        output.mkdir(parents=True, exist_ok=True)
        model.save(output / "classifier.keras")
        results = {"task": task.spec, "split": task.evaluation_split, "accuracy": accuracy,
                   "inputs": args.inputs, "encoder": inputs.source, "seed": args.seed,
                   "epochs": args.epochs, "glove_words": (
                       inputs.encoder.run.model.glove_words if args.inputs == "glove+cove"
                       else args.glove_words),
                   "labels": task.labels}
        (output / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
