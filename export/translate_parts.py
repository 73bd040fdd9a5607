"""kt-translate's lines path: the input translated CHUNK_LINES lines at a time, each part's
output written in input order as it is made, what an interruption leaves kept
(export/resume.py)."""

import json
import sys
import time

from keras_transformer.export import checks, resume
from keras_transformer.export.lines import Interrupted, Sampling, n_best_lines
from keras_transformer.export.markup_lines import markup_n_best_lines, unmasked


def one_line(text):
    """One translation a line, even if the model produced a line break (byte-fallback pieces)."""
    return " ".join(text.splitlines())


# Lines translated, then written, at a time: the output grows in input order as it is made,
# and an interrupted run keeps what it translated. Many, so that batches sorted by length stay
# as full as over the whole input.
CHUNK_LINES = 4096
PROGRESS_SECONDS = 10  # between progress lines on stderr


def format_n_best(hypotheses, form, first_line=1):
    """The text of n-best lists (a list of `Hypothesis` lists, one per input line, the first
    being line `first_line`) in `form`: "jsonl" or "moses" (see --n_best_format)."""
    if form == "moses":  # Moses numbers sentences from 0
        return "".join(f"{index} ||| {one_line(h.text)} ||| LogProb= {h.log_prob:.6f} ||| "
                       f"{h.score:.6f}\n" for index, best in enumerate(hypotheses, first_line - 1)
                       for h in best)
    return "".join(json.dumps({"line": number, "hypotheses": [
        {"text": h.text, "score": round(h.score, 6), "log_prob": round(h.log_prob, 6)}
        for h in best]}, ensure_ascii=False) + "\n"
        for number, best in enumerate(hypotheses, first_line))


def write_in_parts(args, translator, inputs, output, translations, progress):
    """Translates the input from line `progress.lines_done + 1` on, CHUNK_LINES lines at a
    time, writing each part's output to `output` (a `cli.PieceWriter`) and the runs of
    `progress` (an interrupted run's) in their places, appending the lines' translations to
    `translations` and keeping `progress` up to date; returns how many lines --min_confidence
    left untranslated.

    Args:
        inputs: (the lines, their `markup.Masked` or None, their target prefixes or None,
            the `data.glossary.Glossary` or None: each part's terms are looked for as it
            comes, so a large input with a large glossary writes as it goes too).

    Raises:
        KeyboardInterrupt: with `progress` holding what was translated, written or not.
    """
    lines, masked, prefixes, terms = inputs
    untranslated = 0
    while progress.lines_done < len(lines):
        first = progress.lines_done
        ready = progress.run_at(first + 1)
        if ready:
            output.write(ready.text)
            progress.lines_done += ready.lines
            progress.drop_runs_before(progress.lines_done + 1)
            continue
        part = slice(first, progress.next_run_start(
            first + 1, default=first + CHUNK_LINES + 1) - 1)
        part = slice(first, min(part.stop, first + CHUNK_LINES, len(lines)))
        parts = (lines[part], masked and masked[part], prefixes and prefixes[part])
        try:
            hypotheses = chunk_hypotheses(args, translator, *parts,
                                          part_terms(terms, lines, part), first + 1)
        except Interrupted as interrupt:
            keep_translated(args, translator, parts, interrupt.hypotheses, output, progress)
            raise
        text, done, left = chunk_output(args, translator, parts[0], parts[1], hypotheses,
                                        first + 1)
        output.write(text)
        translations += done
        untranslated += left
        progress.lines_done = part.stop
    return untranslated


def keep_translated(args, translator, parts, hypotheses, output, progress):
    """After an interruption in a part of the input starting at line `progress.lines_done +
    1` (`parts`: its lines, masked lines or None, prefixes or None): writes the output of
    its translated lines (`hypotheses`, None for those not reached) that come in order, and
    keeps the other translated ones' output in `progress.runs`."""
    lines, masked = parts[:2]
    if masked:
        hypotheses = unmasked(hypotheses, masked)
    first, runs, row = progress.lines_done, [], 0
    while row < len(hypotheses):
        if hypotheses[row] is None:
            row += 1
            continue
        end = next((end for end in range(row, len(hypotheses)) if hypotheses[end] is None),
                   len(hypotheses))
        text = chunk_output(args, translator, lines[row:end], masked and masked[row:end],
                            hypotheses[row:end], first + row + 1)[0]
        runs.append(resume.Run(first + row + 1, end - row, text))
        row = end
    if runs and runs[0].first == first + 1:
        in_order = runs.pop(0)
        output.write(in_order.text)
        progress.lines_done += in_order.lines
    progress.runs = sorted(runs + progress.runs, key=lambda run: run.first)


def part_terms(terms, lines, part):
    """The glossary `terms`' (None: no glossary) required target terms of each line of
    `lines[part]`, said on stderr when looking took longer than a progress line's interval."""
    if terms is None:
        return None
    start = time.perf_counter()
    found = terms.targets_of(lines[part])
    seconds = time.perf_counter() - start
    if seconds > PROGRESS_SECONDS:
        print(f"kt-translate: glossary terms of lines {part.start + 1}-"
              f"{min(part.stop, len(lines))} looked for in {seconds:.0f} s", file=sys.stderr,
              flush=True)
    return found


def chunk_hypotheses(args, translator, lines, masked, prefixes, terms, first_line):
    """Each of `lines`' hypotheses (a list, best first): one part of the input, whose first
    line is line `first_line`, with its part of the markup, prefixes or glossary terms."""
    sampling = args.sampling_temperature and Sampling(
        args.sampling_temperature, args.sampling_top_k, args.seed)
    if masked:
        return unmasked(markup_n_best_lines(
            translator, masked, args.n_best or 1, args.batch_size, progress_every=PROGRESS_SECONDS,
            sampling=sampling, first_line=first_line), masked)
    return n_best_lines(translator, lines, args.n_best or 1, args.batch_size,
                        progress_every=PROGRESS_SECONDS, prefixes=prefixes, sampling=sampling,
                        glossary_terms=terms, first_line=first_line)


def chunk_output(args, translator, lines, masked, hypotheses, first_line):
    """(the output text of one part of the input, as the flags ask; its lines' translations;
    how many of them --min_confidence left untranslated)."""
    translations = [one_line(best[0].text) for best in hypotheses]
    if args.checks or args.alignments or args.min_confidence is not None:
        checked = checks.check_lines(translator, [line.text for line in masked] if masked
                                     else lines, [best[0] for best in hypotheses],
                                     args.batch_size)
        text, untranslated = checks.checked_text(
            lines, translations, hypotheses, checked, as_json=args.checks,
            alignments=args.alignments, min_confidence=args.min_confidence,
            first_line=first_line)
        return text, translations, untranslated
    if args.n_best:
        return format_n_best(hypotheses, args.n_best_format, first_line), translations, 0
    return "".join(f"{best[0].score:.4f}\t{line}\n" if args.scores else f"{line}\n"
                   for line, best in zip(translations, hypotheses)), translations, 0
