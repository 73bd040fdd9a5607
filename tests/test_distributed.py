"""model.fit under tf.distribute: 2 replicas equal 1 device, also accumulating gradients over
micro-batches; two workers agree, accumulating."""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap

from test_trainer import kt_train, small_corpus  # noqa: F401  (a fixture)

MIRRORED_CHECK = textwrap.dedent("""
    import json
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import numpy as np
    import keras_transformer as kt

    VOCAB = 30
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(4):  # global batches of 8 pairs with padding on both sides
        source = rng.integers(2, VOCAB, (8, 7)).astype("int32")
        source[:3, 5:] = 0
        target = rng.integers(2, VOCAB, (8, 6)).astype("int32")
        target[2:5, 3:] = 0
        batches.append(((source, np.pad(target[:, :-1], [(0, 0), (1, 0)])), target))
    spec = tf.TensorSpec([None, None], tf.int32)

    def dataset():
        return tf.data.Dataset.from_generator(lambda: iter(batches),
                                              output_signature=((spec, spec), spec))

    hp = kt.hparams.get("transformer_tiny", dropout=0.0, warmup_steps=5)
    keras.utils.set_random_seed(1)
    initial = kt.build_model(hp, VOCAB).get_weights()

    def train(strategy, accumulate_steps=1):
        with strategy.scope():
            model = kt.build_model(hp, VOCAB)
            model.set_weights(initial)
            model.compile(optimizer=kt.build_optimizer(hp), loss=kt.build_loss(hp),
                          accumulate_steps=accumulate_steps)
        history = model.fit(dataset(), epochs=2, verbose=0)
        return model.get_weights(), history.history["loss"]

    one_weights, one_loss = train(tf.distribute.get_strategy())
    two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    two_weights, two_loss = train(two)
    # Each replica's 4 rows in 2 micro-batches of unequal target tokens.
    accumulated_weights, accumulated_loss = train(two, accumulate_steps=2)
    print(json.dumps({
        "replicas": two.num_replicas_in_sync,
        "max_weight_difference": max(float(np.abs(a - b).max())
                                     for a, b in zip(one_weights, two_weights)),
        "max_accumulated_difference": max(float(np.abs(a - b).max())
                                          for a, b in zip(one_weights, accumulated_weights)),
        "moved": max(float(np.abs(a - b).max()) for a, b in zip(initial, one_weights)),
        "losses": [one_loss, two_loss, accumulated_loss]}))
""")


def test_two_replicas_train_like_one_device():
    result = subprocess.run([sys.executable, "-c", MIRRORED_CHECK], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    assert report["moved"] > 1e-2  # training changed the weights...
    assert report["max_weight_difference"] < 1e-4  # ...and both ways alike (float reordering)
    assert report["max_accumulated_difference"] < 1e-4
    one_loss, two_loss, accumulated_loss = report["losses"]
    assert abs(one_loss[-1] - two_loss[-1]) < 1e-5
    assert abs(one_loss[-1] - accumulated_loss[-1]) < 1e-5


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_workers_on_localhost_train_and_agree(tmp_path, small_corpus):  # noqa: F811
    vocab = tmp_path / "vocab.model"
    assert subprocess.run([sys.executable, "-m", "keras_transformer.data.vocab", "--data",
                           str(small_corpus),
                           "--source_lang", "en", "--target_lang", "es", "--vocab_size", "600",
                           "--output", str(vocab)], capture_output=True, timeout=300
                          ).returncode == 0
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    command = [sys.executable, "-m", "keras_transformer.trainer.task",
               "--model_dir", str(tmp_path / "run"),
               "--data", str(small_corpus), "--source_lang", "en", "--target_lang", "es",
               "--vocab", str(vocab), "--batch_tokens", "1500", "--accumulate_steps", "2",
               "--max_length", "150", "--hparams", "transformer_tiny", "--train_steps", "4",
               "--log_every", "2"]
    processes = []
    for index in range(2):
        environment = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for process in processes:
            results.append(process.communicate(timeout=420))
    finally:  # a worker that failed or hung must not leave the other waiting forever
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, (_, stderr) in zip(processes, results):
        assert process.returncode == 0, stderr
    outputs = [stdout for stdout, _ in results]
    checksums = [re.search(r"done: step 4, weights checksum (\S+),", out).group(1)
                 for out in outputs]
    assert checksums[0] == checksums[1]
    assert "2 replica(s)" in outputs[0]
    assert "each update: 2 micro-batch(es) x 1,500 padded tokens a side over 2 replica(s)" in \
        outputs[0]
    assert (tmp_path / "run" / "checkpoints" / "ckpt-4").is_dir()  # written by the chief only
