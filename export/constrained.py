"""The `Translator`'s searches held to a constraint: a target prefix, markup, a text to place
tags in, a glossary (decoding processors, keras_transformer/search/processors.py), each an exported
graph function over its inputs, made into processor objects at the top and passed down the
search as objects (padded or repeated by `processors.rows_added`/`rows_repeated`). A mixin:
`Translator` supplies `_n_best`, `processors` and `vocabulary`."""

import tensorflow as tf

from keras_transformer.search.constraints.glossary import GlossaryConstraint
from keras_transformer.search.constraints.markup import MarkupConstraint, NoMarkup, TextKept
from keras_transformer.search.contract import graph_function
from keras_transformer.search.processors import PrefixForcing

IDS = tf.TensorSpec([None, None], tf.int32, name="source_ids")
PREFIX_IDS = tf.TensorSpec([None, None], tf.int32, name="prefix_ids")
ITEM_IDS = tf.TensorSpec([None, None], tf.int32, name="item_ids")
OPENING = tf.TensorSpec([None, None], tf.int32, name="opening")
TEXT_IDS = tf.TensorSpec([None, None], tf.int32, name="text_ids")
PHRASE_IDS = tf.TensorSpec([None, None, None], tf.int32, name="phrase_ids")


def combination_error(given):
    """The one rule for which constraints combine, for every caller: a search holds at most one
    of a target prefix, markup and a glossary (each is a processor of its own, and they do not
    yet know of each other). `given`: {name as the caller shows it: truthy if given}; returns
    None, or the message naming those given."""
    named = [name for name, value in given.items() if value]
    return f"{' and '.join(named)} cannot be combined (yet)" if len(named) > 1 else None


class ConstrainedSearches:
    """`translate_n_best_ids` held to one constraint; results as it gives them."""

    @graph_function(input_signature=[IDS, PREFIX_IDS])
    def translate_n_best_ids_with_prefix(self, source_ids, prefix_ids):
        """`translate_n_best_ids` with every hypothesis of a sentence starting with its target
        prefix, int32 prefix_ids [batch, prefix_length] (subwords, 0-padded; `tokenize_prefixes`
        makes them from text). The prefix's tokens count in the scores. A prefix as long as
        the output limit leaves nothing to search: check first (`lines.check_prefixes`)."""
        return self._n_best(source_ids, self.constraints(prefix_ids=prefix_ids))

    @graph_function(input_signature=[IDS, ITEM_IDS, OPENING])
    def translate_n_best_ids_with_markup(self, source_ids, item_ids, opening):
        """`translate_n_best_ids` of masked texts (`data.markup.mask`), every hypothesis holding
        each of its sentence's item tokens exactly once, tag pairs well nested
        (`MarkupConstraint`): item_ids and opening int32 [batch, items] as
        `data.markup.constraint_inputs` makes them. The vocabulary must hold the tokens whole
        (`Vocabulary.markup_ids`)."""
        return self._n_best(source_ids, self.constraints(markup=(item_ids, opening)))

    @graph_function(input_signature=[IDS, ITEM_IDS, OPENING, TEXT_IDS])
    def place_markup_ids(self, source_ids, item_ids, opening, text_ids):
        """`translate_n_best_ids_with_markup` held to a text: every hypothesis is text_ids (int32
        [batch, length]: each sentence's translation without tags, its items' tokens in it,
        ending with end of sentence, 0-padded) with the sentence's tag tokens inserted where
        the model puts them, before a word, punctuation or the end (`TextKept`). The output
        limit grows to fit the text and the tags."""
        room = (tf.reduce_sum(tf.cast(text_ids != 0, tf.int32), 1) +
                tf.reduce_sum(tf.cast(item_ids != 0, tf.int32), 1))
        return self._n_best(source_ids, self.constraints(markup=(item_ids, opening, text_ids)),
                            room=room)

    @graph_function(input_signature=[IDS, PHRASE_IDS])
    def translate_n_best_ids_with_glossary(self, source_ids, phrase_ids):
        """`translate_n_best_ids` with every hypothesis holding each of its sentence's required
        target phrases (`GlossaryConstraint`): phrase_ids int32 [batch, phrases, length], the
        phrases' subwords (`tokenize_prefixes`), 0-padded."""
        return self._n_best(source_ids, self.constraints(glossary=phrase_ids))

    def constraints(self, *, prefix_ids=None, markup=None, glossary=None):
        """The processors that hold a search to what is given: a `PrefixForcing` of prefix_ids;
        for markup's (item_ids, opening[, text_ids]) a `TextKept` of the text's tags (with a
        text) and a `MarkupConstraint`; a `GlossaryConstraint` of glossary's phrase ids. Each
        holds one row per sentence (`processors.rows_added`). The callers hold a search to at
        most one of the three (`combination_error`)."""
        constraints = []
        if prefix_ids is not None:
            constraints.append(PrefixForcing(prefix_ids))
        if markup is not None:
            marker_ids = tf.constant(self.vocabulary.markup_ids(), tf.int32)
            word_start = tf.constant(self.vocabulary.before_tag_ok())
            if len(markup) == 3:
                item_ids, _, text_ids = markup
                in_text = tf.reduce_any(item_ids[:, :, None] == text_ids[:, None, :], axis=2)
                constraints.append(TextKept(text_ids, tf.where(in_text, 0, item_ids),
                                            word_start))
            # With a kept text, TextKept already decides what follows each token.
            constraints.append(MarkupConstraint(*markup[:2], marker_ids,
                                                word_start if len(markup) == 2 else None))
        if glossary is not None:
            constraints.append(GlossaryConstraint(glossary))
        return constraints

    def _processors(self, constraints=(), tree_constraint=None):
        """The processors of a search held to `constraints`, in order: a target prefix (its
        tokens scored by the model's own log-probabilities), the tree constraint (where given),
        the translator's processors, `NoMarkup` where no markup is given and the vocabulary
        holds its tokens, then the other constraints (which give an owed token the end's
        probability, after every ban)."""
        forcing = [c for c in constraints if isinstance(c, PrefixForcing)]
        others = [c for c in constraints if not isinstance(c, PrefixForcing)]
        tree = [] if tree_constraint is None else [tree_constraint]
        no_markup = []
        if self.vocabulary.holds_markup and not any(isinstance(c, MarkupConstraint)
                                                    for c in others):
            no_markup = [NoMarkup(tf.constant(self.vocabulary.markup_ids(), tf.int32))]
        return forcing + tree + list(self.processors) + no_markup + others
