"""Translation quality per CPU budget: kt-train for a fixed budget, then beam search on the whole
dev set; the keras.io recipe (bench/keras_io_recipe.py) on the same data and budget, side by side.

    python -m bench.quality --minutes 55                  # the issue's budget, both systems
    python -m bench.quality --steps 800 \\
        --variants "ours;warmup 1000=--hparams_override warmup_steps=1000"

A budget is wall-clock minutes (`--minutes`, what a user spends) or optimizer steps (`--steps`,
the same amount of training for every variant whose batching is unchanged, whatever the machine's
load: the way to compare variants). Each variant is `name=kt-train flags` ("ours" alone: the
defaults below); the name "keras.io recipe" is the peer. Prints and records, per variant:
steps, target tokens trained, dev BLEU and chrF (sacrebleu), the length ratio (hypothesis /
reference tokens, sacrebleu's) and the n-gram precisions, each from one run.

On bible_en_es every system trains without four books of the train split and is also scored on
them (bench/heldout.py: "test", 468 verses never seen, dev never used to choose anything there);
on tatoeba_en_es likewise without 2,766 pairs in groups that share no sentence with the rest.
`--no-heldout` trains on the whole bundled train split and scores dev alone. `--alphas 0.6,1,1.4`
decodes dev at each length penalty and reports every split at the one with the best dev BLEU
(chosen on dev, reported on the held-out lines). The matmul peak of the hour is measured before
and after the runs and printed beside the tokens a second.
"""

import argparse
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import time
import typing

import sacrebleu

from bench import heldout
from bench.common import append_results, markdown_table

PEER = "keras.io recipe"
LOG_EVERY = 50


def parse_variants(text):
    """"a;b=--flag x" -> [("a", []), ("b", ["--flag", "x"])]."""
    variants = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, flags = item.partition("=")
        variants.append((name.strip(), shlex.split(flags)))
    return variants


def run(command, log):
    """Runs a command, echoing its output; returns the output, raising if it fails."""
    print("$ " + shlex.join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True)
    log.write(result.stdout + result.stderr)
    if result.returncode:
        sys.exit(f"failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-4000:]}")
    return result.stdout + result.stderr


def train_ours(model_dir, vocab, corpus, args, flags, log):
    """kt-train for the budget; returns (steps, target tokens, seconds, schedule): schedule
    says the precision it trained in and where its rate peaked and cooled down."""
    budget = (["--max_minutes", str(args.minutes)] if args.minutes else
              ["--train_steps", str(args.steps)])
    start = time.monotonic()
    output = run([sys.executable, "-m", "keras_transformer.trainer", "--model_dir",
                  str(model_dir), *corpus.flags, "--hparams", args.hparams,
                  "--mixed_precision", args.mixed_precision, "--batch_tokens",
                  str(args.batch_tokens), "--vocab", str(vocab), "--seed", str(args.seed),
                  "--eval_every", str(10**9), "--eval_sentences", "0",
                  "--log_every", str(LOG_EVERY),
                  *budget, *flags], log)
    steps = int(re.search(r"done: step (\d+)", output).group(1))
    # Each progress line counts the real target tokens of its LOG_EVERY steps.
    logged = [float(t) for t in re.findall(r"target_tokens ([0-9.e+]+),", output)]
    tokens = sum(logged) / (LOG_EVERY * len(logged)) * steps if logged else float("nan")
    return steps, tokens, time.monotonic() - start, schedule_of(output)


def schedule_of(output):
    """"<precision>; peak at P, cooldown from C" from kt-train's start and plan lines ("-" for
    what it did not say: a rate that peaked as eq. 3 does, with no time limit)."""
    from bench.first_run import found, peak_of

    return (f"{found(r'replica[(]s[)] on .*?, (float32|mixed_bfloat16|mixed_float16)[ ,]', output)}"
            f"; peak at {peak_of(output)}, cooldown from "
            f"{found(r'the learning rate falls to zero from step ([0-9]+)', output)}")


def translate_ours(model_dir, corpus, split, alpha, args, log):
    """kt-translate of a split at `alpha` (None: the hparams set's); returns the lines."""
    output = pathlib.Path(model_dir) / f"{split}.alpha-{alpha}.hyp"
    alpha_flags = [] if alpha is None else ["--alpha", str(alpha)]
    run([sys.executable, "-m", "keras_transformer.export.translate", "--model_dir",
         str(model_dir), *corpus.flags, "--split", split, "--beam_size",
         str(args.beam_size), *alpha_flags, "--output", str(output), "--overwrite"], log)
    return output.read_text(encoding="utf-8").splitlines()


def score_ours(model_dir, corpus, args, log):
    """Scores of every split of `corpus`, at the alpha of `args.alphas` with the best dev BLEU
    (the other splits are decoded at that alpha only); returns ({split: scores}, alpha)."""
    on_dev = {alpha: scores(translate_ours(model_dir, corpus, "dev", alpha, args, log),
                            _references(corpus.source, "dev")) for alpha in args.alphas}
    alpha = max(on_dev, key=lambda a: on_dev[a]["BLEU"])
    results = {"dev": on_dev[alpha]}
    for split in corpus.splits[1:]:
        results[split] = scores(translate_ours(model_dir, corpus, split, alpha, args, log),
                                _references(corpus.source, split))
    return results, alpha


class Corpus(typing.NamedTuple):
    """What every system trains on: the command-line flags that name it, the source object, and
    the splits scored."""
    flags: list
    source: object
    splits: tuple


def corpus_for(args, work):
    from keras_transformer import data

    if args.heldout and args.data in heldout.CORPORA:
        directory = str(heldout.write_corpus(work / "corpus", args.data))
        return Corpus(["--data", directory, "--source_lang", "en", "--target_lang", "es"],
                      data.get_source(directory, "en", "es"), ("dev", "test"))
    return Corpus(["--data", args.data], data.get_source(args.data), ("dev",))


def scores(translations, references):
    """BLEU, chrF, length ratio, brevity penalty and n-gram precisions (sacrebleu)."""
    bleu = sacrebleu.BLEU().corpus_score(translations, [references])
    chrf = sacrebleu.CHRF().corpus_score(translations, [references])
    return {"BLEU": bleu.score, "chrF": chrf.score, "ratio": bleu.sys_len / bleu.ref_len,
            "BP": bleu.bp, "precisions": "/".join(f"{p:.1f}" for p in bleu.precisions)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split(
        "\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--minutes", type=float, help="training time of each variant")
    budget.add_argument("--steps", type=int, help="optimizer steps of each variant")
    parser.add_argument("--variants", default=f"ours;{PEER}",
                        help='";"-separated "name=kt-train flags" (default "%(default)s")')
    parser.add_argument("--data", default="bible_en_es")
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--mixed_precision", default="mixed_bfloat16")
    parser.add_argument("--batch_tokens", type=int, default=4096,
                        help="ours: padded tokens a batch each side (the peer: 4,000 padded "
                             "target tokens)")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--beam_size", type=int, default=4)
    alpha = parser.add_mutually_exclusive_group()
    alpha.add_argument("--alpha", type=float,
                       help="ours (default: the hparams set's decode_alpha); the peer has none")
    alpha.add_argument("--alphas", type=lambda text: [float(a) for a in text.split(",")],
                       help="ours: decode dev at each of these comma-separated alphas and "
                            "report every split at the one with the best dev BLEU (default: "
                            "--alpha alone)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--heldout", action=argparse.BooleanOptionalAction, default=True,
                        help=f"on {' and '.join(heldout.CORPORA)}: train without "
                             "bench/heldout.py's held-out lines and score them as a test split "
                             "(default: %(default)s)")
    parser.add_argument("--work_dir", help="keep the runs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    args.alphas = args.alphas or [args.alpha]
    return args


def main(argv=None):
    args = parse_args(argv)
    variants = parse_variants(args.variants)
    with tempfile.TemporaryDirectory() as scratch:
        work = pathlib.Path(args.work_dir or scratch)
        work.mkdir(parents=True, exist_ok=True)
        log = open(work / "log.txt", "a", encoding="utf-8")
        corpus = corpus_for(args, work)
        # Named for what it was built on: a work_dir may hold runs with and without the
        # held-out books, and a vocabulary that saw them must not serve a run scored on them.
        vocab = work / f"vocab.{'heldout' if 'test' in corpus.splits else 'all'}.model"
        if not vocab.exists() and any(name != PEER for name, _ in variants):
            run([sys.executable, "-m", "keras_transformer.data.build_vocab", *corpus.flags,
                 "--vocab_size", str(args.vocab_size), "--output", str(vocab)], log)
        rows, peaks = [], [matmul_peaks()]
        for number, (name, flags) in enumerate(variants):
            if name == PEER:
                row = run_peer(args, corpus)
            else:
                model_dir = work / f"{number}-{re.sub(r'[^a-z0-9]+', '-', name.lower())}"
                steps, tokens, seconds, schedule = train_ours(model_dir, vocab, corpus, args,
                                                              flags, log)
                results, alpha = score_ours(model_dir, corpus, args, log)
                row = dict(steps=steps, tokens=tokens, seconds=seconds, alpha=alpha,
                           schedule=schedule, **results)
            rows.append([name, " ".join(flags) or "-", row["steps"], f"{row['tokens']:,.0f}",
                         f"{row['seconds'] / 60:.1f}", f"{row['tokens'] / row['seconds']:,.0f}",
                         alpha_cell(row), row.get("schedule", "-"),
                         *score_cells(row, corpus.splits)])
            print(markdown_table(columns(corpus.splits), rows[-1:]), flush=True)
        log.close()
        peaks.append(matmul_peaks())
    budget = f"{args.minutes:g} minutes" if args.minutes else f"{args.steps} steps"
    held_out = "books" if args.data == heldout.CORPUS else "sentence groups"
    where = "whole dev split"
    if "test" in corpus.splits:
        where += f" and the held-out {held_out} (test: bench/heldout.py, not trained on)"
    table = (f"{args.data}, {where}; budget {budget} of training each; ours: "
             f"{args.hparams}, {args.mixed_precision}, --batch_tokens {args.batch_tokens}, a "
             f"{args.vocab_size}-id shared BPE, beam {args.beam_size}, alpha "
             f"{alphas(args)}; the "
             f"keras.io recipe at the same size (bench/keras_io_recipe.py), beam "
             f"{args.beam_size}, no length penalty. One run each; minutes: the training's wall "
             f"time (ours: the kt-train command, start-up and checkpoints included); tokens/s: "
             f"target tokens trained a second of those minutes (so ours pays its start-up). "
             f"Matmul peaks (2048^3) before and after the runs: float32 {peaks[0][0]:.0f} and "
             f"{peaks[1][0]:.0f}, bfloat16 {peaks[0][1]:.0f} and {peaks[1][1]:.0f} GFLOP/s."
             f"\n\n"
             + markdown_table(columns(corpus.splits), rows))
    print(table)
    append_results(f"Translation quality on {args.data}, {budget}", table)


def alphas(args):
    if len(args.alphas) > 1:
        return f"the best dev BLEU of {', '.join(f'{a:g}' for a in args.alphas)} (column alpha)"
    return f"{args.alphas[0]:g}" if args.alphas[0] is not None else "of the hparams set"


def alpha_cell(row):
    """The alpha a row was decoded at: "-" for the peer (no length penalty)."""
    if "alpha" not in row:
        return "-"
    return "set's" if row["alpha"] is None else f"{row['alpha']:g}"


def matmul_peaks():
    """(float32, bfloat16) 2048^3 matmul peaks, GFLOP/s."""
    from bench.train_step import matmul_peak

    return tuple(matmul_peak(dtype) / 1e9 for dtype in ("float32", "bfloat16"))


def columns(splits):
    per_split = [f"{split} {what}" for split in splits for what in ("BLEU", "chrF", "length ratio")]
    return ["variant", "kt-train flags", "steps", "target tokens", "minutes", "tokens/s", "alpha",
            "precision; learning rate", *per_split, f"{splits[0]} precisions 1/2/3/4"]


def score_cells(row, splits):
    cells = [cell for split in splits for cell in (
        f"{row[split]['BLEU']:.2f}", f"{row[split]['chrF']:.1f}", f"{row[split]['ratio']:.3f}")]
    return [*cells, row[splits[0]]["precisions"]]


def _references(source, split):
    return [target.decode() for _, target in source.pairs(split).as_numpy_iterator()]


def run_peer(args, corpus):
    import keras

    import keras_transformer as kt
    from bench import keras_io_recipe

    keras.mixed_precision.set_global_policy(args.mixed_precision)
    outputs, steps, tokens, seconds = keras_io_recipe.train_and_translate(
        corpus.source, kt.hparams.get(args.hparams), args.vocab_size, minutes=args.minutes,
        steps=args.steps, beam_size=args.beam_size, seed=args.seed, splits=corpus.splits)
    return dict(steps=steps, tokens=tokens, seconds=seconds,
                **{split: scores(*outputs[split]) for split in corpus.splits})


if __name__ == "__main__":
    main()
