"""Training step speed: this project against keras-hub layers and torch.nn.Transformer.

Every model is the paper's base configuration (unless --hparams says otherwise) with a shared
32,000-id vocabulary tied with the output projection, trained one Adam step at a time on the same
random batch without padding. Variants alternate within each repetition (one step each, in
turn), so the machine's noise falls on all of them alike; the matmul peak is measured in the same
process before and after. Needs `pip install -e .[bench]`.

- this project: `kt.build_model` + `kt.build_loss` (label smoothing 0.1) + `kt.FusedAdam` (what
  `kt.build_optimizer` gives) under `train_on_batch`, float32 or mixed_bfloat16, XLA off or on;
- keras-hub: TransformerEncoder/TransformerDecoder stacks, ReversibleEmbedding, sparse
  cross-entropy without smoothing (Keras's smoothing needs one-hot targets, which would slow it
  down; the peer gets its fastest loss), `keras.optimizers.Adam`, `train_on_batch`, XLA off or
  on;
- torch: `torch.nn.Transformer`, eager, `CrossEntropyLoss(label_smoothing=0.1)`, float32 or
  `torch.autocast("cpu", torch.bfloat16)`.

FLOPs are the matmuls a step must do (3x the forward pass's: projections, feed-forward, attention
scores and sums over all key positions, output projection); MFU divides the achieved rate by
the measured matmul peak of the variant's compute dtype.

    python -m bench.train_step --repeats 5
"""

import argparse
import statistics
import time
from functools import partial

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from bench import peers
from bench.common import append_results, markdown_table

ADAM = dict(learning_rate=1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def random_batch(vocab_size, batch, length, seed=0):
    """(source, target_input, target_output) int32 [batch, length]: no padding, eos last."""
    rng = np.random.default_rng(seed)
    source = rng.integers(2, vocab_size, (batch, length), dtype=np.int32)
    target = rng.integers(2, vocab_size, (batch, length), dtype=np.int32)
    source[:, -1] = target[:, -1] = kt.EOS_ID
    target_input = np.concatenate([np.zeros((batch, 1), np.int32), target[:, :-1]], axis=1)
    return source, target_input, target


def step_flops(hp, vocab_size, batch, source_length, target_length):
    """Matmul FLOPs of one training step (forward x 3)."""
    d, d_ff, n = hp.d_model, hp.d_ff, hp.num_layers
    width = hp.num_heads * (hp.d_k or d // hp.num_heads)
    source_tokens, target_tokens = batch * source_length, batch * target_length
    encoder = n * source_tokens * (2 * 4 * d * width + 2 * 2 * d * d_ff
                                   + 2 * 2 * source_length * width)
    decoder = n * (target_tokens * (2 * 6 * d * width + 2 * 2 * d * d_ff
                                    + 2 * 2 * (target_length + source_length) * width)
                   + source_tokens * 2 * 2 * d * width)  # encoder-decoder keys and values
    output = target_tokens * 2 * d * vocab_size
    return 3 * (encoder + decoder + output)


def matmul_peak(dtype, size=2048, repeats=10):
    """Median FLOP/s of a size^3 TensorFlow matmul in `dtype`."""
    a = tf.random.normal([size, size], dtype=tf.float32)
    a = tf.cast(a, dtype)
    matmul = tf.function(lambda x: tf.matmul(x, x))
    matmul(a).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).numpy()
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / statistics.median(times)


def keras_step(model, optimizer, loss, jit_compile, batch):
    source, target_input, target = (tf.constant(t) for t in batch)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    return lambda: float(model.train_on_batch((source, target_input), target))


def ours(policy, jit_compile, hp, vocab_size, batch):
    model = kt.build_model(hp, vocab_size, dtype=policy)
    return keras_step(model, kt.FusedAdam(**ADAM), kt.build_loss(hp), jit_compile, batch)


def keras_hub(policy, jit_compile, hp, vocab_size, batch):
    model = peers.keras_hub_transformer(vocab_size, hp.num_layers, hp.d_model, hp.d_ff,
                                        hp.num_heads, hp.dropout, dtype=policy)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=kt.PAD_ID)
    return keras_step(model, keras.optimizers.Adam(**ADAM), loss, jit_compile, batch)


def torch_model(bf16, hp, vocab_size, batch):
    import torch

    model = peers.torch_transformer(vocab_size, hp.num_layers, hp.d_model, hp.d_ff,
                                    hp.num_heads, hp.dropout)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=ADAM["learning_rate"],
                                 betas=(ADAM["beta_1"], ADAM["beta_2"]), eps=ADAM["epsilon"])
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=kt.PAD_ID, label_smoothing=0.1)
    source, target_input, target = (torch.from_numpy(t).long() for t in batch)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(source, target_input)
        loss = loss_fn(logits.float().reshape(-1, vocab_size), target.reshape(-1))
        loss.backward()
        optimizer.step()
        return float(loss)

    return step


# name -> (peer or None for ours, compute dtype, factory(hp, vocab_size, batch) -> step)
VARIANTS = {
    "ours fp32": (None, "float32", partial(ours, "float32", False)),
    "ours fp32 XLA": (None, "float32", partial(ours, "float32", True)),
    "ours bf16": (None, "bfloat16", partial(ours, "mixed_bfloat16", False)),
    "ours bf16 XLA": (None, "bfloat16", partial(ours, "mixed_bfloat16", True)),
    "keras-hub fp32": ("keras-hub", "float32", partial(keras_hub, "float32", False)),
    "keras-hub fp32 XLA": ("keras-hub", "float32", partial(keras_hub, "float32", True)),
    "keras-hub bf16": ("keras-hub", "bfloat16", partial(keras_hub, "mixed_bfloat16", False)),
    "torch fp32": ("torch", "float32", partial(torch_model, False)),
    "torch bf16 autocast": ("torch", "bfloat16", partial(torch_model, True)),
}


def run_workload(hp, vocab_size, batch_size, length, names, repeats, warmup):
    """{name: [seconds per step]}, variants alternating one step at a time."""
    batch = random_batch(vocab_size, batch_size, length)
    steps = {}
    for name in names:
        keras.utils.set_random_seed(0)
        steps[name] = VARIANTS[name][2](hp, vocab_size, batch)
        start = time.perf_counter()
        for _ in range(warmup):  # traces, compiles, allocates
            loss = steps[name]()
        print(f"{batch_size}x{length} {name}: warm-up {time.perf_counter() - start:.1f} s, "
              f"loss {loss:.3f}", flush=True)
    times = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names:
            start = time.perf_counter()
            loss = steps[name]()
            times[name].append(time.perf_counter() - start)
            print(f"{batch_size}x{length} {name} #{repeat}: {times[name][-1]:.2f} s, "
                  f"loss {loss:.3f}", flush=True)
    del steps
    keras.backend.clear_session()
    return times


# (our compute dtype, the peers' compute dtype) pairs the issue sets goals for.
GOALS = (("float32", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32"))


def best(times, names, peer, dtype):
    candidates = [n for n in names if (VARIANTS[n][0] is not None) == peer and
                  VARIANTS[n][1] == dtype]
    return min(candidates, key=lambda n: statistics.median(times[n]), default=None)


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.train_step",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams", default="transformer_base")
    parser.add_argument("--vocab_size", type=int, default=32000)
    parser.add_argument("--workloads", default="64x32,64x64",
                        help="batch x length (source = target length), comma-separated; 64x64 "
                             "is a 4096-token batch")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    hp = kt.hparams.get(args.hparams)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")

    peaks = {"float32": [matmul_peak(tf.float32)], "bfloat16": [matmul_peak(tf.bfloat16)]}
    results = []
    for workload in args.workloads.split(","):
        batch_size, length = (int(v) for v in workload.split("x"))
        times = run_workload(hp, args.vocab_size, batch_size, length, names, args.repeats,
                             args.warmup)
        results.append((batch_size, length, times))
    peaks["float32"].append(matmul_peak(tf.float32))
    peaks["bfloat16"].append(matmul_peak(tf.bfloat16))
    peak = {dtype: statistics.median(values) for dtype, values in peaks.items()}

    rows, verdicts = [], []
    for batch_size, length, times in results:
        flops = step_flops(hp, args.vocab_size, batch_size, length, length)
        tokens = 2 * batch_size * length
        reference = {dtype: best(times, names, True, dtype) for dtype in ("float32", "bfloat16")}
        for name in names:
            seconds = times[name]
            median = statistics.median(seconds)
            dtype = VARIANTS[name][1]
            ratios = [f"{statistics.median(times[ref]) / median:.2f}x {ref}"
                      for ref in reference.values() if ref and ref != name]
            rows.append([f"{batch_size}x{length}", name,
                         f"{median:.2f} ({min(seconds):.2f}-{max(seconds):.2f})",
                         f"{tokens / median:,.0f}", f"{flops / median / peak[dtype]:.0%}",
                         "; ".join(ratios)])
        for mine_dtype, peer_dtype in GOALS:
            mine, peer = best(times, names, False, mine_dtype), reference[peer_dtype]
            if mine and peer:
                ratio = statistics.median(times[peer]) / statistics.median(times[mine])
                verdicts.append(f"{batch_size}x{length}: best of ours in {mine_dtype} ({mine}) "
                                f"is {ratio:.2f}x the best {peer_dtype} peer ({peer})")

    import keras_hub
    import torch
    table = (
        f"{args.hparams}, {args.vocab_size}-id shared vocabulary, one Adam step on a random batch "
        f"without padding (source and target of the same length), variants alternating; "
        f"seconds per step: median (min-max) of {args.repeats} after {args.warmup} warm-up "
        f"steps. tokens/s counts source + target tokens. keras-hub {keras_hub.__version__}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads). Matmul peak in this "
        f"run (2048^3, before/after): float32 "
        f"{', '.join(f'{p / 1e9:.0f}' for p in peaks['float32'])} GFLOP/s, bfloat16 "
        f"{', '.join(f'{p / 1e9:.0f}' for p in peaks['bfloat16'])} GFLOP/s; MFU uses their "
        f"medians for the variant's compute dtype.\n\n"
        + markdown_table(["batch", "variant", "s/step", "tokens/s", "MFU",
                          "speed-up over the best peer"], rows)
        + "\n\n" + "\n".join(f"- {v}" for v in verdicts))
    append_results("Training step: this project vs keras-hub and torch", table)


if __name__ == "__main__":
    main()
