"""CoVe's downstream tasks: the bundled files, refusals that name the line, and kt-classify end to
end on a task and GloVe file the test writes."""

import functools
import json

import pytest
from conftest import run_main

from keras_transformer.data import classification
from keras_transformer.models.bcn import BiattentiveClassificationNetwork
from keras_transformer.trainer import classify


@pytest.mark.parametrize("spec, sizes, labels", [
    ("trec6", (5452, 500), 6), ("trec50", (5452, 500), 50), ("polarity", (8530, 1028), 2)])
def test_the_bundled_tasks_read_whole(spec, sizes, labels):
    task = classification.ClassificationTask(spec)
    train, held_out = task.examples("train"), task.examples(task.evaluation_split)
    assert (len(train[0]), len(held_out[0])) == sizes and len(task.labels) == labels
    assert all(text.strip() for text in train[0] + held_out[0])


def write_task(directory, train, test):
    directory.mkdir(exist_ok=True)
    for split, lines in (("train", train), ("test", test)):
        (directory / f"{split}.tsv").write_text("".join(line + "\n" for line in lines),
                                                encoding="utf-8")
    return directory


QUESTIONS = [("NUM:count", "How many cats sat on the mat ?"),
             ("HUM:ind", "Who sat on the mat ?"),
             ("LOC:other", "Where is the mat ?"),
             ("NUM:date", "When did the cat sit ?")]


@pytest.mark.parametrize("train, test, message", [
    (["NUM:count How many ?"], ["NUM:count How many ?"],
     "train.tsv, line 1: expected 2 tab-separated fields (label, text), got 1"),
    (["NUM:count\tHow many ?", "HUM:ind\t  "], ["NUM:count\tHow many ?"],
     "train.tsv, line 2: the sentence is empty"),
    (["NUM:count\tHow many ?"], ["NUM:count\tHow many ?", "ABBR:exp\tWhat is AI ?"],
     "test.tsv, line 2: label 'ABBR' never occurs in training"),
])
def test_bad_task_files_are_refused_naming_the_line(tmp_path, train, test, message):
    write_task(tmp_path / "task", train, test)
    with pytest.raises(classification.ClassificationError, match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        task = classification.ClassificationTask(f"trec6:{tmp_path / 'task'}")
        task.examples("test")


def test_an_unknown_task_or_missing_file_is_refused(tmp_path):
    with pytest.raises(classification.ClassificationError, match="unknown task 'sst2'; valid: "
                                                                 "trec6, trec50, polarity"):
        classification.ClassificationTask("sst2")
    with pytest.raises(classification.ClassificationError, match="no train.tsv or train.tsv.gz"):
        classification.ClassificationTask(f"trec6:{tmp_path}")


@pytest.mark.slow
def test_kt_classify_trains_and_reports_accuracy_with_its_seed(tmp_path, monkeypatch):
    # Its train step is traced once: Keras left the optimizer and metrics to the step's first
    # trace, and tf.function traces a step that creates variables twice.
    training_calls = []
    call = BiattentiveClassificationNetwork.call

    @functools.wraps(call)  # Keras reads the signature for the arguments it passes
    def counted(self, *args, **kwargs):
        training_calls.append(kwargs.get("training"))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(BiattentiveClassificationNetwork, "call", counted)
    lines = [f"{label}\t{text}" for label, text in QUESTIONS]
    task = write_task(tmp_path / "task", lines * 10, lines)
    words = ["how", "many", "cats", "sat", "on", "the", "mat", "?", "who", "where", "is"]
    (tmp_path / "glove.txt").write_text("".join(
        f"{word} {i % 3} {i % 5} {i % 7}\n" for i, word in enumerate(words)), encoding="utf-8")
    common = ["--task", f"trec50:{task}", "--epochs", "1", "--hidden_size", "8", "--seed", "3"]
    # 100 updates: enough to learn the 4 sentences it is tested on (in its training set too)
    learns = ["--epochs", "20", "--batch_size", "8", "--learning_rate", "2e-2"]
    result = run_main(classify.main, *common, *learns, "--glove", tmp_path / "glove.txt",
                      "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert training_calls.count(True) == 1, training_calls
    monkeypatch.undo()
    # when, did, cat, sit: 4 of the 25 test words
    assert "trec50: 40 training and 4 test sentences, 4 labels; inputs glove (14 ids, " \
        "16.0% of test words unknown); seed 3" in result.stdout
    # Chance is 1 in 4; seeds 1 to 8 all scored 1.0 (with kt-classify's default 1 epoch of one
    # batch: 0.0 to 0.5).
    assert "trec50 test accuracy 1.0000 after 20 epoch(s): inputs glove, seed 3" in result.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["labels"] == ["HUM:ind", "LOC:other", "NUM:count", "NUM:date"]
    assert results["accuracy"] == 1.0 and (tmp_path / "out" / "classifier.keras").is_file()
    random = run_main(classify.main, *common, "--inputs", "random", "--embedding_dim", "4")
    assert random.returncode == 0, random.stderr
    assert "inputs random (18 ids, 0.0% of test words unknown)" in random.stdout

    (tmp_path / "bad.txt").write_text("how 1 2 3\nmany 1 2\n", encoding="utf-8")
    bad = run_main(classify.main, *common, "--glove", tmp_path / "bad.txt")
    assert bad.returncode == 2 and "bad.txt, line 2: expected a word and 3 numbers" in bad.stderr
    missing = run_main(classify.main, *common)
    assert missing.returncode == 2 and "--inputs glove needs --glove PATH" in missing.stderr
