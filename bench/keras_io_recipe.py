"""The peer of bench/quality.py: the keras.io "English-to-Spanish translation with KerasHub"
recipe, at this project's model size, trained and decoded on a corpus of ours.

Every choice is the recipe's (as issue 24 lists them), not this project's: a SentencePiece BPE
of its own (pad 0, unk 1, bos 2, eos 3, character coverage 1.0) on both sides of the train split;
pairs longer than 96 ids a side dropped; the source without BOS/EOS, the decoder input
[BOS] + ids and the labels ids + [EOS]; keras-hub `TokenAndPositionEmbedding` (learned
positions, one table per side, no sqrt(d) scaling) and `TransformerEncoder`/`TransformerDecoder`
(post-norm, dropout on attention probabilities, residual branches and after each embedding); an
untied `Dense` output; label-smoothed (0.1) cross-entropy over real target tokens; Adam(0.9, 0.98,
1e-9) on eq. 3 with warmup 1,000; batches of pairs sorted by (target, source) length with random
tie-breaks, cut at <= 4,000 padded target tokens, their order reshuffled each epoch; beam search
with keras-hub's `BeamSampler`, no length penalty. Needs keras-hub (`pip install -e .[bench]`).
"""

import io
import time

import keras
import numpy as np
import sentencepiece
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.trainer.callbacks import TimeLimit

PAD, UNK, BOS, EOS = 0, 1, 2, 3
MAX_IDS = 96


def build_tokenizer(texts, vocab_size):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        character_coverage=1.0, num_threads=2, minloglevel=2)
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


def batches_of(sources, targets, batch_tokens, rng):
    """Index arrays, one a batch: pairs sorted by (target, source) length with random
    tie-breaks, cut so that rows x (longest target + 1) <= batch_tokens."""
    target_lengths = np.array([len(t) + 1 for t in targets])
    order = np.lexsort((rng.random(len(targets)), [len(s) for s in sources], target_lengths))
    batches, current = [], []
    for index in order:
        if current and (len(current) + 1) * target_lengths[index] > batch_tokens:
            batches.append(np.array(current))
            current = []
        current.append(index)
    return batches + [np.array(current)] if current else batches


def _padded(rows):
    out = np.zeros((len(rows), max(1, max(len(r) for r in rows))), np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def build_model(vocab_size, num_layers, d_model, d_ff, num_heads, dropout=0.1):
    """(training model, encoder model, decoder model), the recipe's functional stacks."""
    import keras_hub

    def embed(ids, name):
        x = keras_hub.layers.TokenAndPositionEmbedding(
            vocab_size, MAX_IDS + 1, d_model, mask_zero=True, name=name)(ids)
        return keras.layers.Dropout(dropout)(x)

    source = keras.Input((None,), dtype="int32", name="source_ids")
    x = embed(source, "source_embedding")
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(d_ff, num_heads, dropout=dropout)(x)
    encoder = keras.Model(source, x)
    target = keras.Input((None,), dtype="int32", name="target_input_ids")
    memory = keras.Input((None, d_model), name="memory")
    memory_ids = keras.Input((None,), dtype="int32", name="memory_ids")
    # The source padding mask, passed explicitly: a Keras mask would not survive repeating the
    # encoder output for the beams, and training and decoding must mask alike.
    memory_mask = keras.ops.not_equal(memory_ids, PAD)
    y = embed(target, "target_embedding")
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(d_ff, num_heads, dropout=dropout)(
            y, memory, encoder_padding_mask=memory_mask)
    logits = keras.layers.Dense(vocab_size, dtype="float32", name="output")(y)
    decoder = keras.Model((target, memory, memory_ids), logits)
    model = keras.Model((source, target), decoder((target, encoder(source), source)))
    return model, encoder, decoder


def train_and_translate(source, hp, vocab_size=8000, batch_tokens=4000, minutes=None,
                        steps=None, beam_size=4, seed=1, splits=("dev",), log=print):
    """Trains the recipe on `source`'s train split for `minutes` or `steps`, then translates each
    of `splits`; returns ({split: (translations, references)}, steps trained, target tokens
    trained, seconds of training)."""
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    pairs = list(source.pairs("train").as_numpy_iterator())
    tokenizer = build_tokenizer((text.decode() for pair in pairs for text in pair), vocab_size)
    sources = [tokenizer.encode(s.decode()) for s, _ in pairs]
    targets = [tokenizer.encode(t.decode()) for _, t in pairs]
    keep = [i for i, (s, t) in enumerate(zip(sources, targets))
            if 0 < len(s) <= MAX_IDS and 0 < len(t) <= MAX_IDS]
    log(f"keras.io recipe: {len(keep)} of {len(pairs)} pairs kept (<= {MAX_IDS} ids a side)")
    sources, targets = [sources[i] for i in keep], [targets[i] for i in keep]
    batches = batches_of(sources, targets, batch_tokens, rng)

    def stream():
        while True:
            for batch in rng.permutation(len(batches)):
                rows = batches[batch]
                yield ((_padded([sources[i] for i in rows]),
                        _padded([[BOS] + targets[i] for i in rows])),
                       _padded([targets[i] + [EOS] for i in rows]))

    spec = tf.TensorSpec([None, None], tf.int32)
    dataset = tf.data.Dataset.from_generator(stream, output_signature=((spec, spec), spec))
    model, encoder, decoder = build_model(tokenizer.get_piece_size(), hp.num_layers,
                                          hp.d_model, hp.d_ff, hp.num_heads)
    schedule = kt.TransformerSchedule(hp.d_model, warmup_steps=1000)
    model.compile(optimizer=keras.optimizers.Adam(schedule, 0.9, 0.98, 1e-9),
                  loss=kt.LabelSmoothedCrossEntropy(0.1, pad_id=PAD))
    log(f"keras.io recipe: {model.count_params():,} parameters, {len(batches)} batches an "
        f"epoch, {keras.mixed_precision.global_policy().name}")
    callbacks = [TimeLimit(minutes)] if minutes else []
    start = time.monotonic()
    model.fit(dataset.prefetch(4), epochs=1, steps_per_epoch=steps or 10**9,
              callbacks=callbacks, verbose=0)
    trained = int(model.optimizer.iterations.numpy())
    tokens = trained * np.mean([sum(len(targets[i]) + 1 for i in b) for b in batches])
    seconds = time.monotonic() - start
    log(f"keras.io recipe: {trained} steps in {seconds:.0f} s")
    outputs = {}
    for split in splits:
        pairs = list(source.pairs(split).as_numpy_iterator())
        outputs[split] = (translate(encoder, decoder, tokenizer, [
            tokenizer.encode(s.decode())[:MAX_IDS] for s, _ in pairs], beam_size),
                          [t.decode() for _, t in pairs])
    return outputs, trained, tokens, seconds


def translate(encoder, decoder, tokenizer, source_ids, beam_size, batch_size=32):
    """keras-hub's BeamSampler over the decoder, the encoder run once a batch."""
    import keras_hub

    sampler = keras_hub.samplers.BeamSampler(num_beams=beam_size)

    # Unknown batch size: keras-hub's loop state must keep the shapes it starts with.
    ids = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[ids, ids])
    def generate(sources, prompt):
        memory = tf.repeat(encoder(sources, training=False), beam_size, axis=0)
        memory_ids = tf.repeat(sources, beam_size, axis=0)

        def next_token(prompt, cache, index):
            logits = decoder((prompt, memory, memory_ids), training=False)[:, index - 1, :]
            return logits, None, cache

        return sampler(next_token, prompt, index=1, stop_token_ids=[EOS])

    translations = [None] * len(source_ids)
    order = np.argsort([-len(s) for s in source_ids], kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        sources = _padded([source_ids[i] for i in rows])
        length = min(MAX_IDS + 1, sources.shape[1] + 50)
        prompt = np.zeros((len(rows), length), np.int32)
        prompt[:, 0] = BOS
        for row, ids in zip(rows, generate(sources, prompt).numpy()):
            ids = list(ids[1:])
            translations[row] = tokenizer.decode(ids[:ids.index(EOS)] if EOS in ids else ids)
    return translations
