"""The tests' SavedModel clients, each run as a script in a Python process of its own that has
imported TensorFlow and tensorflow-text and nothing of this project, as TF Serving's side of a
deployment would: one such process for a pytest worker, started by the first client and kept,
instead of one a client (each paid TensorFlow's 6-7 s start-up, 2026-11-29, AMX Xeon).

Every reply lists the modules of this project the process holds, so that a client which imported
one (and so no longer proves that the export stands alone) fails its test."""

import atexit
import json
import subprocess
import sys

OUR_PACKAGES = ("keras_transformer", "data", "trainer", "export", "model_dir", "demo")

# Reads one JSON request a line ({"script", "argv", "input", "cwd"}), runs the script as
# `python -c script argv...` would (its stdin the request's input, in cwd), and writes one JSON
# reply a line on the stdout it started with.
SERVER = r"""
import contextlib, io, json, os, sys, traceback
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

replies = os.fdopen(os.dup(1), "w", encoding="utf-8")  # fd 1 itself: what C++ prints
os.dup2(2, 1)
for request in map(json.loads, sys.stdin):
    streams = [io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2)]
    sys.argv, os_dir = ["-c", *request["argv"]], os.getcwd()
    stdin, sys.stdin = sys.stdin, io.StringIO(request["input"])
    code = 0
    try:
        os.chdir(request["cwd"])
        with contextlib.redirect_stdout(streams[0]), contextlib.redirect_stderr(streams[1]):
            try:
                exec(compile(request["script"], "<client>", "exec"), {"__name__": "__main__"})
            except SystemExit as exit_info:
                code = exit_info.code if isinstance(exit_info.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 1
    finally:
        sys.stdin = stdin
        os.chdir(os_dir)
    texts = []
    for stream in streams:
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8", errors="replace"))
    ours = sorted(name for name in sys.modules if name.split(".")[0] in OURS)
    replies.write(json.dumps({"returncode": code, "stdout": texts[0], "stderr": texts[1],
                              "ours": ours}) + "\n")
    replies.flush()
"""

_process = None


def _server():
    global _process
    if _process is None or _process.poll() is not None:
        _process = subprocess.Popen(
            [sys.executable, "-c", f"OURS = {OUR_PACKAGES!r}\n{SERVER}"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        atexit.register(_process.kill)
    return _process


def run_client(script, *argv, input="", cwd="."):
    """`python -c script argv...` with `input` on its stdin, in the client process: a
    CompletedProcess (text) with the exit code (1 and the traceback on stderr for an exception)
    and what the script printed. Fails if the process holds any module of this project."""
    process = _server()
    process.stdin.write(json.dumps({"script": script, "argv": [str(arg) for arg in argv],
                                    "input": input, "cwd": str(cwd)}) + "\n")
    process.stdin.flush()
    line = process.stdout.readline()
    assert line, f"the client process ended (exit code {process.wait()})"
    reply = json.loads(line)
    assert reply["ours"] == [], f"the client process imported {reply['ours']}"
    return subprocess.CompletedProcess(["client", *argv], reply["returncode"], reply["stdout"],
                                       reply["stderr"])
