"""Glossaries: source terms whose translation must come out one fixed way (the
production-translation issue; kt-translate --glossary terms.tsv).

A glossary file holds one term pair a line, `source term<TAB>target term` (UTF-8; blank lines and
lines starting with `#` are skipped). A source term occurs in a sentence where it stands as whole
words (case-sensitive; not next to a Unicode letter, number or `_`); where terms overlap, the
longest is taken: terms are looked for longest first, and where one is found, a shorter one
inside it no longer counts. Its target term is then required in the translation
(`keras_transformer.glossary_constraint.GlossaryConstraint` holds the search to it).

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

        Only the terms all of whose words are words of the sentences are looked for (a term
        whose words are not all there cannot occur, nor hide another): a glossary of 100,000
        terms costs about what the handful that may occur cost (~7 ms a term looked for)."""
        if not self.sources or not len(sentences):
            return [[] for _ in sentences]
        texts = tf.constant(sentences, tf.string)
        present = set(words(texts).flat_values.numpy().tolist())
        sources = [source for source, its_words in zip(
            self.sources, words(tf.constant(self.sources)).to_list())
            if present.issuperset(its_words)]
        if not sources:
            return [[] for _ in sentences]
        found = required_terms(texts, tf.constant(sources)).numpy()
        return [list(dict.fromkeys(self.targets[source] for source, hit in zip(sources, row)
                                   if hit)) for row in found]


def words(texts):
    """tf.string [n] -> ragged tf.string [n, (words)]: each text's runs of letters, numbers and
    `_` as RE2 reads them (what a term's ends may not touch); bytes that are not UTF-8 read as
    U+FFFD, as `required_terms` reads them."""
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    return tf.strings.split(tf.strings.regex_replace(texts, f"[^{_WORD_CHARACTER}]+", " "))


def required_terms(texts, sources):
    """bool [batch, terms]: whether each source term occurs in each text, as whole words, with
    the longer terms' occurrences hiding shorter terms inside them. TensorFlow ops only.

    Args:
        texts: tf.string [batch]; bytes that are not UTF-8 are read as U+FFFD.
        sources: tf.string [terms], longest first (in characters; the order decides which of
            two overlapping terms is taken).
    """
    escaped = tf.strings.regex_replace(sources, r"([\\.+*?()|\[\]{}^$])", r"\\\1")
    outside = f"[^{_WORD_CHARACTER}]"

    def look_for(state, term):
        texts, _ = state
        found = tf.strings.regex_full_match(
            texts, tf.strings.join([f"(?s)(.*{outside})?", term, f"({outside}.*)?"]))
        # Overwritten twice: one pass skips a second occurrence right after the first, whose
        # boundary character the first match used up.
        blank = tf.strings.join([f"(^|{outside})", term, f"({outside}|$)"])
        for _ in range(2):
            texts = tf.strings.regex_replace(texts, blank, f"\\1{_BLANK}\\2")
        return texts, found

    def look_for_each(texts):
        _, found = tf.scan(look_for, escaped, initializer=(texts, tf.zeros(tf.shape(texts),
                                                                           tf.bool)))
        # Transposed as floats: oneDNN logs an error line for a bool transpose on some CPUs.
        return tf.transpose(tf.cast(tf.reshape(found, [tf.size(sources), tf.size(texts)]),
                                    tf.float32)) > 0

    texts = tf.strings.unicode_transcode(tf.convert_to_tensor(texts, tf.string), "UTF-8",
                                         "UTF-8", errors="replace")
    # A scan over no terms cannot stack its (unshaped) results.
    return tf.cond(tf.size(sources) > 0, lambda: look_for_each(texts),
                   lambda: tf.zeros([tf.size(texts), 0], tf.bool))
