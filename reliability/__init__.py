"""Reliability campaigns: the long forms of the test suite's fault and hostile-input tests.

`faults` kills, preempts and starves kt-train (SIGKILL at random moments, SIGTERM, corrupted and
truncated checkpoints, a full disk, a diverging loss) and checks that it resumes without loss;
`soak` loads an exported model as a server would and sends it hostile inputs and a mixed load for
minutes, watching its answers and its memory. They take minutes to an hour and none runs in CI.
Run them as modules from the repository root, e.g. `python -m reliability.faults --kills 10`
or `python -m reliability.soak --model_dir runs/demo`; each writes its section of
reliability/RESULTS.md. Speed benchmarks are in bench/.
"""
