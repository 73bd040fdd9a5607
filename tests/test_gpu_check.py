"""bench/gpu_check.sh, the script a user with a GPU runs: its shell parses, its arithmetic holds
(a run of it on the CPU, with --tiny, is in the multi-device issue's note of 2026-11-26)."""

import pathlib
import subprocess

import pytest

from bench import gpu_check

SCRIPT = pathlib.Path(__file__).parents[1] / "bench" / "gpu_check.sh"


def test_the_script_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_utilization_is_six_flops_a_parameter_a_token_over_the_peak():
    # transformer_base (~63M parameters at a 37k vocabulary) at 30,000 tokens/s on one A100.
    assert gpu_check.mfu(63_000_000, 30_000, 312e12) == pytest.approx(6 * 63e6 * 3e4 / 312e12)
    assert gpu_check.gpu_peak_tflops("Tesla T4") == 65.0
    assert gpu_check.gpu_peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_check.gpu_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu_check.gpu_peak_tflops("Quadro RTX 8000") is None
    assert gpu_check.gpu_peak_tflops("NVIDIA L40S") is None  # not the L4's 121
    assert gpu_check.gpu_peak_tflops("NVIDIA RTX A1000") is None  # not the A100's 312


def test_the_papers_batch_is_25000_tokens_an_update_3125_a_gpu():
    for gpus, flags in [(0, (3125, 8)), (1, (3125, 8)), (2, (6250, 4)), (4, (12500, 2)),
                        (8, (25000, 1)), (16, (25000, 1))]:
        assert gpu_check.paper_batch(gpus) == flags


def test_the_rate_is_the_median_of_the_log_lines_after_the_first():
    log = "\n".join(f"step {step}: learning_rate 0.001, target_tokens 1e+04, "
                    f"target_tokens_per_second {rate}, loss 5.2" for step, rate in
                    [(20, "900"), (40, "4000"), (60, "4.2e+03"), (80, "3900")])
    assert gpu_check.steady_tokens_per_second(log) == 4000.0
    assert gpu_check.steady_tokens_per_second(log.splitlines()[0]) == 900.0
    with pytest.raises(SystemExit, match="no 'target_tokens_per_second' line"):
        gpu_check.steady_tokens_per_second("starting at step 0")
