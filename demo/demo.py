"""kt-demo: train, evaluate, translate, export, reload and look at attention, in one command.

    kt-demo                                  # transformer_small, tatoeba_en_es, 10 minutes
    kt-demo --data bible_en_es               # the other bundled corpus
    kt-demo --minutes 60                     # run again to train on: it resumes
    kt-demo --hparams transformer_base --data wmt14_translate/de-en --download --minutes 600

Trains with kt-train (any kt-train flag is passed on; the defaults suit 2 CPU cores, and a new
run of up to 15 minutes trains without dropout, the runs that resume it with the preset's), then
with the trained model (the newest checkpoint, or the final average of --average_last): dev BLEU
with beam search (sacrebleu), a few translations, a SavedModel export (kt-export), that
SavedModel reloaded with tf.saved_model.load translating the same sentences, and one sentence's
attention drawn to a PNG (kt-attention). Everything goes under --model_dir, and the last lines
say where.
"""

import argparse
import pathlib
import sys
import time

import sacrebleu
import tensorflow as tf

from keras_transformer import cli, data, hparams, model_dir
from keras_transformer.cli import at_least
from keras_transformer.errors import UserError
from keras_transformer.export import attention_figures as attention
from keras_transformer.export.lines import print_scores, translate_lines
from keras_transformer.export.saved_model import export, provenance
from keras_transformer.export.translator import Translator
from keras_transformer.model_dir import config, config_file, layout
from keras_transformer.trainer import callbacks, flags

# kt-train flags (by argparse dest) for a new run; a model_dir with a config keeps its own.
NEW_RUN_DEFAULTS = {"hparams_name": ("--hparams", "transformer_small"),
                    # Short modern sentences: 10 minutes translate most right; of Bible verses,
                    # few (bench/RESULTS.md, "kt-demo's 10 minutes on both corpora").
                    "data": ("--data", "tatoeba_en_es"),
                    # Twice the updates of 3,072 in the same 10 minutes: 26.83 dev BLEU
                    # against 21.28 on a Xeon without bfloat16 (bench/RESULTS.md, 2026-11-28).
                    "batch_tokens": ("--batch_tokens", "1536"),
                    # bfloat16 where it measures faster: 1.7x the steps on a Zen 5, 0.6x on a
                    # Xeon whose bfloat16 flags promise it (bench/RESULTS.md).
                    "mixed_precision": ("--mixed_precision", "auto"),
                    "eval_every": ("--eval_every", "300")}
# A short new run (at most SHORT_RUN_MINUTES) trains without dropout, the later runs of its
# model_dir with the preset's ("late dropout", Liu et al. 2023, "Dropout Reduces Underfitting",
# section 5): 10-15 minutes see tatoeba_en_es one to ~3.5 times, too few for dropout to pay
# (greedy dev BLEU at ~1,000 updates where bfloat16 is slow: 28.9 against 23.1; at 15 minutes
# where it is fast: 40.3 against 37.2; docs/training.md). A longer run keeps the preset's.
FIRST_RUN_OVERRIDE = "dropout=0"
SHORT_RUN_MINUTES = 15
EXAMPLES = 3
PHASES = 6


class DemoError(Exception):
    """Training failed: kt-train's message (naming its flags) and exit code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.message, self.code = message, code


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-demo", description=__doc__.split("\n\n")[0], allow_abbrev=False,
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", default="runs/demo",
                        help="where everything goes (default %(default)s)")
    parser.add_argument("--minutes", type=at_least(0, float), default=10.0,
                        help="training time this run, in minutes (default %(default)s; 0 skips "
                             "training and shows the newest checkpoint)")
    parser.add_argument("--bleu_sentences", type=at_least(EXAMPLES), default=100,
                        help="dev sentences, spread evenly over the dev split, translated "
                             "with beam search for BLEU (default %(default)s)")
    cli.add_verbose_flag(parser)
    args, train_flags = parser.parse_known_args(argv)
    return args, train_flags


def phase(number, text):
    print(f"\n[{number}/{PHASES}] {text}", flush=True)


def train_argv(args, train_flags):
    """kt-train's arguments: the demo's, the user's, and the new-run defaults they leave unset.

    kt-train's own parser reads the user's flags, so a typo or a bad value is refused by it,
    naming the flag.
    """
    argv = ["--model_dir", args.model_dir, "--max_minutes", str(args.minutes), *train_flags]
    given = vars(flags.parse_args(["--model_dir", args.model_dir, *train_flags]))
    if given["max_minutes"] is not None:
        raise config.ConfigError("kt-demo sets kt-train's --max_minutes: use --minutes")
    saved = config_file.load(args.model_dir)
    if saved is None:
        for dest, (flag, value) in NEW_RUN_DEFAULTS.items():
            if given[dest] is None:
                argv += [flag, value]
    return argv + dropout_override(saved, given["hparams_override"], args.minutes)


def dropout_override(saved, given_override, minutes):
    """The --hparams_override that sets this run's dropout: FIRST_RUN_OVERRIDE's for a new run
    (`saved` None) of at most SHORT_RUN_MINUTES, the preset's for a run resumed from one the
    demo started so (its only override FIRST_RUN_OVERRIDE); [] where the user gives
    --hparams_override (`given_override`: theirs is the run's), or for any other run."""
    if given_override is not None:
        return []
    if saved is None:
        return ["--hparams_override", FIRST_RUN_OVERRIDE] if minutes <= SHORT_RUN_MINUTES else []
    if saved.model.hparams_override == FIRST_RUN_OVERRIDE:
        return ["--hparams_override",
                f"dropout={hparams.get(saved.model.hparams_name).dropout:g}"]
    return []


def train(argv):
    """Trains with the Python API (`trainer.Trainer`) the run kt-train's arguments `argv`
    describe; errors name kt-train's flags."""
    parser = flags.argument_parser()
    try:
        flags.trainer_of(parser.parse_args(argv)).fit()
    except (*flags.ERRORS, OSError) as error:
        raise DemoError(flags.in_flags(str(error), flags.flag_names(parser)),
                        1 if isinstance(error, callbacks.TrainingError) else 2) from None


def dev_pairs(run, count):
    """`count` dev pairs spread evenly over the dev split (`data.spread_pairs`): the first few
    of tatoeba_en_es' would not show the model's work."""
    source = run.data.open()
    sources, references = data.spread_pairs(source, "dev", count)
    if not sources:
        raise data.CorpusError(f"{source!r} has no dev split to evaluate on")
    return sources, references


def examples_of(sources, references):
    """The shortest few dev pairs of at least 5 words: short enough to read (and to draw)."""
    pairs = sorted(zip(sources, references), key=lambda pair: len(pair[0].split()))
    return ([pair for pair in pairs if len(pair[0].split()) >= 5] or pairs)[:EXAMPLES]


def train_phase(args, train_flags):
    """Phase 1: train for --minutes (or not)."""
    if args.minutes:
        argv = train_argv(args, train_flags)
        phase(1, f"training for {args.minutes:g} minutes: kt-train {' '.join(argv)}")
        train(argv)
    elif train_flags:
        raise config.ConfigError(f"{' '.join(train_flags)}: kt-train flags need --minutes > 0")
    else:
        phase(1, "training skipped (--minutes 0)")


def bleu_phase(loaded, translator, count):
    """Phase 2: dev BLEU of `count` spread dev sentences; returns (BLEU, sources, references,
    hypotheses)."""
    phase(2, f"dev BLEU with beam search (beam {translator.decoding.beam_size}, alpha "
             f"{translator.decoding.alpha:g}) on "
             f"{loaded.checkpoint}")
    sources, references = dev_pairs(loaded.run, count)
    start = time.perf_counter()
    hypotheses, _ = translate_lines(translator, sources, batch_size=32, progress_every=10)
    bleu = sacrebleu.BLEU().corpus_score(hypotheses, [references]).score
    print(f"step {model_dir.step_in_name(loaded.checkpoint)}: dev BLEU {bleu:.2f} on "
          f"{len(sources)} sentences ({time.perf_counter() - start:.1f} s)")
    print_scores(hypotheses, references, sys.stdout)
    return bleu, sources, references, hypotheses


def export_phases(loaded, translator, directory, examples, translations):
    """Phases 4 and 5: the SavedModel, reloaded, translating the examples again; returns its
    path."""
    phase(4, "exporting a SavedModel for TF Serving (kt-export)")
    export_path = export(translator, directory / "export", provenance=provenance(loaded))
    print(f"exported {loaded.checkpoint} to {export_path}")
    phase(5, f"reloading {export_path} with tf.saved_model.load and translating again")
    serving = tf.saved_model.load(str(export_path)).signatures["serving_default"]
    reloaded = serving(inputs=tf.constant([source for source, _ in examples]))
    same = 0
    for (source, _), text in zip(examples, reloaded["translations"].numpy()):
        text = text.decode("utf-8")
        same += text == translations[source]
        print(f"  {source}\n  -> {text}")
    print(f"the SavedModel's translations equal the checkpoint's on {same} of {len(examples)}")
    return export_path


def attention_phase(loaded, translator, sentence, png):
    """Phase 6: one sentence's attention, drawn to `png` (kept if an earlier run drew it)."""
    phase(6, "attention of the shortest example (kt-attention)")
    maps = attention.attention_maps(translator, sentence)
    if png.exists():  # drawn by an earlier kt-demo at this step: the same picture, kept
        print(f"{png} exists; kept")
    else:
        attention.write_png(attention.figure(maps, loaded.model.num_layers, 1), png)
        print(f"drew layer {loaded.model.num_layers}, head 1 to {png}")


def demo(args, train_flags):
    directory = pathlib.Path(args.model_dir)
    train_phase(args, train_flags)
    loaded = model_dir.load(directory)
    step = model_dir.step_in_name(loaded.checkpoint)
    translator = Translator.from_loaded(loaded)  # decodes as kt-translate --model_dir does
    bleu, sources, references, hypotheses = bleu_phase(loaded, translator, args.bleu_sentences)

    phase(3, "translations of dev sentences")
    examples = examples_of(sources, references)
    translations = dict(zip(sources, hypotheses))
    for source, reference in examples:
        print(f"  source:      {source}\n  reference:   {reference}\n"
              f"  translation: {translations[source]}\n")
    export_path = export_phases(loaded, translator, directory, examples, translations)
    png = directory / f"attention_step_{step}.png"
    attention_phase(loaded, translator, examples[0][0], png)

    print(f"\ndone. Everything is in {directory}:\n"
          f"  checkpoints      {directory / layout.CHECKPOINT_DIR}  (newest: "
          f"{loaded.checkpoint.name})\n"
          f"  TensorBoard      tensorboard --logdir {directory / layout.LOG_DIR}\n"
          f"  SavedModel       {export_path}\n"
          f"  attention        {png}\n"
          f"  dev BLEU         {bleu:.2f} at step {step}\n"
          f"Next: kt-translate --model_dir {directory} < input.en, kt-attention --model_dir "
          f"{directory} --text \"...\" --output a.png, or kt-demo --model_dir {directory} to "
          f"train on.")
    return 0


def main(argv=None):
    args, train_flags = parse_args(argv)
    try:
        return demo(args, train_flags)
    except UserError as error:
        print(f"kt-demo: error: {error}", file=sys.stderr)
        return 2
    except DemoError as error:
        print(f"kt-demo: error: {error.message}", file=sys.stderr)
        return error.code


if __name__ == "__main__":
    sys.exit(main())
