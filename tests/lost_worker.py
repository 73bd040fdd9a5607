"""A lost worker: a 2-worker kt-train on localhost whose worker 1 is SIGKILLed mid-run, then
relaunched (both workers, the same commands), ends with the weights of a run that went straight
through (`--deterministic`).

    python tests/lost_worker.py [--work_dir DIR]

Prints a JSON report (what worker 0 did when worker 1 died, the steps, the checksums) and exits
1 when the relaunched run's weights differ from the straight run's. Three 2-worker runs: a few
minutes on 2 cores, so it is not part of the suite (its 10-minute budget); docs/gpus.md says
when it last ran.
"""

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import test_distributed as distributed  # noqa: E402
from conftest import write_corpus_subset  # noqa: E402
from test_distributed import worker_command  # noqa: E402

STEPS = 8
KILLED_AFTER = 4  # checkpoint step after which worker 1 is killed
FLAGS = ("--accumulate_steps", "2", "--train_steps", str(STEPS), "--checkpoint_every_steps", "2",
         "--deterministic", "--seed", "3", "--eval_sentences", "0")
WAIT_FOR_WORKER_0 = 180  # seconds worker 0 is given to notice that worker 1 is gone


def start_workers(commands):
    return distributed.start_workers(commands, stderr=subprocess.STDOUT)


def finish(processes, timeout=600):
    """[(returncode, output)] of the processes, killing those still running after `timeout`."""
    results = []
    try:
        for process in processes:
            results.append((process.wait(timeout=timeout), process.stdout.read()))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return results


def checksum(output):
    found = re.search(rf"done: step {STEPS}, weights checksum (\S+),", output)
    return found.group(1) if found else None


def lose_worker_1(command, model_dir):
    """Starts the cluster, SIGKILLs worker 1 once the chief has written its checkpoint of step
    KILLED_AFTER, and reports what worker 0 then does (exits, and how, or waits)."""
    worker_0, worker_1 = start_workers([command, command])
    checkpoint = model_dir / "checkpoints" / f"ckpt-{KILLED_AFTER}"
    try:
        deadline = time.monotonic() + 600
        while not checkpoint.exists():
            if worker_0.poll() is not None or worker_1.poll() is not None:
                raise RuntimeError("a worker ended before the checkpoint: "
                                   + worker_0.stdout.read() + worker_1.stdout.read())
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {checkpoint} after 10 minutes")
            time.sleep(0.05)
        os.kill(worker_1.pid, signal.SIGKILL)
        killed = time.monotonic()
        try:
            worker_0.wait(timeout=WAIT_FOR_WORKER_0)
            outcome = {"worker 0": f"exited with {worker_0.returncode} after "
                                   f"{time.monotonic() - killed:.0f} s"}
        except subprocess.TimeoutExpired:
            outcome = {"worker 0": f"still running {WAIT_FOR_WORKER_0} s later; killed"}
            worker_0.kill()
            worker_0.wait()
        output = worker_0.stdout.read()
        outcome["worker 0's last lines"] = output.strip().splitlines()[-4:]
    finally:
        for process in (worker_0, worker_1):
            if process.poll() is None:
                process.kill()
    saved = sorted(int(path.name.split("-")[1]) for path in
                   (model_dir / "checkpoints").glob("ckpt-*"))
    outcome["checkpoints left"] = saved
    return outcome


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", help="keep the runs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        work = pathlib.Path(args.work_dir or scratch)
        work.mkdir(parents=True, exist_ok=True)
        corpus = work / "corpus"
        corpus.mkdir(exist_ok=True)
        write_corpus_subset(corpus, train=400, dev=40)
        vocab = work / "vocab.model"
        subprocess.run([sys.executable, "-m", "keras_transformer.data.build_vocab", "--data",
                        str(corpus), "--source_lang", "en", "--target_lang", "es",
                        "--vocab_size", "600", "--output", str(vocab)], check=True,
                       capture_output=True)
        started = time.monotonic()
        straight_command = worker_command(work / "straight", corpus, vocab, *FLAGS)
        straight = finish(start_workers([straight_command, straight_command]))
        report = {"straight": [checksum(output) for _, output in straight]}
        lost_dir = work / "lost"
        lost_command = worker_command(lost_dir, corpus, vocab, *FLAGS)
        report["worker 1 killed after ckpt-%d" % KILLED_AFTER] = lose_worker_1(lost_command,
                                                                               lost_dir)
        relaunched = finish(start_workers([lost_command, lost_command]))
        report["relaunched"] = [checksum(output) for _, output in relaunched]
        report["relaunched resumed from"] = [
            (re.search(r"resuming from (\S+) at step (\d+)", output) or [None])[0]
            for _, output in relaunched]
        report["minutes"] = round((time.monotonic() - started) / 60, 1)
        same = (None not in report["straight"] + report["relaunched"] and
                len(set(report["straight"] + report["relaunched"])) == 1)
        report["equal weights"] = same
        print(json.dumps(report, indent=2))
        if not same:
            for name, results in (("straight", straight), ("relaunched", relaunched)):
                for index, (code, output) in enumerate(results):
                    print(f"--- {name} worker {index}: exit {code}\n{output[-3000:]}",
                          file=sys.stderr)
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
