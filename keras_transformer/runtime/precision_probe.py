"""How much faster bfloat16 computes than float32 on this machine's CPU, measured, for
`--mixed_precision auto` (`devices.choose_policy`) and decoding's `--dtype auto`
(`devices.choose_decoding_dtype`).

A CPU's flags do not say it: an Intel Xeon whose hypervisor lists `avx512_bf16` but hides AMX
ran bfloat16 matmuls at 0.6x float32, the same Xeon with AMX at ~2.4x, an AMD Zen 5 at ~2x, and
a CPU without bfloat16 instructions emulates them (0.23x on a Xeon of family 6 model 85). So
`measure` times the matrix products a model's training runs (a dense layer's forward pass and
both gradients at its feed-forward width) in each dtype, alternating them, within a time budget
of a second or two; `speedup` reads a cached measurement or measures and caches it, per CPU
model, CPU flags, cores, TensorFlow version, shape and oneDNN settings (KERNEL_SETTINGS), so
that later runs start at once. Decoding runs the forward pass alone, on as many rows as a
batch's hypotheses (`DECODING_SHAPE`): `forward_only` times that.

The cache is one JSON file: $KERAS_TRANSFORMER_CACHE/precision.json, else
$XDG_CACHE_HOME/keras_transformer/precision.json, else ~/.cache/keras_transformer/precision.json.
A cache that cannot be read or written is measured around, never an error.
"""

import datetime
import functools
import hashlib
import json
import math
import os
import pathlib
import re
import statistics
import tempfile
import time
import typing

import tensorflow as tf

CACHE_FILE = "precision.json"
# Time for the whole measurement (both dtypes, the first calls included) unless one call takes
# longer: at least MIN_REPEATS timings of each are taken.
BUDGET_SECONDS = 1.5
MIN_REPEATS = 3
# The largest product measured: a big model's widths are cut to this many tokens' worth, which
# says as much about the ratio of the dtypes in a fraction of the time.
MAX_FLOPS = 4e9
# Environment variables that choose the kernels a matmul runs, so a measurement holds only under
# the settings it was taken with. On the AMX Xeon, bfloat16 ran 3.2x float32 with oneDNN's
# defaults and 0.67x with ONEDNN_MAX_CPU_ISA=AVX10_1_512 (AMX off, as on the AMX-hidden Xeon);
# DNNL_MAX_CPU_ISA is that variable's older name; TF_ENABLE_ONEDNN_OPTS=0 leaves the matmuls
# to Eigen (bfloat16 0.86x there). Keyed without them, `auto` under the cap read the 3.2x
# measured without it and chose mixed_bfloat16 (2026-11-30).
KERNEL_SETTINGS = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# Decoding's product, forward only: a CPU's decoding batch (32 sentences) x beam 4 rows through
# transformer_base's feed-forward widths. One shape for every model: whether bfloat16 is fast is
# the CPU's (its instructions, AMX or not), and a small model's own widths would time the call
# overhead rather than the arithmetic; one measurement serves every model a machine decodes.
DECODING_SHAPE = (128, 512, 2048)


class Measurement(typing.NamedTuple):
    """float32 and bfloat16 speeds of one product shape; `speedup` = bfloat16 / float32."""

    float32_gflops: float
    bfloat16_gflops: float
    shape: tuple  # (tokens, d_model, d_ff)
    measured: str  # ISO date
    cached: bool = False  # read from the cache rather than measured by this process
    workers: int = 1  # the speeds are the slowest of this many machines' (a multi-worker run)
    forward_only: bool = False  # decoding's products (no gradients)

    @property
    def speedup(self):
        return self.bfloat16_gflops / self.float32_gflops

    def describe(self):
        """E.g. "bfloat16 matmuls ran 0.26x float32 here (50 against 190 GFLOP/s at
        1536x256x1024, measured now)"."""
        tokens, width, inner = self.shape
        when = f"measured {self.measured}, cached" if self.cached else "measured now"
        where = ("here" if self.workers == 1 else
                 f"on the slowest of the {self.workers} workers in each")
        passes = ", forward only" if self.forward_only else ""
        return (f"bfloat16 matmuls ran {self.speedup:.2f}x float32 {where} "
                f"({self.bfloat16_gflops:.0f} against {self.float32_gflops:.0f} GFLOP/s at "
                f"{tokens}x{width}x{inner}{passes}, {when})")


def probe_shape(d_model, d_ff, batch_tokens):
    """(tokens, d_model, d_ff) of the product to time: a batch's tokens through the
    feed-forward layer, with no more tokens than 2048 or than MAX_FLOPS allows (forward and
    both gradients are 6 tokens d_model d_ff)."""
    tokens = min(batch_tokens, 2048, max(128, int(MAX_FLOPS / (6 * d_model * d_ff))))
    return tokens, d_model, d_ff


def _products(dtype, shape, forward_only=False):
    """A function computing a dense layer's forward pass and (unless `forward_only`) both
    gradients in `dtype`."""
    tokens, width, inner = shape
    inputs = tf.cast(tf.random.stateless_normal([tokens, width], seed=[1, 2]), dtype)
    kernel = tf.cast(tf.random.stateless_normal([width, inner], seed=[3, 4]), dtype)

    @tf.function
    def products():
        outputs = tf.matmul(inputs, kernel)
        if forward_only:
            return tf.reduce_sum(outputs[:1, :1])
        input_gradient = tf.matmul(outputs, kernel, transpose_b=True)
        kernel_gradient = tf.matmul(inputs, outputs, transpose_a=True)
        # Reduced to a scalar so that fetching the result costs nothing.
        return tf.reduce_sum(input_gradient[:1, :1]) + tf.reduce_sum(kernel_gradient[:1, :1])

    return products


def measure(shape, budget_seconds=BUDGET_SECONDS, clock=time.perf_counter, *,
            forward_only=False):
    """Times the products of `shape` in float32 and bfloat16, alternately, until
    `budget_seconds` are spent (at least MIN_REPEATS each); a `Measurement` of the medians."""
    runs = {dtype: _products(dtype, shape, forward_only) for dtype in (tf.float32, tf.bfloat16)}
    times = {dtype: [] for dtype in runs}
    start = clock()
    for run in runs.values():
        run().numpy()  # traced and warmed up
    while True:
        for dtype, run in runs.items():
            began = clock()
            run().numpy()
            times[dtype].append(clock() - began)
        if len(times[tf.float32]) >= MIN_REPEATS and clock() - start >= budget_seconds:
            break
    tokens, width, inner = shape
    flops = (2 if forward_only else 6) * tokens * width * inner
    gflops = {dtype: flops / statistics.median(spent) / 1e9 for dtype, spent in times.items()}
    return Measurement(gflops[tf.float32], gflops[tf.bfloat16], tuple(shape),
                       datetime.date.today().isoformat(), forward_only=forward_only)


def cache_path():
    """Where measurements are cached (module docstring)."""
    if os.environ.get("KERAS_TRANSFORMER_CACHE"):
        return pathlib.Path(os.environ["KERAS_TRANSFORMER_CACHE"]) / CACHE_FILE
    try:
        root = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    except RuntimeError:  # no home directory: a temporary one, still cached for the boot
        root = pathlib.Path(tempfile.gettempdir())
    return pathlib.Path(root) / "keras_transformer" / CACHE_FILE


def kernel_settings():
    """["NAME=value"] of the KERNEL_SETTINGS variables set in this process, in their order."""
    return [f"{name}={os.environ[name]}" for name in KERNEL_SETTINGS if name in os.environ]


def machine_key(cpuinfo, cores, shape, forward_only=False):
    """What a measurement holds for: the CPU's model name, a digest of its flags (a hypervisor
    can hide AMX from the same model), the cores, TensorFlow's version, the shape (and whether
    forward only), and the environment variables of KERNEL_SETTINGS that are set."""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    digest = hashlib.sha256((flags.group(1) if flags else "").encode()).hexdigest()[:12]
    settings = "".join(f" | {setting}" for setting in kernel_settings())
    return (f"{model.group(1).strip() if model else 'unknown CPU'} | flags {digest} | {cores} "
            f"cores | TensorFlow {tf.__version__} | {'x'.join(map(str, shape))}"
            f"{' forward only' if forward_only else ''}{settings}")


def _read(path):
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path, entries):
    """Writes `entries` beside and renames into place (two processes never mix a file);
    gives up silently where the cache cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
        partial.replace(path)
    except OSError:
        pass


def speedup(shape, *, cpuinfo, cores, path=None, measure_fn=None, forward_only=False):
    """The `Measurement` of `shape` (its forward pass alone if `forward_only`) on this machine:
    cached, or measured (`measure_fn(shape)`, default `measure`) and cached at `path` (default
    `cache_path()`)."""
    path = cache_path() if path is None else path
    key = machine_key(cpuinfo, cores, shape, forward_only)
    entries = _read(path)
    entry = entries.get(key)
    try:
        speeds = float(entry["float32_gflops"]), float(entry["bfloat16_gflops"])
        if all(math.isfinite(speed) and speed > 0 for speed in speeds):
            return Measurement(*speeds, tuple(shape), str(entry["measured"]), cached=True,
                               forward_only=forward_only)
    except (KeyError, TypeError, ValueError):  # not cached, or not as written: measured again
        pass
    result = (measure_fn or functools.partial(measure, forward_only=forward_only))(shape)
    entries = _read(path)  # as it is now: another process may have added to it meanwhile
    entries[key] = {"float32_gflops": result.float32_gflops,
                    "bfloat16_gflops": result.bfloat16_gflops, "measured": result.measured}
    _write(path, entries)
    return result
