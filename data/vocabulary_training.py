"""Training a shared SentencePiece vocabulary on a corpus (the paper's shared BPE vocabulary,
section 5.1): `build_vocabulary`, and the texts and whole tokens of a corpus it trains on. The
kt-vocab command (data/build_vocab.py) runs it.

The model it writes reads as data/vocab.py's `Vocabulary` expects: ids 0 pad, 1 end of
sentence, 2 unknown, byte fallback, and normalization that only reads SentencePiece's space
symbol as a space (`vocab.NORMALIZATION_RULES`).
"""

import io
import pathlib
import tempfile

import sentencepiece

from keras_transformer import cli
from keras_transformer.data import treebank
from keras_transformer.data.vocab import NORMALIZATION_RULES, Vocabulary, VocabularyError
from keras_transformer.errors import check_one_of
from keras_transformer.token_ids import EOS_ID, PAD_ID, UNK_ID

MODEL_TYPES = ("bpe", "unigram")


def build_vocabulary(texts, vocab_size, output, model_type="bpe", max_sentences=2_000_000,
                     num_threads=2, overwrite=False, whole_tokens=()):
    """Trains a SentencePiece model on `texts` and writes it to `output`.

    Args:
        texts: iterable of str, one sentence each (both languages, for a shared vocabulary).
        vocab_size: number of ids, including pad, eos, unk and the 256 byte pieces.
        output: path of the `.model` file to write.
        model_type: "bpe" (the paper's en-de) or "unigram" (closest to word-pieces, its en-fr).
        max_sentences: sentences sampled (reservoir) from `texts` for training.
        num_threads: training threads; the model depends on it, so fix it to reproduce one.
        overwrite: replace an existing file; without it an existing file is an error.
        whole_tokens: space-separated tokens of the texts always kept as one piece each (e.g. a
            linearized tree's `(NP`, which SentencePiece would otherwise cut after the bracket).

    Returns:
        the new `Vocabulary`.
    """
    output = pathlib.Path(output)
    if output.exists() and not overwrite:
        raise VocabularyError(f"{output} exists; pass overwrite=True (--overwrite) to replace it")
    check_one_of("model_type", model_type, MODEL_TYPES, VocabularyError)
    model = io.BytesIO()
    with tempfile.TemporaryDirectory() as scratch:
        rules = pathlib.Path(scratch) / "normalization.tsv"
        rules.write_text(NORMALIZATION_RULES, encoding="ascii")
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
                model_type=model_type, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
                byte_fallback=True, character_coverage=0.9995, normalization_rule_tsv=str(rules),
                input_sentence_size=max_sentences, shuffle_input_sentence=True,
                num_threads=num_threads, minloglevel=2,
                # With the whitespace marker a token is one piece; without it, two: '▁' and
                # itself.
                user_defined_symbols=["\u2581" + token for token in whole_tokens])
        except RuntimeError as error:
            raise VocabularyError(f"cannot build {output} with vocab_size={vocab_size}: "
                                  f"{error}") from None
    vocabulary = Vocabulary(model.getvalue(), output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # Readers never see a half-written vocabulary.
    cli.replace_atomically(output, lambda path: path.write_bytes(model.getvalue()))
    return vocabulary


def default_vocab_size(spec):
    """Ids of a vocabulary built for --data `spec`: section 6.3's 16K for a treebank (WSJ
    only), else 8,000, which suits the bundled corpora."""
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    return 16_000 if any(treebank.is_treebank(one) for one in specs) else 8_000


def corpus_whole_tokens(source):
    """The tokens a vocabulary of `source` keeps whole (`build_vocabulary`): a treebank's
    brackets, markup's placeholder tokens (`data.MarkupAugmentedSource`); none for a plain
    translation corpus."""
    whole_tokens = getattr(source, "whole_tokens", None)
    return whole_tokens() if whole_tokens else ()


def corpus_texts(source, split="train"):
    """Both sides of a source's split as str, for `build_vocabulary`; of several weighted corpora
    (`data.WeightedCorpora`), as many training pairs as they hold together, drawn by weight."""
    weighted = getattr(source, "weighted_pairs", None)
    pairs = source.pairs(split) if weighted is None or split != "train" else weighted(
        sum(int(c.pairs("train").reduce(0, lambda count, _: count + 1))
            for c in source.corpora))
    for source_texts, target_texts in pairs.batch(4096).as_numpy_iterator():
        for text in (*source_texts, *target_texts):
            yield text.decode("utf-8", errors="replace")
