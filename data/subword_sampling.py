"""Subword regularization on the training side (`kt-train --subword_alpha A`): each time a
training sentence is read it is cut into pieces anew, at random, so the model sees the many
segmentations of a word, which helps most on small data. For a unigram vocabulary this is
SentencePiece's sampling (Kudo 2018, "Subword Regularization", alpha the smoothing of the
segmentations' probabilities); for a BPE vocabulary, BPE-dropout (Provilkov et al. 2020, each
merge skipped with probability alpha). Dev, test, kt-translate and every export read one
segmentation, `Vocabulary.encode`'s.

SentencePiece draws from a generator each thread seeds once, from the process-wide seed, when it
first samples. So a batch is sampled in a thread of its own, started right after the seed is set
to one made of the run's seed and the batch's index: the same --seed gives the same pieces, in
any order tf.data runs the batches.
"""

import hashlib
import threading

import numpy as np
import sentencepiece
import tensorflow as tf

from keras_transformer.data.vocab import Vocabulary, VocabularyError, encoded, normalize_texts

# The seed is process-wide: one sampled batch at a time.
_SEEDING = threading.Lock()


def _batch_seed(seed, index):
    """A 32-bit SentencePiece seed of the run's seed (None: fresh) and a batch's index."""
    if seed is None:
        return int(np.random.default_rng().integers(2**32))
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class SampledEncoder:
    """`Vocabulary.encode` with the pieces drawn at random (module docstring).

    Args:
        vocabulary: a `data.Vocabulary` (SentencePiece; a unigram or BPE model).
        alpha: unigram: the smoothing of the sampling distribution (Kudo's alpha, 0.1-0.5 in
            his experiments); BPE: the probability of skipping each merge (0.1 in Provilkov's).
        seed: the run's seed (None: different pieces every run).

    Raises:
        VocabularyError: not a SentencePiece `Vocabulary` (an imported Marian model's), or an
            alpha outside (0, 1).
    """

    def __init__(self, vocabulary, alpha, seed=None):
        if type(vocabulary) is not Vocabulary:
            raise VocabularyError(f"subword sampling reads one SentencePiece model; "
                                  f"{vocabulary.path} is not one (an imported model's "
                                  f"vocabulary?)")
        if not 0 < alpha < 1:
            raise VocabularyError(f"subword_alpha must be above 0 and below 1, got {alpha!r}")
        self.vocabulary, self.alpha, self.seed = vocabulary, float(alpha), seed
        self._processor = sentencepiece.SentencePieceProcessor(
            model_proto=vocabulary.model_proto)

    def sample(self, texts, index):
        """Pieces of normalized `texts` (bytes) drawn with the seed of batch `index`: a list of
        id lists."""
        texts = [text.decode("utf-8", "surrogateescape") for text in texts]
        drawn = {}

        def draw():
            drawn["ids"] = self._processor.encode(texts, enable_sampling=True, alpha=self.alpha,
                                                  nbest_size=-1, num_threads=1)

        with _SEEDING:
            sentencepiece.set_random_generator_seed(_batch_seed(self.seed, int(index)))
            thread = threading.Thread(target=draw)
            thread.start()
            thread.join()
        return drawn["ids"]

    def encode(self, texts, index, max_length=None):
        """tf.string [batch], the batch's int64 index -> int32 RaggedTensor [batch, (length)],
        as `Vocabulary.encode` makes it (end of sentence added, cut to `max_length`), of pieces
        drawn at random."""
        def sampled(normalized, index):
            rows = self.sample(normalized.numpy(), index.numpy())
            return (np.array([i for row in rows for i in row], np.int32),
                    np.array([len(row) for row in rows], np.int64))

        values, lengths = tf.py_function(sampled, [normalize_texts(texts), index],
                                         [tf.int32, tf.int64])
        values.set_shape([None])
        lengths.set_shape([None])
        return encoded(tf.RaggedTensor.from_row_lengths(values, lengths), max_length)


__all__ = ["SampledEncoder"]
