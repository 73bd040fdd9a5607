import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import decode_lengths, greedy_decode

VOCAB = 25


def step_by_step_greedy(model, source, max_length):
    """The reference: one Python step at a time through the uncompiled decode."""
    cache = model.init_cache(model.encode(source), kt.padding_mask(source), max_length)
    previous = np.zeros((len(source), 1), "int32")
    finished = np.zeros(len(source), bool)
    output, scores = [], np.zeros(len(source))
    for step in range(max_length):
        logits, cache = model.decode(previous, cache=cache, step=step)
        log_probs = np.asarray(tf.nn.log_softmax(logits[:, -1]))
        chosen = np.where(finished, kt.PAD_ID, log_probs.argmax(-1)).astype("int32")
        scores += np.where(finished, 0.0, log_probs.max(-1))
        finished |= chosen == kt.EOS_ID
        output.append(chosen)
        previous = chosen[:, None]
    return np.stack(output, 1), scores


def test_compiled_greedy_equals_the_step_by_step_reference(rng):
    model = kt.build_model(kt.hparams.get("transformer_tiny"), VOCAB)
    source = rng.integers(2, VOCAB, size=(3, 6)).astype("int32")
    source[1, 4:] = 0
    ids, scores = greedy_decode(model, source, 7)
    expected_ids, expected_scores = step_by_step_greedy(model, source, 7)
    np.testing.assert_array_equal(ids.numpy(), expected_ids)
    np.testing.assert_allclose(scores.numpy(), expected_scores, rtol=1e-5, atol=1e-5)


def test_ended_sentences_produce_padding():
    model = kt.build_model(kt.hparams.get("transformer_tiny"), VOCAB)
    # The last layer's output becomes the constant u (norm scale 0, offset u), and end of
    # sentence is the only token whose embedding points along u: it wins every step.
    final_norm = model.decoder_layers[-1].feed_forward_block.norm
    u = np.zeros(32, "float32")
    u[0] = 1.0
    final_norm.gamma.assign(np.zeros(32, "float32"))
    final_norm.beta.assign(u)
    table = np.asarray(model.embedding.embeddings)
    table[:, 0] = 0.0
    table[kt.EOS_ID] = 10.0 * u
    model.embedding.embeddings.assign(table)
    ids, scores = greedy_decode(model, np.full((2, 5), 3, "int32"), 40)
    assert ids.shape == (2, 40)
    np.testing.assert_array_equal(ids.numpy()[:, 0], kt.EOS_ID)
    np.testing.assert_array_equal(ids.numpy()[:, 1:], kt.PAD_ID)
    assert np.all(scores.numpy() < 0) and np.all(scores.numpy() > -0.01)  # one likely token


def test_decode_lengths_are_each_source_length_plus_extra():
    source = np.array([[5, 6, 1, 0, 0], [5, 6, 7, 8, 1]])
    np.testing.assert_array_equal(decode_lengths(source, extra_length=50), [53, 55])
    np.testing.assert_array_equal(decode_lengths(source, 50, max_length=54), [53, 54])
