"""Fault-injection campaign for kt-train: the long form of tests/test_trainer.py's fault tests.

On transformer_tiny and the bundled corpus, in deterministic mode:
1. An uninterrupted run of --steps steps: the reference weights.
2. The same run killed with SIGKILL --kills times at random moments (while starting up, at a
   random point of a random step, or while a checkpoint is being written: the kill lands while
   the hidden .partial directory exists), restarted after each kill. Each restart must resume
   from the newest complete checkpoint at the moment of the kill, and the final weights must
   equal the reference's.
3. SIGTERM at a random step: exit 0 with a final checkpoint at that step, then resumed.
4. The newest checkpoint corrupted (one flipped byte) or truncated: refused by name, the one
   before it used.
5. A full disk: model_dir on a tmpfs with room for less than one more checkpoint (needs root
   for the mount namespace): a clear error, the previous checkpoint intact.
6. A diverging loss: stops with the step and the batch shape.

    python -m reliability.faults --kills 10 --seed 0
"""

import argparse
import os
import pathlib
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from bench.common import append_results, markdown_table
from keras_transformer.model_dir import checkpoints, config_file, layout, loading

RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"


def command(model_dir, steps, *flags):
    return [sys.executable, "-m", "keras_transformer.trainer.task", "--model_dir", str(model_dir),
            "--hparams", "transformer_tiny", "--hparams_override", "warmup_steps=20",
            "--vocab_size", "1000", "--batch_tokens", "1500", "--max_pair_length", "64",
            "--train_steps", str(steps), "--checkpoint_every_steps", "7", "--deterministic",
            "--seed", "5", "--eval_every", "100000", "--eval_sentences", "0", "--log_every", "1",
            *flags]


def run(model_dir, steps, *flags, **kwargs):
    return subprocess.run(command(model_dir, steps, *flags), capture_output=True, text=True,
                          timeout=1800, **kwargs)


def newest(model_dir):
    paths = checkpoints.CheckpointDirectory(model_dir / layout.CHECKPOINT_DIR).paths()
    return paths[-1].name if paths else None


def partials(model_dir):
    directory = model_dir / layout.CHECKPOINT_DIR
    return sorted(p.name for p in directory.glob(".ckpt-*.partial*")) if directory.exists() \
        else []


def final_weights(model_dir, name):
    run_config = config_file.load(model_dir)
    model = loading.build(run_config)
    checkpoints.restore(model, model_dir / layout.CHECKPOINT_DIR / name)
    return model.get_weights()


def where_it_started(stdout):
    """The checkpoint a kt-train run resumed from, "start", or None if it did not say."""
    found = re.search(r"resuming from \S+/(ckpt-\d+) at step", stdout)
    return found.group(1) if found else "start" if "starting at step 0" in stdout else None


def kill_once(model_dir, steps, mode, rng):
    """Starts kt-train and SIGKILLs it per `mode`.

    Returns (the moment, the step the run resumed from or None, whether it finished first).
    """
    process = subprocess.Popen(command(model_dir, steps), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()

    def resumed_from():
        return where_it_started("".join(lines))

    try:
        if mode == "starting up":
            delay = rng.uniform(0.5, 6.0)
            time.sleep(delay)
            moment = f"{delay:.1f} s after start"
        elif mode == "inside a step":
            start = target = None
            while process.poll() is None:
                text = "".join(lines)
                if start is None:
                    found = re.search(r"(?:at|starting at) step (\d+) of", text)
                    if found:
                        start = int(found.group(1))
                        target = rng.randint(start + 1, max(start + 1, min(start + 20, steps - 1)))
                reached = [int(n) for n in re.findall(r"^step (\d+):", text, re.M)]
                if target is not None and reached and max(reached) >= target:
                    delay = rng.uniform(0, 0.05)
                    time.sleep(delay)
                    moment = f"{delay * 1000:.0f} ms after step {max(reached)}"
                    break
                time.sleep(0.001)
        else:  # "writing a checkpoint"
            wanted, seen = rng.randint(1, 2), set(partials(model_dir))
            while process.poll() is None:
                new = set(partials(model_dir)) - seen
                if new:
                    seen |= new
                    wanted -= 1
                    if wanted == 0:
                        break
                time.sleep(0.0005)
        if process.poll() is not None:
            if process.returncode:
                raise RuntimeError(f"kt-train exited {process.returncode} before the kill: "
                                   + "".join(lines)[-2000:])
            return "finished before the kill", resumed_from(), True
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
        reader.join()
    if mode == "writing a checkpoint":
        left = partials(model_dir)
        moment = (f"while {left[0]} was being written (left behind)" if left else
                  f"while {sorted(new)[0]} was being written (it completed first)")
    return moment, resumed_from(), False


def main():
    parser = argparse.ArgumentParser(prog="python -m reliability.faults",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = pathlib.Path(tempfile.mkdtemp(prefix="kt-faults-"))
    lines = []
    try:
        reference = work / "reference"
        straight = run(reference, args.steps)
        assert straight.returncode == 0, straight.stderr
        vocab = ("--vocab", str(reference / layout.VOCAB_FILE))

        # 2. SIGKILLs at random moments: each restart is the next kill's run.
        killed = work / "killed"
        shutil.copytree(reference, killed, ignore=shutil.ignore_patterns("checkpoints", "logs"))
        rows = []
        modes = ["starting up", "inside a step", "writing a checkpoint"]
        for number in range(1, args.kills + 1):
            mode = modes[number % 3]
            moment, resumed, finished = kill_once(killed, args.steps, mode, rng)
            for row in rows:  # the kills whose restart had not yet said where it resumed
                if len(row) == 4 and resumed:
                    row.append(resumed)
            if finished:  # not a kill: nothing to count
                break
            rows.append([number, mode, moment, newest(killed) or "start"])
        final = run(killed, args.steps, *vocab)
        if final.returncode:
            raise RuntimeError(f"the final run exited {final.returncode}: {final.stderr[-2000:]}")
        for row in rows:
            if len(row) == 4:
                row.append(where_it_started(final.stdout))
        lossless = 0
        for row in rows:
            lossless += row[4] == row[3]
            row.append("yes" if row[4] == row[3] else "NO")
        expected = final_weights(reference, f"ckpt-{args.steps}")
        actual = final_weights(killed, f"ckpt-{args.steps}")
        difference = max(float(np.abs(a - b).max()) for a, b in zip(expected, actual))
        lines.append(markdown_table(["Kill", "Mode", "Moment", "Newest complete checkpoint",
                                     "Restart resumed from", "Lossless"], rows))
        lines.append(f"Restarts that resumed from the newest complete checkpoint: "
                     f"{lossless}/{len(rows)} (a restart killed while starting up, before it "
                     f"loaded anything, is not a restart: the next one is). Final run exit "
                     f"{final.returncode}; final weights "
                     f"(ckpt-{args.steps}) vs the uninterrupted run: max abs difference "
                     f"{difference:.3g}.")

        # 3. SIGTERM at a random step.
        preempted = work / "preempted"
        shutil.copytree(reference, preempted, ignore=shutil.ignore_patterns("checkpoints", "logs"))
        process = subprocess.Popen(command(preempted, args.steps), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        target = rng.randint(10, args.steps - 10)
        for line in process.stdout:
            if re.match(rf"step {target}:", line):
                process.send_signal(signal.SIGTERM)
                break
        stdout, _ = process.communicate(timeout=600)
        stopped = re.search(r"stopped by SIGTERM at step (\d+), checkpoint (\S+?);", stdout)
        resumed = run(preempted, args.steps, *vocab)
        same = max(float(np.abs(a - b).max()) for a, b in
                   zip(expected, final_weights(preempted, f"ckpt-{args.steps}")))
        name = stopped.group(2).rsplit("/", 1)[-1] if stopped else "NO checkpoint"
        message = stopped.group(0).replace(str(work), "...") if stopped else "NO message"
        restart = f"resumed from {name}" if f"{name} at step" in resumed.stdout else \
            "did NOT resume from it"
        lines.append(f"SIGTERM at step {target}: exit {process.returncode}, `{message}`; the "
                     f"restart {restart}, "
                     f"exit {resumed.returncode}, final weights vs the uninterrupted run: max abs "
                     f"difference {same:.3g}.")

        # 4. Corrupted and truncated newest checkpoints.
        for damage in ("corrupted", "truncated"):
            damaged = work / damage
            shutil.copytree(reference, damaged)
            victim = damaged / layout.CHECKPOINT_DIR / f"ckpt-{args.steps}" / \
                checkpoints.WEIGHTS_FILE
            data = bytearray(victim.read_bytes())
            if damage == "corrupted":
                data[rng.randrange(len(data) // 4, len(data))] ^= 0x10
            else:
                data = data[:len(data) // 2]
            victim.write_bytes(bytes(data))
            result = run(damaged, args.steps + 7, *vocab)
            refusal = next((line for line in result.stderr.splitlines()
                            if "is unreadable" in line), "NO refusal")
            resumed = re.search(r"resuming from \S+/(ckpt-\d+)", result.stdout)
            lines.append(f"Newest checkpoint {damage}: exit {result.returncode}; "
                         f"`{refusal.replace(str(work), '...')}`; resumed from "
                         f"{resumed.group(1) if resumed else 'NOTHING'}.")

        # 5. A full disk.
        lines.append(full_disk(work, reference, args.steps, vocab))

        # 6. A diverging loss.
        diverging = run(work / "diverging", 50, *vocab, "--hparams_override",
                        "warmup_steps=1,learning_rate_multiplier=1e12")
        message = next((line for line in diverging.stderr.splitlines()
                        if "loss became" in line), "NO message")
        lines.append(f"Diverging loss: exit {diverging.returncode}; `{message[:160]}...`")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    append_results("Training fault injection", "\n\n".join(lines), RESULTS)


def full_disk(work, reference, steps, vocab):
    """kt-train resumed on a tmpfs holding model_dir with room for half a checkpoint more."""
    checkpoint = reference / layout.CHECKPOINT_DIR / f"ckpt-{steps}"
    size = sum(f.stat().st_size for f in checkpoint.iterdir())
    used = sum(f.stat().st_size for f in reference.rglob("*") if f.is_file())
    mount = work / "tmpfs"
    mount.mkdir()
    kilobytes = (used + size // 2) // 1024 + 64
    script = "; ".join([
        f"mount -t tmpfs -o size={kilobytes}k tmpfs {mount} || exit 99",
        f"cp -a {reference} {mount}/run && rm -rf {mount}/run/logs",
        shlex.join(command(mount / "run", steps + 7, *vocab)),
        "echo exit $?",
        shlex.join([sys.executable, "-c", VERIFY, str(mount / "run")])])
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             script], capture_output=True, text=True, timeout=1800)
    if result.returncode == 99 or "unshare:" in result.stderr:
        return f"Full disk: not run ({result.stderr.strip()[:200]}; needs root)."
    error = next((line for line in result.stderr.splitlines() if "could not write" in line),
                 "NO error message")
    status = re.search(r"^exit (\d+)$", result.stdout, re.M)
    return (f"Full disk (tmpfs of {kilobytes} kB: model_dir plus half a checkpoint): kt-train "
            f"exit {status.group(1) if status else '?'}, "
            f"`{error.replace(str(mount), '<tmpfs>')}`; afterwards "
            f"{result.stdout.strip().splitlines()[-1].replace(str(mount), '<tmpfs>')}")


# Run inside the mount namespace after kt-train: lists the checkpoints and verifies the newest.
VERIFY = """
import sys, pathlib
from keras_transformer.model_dir import checkpoints, layout
directory = checkpoints.CheckpointDirectory(pathlib.Path(sys.argv[1]) / layout.CHECKPOINT_DIR)
names = sorted(p.name for p in directory.directory.iterdir())
checkpoints.verify(directory.paths()[-1])
print(f"checkpoint directory holds {names}; {directory.paths()[-1].name} verifies")
"""


if __name__ == "__main__":
    main()
