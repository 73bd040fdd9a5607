"""How fast a beam search could be if only its dense matrix products cost anything:
bench/decode_ab.py's decode beside the same model's products alone, in one process.

The products are the projections a cached beam-4 decode of the base model issues, in --dtype
(float32 or bfloat16 weights; 32 sources of 32 tokens, 40 tokens every hypothesis): the encoder's
attention projections and feed-forward, the encoder-decoder keys and values once per sentence,
then 40 steps of 128 rows (32 sentences x 4 hypotheses) through each decoder layer's
self-attention query/key/value/output and encoder-decoder query/output projections and its
feed-forward, and the output projection over the vocabulary. They run on the model's own kernels
in one graph (`tf.while_loop`), each step waiting for the previous step's logits as a decode's
step waits for its top-k, so no step's products overlap with another's. Left out: attention's
own products over the cache (scores and weighted sums), softmax, top-k, layer norm, residuals,
the cache's copies. So the products alone are a floor under the decode in that dtype on this
machine; the time above it is what changes to the search, the cache and the rest of the step
could still take away (a search that ran step 0 on one hypothesis a sentence, not four, could go
~2% below it). Measured alternately, --rounds times each, with the matmul peak beside them:

    python -m bench.gemm_floor [--dtype bfloat16]
"""

import argparse
import json
import statistics
import time

import numpy as np
import tensorflow as tf

from bench.decode_ab import BEAM, NEW_TOKENS, workload
from bench.train_step import matmul_peak
from keras_transformer.search.contract import graph_function


def products_alone(model, batch, beam, source_length, new_tokens, candidates=None):
    """A function running the decode's dense products (module docstring) on `model`'s kernels
    once, and returning a scalar tensor that depends on all of them, so none is pruned. The
    model's variables must be in its compute dtype (float32 or bfloat16 weights, not a mixed
    policy). `candidates`: int32 [k], the output projection's columns of a search over a
    shortlist (`Transformer.output_kernel(candidates)`); None: the whole vocabulary.
    bench.decode_speed times it beside the decodes."""
    rows = batch * beam

    def projections(attention):
        return (attention.query_kernel, attention.key_kernel, attention.value_kernel,
                attention.output_kernel)

    @graph_function
    def run(source, state):
        x = source
        for layer in model.encoder_layers:
            q, k, v, o = projections(layer.self_attention)
            x = layer.feed_forward((x @ q + x @ k + x @ v) @ o)
        memory = [x @ layer.encoder_decoder_attention.key_kernel
                  + x @ layer.encoder_decoder_attention.value_kernel
                  for layer in model.decoder_layers]
        # Made once per decode, as search.steps.cached_step makes it.
        output_kernel = model.output_kernel(candidates)

        def step(index, h):
            for layer in model.decoder_layers:
                q, k, v, o = projections(layer.self_attention)
                cross_q, _, _, cross_o = projections(layer.encoder_decoder_attention)
                h = layer.feed_forward(((h @ q + h @ k + h @ v) @ o) @ cross_q @ cross_o)
            logits = h @ output_kernel
            # The next step needs this step's logits, as the search's next tokens do; tanh
            # keeps 40 steps of random products finite.
            return index + 1, tf.tanh(h + logits[:, :1])

        # The first step waits for the encoder-decoder keys and values, as in a decode.
        state += sum(tf.reduce_mean(keys[:1]) for keys in memory)
        _, h = tf.while_loop(lambda index, _: index < new_tokens, step, (0, state))
        return tf.reduce_sum(h)

    generator = np.random.default_rng(0)
    source = tf.constant(generator.normal(size=(batch * source_length, model.d_model)),
                         model.compute_dtype)
    state = tf.constant(generator.normal(size=(rows, model.d_model)), model.compute_dtype)
    return lambda: run(source, state)


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.gemm_floor",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="float32", help="float32 or bfloat16 (weights)")
    args = parser.parse_args()
    model, source, decode = workload(args.dtype)
    batch, source_length = source.shape
    products = products_alone(model, batch, BEAM, source_length, NEW_TOKENS)
    arms = {"beam 4 decode": decode, "its matrix products alone": lambda: products().numpy()}
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
        f"{args.dtype} 2048^3 matmul peak GFLOP/s": [round(matmul_peak(args.dtype) / 1e9)
                                                     for _ in range(3)],
    }, indent=1))


if __name__ == "__main__":
    main()
