"""What n-best lists and ensembles cost and give, on a trained model_dir's dev split.

- n-best: the dev split translated by the same `Translator` for the best hypothesis alone
  (`translate_lines`, kt-translate's default) and for the best 4 (`n_best_lines`, kt-translate
  --n_best 4), alternately, `--repeats` times each; medians of the wall times, and the ratio.
- ensemble (with `--ensemble A,B`, two or more checkpoint directories): dev BLEU of each member
  and of their ensemble (probabilities averaged each step), with the time each took.

    python -m bench.translation_tools --model_dir runs/q55 --repeats 3 \\
        --ensemble runs/q55/checkpoints/ckpt-6000,runs/q55/checkpoints/ckpt-6507
"""

import argparse
import statistics
import time

import sacrebleu

from bench.common import append_results, markdown_table
from bench.train_step import matmul_peak
from keras_transformer import model_dir
from keras_transformer.export import DecodingConfig, Translator
from keras_transformer.export.lines import n_best_lines, translate_lines


def dev_pairs(loaded, sentences=None):
    source = loaded.run.data.open()
    pairs = source.pairs("dev")
    pairs = list((pairs.take(sentences) if sentences else pairs).as_numpy_iterator())
    return [en for en, _ in pairs], [es.decode("utf-8") for _, es in pairs]


def translator_of(loaded, alpha):
    """The Translator of `loaded` (a `model_dir.Loaded`, or a list: an ensemble) decoding as
    kt-translate does, at `alpha` (None: the model's own)."""
    return Translator.from_loaded(loaded, DecodingConfig(alpha=alpha))


def timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def n_best_cost(args, loaded, sources, references):
    translator = translator_of(loaded, args.alpha)
    n = translator.decoding.beam_size  # the whole beam
    translate_lines(translator, sources[:args.batch_size], args.batch_size)  # trace both
    n_best_lines(translator, sources[:args.batch_size], n, args.batch_size)
    one, whole = [], []  # seconds: the best hypothesis, the n best
    for _ in range(args.repeats):
        (best, _), seconds = timed(lambda: translate_lines(translator, sources, args.batch_size))
        one.append(seconds)
        lists, seconds = timed(lambda: n_best_lines(translator, sources, n, args.batch_size))
        whole.append(seconds)
        assert [hypotheses[0].text for hypotheses in lists] == best
    bleu = sacrebleu.corpus_bleu(best, [references]).score
    rows = [["best hypothesis (kt-translate)", f"{statistics.median(one):.1f}", "1.00",
             f"{bleu:.2f}"],
            [f"best {n} (kt-translate --n_best {n})", f"{statistics.median(whole):.1f}",
             f"{statistics.median(whole) / statistics.median(one):.3f}", f"{bleu:.2f}"]]
    table = markdown_table(["output", "seconds (median)", "ratio", "dev BLEU"], rows)
    append_results(
        f"n-best lists against the best hypothesis, {loaded.run.data.corpus}",
        f"{args.model_dir} ({loaded.checkpoint.name}), {len(sources)} dev "
        f"sentences, beam {translator.decoding.beam_size}, alpha {translator.decoding.alpha}, "
        f"batches of "
        f"{args.batch_size}; the two "
        f"alternately, {args.repeats} times each (every time: 1-best, then {n}-best, whose first "
        f"hypotheses were checked equal to the 1-best). Times: "
        f"{[round(t, 1) for t in one]} and {[round(t, 1) for t in whole]} s. Matmul peak "
        f"measured after the runs: float32 {matmul_peak('float32') / 1e9:.0f} GFLOP/s."
        f"\n\n{table}")


def ensemble_gain(args, loaded, sources, references):
    members = [model_dir.load(args.model_dir, checkpoint)
               for checkpoint in args.ensemble.split(",")]
    rows = []
    for name, models in [*((m.checkpoint.name, m) for m in members),
                         (" + ".join(m.checkpoint.name for m in members), members)]:
        translator = translator_of(models, args.alpha)
        (translations, _), seconds = timed(
            lambda: translate_lines(translator, sources, args.batch_size))
        bleu = sacrebleu.corpus_bleu(translations, [references])
        rows.append([name, f"{bleu.score:.2f}", f"{bleu.sys_len / bleu.ref_len:.3f}",
                     f"{seconds:.0f}"])
    table = markdown_table(["model", "dev BLEU", "length ratio", "seconds"], rows)
    append_results(
        f"An ensemble of checkpoints, {loaded.run.data.corpus}",
        f"{args.model_dir}, {len(sources)} dev sentences, beam {translator.decoding.beam_size}, "
        f"alpha {translator.decoding.alpha}; the ensemble averages its members' probabilities "
        f"each step. One run "
        f"each (seconds include tracing).\n\n{table}")


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.translation_tools",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--alpha", type=float, help="default: the model's own")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, help="the first N dev pairs (default: all)")
    parser.add_argument("--ensemble", help="comma-separated checkpoint directories")
    parser.add_argument("--skip_n_best", action="store_true")
    args = parser.parse_args()
    loaded = model_dir.load(args.model_dir)
    sources, references = dev_pairs(loaded, args.sentences)
    if not args.skip_n_best:
        n_best_cost(args, loaded, sources, references)
    if args.ensemble:
        ensemble_gain(args, loaded, sources, references)


if __name__ == "__main__":
    main()
