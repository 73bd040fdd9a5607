"""Markup and placeholders out of the text a model sees, and back into its translation.

    masked = markup.mask('Click <a href="/x">here</a> to pay {amount} before 2026-12-01.')
    masked.text   # 'Click ｟t1｠ here ｟/t1｠ to pay ｟1｠ before ｟2｠ .'
    markup.unmask('Pulse ｟t1｠ aquí ｟/t1｠ para pagar ｟1｠ antes del ｟2｠ .', masked.items)
    # 'Pulse <a href="/x">aquí</a> para pagar {amount} antes del 2026-12-01.'

What a translation must keep exactly (HTML/XML tags with their attributes, format placeholders
such as `{0}`, `{name}`, `{{name}}`, `%s`, `%1$d`, URLs, e-mail addresses, numbers) is replaced by
placeholder tokens, OpenNMT's ｟...｠ convention: `｟tN｠ ... ｟/tN｠` for a tag pair (opening and
closing share N), `｟tN/｠` for a self-closing or unpaired tag, `｟N｠` for any other item. The
model translates the masked text, its vocabulary holding the tokens whole (`TOKENS`, for
`data.build_vocabulary(..., whole_tokens=...)`); a decoding processor can hold its output to
every token exactly once, tag pairs well nested; `unmask` puts the items back verbatim and
refuses, naming the token, an output that breaks those rules.

HTML's character references (`&amp;`, `&#39;`) are text, never items: the model reads the
characters they stand for (`decoded`), and `unmask` writes a translation of a text that held one
with &, < and > escaped (`Masked.escaped`). A `<script>` or `<style>` element held whole is one
lone tag, its code kept verbatim.

Spacing: a placeholder stands apart from its neighbours by one space in the masked text (the
vocabulary holds each token whole after a word boundary); `unmask` takes that space away again
on the sides where the source had none beside the item.
"""

import dataclasses
import html.entities
import re

import numpy as np

from keras_transformer.errors import UserError

MAX_ITEMS = 50  # of each kind (tag pairs, other items) in one text
TOKENS = tuple([f"｟{n}｠" for n in range(1, MAX_ITEMS + 1)] +
               [f"｟t{n}｠" for n in range(1, MAX_ITEMS + 1)] +
               [f"｟/t{n}｠" for n in range(1, MAX_ITEMS + 1)] +
               [f"｟t{n}/｠" for n in range(1, MAX_ITEMS + 1)])


def _class_of(test):
    """A regex character class's contents (no brackets) holding exactly the characters for
    which test(character) is true, as literal ranges: read alike by Python's re and RE2."""
    ranges, first, last = [], None, None
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF or not test(chr(code)):  # surrogates: never in UTF-8 text
            continue
        if last is not None and code == last + 1:
            last = code
            continue
        if first is not None:
            ranges.append((first, last))
        first = last = code
    ranges.append((first, last))
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


# Character classes written out (not \w, \d or \s, whose meanings differ between Python's re and
# RE2), so that the graph's masking (data/markup_graph.py, RE2) finds what this module finds.
SPACE = _class_of(str.isspace)
WORD = _class_of(str.isalnum)  # letters and digits of every script
DIGIT = _class_of(str.isdecimal)
_QUOTED = """"[^"]*"|'[^']*'"""  # an attribute's quoted value, which may hold < and >
REFERENCE = r"&(?:#[0-9]+|#[xX][0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);"
# A tag item that is a whole element (<script>...</script>, <style>...</style>): alone.
WHOLE_ELEMENT = r"(?s)<(?i:script|style)[^0-9A-Za-z_:.-].*</.*"
# One alternation, tried in this order at each position: the longest-lived patterns first, so a
# URL's digits are not numbers and an e-mail's domain is not a URL. A number that touches a word
# ("v1.2", "3rd", "abc123") or follows a "." is none: `mask` leaves it as text (RE2 has no
# lookbehind to say so in the pattern).
_PATTERNS = tuple((kind, pattern.replace("QUOTED", _QUOTED).replace("SPACE", SPACE)
                   .replace("WORD", WORD).replace("DIGIT", DIGIT)) for kind, pattern in (
    # A character reference (&amp; &#39; &#x2019;) is text, never an item: matched first, so its
    # digits are no number; the model reads the character it stands for (`decoded`).
    ("reference", REFERENCE),
    # A <script> or <style> element whole (code: one lone tag, verbatim; an element that a line
    # does not hold whole is tags and text), a comment, a CDATA section, a <!DOCTYPE> or
    # <?processing instruction?> (each an opaque lone tag), or an element's tag whose quoted
    # attribute values may hold < and >; failing that, a tag whose attributes are read up to
    # the first > (unbalanced quotes, as before).
    ("tag", r"<(?i:script)(?:[SPACE](?:QUOTED|[^<>\"'])*)?>(?s:.)*?</(?i:script)[SPACE]*>"
            r"|<(?i:style)(?:[SPACE](?:QUOTED|[^<>\"'])*)?>(?s:.)*?</(?i:style)[SPACE]*>"
            r"|<!--(?s:.)*?-->|<!\[CDATA\[(?s:.)*?\]\]>|<[!?][A-Za-z](?:QUOTED|[^<>\"'])*>"
            r"|</?[A-Za-z][0-9A-Za-z_:.-]*(?:[SPACE]+(?:QUOTED|[^<>\"'])*?)?[SPACE]*/?>"
            r"|</?[A-Za-z][0-9A-Za-z_:.-]*(?:[SPACE]+[^<>]*?)?[SPACE]*/?>"),
    ("email", r"[WORD_.+-]+@[WORD_-]+(?:\.[WORD_-]+)+"),
    ("url", r"(?:https?://|www\.)[^SPACE<>\"']+[^SPACE<>\"'.,;:!?)\]}]"),
    # {{name}}, {0}, {name}, {0:.2f}; printf's %s, %1$d, %-5.2f (no space flag: "50% sure").
    ("placeholder", r"\{\{[SPACE]*[WORD_]+[SPACE]*\}\}|\{[WORD_]*(?::[^{}]*)?\}"
                    r"|%(?:[0-9]+\$)?[-+#0]*[0-9]*(?:\.[0-9]+)?[sdifx%]"),
    ("number", r"[DIGIT]+(?:[.,:/-][DIGIT]+)*"),
))
TAG_PATTERN = dict(_PATTERNS)["tag"]  # a tag, a comment, a whole <script> element, ...
# RE2's too: group k + 1 is ITEM_KINDS[k] (data/markup_graph.py tells a number and a reference
# by their groups; a reference is text, "kind" of a match rather than of an item).
ITEM_KINDS = tuple(kind for kind, _ in _PATTERNS)
ITEM_PATTERN = "|".join(f"({pattern})" for _, pattern in _PATTERNS)
# Beside a number that is none: before it, a word's character, "_" or "."; after it, the first two.
NOT_BEFORE_A_NUMBER, NOT_AFTER_A_NUMBER = WORD + "_.", WORD + "_"
_ITEM = re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in _PATTERNS))
_IS_SPACE = re.compile(f"[{SPACE}]")
_IS_WORD = re.compile(f"[{WORD}]")
_NOT_BEFORE, _NOT_AFTER = (re.compile(f"[{chars}]") for chars in (NOT_BEFORE_A_NUMBER,
                                                                 NOT_AFTER_A_NUMBER))
TOKEN_PATTERN = "｟/?t?[0-9]+/?｠"  # any placeholder token (RE2's too)
_TOKEN = re.compile(r"｟(/?)(t?)([0-9]+)(/?)｠")
_TAG_NAME = re.compile(r"</?([A-Za-z][0-9A-Za-z_:.-]*)")
# HTML's named references that end in ";" (the pattern's), without it: "amp" -> "&".
NAMED_REFERENCES = {name[:-1]: text for name, text in html.entities.html5.items()
                    if name.endswith(";")}
# What HTML reads for the numbers 0x80-0x9F: Windows-1252's characters; the five it lacks are
# themselves.
WINDOWS_1252 = tuple(bytes([code]).decode("cp1252", errors="ignore") or chr(code)
                     for code in range(0x80, 0xA0))
_WHOLE_ELEMENT = re.compile(WHOLE_ELEMENT)
_REFERENCE = re.compile(REFERENCE)
# HTML's escapes of the characters a text must not hold bare (`unmask` with `escaped`).
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_UNSAFE = re.compile("[&<>]")


class MarkupError(UserError):
    """A translation that does not hold its source's items exactly once, well nested; or a text
    with more items than `MAX_ITEMS`."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One span of the source kept verbatim.

    kind: "tag" (an opening, closing, self-closing or unpaired tag), "email", "url",
        "placeholder" or "number".
    text: the span as the source has it (a tag with its attributes).
    token: its placeholder token in the masked text.
    """

    kind: str
    text: str
    token: str
    space_before: bool = True  # the source has a space (or the text's start) before it
    space_after: bool = True  # ... after it
    word_before: bool = False  # the source has a letter or digit right before it
    word_after: bool = False  # ... right after it


@dataclasses.dataclass(frozen=True)
class Masked:
    """A text with its items replaced by tokens and its character references by their
    characters (`text`), the items in source order, and whether the source holds a reference
    (`escaped`: it escapes &, < and >, and its translation is written so too)."""

    text: str
    items: tuple
    escaped: bool = False


def _tag_tokens(tags):
    """Tokens for the tags of one text, [(start, text)] in order: a closing tag pairs with the
    nearest open tag of its name (`｟tN｠ ... ｟/tN｠`, N in the order the pairs open); self-closing
    tags and tags left unpaired become `｟tN/｠`, numbered after the pairs."""
    pairs, open_tags = [], []  # (opening start, closing start); (start, name)
    for start, text in tags:
        element = _TAG_NAME.match(text)
        if element is None or _WHOLE_ELEMENT.fullmatch(text):  # a comment, CDATA, <!DOCTYPE>,
            continue  # <?...?>, or a <script> or <style> element: alone
        name = element.group(1).lower()
        if text.startswith("</"):
            match = next((i for i in range(len(open_tags) - 1, -1, -1)
                          if open_tags[i][1] == name), None)
            if match is not None:  # tags opened inside the pair and still open stay unpaired
                pairs.append((open_tags[match][0], start))
                del open_tags[match:]
        elif not text.endswith("/>"):
            open_tags.append((start, name))
    tokens = {}
    for number, (opening, closing) in enumerate(sorted(pairs), 1):
        tokens[opening], tokens[closing] = f"｟t{number}｠", f"｟/t{number}｠"
    singles = [start for start, _ in tags if start not in tokens]
    for number, start in enumerate(singles, len(pairs) + 1):
        tokens[start] = f"｟t{number}/｠"
    if len(pairs) + len(singles) > MAX_ITEMS:
        raise MarkupError(f"{len(pairs) + len(singles)} tags; at most {MAX_ITEMS} a text")
    return tokens


def _word_around(text, match):
    """Whether a match is a number that touches a word or follows a "." (no item)."""
    start, end = match.span()
    return match.lastgroup == "number" and (
        (start > 0 and bool(_NOT_BEFORE.match(text[start - 1]))) or
        (end < len(text) and bool(_NOT_AFTER.match(text[end]))))


def mask(text):
    """`text` with its items replaced by placeholder tokens: a `Masked`.

    Raises:
        MarkupError: more than MAX_ITEMS tags or other items, or the text already holds a
            placeholder token (it could not be told from an item's).
    """
    if _TOKEN.search(text):
        raise MarkupError(f"the text already holds a placeholder token "
                          f"({_TOKEN.search(text).group(0)}): {text!r}")
    matches = list(_ITEM.finditer(text))
    found = [(match.start(), match.end(), match.lastgroup, match.group(0)) for match in matches
             if match.lastgroup != "reference" and not _word_around(text, match)]
    tag_tokens = _tag_tokens([(start, span) for start, _, kind, span in found if kind == "tag"])
    others = sum(kind != "tag" for _, _, kind, _ in found)
    if others > MAX_ITEMS:
        raise MarkupError(f"{others} placeholders, URLs, e-mail addresses and numbers; at most "
                          f"{MAX_ITEMS} a text")
    pieces, items, position, number = [], [], 0, 0
    for start, end, kind, span in found:
        if kind == "tag":
            token = tag_tokens[start]
        else:
            number += 1
            token = f"｟{number}｠"
        space_before = start == 0 or bool(_IS_SPACE.match(text[start - 1]))
        space_after = end == len(text) or bool(_IS_SPACE.match(text[end]))
        # A space only where the source has none, once between two items: `unmask` takes
        # exactly those away again.
        joined = start == position and bool(pieces) and pieces[-1] == " "
        pieces += [decoded(text[position:start]), "" if space_before or joined else " ", token,
                   "" if space_after else " "]
        items.append(Item(kind, span, token, space_before, space_after,
                          start > 0 and bool(_IS_WORD.match(text[start - 1])),
                          end < len(text) and bool(_IS_WORD.match(text[end]))))
        position = end
    pieces.append(decoded(text[position:]))
    return Masked("".join(pieces), tuple(items),
                  any(match.lastgroup == "reference" for match in matches))


def decoded(text):
    """`text` with each character reference (`REFERENCE`) replaced by the character it stands
    for (`character_of`)."""
    return _REFERENCE.sub(lambda match: character_of(match.group(0)), text)


def character_of(reference):
    """What one reference (`REFERENCE`) stands for, as HTML reads it: a name of HTML's
    (`NAMED_REFERENCES`), else the reference as written; a number, U+FFFD for 0, a surrogate
    or past U+10FFFF, Windows-1252's character for 0x80-0x9F (`WINDOWS_1252`). A reference to
    markup's token brackets stays as written (a token could not be told from an item's)."""
    if not reference.startswith("&#"):
        return NAMED_REFERENCES.get(reference[1:-1], reference)
    hexadecimal = reference[2] in "xX"
    digits = reference[3 if hexadecimal else 2:-1].lstrip("0")
    number = (0x110000 if len(digits) > (6 if hexadecimal else 7)
              else int(digits or "0", 16 if hexadecimal else 10))
    if number == 0 or number > 0x10FFFF or 0xD800 <= number <= 0xDFFF:
        return "\ufffd"
    character = WINDOWS_1252[number - 0x80] if 0x80 <= number <= 0x9F else chr(number)
    return reference if character in "｟｠" else character


# HTML's void elements: never closed, so alone without being unbalanced.
_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())


def unbalanced(masked):
    """The tags of a `Masked` text left unpaired that should have had a pair: not
    self-closing (`/>`), not an HTML void element (`<br>`), e.g. `<b>` never closed or a
    stray `</i>`. They are kept, each once, as lone tags. Comments, CDATA sections,
    `<!DOCTYPE>` and `<?...?>` are lone by nature, so never unbalanced."""
    elements = ((item, _TAG_NAME.match(item.text)) for item in masked.items
                if item.kind == "tag" and item.token.endswith("/｠"))
    return [item.text for item, element in elements if element is not None and
            not item.text.endswith("/>") and element.group(1).lower() not in _VOID and
            not _WHOLE_ELEMENT.fullmatch(item.text)]


def without_tags(masked):
    """A `Masked` text without its tag tokens (spaces collapsed) and with its other items: the
    text to translate first when tags are to be placed in a translation afterwards."""
    kept = tuple(item for item in masked.items if item.kind != "tag")
    tags = {item.token for item in masked.items if item.kind == "tag"}
    return Masked(" ".join(word for word in masked.text.split() if word not in tags), kept,
                  masked.escaped)


def problems(translation, items):
    """What is wrong with a masked translation against its source's items: a list of messages,
    empty when every item's token is there exactly once and tag pairs are well nested (each
    `｟/tN｠` after its `｟tN｠`, closing the innermost open pair)."""
    expected = [item.token for item in items]
    found = [match.group(0) for match in _TOKEN.finditer(translation)]
    messages = []
    for token in dict.fromkeys(expected + found):
        count, wanted = found.count(token), expected.count(token)
        if count != wanted:
            messages.append(f"{token} appears {count} time(s), the source has it {wanted}")
    open_pairs = []
    for match in _TOKEN.finditer(translation):
        closing, tag, number, single = match.groups()
        if not tag or single:
            continue
        if not closing:
            open_pairs.append(number)
        elif not open_pairs or open_pairs[-1] != number:
            messages.append(f"{match.group(0)} closes "
                            f"{'｟t' + open_pairs[-1] + '｠' if open_pairs else 'nothing open'}")
            if number in open_pairs:
                open_pairs.remove(number)
        else:
            open_pairs.pop()
    return messages


def unmask(translation, items, *, escaped=False):
    """The masked `translation` with each token replaced by its item's source text; with
    `escaped` (`Masked.escaped`: the source writes references), its &, < and > written as
    HTML's references first (meaning the characters the model wrote, as the source's did).

    A space the masking put beside a token is taken away where the source had none beside the
    item (`<b>word</b>`, `{amount}.`, `(2026)`), unless the translation puts a word there where
    the source had none: `<i>dolor</i>.` in the source, `<i>y ven</i> mis` in a translation.

    Raises:
        MarkupError: `problems(translation, items)` found something, named in the message.
    """
    found = problems(translation, items)
    if found:
        raise MarkupError(f"{translation!r}: {'; '.join(found)}")
    by_token = {item.token: item for item in items}
    if escaped:
        translation = _UNSAFE.sub(lambda match: _ESCAPES[match.group(0)], translation)

    def restore(match):
        before, token, after, following = match.groups()
        item = by_token[token]
        preceding = translation[match.start() - 1:match.start()]
        keep_before = item.space_before or (bool(_IS_WORD.match(preceding)) and
                                            not item.word_before)
        keep_after = item.space_after or (bool(_IS_WORD.match(following)) and
                                          not item.word_after)
        return (before if keep_before else "") + item.text + (after if keep_after else "")

    return re.sub(f"( ?)({TOKEN_PATTERN})( ?)(?=(.?))", restore, translation)


def constraint_inputs(items_of_texts, token_ids):
    """What `keras_transformer.search.constraints.markup.MarkupConstraint` needs for a batch of
    masked texts: (item_ids, opening), int32 [texts, most items] each.

    Args:
        items_of_texts: each text's `Masked.items`.
        token_ids: the vocabulary's id of each of `TOKENS`, in its order
            (`Vocabulary.markup_ids`).

    Returns:
        item_ids: each text's item token ids in source order, 0-padded; opening: for a closing
        tag's entry, the column of its opening tag; -1 elsewhere.
    """
    id_of = dict(zip(TOKENS, token_ids))
    width = max([1, *map(len, items_of_texts)])
    item_ids = np.zeros([len(items_of_texts), width], np.int32)
    opening = np.full([len(items_of_texts), width], -1, np.int32)
    for row, items in enumerate(items_of_texts):
        column_of = {}
        for column, item in enumerate(items):
            item_ids[row, column] = id_of[item.token]
            column_of[item.token] = column
            if item.token.startswith("｟/t"):  # its opening came first in the source
                opening[row, column] = column_of["｟t" + item.token[3:]]
    return item_ids, opening
