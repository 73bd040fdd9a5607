"""Input pipelines: sources of sentence pairs, subword vocabularies, token-budget batches.

    from keras_transformer import data
    vocabulary = data.Vocabulary.load("vocab.model")          # or data.build_vocabulary(...)
    batches = data.pipeline("bible_en_es", vocabulary, "train", batch_tokens=4096)
    model.fit(batches, steps_per_epoch=1000)

For parsing (paper 6.3), `ptb:DIR` sources read treebanks (data/treebank.py), data/trees.py
turns trees into bracket sequences and back, data/evalb.py scores parses as EVALB does.

Nothing here imports the model: data flows from here into keras_transformer, not back.
"""

from keras_transformer._layout import require_installed_name

require_installed_name(__name__, "data")

from keras_transformer.data.batching import (
    BUCKET_GROWTH,
    XLA_BUCKET_GROWTH,
    UpdateBatches,
    batch_by_length,
    batch_shapes,
    bucket_batch_sizes,
    bucket_boundaries,
    length_sorted_batches,
    update_batches,
)
from keras_transformer.data.input_pipeline import (
    counted,
    limit_length,
    pipeline,
    shift_right,
    tokenized_pairs,
)
from keras_transformer.data.marian_vocab import MarianVocabulary, import_marian_vocabulary
from keras_transformer.data.markup_pairs import MarkupAugmentedSource
from keras_transformer.data.mixture import WeightedCorpora, parse_weights
from keras_transformer.data.sources import (
    BUNDLED,
    CorpusError,
    LocalSource,
    TfdsSource,
    bundled_source,
    directory_source,
    first_pairs,
    get_source,
    spread,
    spread_pairs,
)
from keras_transformer.data.treebank import TreebankSource, is_treebank
from keras_transformer.data.trees import Tree, TreeError, delinearize, linearize, read_trees
from keras_transformer.data.vocab import (
    EOS_ID,
    PAD_ID,
    Vocabulary,
    VocabularyError,
    normalize_whitespace,
)
from keras_transformer.data.vocabularies import (
    VocabularyProtocol,
    load_vocabulary,
    vocabulary_file,
)
from keras_transformer.data.vocabulary_training import (
    build_vocabulary,
    corpus_texts,
    corpus_whole_tokens,
    default_vocab_size,
)

__all__ = [
    "BUCKET_GROWTH", "BUNDLED", "CorpusError", "EOS_ID", "LocalSource", "MarianVocabulary",
    "MarkupAugmentedSource",
    "PAD_ID", "TfdsSource",
    "Tree",
    "TreeError", "TreebankSource", "UpdateBatches", "Vocabulary", "VocabularyError",
    "VocabularyProtocol", "WeightedCorpora",
    "XLA_BUCKET_GROWTH", "batch_by_length", "batch_shapes",
    "bucket_batch_sizes", "bucket_boundaries", "build_vocabulary", "bundled_source",
    "corpus_texts", "corpus_whole_tokens", "counted", "default_vocab_size", "delinearize",
    "directory_source", "first_pairs", "get_source", "import_marian_vocabulary",
    "is_treebank", "load_vocabulary", "length_sorted_batches", "limit_length", "linearize",
    "normalize_whitespace", "parse_weights", "pipeline", "read_trees", "shift_right", "spread",
    "spread_pairs",
    "tokenized_pairs", "update_batches", "vocabulary_file",
]
