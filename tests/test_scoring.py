"""kt.score: the model's log P(target | source) of given pairs, against beam search's own scores
and an independent teacher-forced computation (tests/test_decoding.py's)."""

import numpy as np
import pytest
import tensorflow as tf
from test_decoding import dev_source_ids, hypothesis_lengths, teacher_forced_log_probs

import keras_transformer as kt


def beams_as_rows(source, ids):
    """source [batch, s], beams [batch, n, length] -> rows: [batch n, s], [batch n, length]."""
    batch, n, length = ids.shape
    return np.repeat(source, n, axis=0), ids.reshape(batch * n, length)


def test_scoring_a_beams_own_output_gives_back_its_scores(trained, dev_sentences):
    source = dev_source_ids(trained, dev_sentences)
    limits = np.count_nonzero(source, axis=1)[:, None] + 50
    for alpha in (0.6, 1.0):
        ids, scores = kt.beam_decode(trained.model, source, beam_size=4, alpha=alpha)
        ids, scores = ids.numpy(), scores.numpy()
        result = kt.score(trained.model, *beams_as_rows(source, ids), alpha=alpha)
        np.testing.assert_allclose(result["scores"].numpy().reshape(scores.shape), scores,
                                   atol=1e-4, rtol=0)
        lengths = hypothesis_lengths(ids, limits)
        np.testing.assert_array_equal(result["lengths"].numpy().reshape(lengths.shape), lengths)
        expected = teacher_forced_log_probs(trained.model, source, ids, lengths)
        np.testing.assert_allclose(result["log_probs"].numpy().reshape(expected.shape),
                                   expected, atol=1e-4, rtol=0)


def test_scores_do_not_depend_on_batch_mates_order_or_padding(trained, dev_sentences):
    source = dev_source_ids(trained, dev_sentences, count=6)
    targets = trained.vocabulary.encode(
        tf.constant([es for _, es in dev_sentences[:6]]), 64).to_tensor().numpy()
    together = kt.score(trained.model, source, targets)["log_probs"].numpy()
    order = np.array([3, 0, 5, 1, 4, 2])
    shuffled = kt.score(trained.model, source[order], targets[order])["log_probs"].numpy()
    np.testing.assert_allclose(shuffled, together[order], atol=1e-5, rtol=1e-6)
    for row in (0, 4):
        alone_source = source[row:row + 1, :np.count_nonzero(source[row])]
        alone_target = np.pad(targets[row:row + 1], [(0, 0), (0, 7)])  # more padding
        alone = kt.score(trained.model, alone_source, alone_target)["log_probs"].numpy()
        np.testing.assert_allclose(alone, together[row:row + 1], atol=1e-5, rtol=1e-6)


def test_only_the_tokens_up_to_the_first_end_of_sentence_count():
    model = kt.build_model("transformer_tiny", vocab_size=20)
    source = np.array([[5, 6, 7, kt.EOS_ID]])
    clean = np.array([[4, 9, kt.EOS_ID, 0, 0]])
    after_end = np.array([[4, 9, kt.EOS_ID, 12, 13]])
    first, second = (kt.score(model, source, target, alpha=0.0) for target in (clean, after_end))
    assert int(first["lengths"][0]) == int(second["lengths"][0]) == 3
    assert float(first["log_probs"][0]) == float(second["log_probs"][0])
    np.testing.assert_array_equal(second["token_log_probs"].numpy()[0, 3:], 0.0)
    # The formula by hand: softmax of the decoder's logits over [start, 4, 9] at 4, 9, EOS,
    # over every token but padding.
    logits = model.decode(np.array([[kt.PAD_ID, 4, 9]]), model.encode(source),
                          kt.padding_mask(source)).numpy()[0].astype("float64")[:, 1:]
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_softmax = np.concatenate([np.full([3, 1], -np.inf), log_softmax], axis=1)
    expected = log_softmax[0, 4] + log_softmax[1, 9] + log_softmax[2, kt.EOS_ID]
    np.testing.assert_allclose(float(first["log_probs"][0]), expected, atol=1e-5)
    penalized = kt.score(model, source, clean, alpha=0.6)
    np.testing.assert_allclose(float(penalized["scores"][0]),
                               expected / ((5 + 3) / 6) ** 0.6, atol=1e-5)


@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")  # one position
def test_an_empty_target_scores_zero_over_zero_tokens():
    model = kt.build_model("transformer_tiny", vocab_size=20)
    result = kt.score(model, np.array([[5, kt.EOS_ID]]), np.zeros([1, 0], "int32"))
    assert int(result["lengths"][0]) == 0 and float(result["scores"][0]) == 0.0


def test_scoring_a_few_positions_at_a_time_gives_the_whole_targets_scores(monkeypatch):
    """Targets are projected onto the vocabulary a block of positions at a time (BLOCK_LOGITS):
    one position a block, or every one at once, the log-probabilities of a hand computation;
    an ensemble's too (the log of its members' mean probability)."""
    models = [kt.build_model("transformer_tiny", vocab_size=30) for _ in range(2)]
    rng = np.random.default_rng(0)
    source = np.concatenate([rng.integers(2, 30, [3, 6]), np.full([3, 1], kt.EOS_ID)], 1)
    target = np.concatenate([rng.integers(2, 30, [3, 9]), np.full([3, 1], kt.EOS_ID)], 1)
    target[1, 4:] = [kt.EOS_ID, 0, 0, 0, 0, 0]
    decoder_input = np.concatenate([np.zeros([3, 1], int), target[:, :-1]], 1)

    def by_hand(model):
        logits = model.decode(decoder_input, model.encode(source), kt.padding_mask(source))
        logits = logits.numpy().astype("float64")
        logits[..., kt.PAD_ID] = -np.inf
        return logits - np.log(np.exp(logits).sum(-1, keepdims=True))

    expected = np.log(np.mean([np.exp(by_hand(m)) for m in models], axis=0))
    expected = np.take_along_axis(expected, target[..., None], -1)[..., 0]
    expected[1, 5:] = 0
    scoring = kt.search.scoring
    for block_logits in (3 * 30, 3 * 30 * 4, 2**23):  # 1 position, 4, all 10 at once
        monkeypatch.setattr(scoring, "BLOCK_LOGITS", block_logits)
        scored = scoring.score.python_function(models, source, target)
        np.testing.assert_allclose(scored["token_log_probs"].numpy(), expected, atol=1e-5)


def test_scoring_is_held_to_the_search_bound(bible_vocab):
    """A served `score` counts sentences x target columns against max_search_positions, as a
    search of one hypothesis a sentence, and names the limit past it."""
    model = kt.build_model("transformer_tiny", vocab_size=bible_vocab.vocab_size)
    translator = kt.export.Translator(model, bible_vocab, max_input_length=16,
                                      max_output_length=20, beam_size=1,
                                      max_search_positions=40)
    long_target = " ".join(["And God said, Let there be light"] * 4)  # past 20 tokens
    within = translator.score(tf.constant(["Jesus wept."] * 2), tf.constant([long_target] * 2))
    assert within["truncated"].numpy().all()  # cut to the 20 columns a translation may have
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"scoring past the limit \(max_search_positions\) of 40 positions"):
        translator.score(tf.constant(["Jesus wept."] * 3), tf.constant([long_target] * 3))
