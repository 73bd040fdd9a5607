"""How fast a beam search could be if only its matrix products cost anything: the decode of
bench/decode_ab.py beside the same model's dense matrix products alone, in one process.

The products are those a cached beam-4 decode of the base model issues (its weights and
products in --dtype, float32 or bfloat16; 32 sources of 32 tokens, --new_tokens every
hypothesis): the encoder's projections and feed-forward once, the
encoder-decoder keys and values once, then at every step, for batch x beam rows, each decoder
layer's query/key/value/output and encoder-decoder query/output projections, its feed-forward
and the output projection over the vocabulary. They run on the model's own kernels, one after
another as in a decode, in a `tf.while_loop` inside one `tf.function`; attention, softmax, top-k,
the cache's copies and layer norm are left out. So "products alone" is a floor under the decode
on this machine that no change to the search or the cache can go below in that dtype; the time
above it is what such changes could still take away. Measured alternately, --rounds times each,
with the 2048^3 matmul peak printed beside them:

    python -m bench.gemm_floor [--dtype bfloat16]
"""

import argparse
import json
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench.train_step import matmul_peak


def products_alone(model, batch, beam, source_length, new_tokens):
    """A function running the decode's dense products on `model`'s kernels (in its compute
    dtype) once; it returns a scalar tensor that depends on all of them, so none is pruned.
    bench.decode_speed times it beside the decodes."""
    embedding = model.embedding.output_kernel()
    rows = batch * beam

    def attention_kernels(attention):
        return (attention.query_kernel, attention.key_kernel, attention.value_kernel,
                attention.output_kernel)

    def feed_forward(layer, x):
        return layer.feed_forward.outer(layer.feed_forward.inner(x))

    @tf.function(autograph=False)
    def run(source, state):
        x = source
        for layer in model.encoder_layers:
            q, k, v, o = attention_kernels(layer.self_attention)
            x = feed_forward(layer, (x @ q + x @ k + x @ v) @ o)
        memory = [x @ layer.encoder_decoder_attention.key_kernel
                  + x @ layer.encoder_decoder_attention.value_kernel
                  for layer in model.decoder_layers]

        def step(index, h, total):
            for layer in model.decoder_layers:
                q, k, v, o = attention_kernels(layer.self_attention)
                cross_q, _, _, cross_o = attention_kernels(layer.encoder_decoder_attention)
                h = ((h @ q + h @ k + h @ v) @ o) @ cross_q @ cross_o
                h = feed_forward(layer, h)
            logits = h @ embedding
            return index + 1, h * 0.5, total + logits[:, :1]

        _, _, total = tf.while_loop(lambda index, *_: index < new_tokens, step,
                                    (0, state, tf.zeros([rows, 1], state.dtype)))
        return tf.reduce_sum(total) + sum(tf.reduce_sum(m[:1]) for m in memory)

    generator = np.random.default_rng(0)
    source = tf.constant(generator.normal(size=(batch * source_length, model.d_model)),
                         model.compute_dtype)
    state = tf.constant(generator.normal(size=(rows, model.d_model)), model.compute_dtype)
    return lambda: run(source, state)


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.gemm_floor",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new_tokens", type=int, default=40)
    parser.add_argument("--dtype", default="float32", help="float32 or bfloat16 (weights)")
    args = parser.parse_args()
    batch, beam, source_length = 32, 4, 32
    keras.utils.set_random_seed(0)
    model = kt.build_model("transformer_base", 32000, dtype=args.dtype)
    source = np.random.default_rng(0).integers(2, 32000, size=(batch, source_length))
    source[:, -1] = kt.EOS_ID
    source = tf.constant(source, tf.int32)

    products = products_alone(model, batch, beam, source_length, args.new_tokens)
    arms = {"beam 4 decode": lambda: kt.beam_decode(
                model, source, max_length=args.new_tokens, beam_size=beam, alpha=0.6,
                eos_id=-1)[0].numpy(),
            "its matrix products alone": lambda: products().numpy()}
    times = {name: [] for name in arms}
    for run in arms.values():  # trace
        run()
    for _ in range(args.rounds):
        for name, run in arms.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(json.dumps({
        "dtype": args.dtype,
        **{f"{name} s": round(value, 3) for name, value in medians.items()},
        "products / decode": round(medians["its matrix products alone"]
                                   / medians["beam 4 decode"], 3),
        "runs s": {name: [round(t, 2) for t in values] for name, values in times.items()},
        "float32 matmul peak GFLOP/s": [round(matmul_peak("float32") / 1e9) for _ in range(3)],
    }, indent=1))


if __name__ == "__main__":
    main()
