"""One training step under Keras's JAX backend, this project beside the peers users would pick
instead, in one run: tokens a second and MFU, on a GPU (or, as a check, the CPU).

    python -m bench.jax_step                       # transformer_base; 100x250 and 400x64
    python -m bench.jax_step --model big
    python -m bench.jax_step --model small --shapes 32x32x32 --steps 10 --peak_size 2048  # CPU

Each part runs in its own process (one framework a process; a part that fails or runs out of
--part_seconds loses only its rows):
- kt: this project, `kt.build_model` + `kt.build_loss` + `kt.build_optimizer` (the paper's Adam
  on eq. 3) under mixed_bfloat16, stepped by the train function `model.fit` runs (the model's
  own `train_step(state, data)`, keras_transformer/training/jax_steps.py, jitted by Keras);
- keras_hub: keras-hub's TransformerEncoder/TransformerDecoder stacks (bench/peers.py), the same
  loss, Adam and train function;
- torch_eager, torch_compile: Hugging Face `MarianMTModel` (bench/peers.marian_config, SDPA
  attention), float32 weights under `torch.autocast(bfloat16)`, `F.cross_entropy(label_smoothing
  =0.1, ignore_index=pad)`, Adam (`AdamW`, weight decay 0, fused on CUDA); compile: the forward
  pass and loss under `torch.compile`.
Every part: the same random batches without padding (every token real), the first step
(compilation) timed apart, 3 warm-up steps, then the median of --steps timed steps, each timed
until the device is done. Nothing here needs TensorFlow (the lent GPU machines have none;
keras-hub imports it where it is installed).

MFU = (6 N tokens + attention FLOPs) / median step time / the bf16 matmul peak measured in the kt
part on the same device (--peak_size cubed, median of 5), with N the non-embedding matrix
parameters (the formula is printed with the table; gpu-probe's, so figures compare).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

PARTS = ("kt", "keras_hub", "torch_eager", "torch_compile")
MODELS = {"tiny": ("transformer_tiny", 512), "small": ("transformer_small", 8000),
          "base": ("transformer_base", 32000),
          "big": ("transformer_big", 32000)}
LABEL_SMOOTHING, PAD_ID = 0.1, 0
ADAM = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
WARMUP_STEPS = 3
CPU_NOTE = (" On a CPU this checks that every part runs and compares the frameworks' CPU "
            "paths; it says nothing of a GPU's kernels.")
FORMULA = ("MFU = (6 N tokens + attention FLOPs) / median step time / measured bf16 matmul "
           "peak; N = L (4 d^2 + 2 d d_ff) [encoder] + L (8 d^2 + 2 d d_ff) [decoder] "
           "(biases, norms and the tied embedding not counted); tokens = target tokens (= source "
           "tokens here); attention FLOPs = 12 d B L (S^2 + T^2 + T S) (full squares, x3 for "
           "training)")


def shape_of(hparams):
    import keras_transformer as kt

    hp = kt.hparams.get(hparams)
    return dict(num_layers=hp.num_layers, d_model=hp.d_model, d_ff=hp.d_ff,
                num_heads=hp.num_heads)


def step_flops(shape, sentences, source_length, target_length):
    d, d_ff, layers = shape["d_model"], shape["d_ff"], shape["num_layers"]
    non_embedding = layers * (4 * d * d + 2 * d * d_ff) + layers * (8 * d * d + 2 * d * d_ff)
    attention = 12 * d * sentences * layers * (
        source_length ** 2 + target_length ** 2 + target_length * source_length)
    return 6 * non_embedding * sentences * target_length + attention


def batch_ids(sentences, source_length, target_length, vocab_size):
    """(source, target input, target output), int32, ids in [3, vocab): no padding."""
    rng = np.random.default_rng(0)
    source = rng.integers(3, vocab_size, (sentences, source_length)).astype("int32")
    target = rng.integers(3, vocab_size, (sentences, target_length)).astype("int32")
    return source, np.pad(target[:, :-1], [(0, 0), (1, 0)]), target


def timed(step, sync, steps):
    """(first step's seconds, [timed steps' seconds], first loss, last loss)."""
    started = time.perf_counter()
    first_loss = float(sync(step()))
    first = time.perf_counter() - started
    for _ in range(WARMUP_STEPS):
        sync(step())
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        loss = sync(step())
        seconds.append(time.perf_counter() - started)
    return first, seconds, first_loss, float(loss)


def matmul_peaks(size):
    """{"bfloat16": TFLOP/s, "float32": TFLOP/s} of jnp.matmul on the first device."""
    import jax

    peaks = {}
    for dtype in ("bfloat16", "float32"):
        a = jax.random.normal(jax.random.key(0), (size, size), dtype)
        product = jax.jit(lambda x: x @ x)
        product(a).block_until_ready()
        seconds = []
        for _ in range(5):
            started = time.perf_counter()
            product(a).block_until_ready()
            seconds.append(time.perf_counter() - started)
        peaks[dtype] = 2 * size ** 3 / statistics.median(seconds) / 1e12
    return peaks


def keras_part(part, args):
    """The kt or keras_hub part: the train function `fit` runs, on each shape."""
    import jax
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    import keras_transformer as kt
    from bench import peers

    hparams, vocab = MODELS[args.model]
    hp = kt.hparams.get(hparams)
    facts = {"jax": jax.__version__, "keras": keras.__version__,
             "device": str(jax.devices()[0].device_kind)}
    if part == "kt":
        facts["peaks_tflops"] = matmul_peaks(args.peak_size)
    rows = []
    for sentences, source_length, target_length in args.shapes:
        keras.utils.set_random_seed(0)
        if part == "kt":
            model = kt.build_model(hp, vocab)
            optimizer = kt.build_optimizer(hp)
        else:
            model = peers.keras_hub_transformer(vocab, hp.num_layers, hp.d_model, hp.d_ff,
                                                hp.num_heads, hp.dropout)
            optimizer = keras.optimizers.Adam(5e-4, **ADAM)
        model.compile(optimizer=optimizer, loss=kt.build_loss(hp))
        source, target_input, target = (jax.device_put(a) for a in batch_ids(
            sentences, source_length, target_length, vocab))
        first, seconds, first_loss, last_loss = time_train_function(
            model, ((source, target_input), target), args.steps)
        rows.append(dict(shape=(sentences, source_length, target_length), first=first,
                         seconds=seconds, first_loss=first_loss, last_loss=last_loss,
                         params=int(sum(np.prod(v.shape) for v in model.trainable_variables))))
    return {**facts, "rows": rows}


def time_train_function(model, data, steps):
    """`timed` of the compiled model's train function on `data`, its state carried from step
    to step as `fit` carries it."""
    import jax

    started = time.perf_counter()
    first_loss = float(model.train_on_batch(*data))  # builds the optimizer and metrics; compiles
    first = time.perf_counter() - started
    state = [[v.value for v in variables] for variables in (
        model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
        model.metrics_variables)]

    def step():
        nonlocal state
        logs, state = model.train_function(state, iter([data]))
        return logs["loss"]

    _, seconds, _, last_loss = timed(step, jax.block_until_ready, steps)
    return first, seconds, first_loss, last_loss


def torch_part(part, args):
    import torch
    import torch.nn.functional as F
    from transformers import MarianMTModel

    from bench import peers

    hparams, vocab = MODELS[args.model]
    shape = shape_of(hparams)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    config = peers.marian_config(vocab, shape["num_layers"], shape["d_model"], shape["d_ff"],
                                 shape["num_heads"], 0.1, eos_id=1)
    model = MarianMTModel._from_config(config, attn_implementation="sdpa").to(device).train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=5e-4, betas=(0.9, 0.98), eps=1e-9,
                                  weight_decay=0.0, fused=cuda)

    def forward_loss(source, target_input, target):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(input_ids=source, attention_mask=torch.ones_like(source),
                           decoder_input_ids=target_input, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, vocab), target.reshape(-1),
                               ignore_index=PAD_ID, label_smoothing=LABEL_SMOOTHING)

    if part == "torch_compile":
        forward_loss = torch.compile(forward_loss, dynamic=False)
    rows = []
    for sentences, source_length, target_length in args.shapes:
        data = [torch.from_numpy(a).long().to(device) for a in batch_ids(
            sentences, source_length, target_length, vocab)]

        def step():
            loss = forward_loss(*data)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        def sync(loss):
            if cuda:
                torch.cuda.synchronize()
            return loss.detach()

        first, seconds, first_loss, last_loss = timed(step, sync, args.steps)
        rows.append(dict(shape=(sentences, source_length, target_length), first=first,
                         seconds=seconds, first_loss=first_loss, last_loss=last_loss,
                         params=sum(p.numel() for p in parameters)))
    return {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if cuda
            else "cpu", "rows": rows}


def run_part(part, argv, seconds):
    """The part's result dict, or {"error": what went wrong}."""
    environment = {**os.environ, "KERAS_BACKEND": "jax", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        done = subprocess.run([sys.executable, "-m", "bench.jax_step", "--part", part, *argv],
                              env=environment, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {seconds} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}


def table(results, args):
    """The markdown table: a row a part and shape, with the ratio to torch.compile."""
    shape = shape_of(MODELS[args.model][0])
    peak = results["kt"].get("peaks_tflops", {}).get("bfloat16")
    speeds = {}
    for part, result in results.items():
        for row in result.get("rows", []):
            speeds[part, tuple(row["shape"])] = (
                row["shape"][0] * row["shape"][2] / statistics.median(row["seconds"]))
    lines = ["| part | shape (sentences x source x target) | median step ms (min-max, n) | "
             "target tokens/s | x torch.compile | MFU | first step s | loss first -> last |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for part, result in results.items():
        if "error" in result:
            lines.append(f"| {part} | - | failed: {result['error']} | | | | | |")
        for row in result.get("rows", []):
            key = (part, tuple(row["shape"]))
            compiled = speeds.get(("torch_compile", key[1]))
            median = statistics.median(row["seconds"])
            mfu = (step_flops(shape, *row["shape"]) / median / (peak * 1e12)) if peak else None
            lines.append(
                f"| {part} | {'x'.join(map(str, row['shape']))} | {median * 1e3:,.1f} "
                f"({min(row['seconds']) * 1e3:,.1f}-{max(row['seconds']) * 1e3:,.1f}, "
                f"n={len(row['seconds'])}) | {speeds[key]:,.0f} | "
                f"{f'{speeds[key] / compiled:.2f}' if compiled else '-'} | "
                f"{f'{mfu:.1%}' if mfu is not None else '-'} | {row['first']:.1f} | "
                f"{row['first_loss']:.3f} -> {row['last_loss']:.3f} |")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="base")
    parser.add_argument("--shapes", default="100x250x250,400x64x64",
                        help="sentences x source length x target length, comma-separated")
    parser.add_argument("--steps", type=int, default=20, help="timed steps a shape")
    parser.add_argument("--peak_size", type=int, default=8192,
                        help="the side of the square matmuls the peak is measured with")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--part_seconds", type=int, default=300)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # one part, in-process
    parser.add_argument("--no_write", action="store_true",
                        help="print the table without writing bench/RESULTS.md")
    args = parser.parse_args(argv)
    args.shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.part:
        result = (keras_part if args.part in ("kt", "keras_hub") else torch_part)(args.part, args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    forwarded = [a for a in argv if not a.startswith("--parts")]
    results = {}
    for part in args.parts.split(","):
        print(f"[jax_step] {part} ...", flush=True)
        results[part] = run_part(part, forwarded, args.part_seconds)
    kt_facts = results.get("kt", {})
    peaks = kt_facts.get("peaks_tflops", {})
    torch_version = results.get("torch_eager", {}).get("torch", "?")
    machine = (f"{kt_facts.get('device', '?')}; jax {kt_facts.get('jax', '?')}, keras "
               f"{kt_facts.get('keras', '?')}, torch {torch_version}"
               f"; matmul peak ({args.peak_size}^3, median of 5): bfloat16 "
               f"{peaks.get('bfloat16', float('nan')):.3g}, float32 "
               f"{peaks.get('float32', float('nan')):.3g} TFLOP/s")
    text = (f"{MODELS[args.model][0]}, vocabulary {MODELS[args.model][1]:,}, mixed bfloat16, "
            f"{args.steps} timed steps a shape. {FORMULA}. The kt part's rate follows eq. 3's "
            f"warmup (its loss falls less over these steps), the peers' is a constant 5e-4: a "
            f"step's time does not depend on it."
            f"{CPU_NOTE if kt_facts.get('device') == 'cpu' else ''}\n\n{table(results, args)}")
    if args.no_write:
        print(machine + "\n\n" + text)
        return
    from bench.common import append_results

    append_results(f"A training step under Keras-JAX beside its peers, {args.model}, on "
                   f"{kt_facts.get('device', '?')}", text, machine_line=machine)


if __name__ == "__main__":
    main()
