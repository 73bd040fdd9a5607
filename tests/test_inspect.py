from conftest import run_main

from keras_transformer.data import inspect


def run_inspect(*args):
    return run_main(inspect.main, *args)


def test_inspect_prints_the_report(bible_vocab_path):
    result = run_inspect("--vocab", str(bible_vocab_path), "--split", "dev", "--batch_tokens",
                         "4096")
    assert result.returncode == 0, result.stderr
    assert "split dev: 492 pairs read" in result.stdout
    assert "padding efficiency (real tokens / padded slots): 0.9" in result.stdout


def test_inspect_names_bad_input(tmp_path, bible_vocab_path):
    missing = run_inspect("--vocab", str(tmp_path / "v.model"))
    assert missing.returncode == 2 and "v.model: no such vocabulary file" in missing.stderr
    no_split = run_inspect("--vocab", str(bible_vocab_path), "--split", "test")
    assert no_split.returncode == 2 and "has no split 'test'; it has train, dev" in no_split.stderr
    # The library's ValueError about its arguments, said of the flags that gave them.
    small = run_inspect("--vocab", str(bible_vocab_path), "--batch_tokens", "100")
    assert small.returncode == 2 and ("--batch_tokens 100 with --max_pair_length 256: an update "
                                      "of 100 padded tokens") in small.stderr, small.stderr
