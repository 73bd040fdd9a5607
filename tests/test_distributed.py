"""model.fit under tf.distribute: 2 and 4 replicas (and 8 in replica_equivalence.py full) equal 1
device in every precision, also accumulating gradients over micro-batches; float16 overflow
anywhere skips the update; replicas draw their own dropout masks; two workers agree,
accumulating."""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys

import pytest
from test_trainer import kt_train, small_corpus  # noqa: F401  (a fixture)

from keras_transformer.runtime import devices, precision_probe

# The replica report's process: 147 s alone on a 2-core Cascade Lake Xeon (2026-11-28), 97 s on
# the AMX Xeon. Beside the other worker it took 168-448 s while it fed fit from a generator
# (tests/replica_equivalence.py's `dataset` says why), and ran past the suite's 600 s a test.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def replicas_report():
    """tests/replica_equivalence.py's report (one process, 8 logical CPUs)."""
    result = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name(
        "replica_equivalence.py"))], capture_output=True, text=True, timeout=1150)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# Largest weight difference from one device, as a fraction of how far one device moved them
# under SGD (measured 2026-11-26, one layer: float32 8e-7, the reduction order's rounding;
# mixed_bfloat16 0.012-0.017 and mixed_float16 0.0005-0.032, each replica's partial gradient
# sums and activations of other batch shapes rounded to 8 and 11 bits; 2026-11-29, embeddings
# unshared: float32 5e-7, mixed_bfloat16 0.029, mixed_float16 0.0022). A replica's rows left
# out, or its loss normalized by its own tokens, would change the gradient by its whole share.
TOLERANCE = {"float32": 1e-5, "mixed_bfloat16": 0.1, "mixed_float16": 0.1}


@pytest.mark.parametrize("precision", list(TOLERANCE))
@pytest.mark.parametrize("accumulate_steps", [1, 2])
def test_n_replicas_train_like_one_device(replicas_report, precision, accumulate_steps):
    entry = dict(replicas_report["equivalence"][f"{precision} accumulate {accumulate_steps}"])
    moved = entry.pop("moved")
    assert moved > 1e-2  # training changed the weights...
    assert entry  # ...and the replica counts run for this case (2, 4 or 8) alike
    for replicas, difference in entry.items():
        assert difference < TOLERANCE[precision] * moved, (replicas, entry)


def test_float16_overflow_in_any_replica_or_micro_batch_skips_the_update_everywhere(
        replicas_report):
    report = dict(replicas_report["overflow"])
    control = report.pop("no overflow")
    assert control["changed"] > 1e-3 and control["scale"] == 32768.0
    assert sorted(report) == ["last rows of replica 1 of 2", "micro-batch 1 of replica 1 of 2",
                              "one device"]
    for case, entry in report.items():  # Keras's own loss scaling: nan weights on one replica
        assert entry == {"changed": 0.0, "scale": 16384.0, "finite": True}, case


def test_replicas_draw_their_own_dropout_masks_reproducibly(replicas_report):
    report = replicas_report["dropout"]
    assert report["keras.layers.Dropout"] == 0.0  # Keras's: one mask on every replica
    assert report["kt.Dropout"] > 0.5
    assert report["model, dropout"] > 0.1 and report["model, word dropout"] > 0.1
    assert report["same seed"] == 0.0
    (seed, count), (seed_after, count_after) = report["states"]
    assert (seed_after, count_after) == (seed, count + 1)  # one draw a call, not one a replica


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_workers(commands, stderr=subprocess.PIPE, environments=None):
    """Starts one process a command, as the workers of one localhost cluster (TF_CONFIG set for
    each, and the variables of its `environments` dict), their output piped (stderr into stdout
    with `stderr=subprocess.STDOUT`)."""
    workers = [f"127.0.0.1:{free_port()}" for _ in commands]
    processes = []
    for index, command in enumerate(commands):
        environment = dict(os.environ, **(environments[index] if environments else {}),
                           TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                 "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                                          stderr=stderr, text=True))
    return processes


def run_workers(commands, timeout=420, environments=None):
    """Runs one command a worker of a localhost cluster; returns their (returncode, stdout,
    stderr), killing any still running when one fails or hangs."""
    processes = start_workers(commands, environments=environments)
    results = []
    try:
        for process in processes:
            results.append((*process.communicate(timeout=timeout),))
    finally:  # a worker that failed or hung must not leave the other waiting forever
        for process in processes:
            if process.poll() is None:
                process.kill()
    return [(process.returncode, *result) for process, result in zip(processes, results)]


def worker_command(model_dir, corpus, vocab, *flags):
    return [sys.executable, "-m", "keras_transformer.trainer.task", "--model_dir", str(model_dir),
            "--data", str(corpus), "--source_lang", "en", "--target_lang", "es",
            "--vocab", str(vocab), "--batch_tokens", "1500", "--max_pair_length", "150",
            "--hparams", "transformer_tiny", "--log_every", "2", *flags]


def precision_caches(tmp_path, speeds):
    """One environment a worker whose --mixed_precision auto finds (float32, bfloat16) GFLOP/s
    in its cache for transformer_tiny at 1,500 tokens, as the probe would have written them."""
    key = precision_probe.machine_key(devices.cpu_flags(), devices.cores_available(),
                                      precision_probe.probe_shape(32, 64, 1500))
    environments = []
    for index, (float32, bfloat16) in enumerate(speeds):
        cache = tmp_path / f"cache_{index}"
        cache.mkdir()
        (cache / "precision.json").write_text(json.dumps({key: {
            "float32_gflops": float32, "bfloat16_gflops": bfloat16, "measured": "2026-11-28"}}))
        environments.append({"KERAS_TRANSFORMER_CACHE": str(cache)})
    return environments


@pytest.mark.slow
def test_two_workers_on_localhost_train_and_agree(tmp_path, small_corpus,  # noqa: F811
                                                  bible_vocab_path):
    # One layer: what the workers prove does not depend on depth, and a second doubled tracing.
    command = worker_command(tmp_path / "run", small_corpus, bible_vocab_path, "--accumulate_steps",
                             "2", "--train_steps", "4", "--mixed_precision", "auto",
                             "--hparams_override", "num_layers=1")
    # Machines that measure bfloat16 1.2x and 3x float32: alone, one would take float32 and the
    # other mixed_bfloat16; together they compare the slowest in each dtype (a synchronous step
    # waits for it), 360 against 200, and both take mixed_bfloat16.
    results = run_workers([command, command],
                          environments=precision_caches(tmp_path, [(300, 360), (200, 600)]))
    for returncode, _, stderr in results:
        assert returncode == 0, stderr
    outputs = [stdout for _, stdout, _ in results]
    for output in outputs:
        assert ("mixed_bfloat16 (--mixed_precision auto: bfloat16 matmuls ran 1.80x float32 on "
                "the slowest of the 2 workers in each (360 against 200 GFLOP/s") in output, output
    checksums = [re.search(r"done: step 4, weights checksum (\S+),", out).group(1)
                 for out in outputs]
    assert checksums[0] == checksums[1]
    assert "2 replica(s)" in outputs[0]
    assert ("each update: 2 micro-batch(es) x 1,500 padded tokens a side over 2 replica(s) = "
            "3,000 padded tokens a side; a replica's batches hold 1,500") in outputs[0]
    assert (tmp_path / "run" / "checkpoints" / "ckpt-4").is_dir()  # written by the chief only


def test_workers_that_do_not_share_the_model_dir_are_refused(tmp_path, small_corpus,  # noqa: F811
                                                              bible_vocab_path):
    results = run_workers([worker_command(tmp_path / f"own_{index}", small_corpus,
                                          bible_vocab_path,
                                          "--train_steps", "2") for index in range(2)])
    for returncode, _, stderr in results:  # both stop, and neither waits for the other
        assert returncode == 2, stderr
        assert (f"kt-train: error: --model_dir {tmp_path / 'own_'}" in stderr and
                "worker(s) 1 cannot read what the chief writes there" in stderr), stderr
    assert not (tmp_path / "own_0" / "checkpoints").exists()
