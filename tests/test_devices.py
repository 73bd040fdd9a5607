"""What the devices compute natively or measurably faster, and what a run makes of it, for
machines the tests do not run on (device details faked as TensorFlow and Linux give them, CPU
measurements faked as the probe returns them), and one real measurement, bounded in time."""

import json
import time

import pytest

from keras_transformer.runtime import devices, precision_probe
from keras_transformer.trainer import runner

T4, A100, P100 = ("Tesla T4", (7, 5)), ("NVIDIA A100-SXM4-40GB", (8, 0)), ("Tesla P100", (6, 0))
XEON = ("model name\t: Intel(R) Xeon(R) Platinum 8488C\n"
        "flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")
XEON_AMX_HIDDEN = XEON.replace(" amx_bf16 amx_tile", "")


def measured(float32, bfloat16):
    """A CPU measurement as the probe returns it (GFLOP/s of each dtype)."""
    return lambda: precision_probe.Measurement(float32, bfloat16, (2048, 256, 1024), "2026-11-28")


def not_measured():
    raise AssertionError("a machine with GPUs measured its CPU")


def test_auto_precision_on_a_cpu_is_the_faster_one_measured():
    # The Xeon whose flags list avx512_bf16 with AMX hidden: bfloat16 0.6x.
    slow = devices.choose_policy([], measure_cpu=measured(281, 166))
    assert slow.policy == "float32"
    assert slow.reason == ("bfloat16 matmuls ran 0.59x float32 here (166 against 281 GFLOP/s at "
                           "2048x256x1024, measured now)")
    # A Zen 5: 1.9x.
    assert devices.auto_policy([], measure_cpu=measured(470, 893)) == "mixed_bfloat16"
    # Casts and float32 layer norms eat a small edge: bfloat16 must win by CPU_SPEEDUP_NEEDED.
    assert devices.auto_policy([], measure_cpu=measured(400, 440)) == "float32"
    assert devices.auto_policy([], measure_cpu=measured(400, 500)) == "mixed_bfloat16"


def test_auto_precision_on_gpus_follows_their_compute_capability():
    # On a GPU machine the GPUs decide, whatever the host CPU (H100 servers have AMX).
    assert devices.choose_policy([A100] * 8, measure_cpu=not_measured) == (
        "mixed_bfloat16", "GPUs of compute capability 8.0: bfloat16 tensor cores")
    assert devices.auto_policy([T4], measure_cpu=not_measured) == "mixed_float16"
    assert devices.auto_policy([A100, T4], measure_cpu=not_measured) == "mixed_float16"
    assert devices.auto_policy([P100], measure_cpu=not_measured) == "float32"
    assert runner.policy_of("none").policy == "float32"
    assert runner.policy_of("mixed_float16") == ("mixed_float16",
                                                 "--mixed_precision mixed_float16")


def test_auto_decoding_dtype_is_bfloat16_where_it_computes_faster():
    # Decoding's product measured as on the Xeon with AMX (3.7x) and with AMX hidden (0.6x).
    fast = devices.choose_decoding_dtype([], measure_cpu=measured(250, 925))
    assert fast.policy == "bfloat16" and fast.reason.startswith("bfloat16 matmuls ran 3.70x")
    assert devices.choose_decoding_dtype([], measure_cpu=measured(281, 166)).policy == "float32"
    # Faster, but by less than the search's float32 parts would leave a gain from.
    assert devices.choose_decoding_dtype([], measure_cpu=measured(400, 440)).policy == "float32"
    assert devices.choose_decoding_dtype([], measure_cpu=measured(400, 500)).policy == "bfloat16"
    assert devices.choose_decoding_dtype([A100], measure_cpu=not_measured) == (
        "bfloat16", "GPUs of compute capability 8.0: bfloat16 tensor cores")
    assert devices.choose_decoding_dtype([A100, T4], measure_cpu=not_measured).policy == (
        "float32")


def test_a_measurement_is_cached_per_machine(tmp_path, monkeypatch):
    for name in precision_probe.KERNEL_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "cache" / "precision.json"
    calls = []

    def measure(shape):
        calls.append(shape)
        return measured(281, 166)()._replace(shape=shape)

    shape = precision_probe.probe_shape(256, 1024, 3072)
    assert shape == (2048, 256, 1024)
    first = precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                    measure_fn=measure)
    again = precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                    measure_fn=measure)
    assert calls == [shape] and not first.cached and again.cached
    assert again.speedup == pytest.approx(166 / 281)
    assert again.describe().endswith("at 2048x256x1024, measured 2026-11-28, cached)")
    # The same model with AMX visible, more cores, another shape: each measured on its own.
    for cpuinfo, cores, other in [(XEON, 2, shape), (XEON_AMX_HIDDEN, 4, shape),
                                  (XEON_AMX_HIDDEN, 2, (512, 256, 1024))]:
        precision_probe.speedup(other, cpuinfo=cpuinfo, cores=cores, path=path,
                                measure_fn=measure)
    assert len(calls) == 4 and len(json.loads(path.read_text())) == 4
    # Decoding's forward pass alone is a measurement of its own, said so.
    forward = precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                      measure_fn=measure, forward_only=True)
    assert len(calls) == 5 and not forward.cached
    assert precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                   measure_fn=measure, forward_only=True).describe().endswith(
        "at 2048x256x1024, forward only, measured 2026-11-28, cached)")
    # oneDNN's settings choose the kernels: each is measured under its own, and unset again
    # reads the first measurement.
    for name, value in [("ONEDNN_MAX_CPU_ISA", "AVX10_1_512"), ("TF_ENABLE_ONEDNN_OPTS", "0")]:
        monkeypatch.setenv(name, value)
        assert not precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                           measure_fn=measure).cached
    assert len(calls) == 7
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    assert precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                   measure_fn=measure).cached
    # A cache that cannot be read is measured around and written anew; one that cannot be
    # written (its directory is a file) is no error.
    path.write_text("{not json")
    assert not precision_probe.speedup(shape, cpuinfo=XEON_AMX_HIDDEN, cores=2, path=path,
                                       measure_fn=measure).cached
    assert len(json.loads(path.read_text())) == 1
    blocked = tmp_path / "file" / "precision.json"
    blocked.parent.write_text("")
    assert precision_probe.speedup(shape, cpuinfo=XEON, cores=2, path=blocked,
                                   measure_fn=measure).speedup == pytest.approx(166 / 281)


def test_the_real_probe_measures_both_dtypes_within_its_budget():
    start = time.perf_counter()
    measurement = precision_probe.measure((128, 64, 256), budget_seconds=0.5)
    spent = time.perf_counter() - start
    assert measurement.float32_gflops > 0 and measurement.bfloat16_gflops > 0
    assert measurement.shape == (128, 64, 256) and not measurement.cached
    assert spent < 10, spent  # the budget, plus tracing both and one last pair of timings
    forward = precision_probe.measure((128, 64, 256), budget_seconds=0.2, forward_only=True)
    assert forward.forward_only and forward.float32_gflops > 0 and forward.bfloat16_gflops > 0
    # Big widths are measured on fewer tokens: a second or two whatever the model.
    assert precision_probe.probe_shape(1024, 4096, 25_000) == (158, 1024, 4096)
    assert precision_probe.probe_shape(512, 2048, 4096) == (635, 512, 2048)


def test_the_start_line_names_the_devices_and_a_missing_gpu_is_said(tmp_path):
    assert devices.describe_devices(gpus=[T4]) == "1 x GPU (Tesla T4, compute capability 7.5)"
    assert devices.describe_devices(gpus=[A100] * 8) == (
        "8 x GPU (NVIDIA A100-SXM4-40GB, compute capability 8.0)")
    # The model, not its bfloat16 flags: they promised a speed this Xeon did not have.
    assert devices.describe_devices(XEON_AMX_HIDDEN, gpus=[], cores=2) == (
        "CPU (Intel(R) Xeon(R) Platinum 8488C, 2 cores)")
    assert devices.describe_devices("flags : fpu avx2", gpus=[], cores=1) == "CPU (1 core)"
    driver = tmp_path / "version"
    hidden = ["W0000 cuda_executor.cc: Could not find cuda drivers", "I0000 port.cc: oneDNN on",
              "W0000 gpu_device.cc:2342] Cannot dlopen some GPU libraries."]
    assert devices.missing_gpu_warning(hidden, gpus=[], driver=driver) is None  # no driver
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    warning = devices.missing_gpu_warning(hidden, gpus=[], driver=driver)
    assert warning.startswith(f"warning: NVIDIA's driver is loaded ({driver}) but TensorFlow sees "
                              f"no GPU, so this run trains on the CPU")
    assert "TensorFlow said: W0000 gpu_device.cc:2342] Cannot dlopen some GPU libraries." in warning
    assert "oneDNN" not in warning
    assert devices.missing_gpu_warning(hidden, gpus=[T4], driver=driver) is None


def test_decoding_batches_are_wider_on_a_gpu():
    assert devices.decode_batch_size(gpus=[]) == 32
    assert devices.decode_batch_size(gpus=[T4]) == 128
