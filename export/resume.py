"""An interrupted kt-translate's state, and its continuation (--resume).

Lines are translated in length-sorted batches, so when Ctrl-C or SIGTERM stops a run, the
lines translated so far are a prefix of the input (written to --output, in order) and some
lines beyond it (translated out of order). With --output FILE, the second kind is kept in
FILE.kt-resume.json beside it, with what the run was (its flags, its input's SHA-256);
`kt-translate ... --output FILE --resume` checks that the run is the same, writes those lines in
their places without translating them again, translates the rest and removes the state file.
"""

import dataclasses
import hashlib
import json
import pathlib

from keras_transformer.errors import UserError

# Flags that do not change what a line's output is: they may differ on --resume.
_FREE_FLAGS = frozenset({"resume", "overwrite", "batch_size", "seed_drawn"})


class ResumeError(UserError):
    """--resume where there is nothing to continue, or another run's state."""


@dataclasses.dataclass
class Run:
    """Output text of input lines first .. first + lines - 1 (numbered from 1)."""

    first: int
    lines: int
    text: str


@dataclasses.dataclass
class Progress:
    """How far a translation of the input is: `lines_done` input lines have their output in
    the output file, in order; `runs` (ascending, past lines_done) hold output made out of
    order."""

    lines_done: int = 0
    runs: list = dataclasses.field(default_factory=list)

    def run_at(self, line):
        """The run that starts at input line `line` (from 1), or None."""
        return next((run for run in self.runs if run.first == line), None)

    def next_run_start(self, line, default):
        """The first line of the first run starting after input line `line`, else `default`."""
        return min([run.first for run in self.runs if run.first > line], default=default)

    def lines_in_runs(self):
        return sum(run.lines for run in self.runs)

    def drop_runs_before(self, line):
        self.runs = [run for run in self.runs if run.first >= line]


def state_path(output):
    output = pathlib.Path(output)
    return output.with_name(f"{output.name}.kt-resume.json")


def _input_digest(lines):
    return hashlib.sha256(b"\n".join(lines)).hexdigest()


def _flags(args):
    return {name: value for name, value in sorted(vars(args).items())
            if name not in _FREE_FLAGS}


def save(args, lines, progress):
    """Writes --output's state file: `progress` (its prefix is in --output now) and the run's
    flags and input."""
    output = pathlib.Path(args.output)
    state = {"input_lines": len(lines), "input_sha256": _input_digest(lines),
             "flags": _flags(args), "lines_done": progress.lines_done,
             "output_bytes": output.stat().st_size,
             "runs": [dataclasses.asdict(run) for run in progress.runs]}
    state_path(output).write_text(json.dumps(state, ensure_ascii=False, default=str) + "\n",
                                  encoding="utf-8")


def load(args, lines):
    """(the `Progress` of the interrupted run of these flags over `lines`, the text --output
    holds of it), refusing another run's state: on a flag given as the run had it, the
    drawn --seed of a sampling run is the run's.

    Raises:
        ResumeError: no state file, another input or other flags, an --output that changed.
    """
    path, output = state_path(args.output), pathlib.Path(args.output)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        written = output.read_bytes()
    except FileNotFoundError as error:
        raise ResumeError(f"--resume: {error.filename} does not exist: nothing to continue "
                          f"(an interrupted kt-translate --output {args.output} writes "
                          f"{path.name})") from None
    except (OSError, ValueError) as error:
        raise ResumeError(f"--resume: cannot read {path}: {error}") from None
    if (state["input_lines"], state["input_sha256"]) != (len(lines), _input_digest(lines)):
        raise ResumeError(f"--resume: the input is not the interrupted run's ({len(lines)} "
                          f"lines now, {state['input_lines']} then, or other text)")
    if getattr(args, "seed_drawn", False):
        args.seed = state["flags"].get("seed")
    flags = json.loads(json.dumps(_flags(args), default=str))
    changed = sorted(name for name in set(flags) | set(state["flags"])
                     if flags.get(name) != state["flags"].get(name))
    if changed:
        raise ResumeError("--resume: flags differ from the interrupted run's: " + ", ".join(
            f"--{name} {flags.get(name)!r} (was {state['flags'].get(name)!r})"
            for name in changed))
    if len(written) < state["output_bytes"]:
        raise ResumeError(f"--resume: {output} is shorter than the interrupted run left it "
                          f"({len(written)} bytes, {state['output_bytes']} then)")
    progress = Progress(state["lines_done"], [Run(**run) for run in state["runs"]])
    return progress, written[:state["output_bytes"]].decode("utf-8")


def remove(args):
    """Removes --output's state file, if any (the translation is whole)."""
    if args.output:
        state_path(args.output).unlink(missing_ok=True)
