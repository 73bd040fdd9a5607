"""Markup kept and placed: two models trained alike but for `kt-train --markup_rate`, on plain
text, on generated tagged inputs under every search, and on hand-tagged dev pairs.

    python -m bench.markup_quality --steps 2000 --work_dir runs/markup

Both runs are bench/quality.py's "ours" (transformer_small, mixed_bfloat16, 4,096 tokens a batch,
seed 1) on bible_en_es without its four held-out books (bench/heldout.py), with one 8,000-id
vocabulary that keeps markup's tokens whole (`kt-vocab --markup`): "plain" trains on the pairs
as they are, "markup" with a share `--rate` of them rewritten (data/markup_pairs.py). Measured,
one run each:

- plain text: dev and held-out ("test") BLEU and chrF, beam 4 at the hparams set's alpha;
- `--inputs` generated tagged inputs (held-out sentences with tags around word spans, nested
  pairs, self-closing tags, placeholders, numbers, URLs, e-mail addresses), translated with
  `--markup` under beam 4, greedy decoding and sampling, in one pass and in kt-translate's two
  (export/markup_lines.py): the share whose masked output holds
  every item exactly once, tags well nested (`data.markup.problems`); and, for the inputs that
  hold tags only, BLEU against the references of the outputs with their tags taken out, beside
  BLEU of the same sentences translated without tags (beam 4);
- bench/data/markup_dev.tsv (40 dev pairs tagged by hand, one tag pair each around a phrase and
  its translation): how often the output's tag pair wraps exactly the words the reference's
  wraps (case and punctuation aside), and the word F1 of the wrapped spans.

Training is skipped for a run whose model_dir already reached `--steps`. The 2048^3 matmul
peak before and after is printed beside the times.
"""

import argparse
import pathlib
import random
import re
import string
import sys
import time

import sacrebleu

from bench import quality
from bench.common import append_results, markdown_table, peaks_sentence
from bench.train_step import matmul_peak
from keras_transformer import model_dir
from keras_transformer.data import markup
from keras_transformer.export import DecodingConfig, Translator
from keras_transformer.export.lines import Sampling, n_best_lines
from keras_transformer.export.markup_lines import markup_n_best_lines

HAND_TAGGED = pathlib.Path(__file__).parent / "data" / "markup_dev.tsv"
TAGS = [("<b>", "</b>"), ("<i>", "</i>"), ('<a href="https://example.com/p?id=3">', "</a>"),
        ('<span class="x">', "</span>"), ("<em>", "</em>")]
OTHER_ITEMS = ["{0}", "{name}", "%s", "{{user}}", "42", "3.5", "2026-12-01",
               "https://example.org/help", "help@example.org"]
SEARCHES = {"beam 4": dict(beam_size=4), "greedy": dict(beam_size=1),
            "sampling T=1": dict(beam_size=1, sampling=Sampling(1.0, 0, 7))}


def tag_spans(length, chooser):
    """1-3 (start, end) word spans (end inclusive) of a sentence of `length` words, none
    crossing another (nested or apart), none twice."""
    spans = []
    for _ in range(chooser.randint(1, 3)):
        start = chooser.randrange(length)
        span = (start, min(length, start + chooser.randint(1, 4)) - 1)
        if span not in spans and not any(a < span[0] <= b < span[1] or span[0] < a <= span[1] < b
                                         for a, b in spans):
            spans.append(span)
    return spans


def tagged_input(sentence, chooser, tags_only):
    """`sentence` with tag pairs around word spans (`tag_spans`), sometimes a self-closing tag,
    and (unless `tags_only`) a placeholder, number, URL or e-mail address after a word or two."""
    words = sentence.split()
    opening, closing = [""] * len(words), [""] * len(words)
    # Outer pairs open first and close last: longer spans first at a start, last at an end.
    spans = sorted(tag_spans(len(words), chooser), key=lambda span: span[0] - span[1])
    tags = {span: chooser.choice(TAGS) for span in spans}
    for start, end in spans:
        opening[start] += tags[start, end][0]
    for start, end in reversed(spans):
        closing[end] += tags[start, end][1]
    if chooser.random() < 0.3:
        opening[chooser.randrange(len(words))] += "<br/>"
    if not tags_only:
        for _ in range(chooser.randint(1, 2)):
            where = chooser.randrange(len(words))
            words[where] += " " + chooser.choice(OTHER_ITEMS)
    return " ".join(o + w + c for o, w, c in zip(opening, words, closing))


def generated_inputs(pairs, count, seed=5):
    """`count` tagged inputs from (sentence, reference) `pairs`: (input, sentence, reference,
    tags_only), the first half holding tags only."""
    chooser, inputs = random.Random(seed), []
    while len(inputs) < count:
        sentence, reference = chooser.choice(pairs)
        if len(sentence.split()) >= 3:
            tags_only = len(inputs) < count // 2
            inputs.append((tagged_input(sentence, chooser, tags_only), sentence, reference,
                           tags_only))
    return inputs


def translations(loaded, lines, search, masked=None, passes=2):
    """Best hypotheses of `lines` under a SEARCHES entry; of masked lines (`markup.Masked`, the
    masked texts returned) in `passes`: 2, kt-translate's (`markup_n_best_lines`: the tags
    placed in the untagged line's translation), or 1 (every item where the search puts it)."""
    settings = dict(SEARCHES[search])
    sampling = settings.pop("sampling", None)
    translator = Translator.from_loaded(loaded, DecodingConfig(**settings))  # kt-translate's
    # other settings
    if masked is not None and passes == 2:
        best = markup_n_best_lines(translator, masked, 1, 32, sampling=sampling)
    else:
        best = n_best_lines(translator, lines, 1, 32, sampling=sampling,
                            markup_items=masked and [line.items for line in masked])
    return [hypotheses[0].text for hypotheses in best]


def untagged(text):
    """`text` without its tags, spaces collapsed."""
    return " ".join(re.sub(r"</?[A-Za-z][^<>]*>", " ", text).split())


def kept_markup(loaded, inputs, search, passes):
    """(share of outputs holding every item once, well nested; the outputs, unmasked)."""
    masked = [markup.mask(text) for text, *_ in inputs]
    outputs = translations(loaded, [m.text for m in masked], search, masked, passes)
    kept = [not markup.problems(output, m.items) for output, m in zip(outputs, masked)]
    return sum(kept) / len(kept), [markup.unmask(output, m.items) if ok else output
                                   for output, m, ok in zip(outputs, masked, kept)]


def wrapped_words(text):
    """The words inside the first tag pair of `text`, lower-cased, punctuation dropped."""
    match = re.search(r"<([A-Za-z]+)[^<>]*>(.*?)</\1>", text)
    inside = untagged(match.group(2)) if match else ""
    return [word.strip(string.punctuation + "“”‘’¿¡«»").lower() for word in inside.split()
            if word.strip(string.punctuation + "“”‘’¿¡«»")]


def placement(loaded, passes):
    """(exact-span share, mean word F1) of the tag pairs on HAND_TAGGED's pairs, beam 4."""
    pairs = [line.split("\t") for line in HAND_TAGGED.read_text(encoding="utf-8").splitlines()]
    masked = [markup.mask(source) for source, _ in pairs]
    outputs = translations(loaded, [m.text for m in masked], "beam 4", masked, passes)
    exact, f1s = 0, []
    for output, m, (_, reference) in zip(outputs, masked, pairs):
        got, wanted = wrapped_words(markup.unmask(output, m.items)), wrapped_words(reference)
        exact += got == wanted
        common = sum(min(got.count(w), wanted.count(w)) for w in set(got))
        f1s.append(2 * common / (len(got) + len(wanted)) if got or wanted else 1.0)
    return exact / len(pairs), sum(f1s) / len(f1s)


def train(work, corpus, vocab, args, name, flags, log):
    """The run's model_dir, trained to args.steps unless it is already; (model_dir, minutes or
    None when it was not trained here)."""
    directory = work / name
    if (directory / "checkpoints" / f"ckpt-{args.steps}").exists():
        return directory, None
    _, _, seconds, _ = quality.train_ours(directory, vocab, corpus, args, flags, log)
    return directory, seconds / 60


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.markup_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=0.3, help="--markup_rate of the markup run")
    parser.add_argument("--inputs", type=int, default=200, help="generated tagged inputs")
    parser.add_argument("--work_dir", required=True)
    args = parser.parse_args(argv)
    # bench/quality.py's "ours", scored at the hparams set's alpha.
    args.__dict__.update(data="bible_en_es", heldout=True, hparams="transformer_small",
                         mixed_precision="mixed_bfloat16", batch_tokens=4096, vocab_size=8000,
                         beam_size=4, alphas=[None], seed=1, minutes=None)
    return args


def measure(loaded, inputs, passes):
    """One model's cells: the share kept under each search; for the tags-only inputs, BLEU of
    their outputs without tags and of their sentences translated untagged (beam 4)."""
    cells, tagged_outputs = [], None
    for search in SEARCHES:
        share, outputs = kept_markup(loaded, inputs, search, passes)
        cells.append(f"{100 * share:.1f}%")
        tagged_outputs = tagged_outputs or outputs
    only = [i for i, (*_, tags_only) in enumerate(inputs) if tags_only]
    references = [[inputs[i][2] for i in only]]
    plain = translations(loaded, [inputs[i][1] for i in only], "beam 4")
    for hypotheses in ([untagged(tagged_outputs[i]) for i in only], plain):
        cells.append(f"{sacrebleu.BLEU().corpus_score(hypotheses, references).score:.2f}")
    return cells


def main(argv=None):
    args = parse_args(argv)
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    peaks = [matmul_peak("float32") / 1e9]
    with open(work / "log.txt", "a", encoding="utf-8") as log:
        corpus = quality.corpus_for(args, work)
        vocab = work / "vocab.markup.model"
        if not vocab.exists():
            quality.run([sys.executable, "-m", "keras_transformer.data.build_vocab", *corpus.flags,
                         "--vocab_size", str(args.vocab_size), "--markup", "--output",
                         str(vocab)], log)
        runs = {name: train(work, corpus, vocab, args, name, flags, log) for name, flags in (
            ("plain", []), ("markup", ["--markup_rate", str(args.rate)]))}
        inputs = generated_inputs([(source.decode(), target.decode()) for source, target in
                                   corpus.source.pairs("test").as_numpy_iterator()], args.inputs)
        rows = []
        for name, (directory, minutes) in runs.items():
            scores, _ = quality.score_ours(directory, corpus, args, log)
            loaded = model_dir.load(directory)
            for passes in (1, 2):
                start = time.monotonic()
                kept = measure(loaded, inputs, passes)
                exact, f1 = placement(loaded, passes)
                rows.append([name, "-" if minutes is None else f"{minutes:.1f}",
                             *(f"{scores[split][metric]:.2f}" for split in ("dev", "test")
                               for metric in ("BLEU", "chrF")), PASSES[passes],
                             *kept, f"{100 * exact:.0f}%", f"{f1:.2f}",
                             f"{(time.monotonic() - start) / 60:.1f}"])
                print(markdown_table(COLUMNS, rows[-1:]), flush=True)
    peaks.append(matmul_peak("float32") / 1e9)
    table = (f"Two runs of bench/quality.py's ours, {args.steps} steps each, one vocabulary "
             f"keeping markup's tokens whole; markup: --markup_rate {args.rate}. "
             f"{args.inputs} generated tagged inputs from the held-out books (half tags only); "
             f"placement on bench/data/markup_dev.tsv ({HAND_TAGGED.read_text().count(chr(10))} "
             f"hand-tagged dev pairs), beam 4. {peaks_sentence(peaks)}\n\n" +
             markdown_table(COLUMNS, rows))
    print(table)
    append_results(f"Markup kept and placed, bible_en_es, {args.steps} steps", table)


PASSES = {1: "1 pass: items where the search puts them",
          2: "2 passes (kt-translate): tags placed in the untagged line's translation"}
COLUMNS = ["run", "training minutes", "dev BLEU", "dev chrF", "test BLEU", "test chrF",
           "markup search",
           *(f"items kept, {search}" for search in SEARCHES),
           "tags-only inputs: BLEU of the outputs without tags", "... of the sentences untagged",
           "tag on the reference's words",
           "wrapped-words F1", "measuring minutes"]

if __name__ == "__main__":
    sys.exit(main())
