"""n-best lists (kt-translate --n_best, the translate_n_best signature), scoring given pairs
(kt-score, the score signature) and target prefixes (kt-translate --target_prefix) on the trained
test model, against beam search itself."""

import contextlib
import io
import json
import os
import shutil
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from client_process import run_client
from conftest import run_main

import keras_transformer as kt
from keras_transformer import cli, export
from keras_transformer.export import export_command, translate, translate_parts
from keras_transformer.export import score as kt_score

BEAM = 4


@pytest.fixture(scope="module")
def sources(dev_sentences, tmp_path_factory):
    """A file of 12 dev sentences, a blank line and the sentences' references."""
    directory = tmp_path_factory.mktemp("pairs")
    english = [en for en, _ in dev_sentences[:12]] + [""]
    (directory / "input.en").write_text("\n".join(english) + "\n", encoding="utf-8")
    return directory / "input.en", english


@pytest.fixture(scope="module")
def beams(trained, sources):
    """Beam search run directly on each sentence, as the commands' Translator cuts it: a list of
    (source ids [1, s], hypothesis ids [BEAM, length], scores [BEAM])."""
    translator = export.Translator(trained.model, trained.vocabulary,
                                   max_input_length=trained.run.data.max_pair_length)
    found = []
    for text in sources[1][:-1]:  # the blank line is not searched
        source = translator.tokenize(tf.constant([text]))["source_ids"]
        ids, scores = kt.beam_decode(trained.model, source, beam_size=BEAM, alpha=0.6)
        found.append((source.numpy(), ids.numpy()[0], scores.numpy()[0]))
    return found


@pytest.fixture(scope="module")
def beam_n_best(trained_model_dir, sources, tmp_path_factory):
    """kt-translate --n_best BEAM of the sources (every hypothesis of the beam, the model_dir's
    default checkpoint, batches of 5), as `n_best` runs it: (its JSON lines, its stderr). One
    run for the tests that compare with it."""
    output = tmp_path_factory.mktemp("n_best") / "n_best.txt"
    result = run_main(translate.main, "--model_dir", trained_model_dir, "--input", sources[0],
                      "--output", output, "--beam_size", BEAM, "--batch_size", "5", "--n_best",
                      BEAM)
    assert result.returncode == 0, result.stderr
    return output.read_text(encoding="utf-8"), result.stderr


def n_best(trained_model_dir, source, tmp_path, capsys, *flags):
    output = tmp_path / "n_best.txt"
    assert translate.main(["--model_dir", str(trained_model_dir), "--input", str(source),
                           "--output", str(output), "--overwrite", "--beam_size", str(BEAM),
                           "--batch_size", "5", *flags]) == 0
    capsys.readouterr()
    return output.read_text(encoding="utf-8")


def test_n_best_lists_are_the_beams_in_order_with_their_teacher_forced_scores(
        trained, trained_model_dir, sources, beams, beam_n_best, tmp_path, capsys):
    source_file, english = sources
    text, _ = beam_n_best
    records = [json.loads(line) for line in text.splitlines()]
    assert [record["line"] for record in records] == list(range(1, len(english) + 1))
    for record, (source, ids, scores) in zip(records, beams):
        hypotheses = record["hypotheses"]
        texts = [t.decode("utf-8") for t in trained.vocabulary.detokenize(ids).numpy()]
        assert [h["text"] for h in hypotheses] == texts
        np.testing.assert_allclose([h["score"] for h in hypotheses], scores, atol=1e-4)
        forced = kt.score(trained.model, np.repeat(source, BEAM, axis=0), ids, alpha=0.6)
        np.testing.assert_allclose([h["score"] for h in hypotheses], forced["scores"],
                                   atol=1e-4, rtol=0)
        np.testing.assert_allclose([h["log_prob"] for h in hypotheses], forced["log_probs"],
                                   atol=1e-4, rtol=0)
    assert records[-1]["hypotheses"] == [{"text": "", "score": 0.0, "log_prob": 0.0}]
    # The first hypotheses are kt-translate's translations.
    best = n_best(trained_model_dir, source_file, tmp_path, capsys).splitlines()
    assert [record["hypotheses"][0]["text"] for record in records] == best

    moses = n_best(trained_model_dir, source_file, tmp_path, capsys, "--n_best", "2",
                   "--n_best_format", "moses").splitlines()
    expected = [(str(index), h["text"], h["log_prob"], h["score"])
                for index, record in enumerate(records) for h in record["hypotheses"][:2]]
    fields = [line.split(" ||| ") for line in moses]
    assert [(i, text) for i, text, _, _ in fields] == [(i, text) for i, text, _, _ in expected]
    assert all(features.startswith("LogProb= ") for _, _, features, _ in fields)
    np.testing.assert_allclose([float(f.split()[1]) for _, _, f, _ in fields],
                               [log_prob for _, _, log_prob, _ in expected], atol=1e-5)
    np.testing.assert_allclose([float(total) for *_, total in fields],
                               [score for *_, score in expected], atol=1e-5)


def test_a_target_prefix_starts_every_translation_and_is_scored(
        trained, trained_model_dir, sources, beams, tmp_path, capsys):
    source_file, english = sources
    prefixes = ["Y", "", "Mas el"] * 4 + ["Y"]
    prefix_file = tmp_path / "prefixes.es"
    prefix_file.write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    text = n_best(trained_model_dir, source_file, tmp_path, capsys, "--n_best", "2",
                  "--target_prefix", str(prefix_file))
    records = [json.loads(line) for line in text.splitlines()]
    prefix_ids = trained.vocabulary.tokenize(tf.constant(prefixes)).to_list()
    for record, prefix, ids, (source, _, _) in zip(records, prefixes, prefix_ids, beams):
        # The search run directly with its first steps forced to the prefix.
        forced_ids, scores = kt.beam_decode(trained.model, source, beam_size=BEAM,
                                            prefix_ids=tf.constant([ids or [0]], tf.int32))
        forced_ids = forced_ids.numpy()[0]
        assert all(row[:len(ids)].tolist() == ids for row in forced_ids)
        texts = [t.decode("utf-8") for t in trained.vocabulary.detokenize(forced_ids).numpy()]
        assert [h["text"] for h in record["hypotheses"]] == texts[:2]
        assert all(t.startswith(prefix) for t in texts)
        np.testing.assert_allclose([h["score"] for h in record["hypotheses"]], scores[0, :2],
                                   atol=1e-4)
        # The prefix's tokens count in the score: teacher forcing gives the same.
        teacher = kt.score(trained.model, np.repeat(source, BEAM, axis=0), forced_ids)
        np.testing.assert_allclose(teacher["scores"], scores[0], atol=1e-4, rtol=0)
    assert records[-1]["hypotheses"] == [{"text": "", "score": 0.0, "log_prob": 0.0}]


def test_target_prefix_refusals_name_the_file_and_line(trained_model_dir, sources, tmp_path,
                                                       capsys):
    source_file, english = sources
    model_dir = ["--model_dir", str(trained_model_dir), "--input", str(source_file),
                 "--extra_length", "3"]
    short = tmp_path / "short.es"
    short.write_text("Y\n")
    assert translate.main([*model_dir, "--target_prefix", str(short)]) == 2
    assert (f"--target_prefix {short} has 1 lines but {source_file} has {len(english)}"
            in capsys.readouterr().err)
    long = tmp_path / "long.es"
    long.write_text("\n".join([""] * 3 + ["y así " * 60] + [""] * (len(english) - 4)) + "\n")
    assert translate.main([*model_dir, "--target_prefix", str(long)]) == 2
    assert f"--target_prefix {long}: line 4: the prefix has " in capsys.readouterr().err


@pytest.mark.slow
def test_sampling_is_reproducible_by_seed_and_top_1_is_greedy(trained_model_dir, sources,
                                                                tmp_path, capsys):
    # 4 of the sentences and the blank line: one batch of 5 (--batch_size 5), so each of the
    # five runs traces its search once, not once for each of 3 batch shapes.
    english = sources[1][:4] + [""]
    source_file = tmp_path / "input.en"
    source_file.write_text("\n".join(english) + "\n", encoding="utf-8")

    def sampled(*flags):
        return n_best(trained_model_dir, source_file, tmp_path, capsys,
                      "--sampling_temperature", "1.0", *flags)

    first, again, other = (sampled("--seed", seed, "--n_best", "3") for seed in ("7", "7", "8"))
    assert first == again and first != other
    records = [json.loads(line) for line in first.splitlines()]
    assert all(len(record["hypotheses"]) == 3 for record in records[:-1])
    assert len({h["text"] for record in records for h in record["hypotheses"]}) > len(english)
    greedy = n_best(trained_model_dir, source_file, tmp_path, capsys, "--beam_size", "1",
                    "--alpha", "0")
    assert sampled("--sampling_top_k", "1", "--seed", "3") == greedy


@pytest.mark.slow
def test_an_ensemble_of_the_model_with_itself_translates_as_the_model(
        trained, trained_model_dir, sources, beam_n_best, tmp_path, capsys):
    source_file, _ = sources
    checkpoint = str(trained.checkpoint)
    # The model alone: kt-translate's whole beam, translated with `checkpoint` as its summary
    # line says; the ensembles' whole beams are compared with it.
    alone, summary = beam_n_best
    assert f" with {checkpoint}, beam {BEAM}," in summary
    # Both ways of naming members in one run: --checkpoint twice and --ensemble, three members,
    # each named in the summary line. In one batch (a trace of the three-member search each
    # batch shape costs); the model alone ran in batches of 5.
    output = tmp_path / "ensemble.txt"
    assert translate.main(["--model_dir", str(trained_model_dir), "--input", str(source_file),
                           "--output", str(output), "--beam_size", str(BEAM), "--batch_size",
                           "13", "--n_best", str(BEAM), "--checkpoint", checkpoint,
                           "--checkpoint", checkpoint, "--ensemble",
                           str(trained_model_dir)]) == 0
    assert f" with {checkpoint} + {checkpoint} + {checkpoint}, beam {BEAM}," in (
        capsys.readouterr().err)
    thrice = output.read_text(encoding="utf-8")
    assert len(thrice.splitlines()) == len(alone.splitlines())
    for one, three in zip(alone.splitlines(), thrice.splitlines()):
        one, three = json.loads(one)["hypotheses"], json.loads(three)["hypotheses"]
        assert [h["text"] for h in one] == [h["text"] for h in three]
        np.testing.assert_allclose([h["score"] for h in one], [h["score"] for h in three],
                                   atol=1e-4)


def test_an_ensemble_member_with_another_vocabulary_is_refused(trained_model_dir, sources,
                                                               tmp_path, capsys):
    from sentencepiece import sentencepiece_model_pb2

    other = tmp_path / "other_run"
    shutil.copytree(trained_model_dir, other)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((other / "vocab.model").read_bytes())
    proto.pieces[5].score -= 1.0  # same size, another segmentation
    (other / "vocab.model").write_bytes(proto.SerializeToString())
    assert translate.main(["--model_dir", str(trained_model_dir), "--ensemble", str(other),
                           "--input", str(sources[0])]) == 2
    assert (f"{other / 'vocab.model'} and {trained_model_dir / 'vocab.model'} are different "
            f"vocabularies" in capsys.readouterr().err)


def refusal(main, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_n_best_and_sampling_refusals_name_the_flags(trained_model_dir, sources, capsys):
    model_dir = ["--model_dir", str(trained_model_dir), "--input", str(sources[0])]
    # The beam's size is known once the model's preset is (a parser's is 21): exit 2 all the same.
    assert translate.main([*model_dir, "--n_best", "5"]) == 2
    assert "--n_best 5 is more than --beam_size 4" in capsys.readouterr().err
    assert "--n_best writes the scores already: drop --scores" in refusal(
        translate.main, [*model_dir, "--n_best", "2", "--scores"], capsys)
    assert "--seed and --sampling_top_k need --sampling_temperature" in refusal(
        translate.main, [*model_dir, "--seed", "3"], capsys)
    assert "--sampling_temperature: must be more than 0" in refusal(
        translate.main, [*model_dir, "--sampling_temperature", "0"], capsys)
    assert "--seed: must be below 2**31, got 2147483648" in refusal(
        translate.main, [*model_dir, "--sampling_temperature", "1", "--seed", str(2**31)], capsys)
    assert translate.main([*model_dir, "--sampling_temperature", "1", "--sampling_top_k",
                           "5000"]) == 2
    assert "--sampling_top_k 5000 is more than the vocabulary's 2000 ids" in \
        capsys.readouterr().err


def scored(model_dir, source, target, capsys, *flags):
    assert kt_score.main(["--model_dir", str(model_dir), "--source", str(source), "--target",
                          str(target), *flags]) == 0
    out, err = capsys.readouterr()
    return [line.split("\t") for line in out.splitlines()], err


def test_kt_score_of_the_models_own_output_gives_back_the_beams_scores(
        trained, trained_model_dir, sources, beams, tmp_path, capsys):
    source_file, english = sources
    best = [ids[0] for _, ids, _ in beams]
    target_file = tmp_path / "best.es"
    texts = [t.decode("utf-8") for t in trained.vocabulary.detokenize(
        tf.ragged.constant([list(ids) for ids in best]).to_tensor()).numpy()]
    target_file.write_text("\n".join(texts + [""]) + "\n", encoding="utf-8")
    rows, err = scored(trained_model_dir, source_file, target_file, capsys, "--batch_size", "5",
                       "--per_token")
    assert len(rows) == len(english) and f"scored {len(english)} pair(s)" in err
    # A hypothesis that stopped at its length limit has no end of sentence: read back from
    # text it gains one, and kt-score cuts it back to the limit, and says so.
    at_limit = [number for number, ids in enumerate(best, 1) if kt.EOS_ID not in ids]
    assert [line for line in err.splitlines() if "warning: line" in line] == [
        line for line in err.splitlines() if any(f"line {n}:" in line for n in at_limit)]
    retokenized = trained.vocabulary.encode(tf.constant(texts)).to_list()
    same_ids = 0
    for row, ids, (_, _, beam_scores), again in zip(rows, best, beams, retokenized):
        score, log_prob, length, per_token = row
        tokens = [float(value) for value in per_token.split()]
        assert int(length) == len(tokens) <= len(again)
        np.testing.assert_allclose(sum(tokens), float(log_prob), atol=1e-3)
        np.testing.assert_allclose(float(log_prob) / ((5 + int(length)) / 6) ** 0.6,
                                   float(score), atol=1e-5)
        # Text -> subwords may segment a word differently from the model's own output; where it
        # gives back the beam's ids, the score is the beam's.
        if again[:int(length)] == [int(i) for i in ids[:int(length)]]:
            same_ids += 1
            assert abs(float(score) - beam_scores[0]) < 1e-4
    assert same_ids >= len(best) - 2
    # Batch mates and order change nothing.
    alone, _ = scored(trained_model_dir, source_file, target_file, capsys, "--batch_size", "1")
    np.testing.assert_allclose([float(r[0]) for r in alone], [float(r[0]) for r in rows],
                               atol=1e-5, rtol=0)


def test_kt_score_cuts_as_serving_does_and_says_so(trained_model_dir, sources, tmp_path,
                                                   capsys):
    source_file, english = sources
    long_target = tmp_path / "long.es"
    long_target.write_text("\n".join(["y así " * 40] + ["y"] * (len(english) - 1)) + "\n",
                           encoding="utf-8")
    rows, err = scored(trained_model_dir, source_file, long_target, capsys,
                       "--max_output_length", "8")
    assert "kt-score: warning: line 1: cut to the limits of a translation" in err
    assert "line 2:" not in err
    assert rows[0][2] == "8" and rows[1][2] == "2"  # "y" + end of sentence


def test_kt_score_refusals_name_the_files(trained_model_dir, sources, tmp_path, capsys):
    source_file, english = sources
    short = tmp_path / "short.es"
    short.write_text("uno\n")
    assert kt_score.main(["--model_dir", str(trained_model_dir), "--source", str(source_file),
                          "--target", str(short)]) == 2
    assert (f"--source {source_file} has {len(english)} lines but --target {short} has 1"
            in capsys.readouterr().err)
    assert kt_score.main(["--model_dir", str(trained_model_dir), "--source",
                          str(tmp_path / "missing.en"), "--target", str(short)]) == 2
    assert f"cannot read --source {tmp_path / 'missing.en'}" in capsys.readouterr().err


CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

model = tf.saved_model.load(sys.argv[1])
texts, targets = json.loads(sys.stdin.read())
n_best = model.signatures["translate_n_best"](inputs=tf.constant(texts))
scores = model.signatures["score"](inputs=tf.constant(texts), targets=tf.constant(targets))
empty = tf.constant([], tf.string)
no_lines = model.signatures["translate_n_best"](inputs=empty)
unpaired = []
for _ in range(16):  # the size check runs before any op that reads both could fail
    try:
        model.signatures["score"](inputs=tf.constant(texts[:3]), targets=tf.constant(targets[:2]))
    except tf.errors.InvalidArgumentError as error:
        unpaired.append(error.message)
print(json.dumps({
    "empty": {name: value.shape.as_list() for name, value in no_lines.items()},
    "unpaired": unpaired,
    "translations": [[t.decode("utf-8") for t in row] for row in n_best["translations"].numpy()],
    "scores": n_best["scores"].numpy().tolist(), "log_probs": n_best["log_probs"].numpy().tolist(),
    "pair_scores": scores["scores"].numpy().tolist(), "lengths": scores["lengths"].numpy().tolist(),
    "truncated": scores["truncated"].numpy().tolist()}))
"""


@pytest.mark.slow
def test_the_exported_n_best_and_score_signatures_without_this_package(
        trained, trained_model_dir, sources, tmp_path, capsys):
    _, english = sources
    output = tmp_path / "exported"
    assert export_command.main(["--model_dir", str(trained_model_dir), "--output",
                                str(output), "--beam_size", str(BEAM)]) == 0
    assert "translate_n_best, score" in capsys.readouterr().out
    translator = export.Translator(trained.model, trained.vocabulary, beam_size=BEAM,
                                   max_input_length=trained.run.data.max_pair_length)
    expected = export.lines.n_best_lines(translator, english, BEAM, batch_size=32)
    targets = [hypotheses[-1].text for hypotheses in expected]
    result = run_client(CLIENT, output / "1", input=json.dumps([english, targets]), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    for row, hypotheses in enumerate(expected[:-1]):
        assert reply["translations"][row] == [h.text for h in hypotheses]
        np.testing.assert_allclose(reply["scores"][row], [h.score for h in hypotheses],
                                   atol=1e-4)
        np.testing.assert_allclose(reply["log_probs"][row], [h.log_prob for h in hypotheses],
                                   atol=1e-4)
    assert reply["translations"][-1][0] == "" and reply["scores"][-1][0] == 0.0
    assert reply["scores"][-1][1:] == [float("-inf")] * (BEAM - 1)
    assert reply["empty"] == {name: [0, BEAM] for name in ("translations", "scores",
                                                           "log_probs")}
    assert len(reply["unpaired"]) == 16 and all(
        "score needs as many targets as inputs" in message and "Incompatible shapes" not in
        message for message in reply["unpaired"])
    # Scoring each sentence's last hypothesis through its text gives back its score, unless
    # its text segments differently.
    close = [abs(a - h[-1].score) < 1e-4 for a, h in zip(reply["pair_scores"], expected[:-1])]
    assert sum(close) >= len(close) - 2


@pytest.mark.slow
def test_an_exported_ensemble_serves_as_its_translator(trained, tmp_path):
    members = [trained.model, trained.model]
    translator = export.Translator(members, trained.vocabulary, max_input_length=32)
    path = export.export(translator, tmp_path / "ensemble", provenance={"members": 2})
    served = tf.saved_model.load(str(path)).signatures["serving_default"]
    texts = tf.constant(["In the beginning God created the heaven and the earth.", "Jesus wept."])
    got, expected = served(inputs=texts), translator.translate(texts)
    assert got["translations"].numpy().tolist() == expected["translations"].numpy().tolist()
    np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-5)


def test_an_output_the_disk_refuses_is_discarded_whole(tmp_path):
    writer = kt.cli.PieceWriter(tmp_path / "out.txt")
    writer.stream.close()
    writer.stream = open("/dev/full", "wb")  # a full disk: ENOSPC
    with pytest.raises(OSError, match="No space left"):
        writer.write("a line\n")
    writer.discard()  # closing flushes the buffered line and fails again; the file goes anyway
    assert list(tmp_path.iterdir()) == []


def test_kt_translate_writes_as_it_goes_and_says_what_it_did_not_write(
        trained_model_dir, tmp_path, monkeypatch):
    """The output is written CHUNK_LINES lines at a time, in input order, alike; SIGTERM (or
    Ctrl-C) while translating keeps the lines translated so far and exits 130 with one line, no
    traceback; an output it cannot name or write (a full disk) is a `kt-translate: error:`
    line."""
    lines = ["Jesus wept.", "In the beginning God created the heaven and the earth.", "Amen."]
    (tmp_path / "in.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--model_dir", trained_model_dir, "--input", tmp_path / "in.en", "--n_best", "2"]
    whole = run_main(translate.main, *flags)
    monkeypatch.setattr(translate_parts, "CHUNK_LINES", 2)
    in_parts = run_main(translate.main, *flags)
    assert whole.returncode == in_parts.returncode == 0, in_parts.stderr
    # The same lines and hypotheses; scores to the rounding of batches of other shapes.
    parts, one = ([json.loads(line) for line in result.stdout.splitlines()]
                  for result in (in_parts, whole))
    assert [p["line"] for p in parts] == [1, 2, 3]
    for part, reference in zip(parts, one):
        assert [h["text"] for h in part["hypotheses"]] == [
            h["text"] for h in reference["hypotheses"]]
        np.testing.assert_allclose([h["score"] for h in part["hypotheses"]],
                                   [h["score"] for h in reference["hypotheses"]], atol=1e-4)

    calls, n_best_lines = [], translate_parts.n_best_lines

    def stopped_in_the_second_part(*args, **kwargs):
        calls.append(kwargs["first_line"])
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # the signal's handler ends this
        return n_best_lines(*args, **kwargs)

    monkeypatch.setattr(translate_parts, "n_best_lines", stopped_in_the_second_part)
    started = time.perf_counter()
    result = run_main(translate.main, *flags[:4], "--output", tmp_path / "out.es")
    assert result.returncode == 130 and time.perf_counter() - started < 60
    assert calls == [1, 3]
    assert f"kt-translate: interrupted; the first 2 of 3 line(s) are translated in " \
        f"{tmp_path / 'out.es'}; add --resume to continue" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "out.es").read_text(encoding="utf-8").splitlines() == [
        json.loads(line)["hypotheses"][0]["text"] for line in whole.stdout.splitlines()[:2]]
    assert cli._stop not in (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    assert list(tmp_path.glob(".*partial*")) == []

    too_long = tmp_path / ("x" * 300)
    refused = run_main(translate.main, "--model_dir", trained_model_dir, "--output", too_long)
    assert refused.returncode == 2 and f"--output {too_long}: File name too long" in (
        refused.stderr)
    # A blank line: its empty translation is written without a search to trace.
    (tmp_path / "blank.en").write_text("\n", encoding="utf-8")
    full, stderr = open("/dev/full", "w", encoding="utf-8"), io.StringIO()  # a full disk
    with contextlib.redirect_stdout(full), contextlib.redirect_stderr(stderr):
        code = translate.main(["--model_dir", str(trained_model_dir), "--input",
                               str(tmp_path / "blank.en")])
    with contextlib.suppress(OSError):  # what the failed write left in its buffer
        full.close()
    assert code == 2 and stderr.getvalue().endswith(
        "kt-translate: error: cannot write --output <stdout>: No space left on device; nothing "
        "was written\n"), stderr.getvalue()
