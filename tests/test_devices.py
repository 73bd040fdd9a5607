"""What the devices compute natively, and what a run makes of it, for machines the tests do not
run on (device details faked as TensorFlow and Linux give them)."""

from keras_transformer import devices
from keras_transformer.trainer import runner

T4, A100, P100 = ("Tesla T4", (7, 5)), ("NVIDIA A100-SXM4-40GB", (8, 0)), ("Tesla P100", (6, 0))
AMX_CPU = "flags : fpu avx512f avx512_bf16 amx_bf16 amx_tile"
ZEN4_CPU = "flags : fpu avx512f avx512_bf16"
OLD_CPU = "flags : fpu avx2 avx512f avx512_vnni"


def test_auto_precision_follows_what_the_devices_compute_natively():
    assert devices.auto_policy(AMX_CPU, gpus=[]) == "mixed_bfloat16"
    assert devices.auto_policy(ZEN4_CPU, gpus=[]) == "mixed_bfloat16"
    assert devices.auto_policy(OLD_CPU, gpus=[]) == "float32"
    # On a GPU machine the GPUs decide, whatever the host CPU (H100 servers have AMX).
    assert devices.auto_policy(AMX_CPU, gpus=[A100] * 8) == "mixed_bfloat16"
    assert devices.auto_policy(AMX_CPU, gpus=[T4]) == "mixed_float16"
    assert devices.auto_policy(AMX_CPU, gpus=[A100, T4]) == "mixed_float16"
    assert devices.auto_policy(AMX_CPU, gpus=[P100]) == "float32"
    assert runner.policy_of("none") == "float32"
    assert runner.policy_of("mixed_float16") == "mixed_float16"


def test_the_start_line_names_the_devices_and_a_missing_gpu_is_said(tmp_path):
    assert devices.describe_devices(gpus=[T4]) == "1 x GPU (Tesla T4, compute capability 7.5)"
    assert devices.describe_devices(gpus=[A100] * 8) == (
        "8 x GPU (NVIDIA A100-SXM4-40GB, compute capability 8.0)")
    assert devices.describe_devices(AMX_CPU, gpus=[], cores=2) == "CPU (2 cores, AMX bfloat16)"
    assert devices.describe_devices(ZEN4_CPU, gpus=[], cores=1) == (
        "CPU (1 core, AVX512_BF16 bfloat16)")
    assert devices.describe_devices(OLD_CPU, gpus=[], cores=8) == "CPU (8 cores)"
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
