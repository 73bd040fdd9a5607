"""Training pairs that teach a model where placeholder tokens go (the production-translation
issue).

A decoding constraint (`keras_transformer.search.constraints.markup.MarkupConstraint`) makes every
item token of a sentence appear once in its translation, tag pairs well nested; where they land is
the model's choice, and a model that never saw `｟1｠` places it anywhere. `augment(source, target)`
rewrites a share of the training pairs so that the model sees the tokens where they belong, in
the masked form `markup.mask` gives a text at translation time:

- items both sides hold verbatim (numbers, URLs, e-mail addresses, format placeholders; the same
  tags in the same order) become the same token on both sides;
- in pairs with no item on either side, made-up ones, each placed where it is right on both
  sides: a tag pair around a phrase and its translation (spans consistent with IBM Model 1 word
  alignments fitted on the training pairs, `data.word_alignment`); a word both sides hold once
  verbatim (a name: "David", "Israel") as a placeholder or wrapped in a tag pair; corresponding
  clauses (both sides cut at the same number of `,;:`) wrapped in a tag pair; the whole sentence
  wrapped; a self-closing tag at the start or the end.

Which pairs and which rewrite are a function of the pair's text (a hash), not of a random state:
the same on every epoch, run, resume and worker.
"""

import functools
import hashlib
import random
import re

import numpy as np
import tensorflow as tf

from keras_transformer.data import markup, word_alignment

DEFAULT_RATE = 0.3  # of the training pairs rewritten
_TAGS = ('<b>', '</b>'), ('<i>', '</i>'), ('<a href="/help">', '</a>'), (
    '<span class="term">', '</span>'), ('<em>', '</em>')
_SELF_CLOSING = ("<br/>", '<img src="icon.png"/>', "<x id=\"1\"/>")
_CLAUSE_END = re.compile(r"\s*[,;:]\s*")
_WORD = re.compile(r"\b[A-ZÀ-Ý][\w'-]{2,}\b")


class MarkupAugmentedSource:
    """A `data.sources` source whose training pairs are rewritten by `augment` at `rate`; its
    other splits, and everything else about it, are the wrapped source's. A vocabulary built
    from it keeps `markup.TOKENS` whole (`whole_tokens`). The word aligner is fitted on the
    first `word_alignment.MAX_PAIRS` training pairs when they are first read (seconds)."""

    def __init__(self, source, rate=DEFAULT_RATE):
        if not 0 < rate < 1:
            raise ValueError(f"the markup rate is a share of the pairs above 0 and below 1, got "
                             f"{rate}")
        self.source, self.rate = source, rate
        self._aligner = None

    def aligner(self):
        """The `word_alignment.Ibm1Aligner` of the training pairs, fitted once."""
        if self._aligner is None:
            pairs = self.source.pairs("train").take(word_alignment.MAX_PAIRS)
            self._aligner = word_alignment.Ibm1Aligner.fit(
                (source.decode("utf-8", "replace"), target.decode("utf-8", "replace"))
                for source, target in pairs.as_numpy_iterator())
        return self._aligner

    def __getattr__(self, name):  # splits, check, ...: the wrapped source's
        return getattr(self.source, name)

    def whole_tokens(self):
        inner = getattr(self.source, "whole_tokens", None)
        return (*(inner() if inner else ()), *markup.TOKENS)

    def pairs(self, split, **kwargs):
        """The wrapped source's pairs (tf.string, tf.string), rewritten if `split` is "train"."""
        pairs = self.source.pairs(split, **kwargs)
        if split != "train":
            return pairs
        aligner = self.aligner()

        def rewrite(sources, targets):
            rewritten = [augment(source.decode("utf-8", "surrogateescape"),
                                 target.decode("utf-8", "surrogateescape"), self.rate, aligner)
                         for source, target in zip(sources, targets)]
            return tuple(np.array([side.encode("utf-8", "surrogateescape") for side in sides],
                                  dtype=object) for sides in zip(*rewritten)) if rewritten else (
                sources, targets)

        def rewrite_batch(sources, targets):
            new_sources, new_targets = tf.numpy_function(rewrite, [sources, targets],
                                                         (tf.string, tf.string), stateful=False)
            return tf.ensure_shape(new_sources, [None]), tf.ensure_shape(new_targets, [None])

        return pairs.batch(1024).map(rewrite_batch).unbatch()

    def __repr__(self):
        return f"MarkupAugmentedSource({self.source!r}, rate={self.rate})"


def augment(source, target, rate=DEFAULT_RATE, aligner=None):
    """(source, target) str -> the pair as the model should learn it: masked as `markup.mask`
    masks a text (items as tokens, with spaces around them), the same token for the same item on
    both sides; or unchanged (a share 1 - `rate` of the pairs, and pairs whose items the two sides
    do not share). `aligner` (a `word_alignment.Ibm1Aligner`) lets made-up tags wrap phrases and
    their translations."""
    chooser = random.Random(hashlib.blake2b(f"{source}\t{target}".encode(
        "utf-8", "surrogateescape"), digest_size=8).digest())
    if chooser.random() >= rate:
        return source, target
    try:
        masked_source, masked_target = markup.mask(source), markup.mask(target)
    except markup.MarkupError:  # a pair that already holds ｟...｠, or too many items
        return source, target
    if not masked_source.items and not masked_target.items:
        masked_source, masked_target = map(markup.mask, _made_up_markup(source, target, chooser,
                                                                        aligner))
    shared = _shared(masked_source.items, masked_target.items)
    if shared is None:
        return source, target
    return masked_source.text, re.sub(r"｟/?t?\d+/?｠", lambda m: shared.get(m.group(0),
                                                                           m.group(0)),
                                      masked_target.text)


def _shared(source_items, target_items):
    """{target token: source token} for items both sides hold verbatim (tags: the same ones in
    the same order, so the numbering agrees), or None if an item is on one side only."""
    tags = [item.text for item in source_items if item.kind == "tag"]
    if tags != [item.text for item in target_items if item.kind == "tag"]:
        return None
    unused = {}
    for item in source_items:
        if item.kind != "tag":
            unused.setdefault(item.text, []).append(item.token)
    renamed = {}
    for item in target_items:
        if item.kind != "tag":
            if not unused.get(item.text):
                return None
            renamed[item.token] = unused[item.text].pop(0)
    if any(unused.values()):
        return None
    return renamed


def _made_up_markup(source, target, chooser, aligner):
    """The pair with one made-up item or tag pair placed where it is right on both sides, and
    a third of the time the whole sentence wrapped around it too (nested tags)."""
    rewrites = [_wrap_sentence, _self_closing]
    phrases = _aligned_phrases(source, target, aligner) if aligner else []
    if phrases:  # what translation most needs: tags around phrases, where a user puts them
        rewrites += [functools.partial(_wrap_phrase, phrases=phrases)] * 6
    names = _shared_words(source, target)
    if names:
        rewrites += [_placeholder_for_word, _wrap_word] * 2
    if _clauses(source) and len(_clauses(source)) == len(_clauses(target)):
        rewrites += [_wrap_clause] * 2
    rewrite = chooser.choice(rewrites)
    source, target = rewrite(source, target, chooser, names)
    if rewrite is not _wrap_sentence and chooser.random() < 1 / 3:
        source, target = _wrap_sentence(source, target, chooser, names)
    return source, target


def _aligned_phrases(source, target, aligner):
    """((source start, end), (target start, end)) character spans of phrases that translate
    each other by `aligner`'s links (`word_alignment.consistent_spans`), shorter than the
    whole sentence."""
    source_words, target_words = word_alignment.words(source), word_alignment.words(target)
    links = aligner.links(source_words, target_words)
    return [((source_words[a].start, source_words[b].end),
             (target_words[c].start, target_words[d].end))
            for (a, b), (c, d) in word_alignment.consistent_spans(links)
            if (a, b) != (0, len(source_words) - 1)]


def _shared_words(source, target):
    """Capitalized words (3 letters or more) each side holds exactly once."""
    source_words, target_words = _WORD.findall(source), _WORD.findall(target)
    return [word for word in dict.fromkeys(source_words)
            if source_words.count(word) == 1 and target_words.count(word) == 1]


def _clauses(text):
    """(start, end) of each clause when `text` has two or more, else []."""
    spans, start = [], 0
    for match in _CLAUSE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text.rstrip(".!?;:, "))))
    return spans if len(spans) > 1 and all(end > start for start, end in spans) else []


def _around(text, start, end, opening, closing):
    return text[:start] + opening + text[start:end] + closing + text[end:]


def _word_span(text, word):
    match = re.search(rf"\b{re.escape(word)}\b", text)
    return match.start(), match.end()


def _wrap_sentence(source, target, chooser, names):
    opening, closing = chooser.choice(_TAGS)
    return opening + source + closing, opening + target + closing


def _self_closing(source, target, chooser, names):
    tag = chooser.choice(_SELF_CLOSING)
    if chooser.random() < 0.5:
        return f"{tag} {source}", f"{tag} {target}"
    return f"{source} {tag}", f"{target} {tag}"


def _placeholder_for_word(source, target, chooser, names):
    word = chooser.choice(names)
    placeholder = chooser.choice(("{0}", "{name}", "%s", "{{user}}"))
    return tuple(text[:start] + placeholder + text[end:] for text in (source, target)
                 for start, end in [_word_span(text, word)])


def _wrap_word(source, target, chooser, names):
    word, (opening, closing) = chooser.choice(names), chooser.choice(_TAGS)
    return tuple(_around(text, *_word_span(text, word), opening, closing)
                 for text in (source, target))


def _wrap_phrase(source, target, chooser, names, phrases):
    (source_span, target_span), (opening, closing) = chooser.choice(phrases), chooser.choice(_TAGS)
    return (_around(source, *source_span, opening, closing),
            _around(target, *target_span, opening, closing))


def _wrap_clause(source, target, chooser, names):
    index, (opening, closing) = chooser.randrange(len(_clauses(source))), chooser.choice(_TAGS)
    return tuple(_around(text, *_clauses(text)[index], opening, closing)
                 for text in (source, target))
