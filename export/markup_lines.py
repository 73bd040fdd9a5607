"""Lines with markup (kt-translate --markup): masking each line, translating it with its tags
placed in a second pass (`export.markup_translator.markup_passes`, the SavedModel's algorithm),
and putting the items back (`data.markup`)."""

import sys

import numpy as np
import tensorflow as tf

from keras_transformer.data import markup
from keras_transformer.export.lines import (
    InputError,
    check_n_best,
    hypotheses_of,
    token_ids,
)
from keras_transformer.export.markup_translator import markup_passes


def markup_n_best_lines(translator, masked, n_best, batch_size, progress_every=None,
                        sampling=None, *, first_line=1):
    """Each of the masked lines (`markup.Masked`)' n best (as `n_best_lines` gives them, the
    texts masked), every hypothesis holding each of its line's items once, tags well nested:
    `markup_passes` of length-sorted batches, the first pass beam search or `sampling`. A
    tagged line's n best are placements of one text (at most the beam's, also when sampling
    draws more). `first_line` as for `n_best_lines`.
    """
    check_n_best(translator, n_best, sampling)
    untagged = [markup.without_tags(line) for line in masked]
    untagged_ids, tagged_ids = (
        token_ids(translator.tokenize, [line.text for line in lines], batch_size,
                  translator.decoding.max_input_length) for lines in (untagged, masked))
    marker_ids = translator.vocabulary.markup_ids()

    def search(rows, batch, number):
        def first_pass(source_ids, item_ids, opening):
            if sampling:
                return translator.sample_n_best_ids(source_ids, n_best, *sampling.drawing(
                    first_line - 1 + number), markup=(item_ids, opening))
            return translator.translate_n_best_ids_with_markup(source_ids, item_ids, opening)

        with_tags = tagged_ids[rows]
        return markup_passes(
            translator, first_pass, untagged_ids=tf.constant(batch),
            untagged_items=markup.constraint_inputs([untagged[row].items for row in rows],
                                                    marker_ids),
            source_ids=tf.constant(
                with_tags[:, :max(1, np.count_nonzero(with_tags, axis=1).max())]),
            items=markup.constraint_inputs([masked[row].items for row in rows], marker_ids),
            tagged=tf.constant([len(masked[row].items) != len(untagged[row].items)
                                for row in rows]))

    return hypotheses_of(translator, untagged_ids, n_best, batch_size, search, progress_every)


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
    """Each line's hypotheses with their items put back (`markup.unmask`); None (a line not
    translated) stays None."""
    return [best and [h._replace(text=markup.unmask(h.text, line.items, escaped=line.escaped))
                      for h in best]
            for best, line in zip(hypotheses, masked)]
