"""Glossaries: source terms whose translation must come out one fixed way (the
production-translation issue; kt-translate --glossary terms.tsv).

A glossary file holds one term pair a line, `source term<TAB>target term` (UTF-8; blank lines and
lines starting with `#` are skipped). A source term occurs in a sentence where it stands as whole
words (case-sensitive; not next to a Unicode letter, number or `_`); where terms overlap, the
longest is taken: terms are looked for longest first, and where one is found, a shorter one
inside it no longer counts. Its target term is then required in the translation
(`keras_transformer.search.constraints.glossary.GlossaryConstraint` holds the search to it).

The search for terms is TensorFlow ops (RE2 patterns; `required_terms`), so kt-translate
--glossary and the SavedModel's `translate_with_glossary` signature find the same terms.
"""

import pathlib
import re

import tensorflow as tf

from keras_transformer.errors import UserError

# RE2: a character that can be part of a word; a term's ends must not touch one.
_WORD_CHARACTER = r"\pL\pN_"
# What a found term is overwritten with, so that no shorter term is found in it: a control
# character, which no term may hold (`CONTROL`), so no term can match where one was found.
_BLANK = "\x01"
CONTROL = r"[\x00-\x1f\x7f]"  # RE2's and re's: C0 controls and DEL, refused in terms
_CONTROL = re.compile(CONTROL)


class GlossaryError(UserError):
    """A glossary that cannot be used; the message names the file and line."""


class Glossary:
    """Term pairs, source -> target.

    Args:
        pairs: (source term, target term) str pairs; a source term given twice must have one
            target term.
    """

    def __init__(self, pairs):
        self.targets = {}
        for source, target in pairs:
            for term in (source, target):
                if _CONTROL.search(term):
                    raise GlossaryError(f"{term!r}: a glossary term holds a control character")
            if self.targets.setdefault(source, target) != target:
                raise GlossaryError(f"{source!r} has two target terms: "
                                    f"{self.targets[source]!r} and {target!r}")
        self.sources = sorted(self.targets, key=lambda term: (-len(term), term))
        self._index = None  # the terms by their words, made when first looked for

    @classmethod
    def load(cls, path):
        """The glossary of a file; a GlossaryError names the file and line of what is wrong."""
        path = pathlib.Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise GlossaryError(f"cannot read glossary {path}: {error.strerror}") from None
        except UnicodeDecodeError as error:
            raise GlossaryError(f"{path}: not UTF-8 at byte {error.start}") from None
        pairs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not all(field.strip() for field in fields):
                raise GlossaryError(f"{path}:{number}: expected 'source term<TAB>target term', "
                                    f"got {line!r}")
            if any(_CONTROL.search(field) for field in fields):
                raise GlossaryError(f"{path}:{number}: a glossary term holds a control "
                                    f"character: {line!r}")
            pairs.append(tuple(field.strip() for field in fields))
        try:
            return cls(pairs)
        except GlossaryError as error:
            raise GlossaryError(f"{path}: {error}") from None

    def __len__(self):
        return len(self.targets)

    def targets_in(self, sentence):
        """The target terms `sentence`'s source terms require, longest source term first."""
        return self.targets_of([sentence])[0]

    def targets_of(self, sentences):
        """`targets_in` of each of `sentences` (str or bytes), in one call.

        In each sentence only the terms all of whose words are its words are looked for (a
        term whose words are not all there cannot occur, nor hide another), in the glossary's
        longest-first order: the cost grows with the sentences and the terms each may hold, not
        with the glossary's size times the input's."""
        if not self.sources or not len(sentences):
            return [[] for _ in sentences]
        texts = tf.constant(sentences, tf.string)
        candidates = [self._candidates(set(its_words)) for its_words in words(texts).to_list()]
        if not any(candidates):
            return [[] for _ in sentences]
        found = _required_among(texts, tf.constant(self.sources), tf.ragged.constant(
            candidates, dtype=tf.int32, ragged_rank=1)).to_list()
        return [list(dict.fromkeys(self.targets[self.sources[term]] for term, hit in zip(
            terms, row) if hit)) for terms, row in zip(candidates, found)]

    def _candidates(self, present):
        """The indices into `sources` (ascending: longest first) of the terms all of whose
        words (bytes) are in the set `present`."""
        if self._index is None:
            self._index = _WordIndex(words(tf.constant(self.sources)).to_list())
        return self._index.terms_within(present)


class _WordIndex:
    """Terms (their words, bytes) found by the words they need: each term is filed under its
    word that the fewest terms hold, so a sentence's words reach few terms to check."""

    def __init__(self, term_words):
        self.term_words = [frozenset(its_words) for its_words in term_words]
        held = {}
        for its_words in self.term_words:
            for word in its_words:
                held[word] = held.get(word, 0) + 1
        self.by_word, self.wordless = {}, []
        for term, its_words in enumerate(self.term_words):
            if its_words:
                self.by_word.setdefault(min(its_words, key=held.get), []).append(term)
            else:  # punctuation alone ("++"): wherever it stands
                self.wordless.append(term)

    def terms_within(self, present):
        found = list(self.wordless)
        for word in present:
            found += [term for term in self.by_word.get(word, ())
                      if self.term_words[term] <= present]
        return sorted(found)


@tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string),
                              tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)])
def _required_among(texts, sources, candidates):
    """ragged bool [n, (k)]: `required_terms` of each text among its own candidate terms
    (`candidates`: indices into `sources`, in its order), one graph for the whole batch."""
    return tf.map_fn(
        lambda args: required_terms(args[0][None], tf.gather(sources, args[1]))[0],
        (texts, candidates), fn_output_signature=tf.RaggedTensorSpec([None], tf.bool))


def words(texts):
    """tf.string [n] -> ragged tf.string [n, (words)]: each text's runs of letters, numbers and
    `_` as RE2 reads them (what a term's ends may not touch); bytes that are not UTF-8 read as
    U+FFFD, as `required_terms` reads them."""
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    return tf.strings.split(tf.strings.regex_replace(texts, f"[^{_WORD_CHARACTER}]+", " "))


# A word boundary written into the text: `_marked` puts _BEFORE before and _AFTER after every
# character that cannot be part of a word, and the text's ends are marked too. A term then
# occurs as whole words exactly where its own marked form stands between an _AFTER and a
# _BEFORE, which a pattern without character classes finds: RE2 compiles one holding
# [^\pL\pN_] in milliseconds, once per term; a plain one in microseconds.
_AFTER, _BEFORE = "\x02", "\x03"


def _marked(texts):
    return tf.strings.regex_replace(texts, f"([^{_WORD_CHARACTER}])", f"{_BEFORE}\\1{_AFTER}")


def required_terms(texts, sources):
    """bool [batch, terms]: whether each source term occurs in each text, as whole words, with
    the longer terms' occurrences hiding shorter terms inside them. TensorFlow ops only.

    Args:
        texts: tf.string [batch]; bytes that are not UTF-8 are read as U+FFFD.
        sources: tf.string [terms], longest first (in characters; the order decides which of
            two overlapping terms is taken).
    """
    escaped = tf.strings.regex_replace(_marked(sources), r"([\\.+*?()|\[\]{}^$])", r"\\\1")
    patterns = tf.strings.join([_AFTER, escaped, _BEFORE])
    # A found term becomes _BLANK, marked as the character it is, so no shorter term is found
    # in it; its boundary marks stay (they belong to its neighbours).
    blank = _AFTER + _BEFORE + _BLANK + _AFTER + _BEFORE

    def look_for(state, pattern):
        texts, _ = state
        replaced = tf.strings.regex_replace(texts, pattern, blank)
        return replaced, replaced != texts

    def look_for_each(texts):
        _, found = tf.scan(look_for, patterns, initializer=(texts, tf.zeros(tf.shape(texts),
                                                                            tf.bool)))
        # Transposed as floats: oneDNN logs an error line for a bool transpose on some CPUs.
        return tf.transpose(tf.cast(tf.reshape(found, [tf.size(sources), tf.size(texts)]),
                                    tf.float32)) > 0

    texts = tf.strings.unicode_transcode(tf.convert_to_tensor(texts, tf.string), "UTF-8",
                                         "UTF-8", errors="replace")
    texts = tf.strings.join([_AFTER, _marked(texts), _BEFORE])
    # A scan over no terms cannot stack its (unshaped) results.
    return tf.cond(tf.size(sources) > 0, lambda: look_for_each(texts),
                   lambda: tf.zeros([tf.size(texts), 0], tf.bool))
