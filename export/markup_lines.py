"""Lines with markup (kt-translate --markup): masking each line, translating it with its tags
placed in a second pass, and putting the items back (`data.markup`,
`keras_transformer.markup_constraint`)."""

import sys

import numpy as np

from keras_transformer.data import markup
from keras_transformer.export.lines import InputError, n_best_lines
from keras_transformer.token_ids import EOS_ID


def markup_n_best_lines(translator, masked, n_best, batch_size, progress_every=None,
                        sampling=None, *, first_line=1):
    """`n_best_lines` of masked lines (`markup.Masked`), every hypothesis holding each of its
    line's items once, tags well nested, in two passes: the line without its tags is
    translated (`markup.without_tags`; its other items held to by `MarkupConstraint`), then,
    for a line with tags, its tags are placed in that translation's best hypothesis, whose
    text stays as it is (`Translator.place_markup_ids`, beam search). So tags change where
    they go, never what the translation says: BLEU of the text is the untagged line's.
    A tagged line's n best are placements of one text; with `sampling`, that text is the
    first sample. `first_line` as for `n_best_lines`.
    """
    untagged = [markup.without_tags(line) for line in masked]
    first = n_best_lines(translator, [line.text for line in untagged], n_best, batch_size,
                         progress_every, sampling=sampling,
                         markup_items=[line.items for line in untagged], first_line=first_line)
    tagged = [row for row, (line, plain) in enumerate(zip(masked, untagged))
              if len(line.items) != len(plain.items) and first[row]]
    if not tagged:
        return first
    texts = []
    for row in tagged:
        ids = first[row][0].ids
        texts.append(ids if len(ids) and ids[-1] == EOS_ID else np.append(ids, EOS_ID))
    placed = n_best_lines(translator, [masked[row].text for row in tagged], n_best, batch_size,
                          progress_every, markup_items=[masked[row].items for row in tagged],
                          kept_text=texts)
    for row, hypotheses in zip(tagged, placed):
        first[row] = hypotheses
    return first


def masked_lines(lines, name, prog="kt-translate"):
    """`markup.mask` of each line (bytes) of the input `name`: a list of `markup.Masked`; a
    warning on stderr names each line with unbalanced tags (`markup.unbalanced`).

    Raises:
        InputError: a line with more items than markup.MAX_ITEMS, or one that holds a
            placeholder token already, naming the line.
    """
    masked = []
    for number, line in enumerate(lines, 1):
        try:
            masked.append(markup.mask(line.decode("utf-8", errors="replace")))
        except markup.MarkupError as error:
            raise InputError(f"{name}:{number}: {error}") from None
        lone = markup.unbalanced(masked[-1])
        if lone:
            print(f"{prog}: warning: {name}:{number}: unbalanced tags {', '.join(lone)}: each "
                  f"is kept once, as a lone tag, where the model puts it", file=sys.stderr)
    return masked


def unmasked(hypotheses, masked):
    """Each line's hypotheses with their items put back (`markup.unmask`)."""
    return [[h._replace(text=markup.unmask(h.text, line.items)) for h in best]
            for best, line in zip(hypotheses, masked)]
