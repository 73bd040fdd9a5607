"""kt-translate interrupted (Ctrl-C) keeps every line it translated, and --resume continues."""

import os
import re
import signal
import time

import pytest
from conftest import run_main

from keras_transformer.export import lines as lines_module
from keras_transformer.export import resume, translate

# The longest first: batches of 2 are lines (1, 2), then (5, 6), then shorter ones. An
# interruption in the third batch leaves lines 1-2 in order and 5-6 out of order.
LINES = ["In the beginning God created the heaven and the earth, and the earth was without "
         "form, and void.",
         "And God said, Let there be light: and there was light, and God saw the light.",
         "Jesus wept.",
         "Amen.",
         "And the evening and the morning were the first day of all days.",
         "And God called the light Day, and the darkness he called Night.",
         "Blessed are the meek.",
         "The Lord is my shepherd."]


@pytest.fixture
def interrupt_at_batch(monkeypatch):
    """interrupt_at_batch(n): SIGINT (Ctrl-C) reaches kt-translate as it starts searching batch
    n (from 1); returns the list of searched batches' sizes, which grows as it searches."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist's may differ
    search = lines_module._beam_search

    def start(number):
        searched = []

        def searching(translator, batch, *args):
            if len(searched) + 1 == number:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(60)  # Python's handler raises KeyboardInterrupt here
            searched.append(len(batch))
            return search(translator, batch, *args)

        monkeypatch.setattr(lines_module, "_beam_search", searching)
        return searched

    yield start
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_keeps_the_translated_lines_and_resume_translates_only_the_rest(
        trained_model_dir, tmp_path, interrupt_at_batch):
    source, output = tmp_path / "in.en", tmp_path / "out.es"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    flags = ["--model_dir", trained_model_dir, "--input", source, "--batch_size", 2,
             "--beam_size", 2]
    whole = run_main(translate.main, *flags)
    assert whole.returncode == 0, whole.stderr
    expected = whole.stdout.splitlines()

    searched = interrupt_at_batch(3)
    started = time.perf_counter()
    stopped = run_main(translate.main, *flags, "--output", output)
    assert stopped.returncode == 130 and time.perf_counter() - started < 60, stopped.stderr
    assert searched == [2, 2] and "Traceback" not in stopped.stderr
    said = re.search(r"interrupted; the first (\d+) of 8 line\(s\) are translated in (\S+), "
                     r"(\d+) more \(out of order\) in (\S+); add --resume", stopped.stderr)
    assert said, stopped.stderr
    in_order, out_of_order = int(said[1]), int(said[3])
    assert in_order >= 2 and in_order + out_of_order == 4  # two batches of two
    assert output.read_text(encoding="utf-8").splitlines() == expected[:in_order]
    assert said[4] == str(resume.state_path(output))
    assert list(tmp_path.glob(".*partial*")) == []

    # Another input or other flags are refused, naming what differs; the state stays.
    changed = run_main(translate.main, *flags[:-1], 1, "--output", output, "--resume")
    assert changed.returncode == 2 and "--resume: flags differ from the interrupted run's: " \
        "--beam_size 1 (was 2)" in changed.stderr, changed.stderr
    (tmp_path / "other.en").write_text("Amen.\n", encoding="utf-8")
    other = run_main(translate.main, *flags[:3], tmp_path / "other.en", *flags[4:],
                     "--output", output, "--resume")
    assert other.returncode == 2 and "the input is not the interrupted run's" in other.stderr

    searched = interrupt_at_batch(0)  # never
    resumed = run_main(translate.main, *flags, "--output", output, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert output.read_text(encoding="utf-8").splitlines() == expected
    assert sum(searched) == 8 - 4  # the kept lines are not translated again
    assert f"translated {8 - 4} sentence(s)" in resumed.stderr
    assert not resume.state_path(output).exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_dropped_in_a_finalizer_still_stops_before_the_next_batch(
        trained_model_dir, tmp_path, monkeypatch):
    """Python drops an exception raised in a finalizer ("Exception ignored in"), and
    TensorFlow's objects run theirs at any moment, so the KeyboardInterrupt of a Ctrl-C can be
    lost (a --documents run went on for 15 minutes past its signal): kt-translate stops before
    its next batch all the same."""
    source = tmp_path / "in.en"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist's may differ
    search, searched = lines_module._beam_search, []

    class SignalledInItsFinalizer:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler raises in here: dropped

    def searching(translator, batch, *args):
        if len(searched) == 1:
            SignalledInItsFinalizer()  # made and finalized at once
        searched.append(len(batch))
        return search(translator, batch, *args)

    monkeypatch.setattr(lines_module, "_beam_search", searching)
    try:
        stopped = run_main(translate.main, "--model_dir", trained_model_dir, "--input", source,
                           "--batch_size", 2, "--beam_size", 1, "--output", tmp_path / "out.es")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopped.returncode == 130 and searched == [2, 2], stopped.stderr
    assert "interrupted; the first 2 of 8 line(s)" in stopped.stderr, stopped.stderr


def test_resume_needs_an_interrupted_output_and_stdout_says_what_it_loses(
        trained_model_dir, tmp_path, interrupt_at_batch):
    source = tmp_path / "in.en"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    flags = ["--model_dir", trained_model_dir, "--input", source, "--batch_size", 2,
             "--beam_size", 2]
    usage = run_main(translate.main, *flags, "--resume")
    assert usage.returncode == 2 and "--resume continues the lines of an interrupted " \
        "--output: it needs --output" in usage.stderr
    (tmp_path / "done.es").write_text("", encoding="utf-8")
    nothing = run_main(translate.main, *flags, "--output", tmp_path / "done.es", "--resume")
    assert nothing.returncode == 2 and "done.es.kt-resume.json does not exist: nothing to " \
        "continue" in nothing.stderr, nothing.stderr

    interrupt_at_batch(3)
    to_stdout = run_main(translate.main, *flags)
    assert to_stdout.returncode == 130
    said = re.search(r"the first (\d+) of 8 line\(s\) are translated in <stdout>; (\d+) more "
                     r"translated out of order are lost", to_stdout.stderr)
    assert said and int(said[1]) + int(said[2]) == 4, to_stdout.stderr
    assert len(to_stdout.stdout.splitlines()) == int(said[1])
