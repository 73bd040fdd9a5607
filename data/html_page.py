"""A web page into the texts a model translates, and the page back with their translations:
every byte outside the translated text as it was.

    page = html_page.read(source)                    # the page, str
    page.texts                                       # sentences, markup as --markup takes it
    page.translated(translations, lang="es")         # the page, each text's translation in place

The parser is Python's own `html.parser.HTMLParser`: it says where in the source each tag and
text begins, so whatever is not translated is copied from the source byte for byte; it reads
the HTML found on the web (unclosed `<li>` and `<p>`, stray end tags) without stopping, reads
`<script>` and `<style>` content as raw text, and adds no dependency. Tree builders (html5lib,
lxml, BeautifulSoup) rebuild the page when writing it out, which changes bytes nobody asked to
change.

What is translated, found by HTML's structure: the inline content of each block (`<p>`, `<li>`,
`<h1>`, `<td>`, `<title>`, ...: `BLOCKS`), with its inline tags, cut into sentences
(`data.documents.split`), each a text for `data.markup`; and the `alt`, `title` and
`placeholder` attributes (`ATTRIBUTES`). What is not: `<script>`, `<style>`, `<pre>`, `<code>`,
`<textarea>`, `<svg>`, `<math>`, `<template>` (`KEPT`), every element with `translate="no"` or
class `notranslate`, and their content (inside a block, such an element is one lone tag of its
text, kept byte for byte); text without a letter; the whitespace around a block's text and the
tags that enclose all of it.

Character references are decoded for the model (`data.markup`) and the translations written
back with &, < and > escaped (in an attribute, its quote too), so the page means what the model
wrote. Tags come back in their source order: a translation that moves an inline tag before
another (each is kept exactly once) has them put back in order, in the places the tags took, so
the page keeps its element tree.
"""

import dataclasses
import html.parser
import re

import tensorflow as tf

from keras_transformer.data import documents, markup

# Elements that start and end a block of text (HTML's flow content that is not phrasing).
BLOCKS = frozenset("""address article aside blockquote body caption center dd details dialog
    dir div dl dt fieldset figcaption figure footer form frameset h1 h2 h3 h4 h5 h6 head header
    hgroup hr html legend li main menu nav noscript ol optgroup option p search section select
    summary table tbody td tfoot th thead title tr ul""".split())
# Elements whose content is code or data: never translated, kept byte for byte.
KEPT = frozenset("script style pre code textarea svg math template".split())
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
ATTRIBUTES = ("alt", "title", "placeholder")
_LETTER = re.compile(r"[^\W\d_]")
_ATTRIBUTE = re.compile(r"""([^\s/>"'=]+)(\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
_TAG = re.compile(markup.TAG_PATTERN)
_SPACES = re.compile(r"\s+")
_HIDDEN = 0xF0000  # planes 15 and 16: private use, 131,068 characters
_PRIVATE = re.compile("[\U000F0000-\U0010FFFD]")


class _Tokens(html.parser.HTMLParser):
    """The page's tokens in order: (kind, start, end, tag, attributes), kind one of "start",
    "startend", "end", "data", "other" (a comment, declaration or processing instruction);
    start and end are offsets in the source, and the tokens cover it, end to end."""

    def __init__(self, source):
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [match.end() for match in re.finditer("\n", source)]
        self.found = []
        self.feed(source)
        self.close()
        starts = [start for _, start, _, _ in self.found] + [len(source)]
        self.tokens = [(kind, start, end, tag, attributes) for (kind, start, tag, attributes),
                       end in zip(self.found, starts[1:]) if end > start]
        if self.tokens and self.tokens[0][1] > 0:  # never seen: the parser starts at 0
            self.tokens.insert(0, ("data", 0, self.tokens[0][1], None, None))

    def _add(self, kind, tag=None, attributes=None):
        line, column = self.getpos()
        self.found.append((kind, self.line_starts[line - 1] + column, tag, attributes))

    def handle_starttag(self, tag, attrs):
        self._add("start", tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("startend", tag, attrs)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("data")

    def handle_comment(self, data):
        self._add("other")

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")


def _kept(tag, attributes):
    """Whether an element is not to be translated, content and all."""
    values = dict(attributes or ())
    return (tag in KEPT or (values.get("translate") or "").strip().lower() == "no"
            or "notranslate" in (values.get("class") or "").split())


@dataclasses.dataclass
class Page:
    """A page read by `read`: its `texts` to translate, and `translated` to put them back."""

    source: str
    texts: list  # str: each a sentence of a block or an attribute's value, as in the source
    # The page in order: str (verbatim), ("block", index), ("attribute", index) or ("lang",
    # the source's <html lang> value, None for none).
    pieces: list = dataclasses.field(default_factory=list)
    blocks: list = dataclasses.field(default_factory=list)  # _Block
    attributes: list = dataclasses.field(default_factory=list)  # (text index, its quote)

    def translated(self, translations, lang=None):
        """The page with each text replaced by its translation (str, in `texts`' order, as
        `data.markup.unmask` gives them); with `lang`, `<html lang>` set to it (added where
        the page has none).

        Raises:
            ValueError: not one translation a text.
        """
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts "
                             f"of the page")
        return "".join(self._piece(piece, translations, lang) for piece in self.pieces)

    def _piece(self, piece, translations, lang):
        if isinstance(piece, str):
            return piece
        kind, index = piece
        if kind == "block":
            return self.blocks[index].translated(translations, self._tag(translations))
        if kind == "attribute":
            text, quote = self.attributes[index]
            return _attribute_value(translations[text], quote)
        if lang is None:
            return index or ""
        return lang if index is not None else f' lang="{lang}"'

    def _tag(self, translations):
        def render(pieces):
            return "".join(self._piece(piece, translations, None) for piece in pieces)
        return render


@dataclasses.dataclass
class _Block:
    """Inline content translated in place: its text's sentences (`Page.texts` indices) and
    what lies between them; the kept elements' stand-ins; its tags with attributes to
    translate (raw tag -> pieces, as `Page.pieces`)."""

    text: str
    sentences: list = dataclasses.field(default_factory=list)
    between: list = dataclasses.field(default_factory=list)  # len(sentences) + 1 str
    stand_ins: dict = dataclasses.field(default_factory=dict)
    tags: dict = dataclasses.field(default_factory=dict)

    def translated(self, translations, render):
        text = self.between[0] + "".join(translations[index] + after for index, after in
                                         zip(self.sentences, self.between[1:]))
        text = _in_source_order(_escaped_text(text), _TAG.findall(self.text))
        for raw, pieces in self.tags.items():
            text = text.replace(raw, render(pieces))
        for stand_in, element in self.stand_ins.items():
            text = text.replace(stand_in, element)
        return text


def _escaped_text(text):
    """A translation's text with HTML's escapes of &, < and > (its tags kept as they are)."""
    pieces, position = [], 0
    for match in _TAG.finditer(text):
        pieces += [_escaped(text[position:match.start()]), match.group(0)]
        position = match.end()
    return "".join(pieces + [_escaped(text[position:])])


def _escaped(text):
    return (markup.decoded(text).replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def _attribute_value(translation, quote):
    value = _escaped(translation)
    if quote == "'":
        return value.replace("'", "&#39;")
    value = value.replace('"', "&quot;")
    return value if quote else f'"{value}"'


def _in_source_order(text, source_tags):
    """`text` with its tags in `source_tags`' order, each in the place one took, where it holds
    the same tags in another order."""
    found = list(_TAG.finditer(text))
    tags = [match.group(0) for match in found]
    if tags == source_tags or sorted(tags) != sorted(source_tags):
        return text
    pieces, position = [], 0
    for match, tag in zip(found, source_tags):
        pieces += [text[position:match.start()], tag]
        position = match.end()
    return "".join(pieces + [text[position:]])


def read(source, *, attributes=True, split=documents.split):
    """The page `source` (str) read: a `Page`, whose `texts` are what to translate (with
    `attributes`, the `ATTRIBUTES`' values too).

    Args:
        split: tf.string [blocks] -> (pieces, is_sentence), RaggedTensors [blocks, (pieces)]
            (`data.documents.split`, the default; kt-translate --html also cuts sentences
            longer than --max_input_length, with `export.documents.parts`).
    """
    return _Reader(source, attributes, split).page


class _Reader:
    """Reads a page's tokens into a `Page`: block by block, each cut into sentences."""

    def __init__(self, source, attributes, split):
        self.source, self.attributes, self.split = source, attributes, split
        self.page = Page(source, [])
        self.nonce = "kt-kept-"
        while self.nonce in source:
            self.nonce += "x"
        run = []  # the tokens since the last block boundary
        for token in _with_kept_elements(_Tokens(source).tokens):
            kind, tag = token[0], token[3]
            if kind != "data" and kind != "other" and (tag in BLOCKS or (
                    kind == "kept" and tag == "pre")):
                self.flush(run)
                run = []
                self.page.pieces += self.tag_pieces(token)
            else:
                run.append(token)
        self.flush(run)
        self.cut_into_sentences()

    def raw(self, token):
        return self.source[token[1]:token[2]]

    def flush(self, run):
        """Puts a run of inline tokens in the page: its edges verbatim, and what they enclose
        as a block if it holds a letter."""
        first, last = _edges(run, self.raw)
        for token in run[:first]:
            self.page.pieces += self.tag_pieces(token)
        core = run[first:last]
        leading = trailing = ""
        if core and core[0][0] == "data":  # the whitespace around the text stays as it is
            leading = re.match(r"\s*", self.raw(core[0])).group(0)
            core[0] = (core[0][0], core[0][1] + len(leading), *core[0][2:])
        if core and core[-1][0] == "data":
            trailing = re.search(r"\s*$", self.raw(core[-1])).group(0)
            core[-1] = (*core[-1][:2], core[-1][2] - len(trailing), *core[-1][3:])
        self.page.pieces.append(leading)
        if any(token[0] == "data" and _LETTER.search(markup.decoded(self.raw(token)))
               for token in core):
            self.page.pieces.append(("block", len(self.page.blocks)))
            self.page.blocks.append(self.block(core))
        else:
            for token in core:
                self.page.pieces += self.tag_pieces(token)
        self.page.pieces.append(trailing)
        for token in run[last:]:
            self.page.pieces += self.tag_pieces(token)

    def block(self, tokens):
        block, text = _Block(""), []
        for token in tokens:
            raw = self.raw(token)
            if token[0] == "data":
                text.append(_SPACES.sub(" ", raw))
            elif token[0] == "kept":
                stand_in = f"<!--{self.nonce}{len(block.stand_ins)}-->"
                block.stand_ins[stand_in] = raw
                text.append(stand_in)
            else:
                text.append(raw)
                pieces = self.tag_pieces(token)
                if pieces != [raw]:
                    block.tags[raw] = pieces
        block.text = "".join(text)
        return block

    def tag_pieces(self, token):
        """A token as `Page.pieces`: verbatim, but for the values of its attributes to
        translate and <html>'s lang."""
        kind, start, _, tag, attributes = token
        raw = self.raw(token)
        if kind not in ("start", "startend") or _kept(tag, attributes):
            return [raw]
        wanted = ATTRIBUTES if self.attributes else ()
        pieces, position, lang = [], 0, False
        name_end = re.match(r"<[^\s/>]*", raw).end()
        for match in _ATTRIBUTE.finditer(raw, name_end):
            name, value = match.group(1).lower(), match.group(3)
            if value is None or not (name in wanted and _LETTER.search(value) or
                                     name == "lang" and tag == "html"):
                continue
            quote = value[0] if value[0] in "\"'" else ""
            value_start = match.start(3) + len(quote)
            value_end = match.end(3) - len(quote)
            pieces.append(raw[position:value_start])
            if name == "lang":
                pieces.append(("lang", raw[value_start:value_end]))
                lang = True
            else:
                pieces.append(("attribute", len(self.page.attributes)))
                self.page.attributes.append((len(self.page.texts), quote))
                self.page.texts.append(raw[value_start:value_end])
            position = value_end
        if tag == "html" and not lang:
            pieces += [raw[position:name_end], ("lang", None)]
            position = name_end
        return [piece for piece in pieces + [raw[position:]] if piece != ""]

    def cut_into_sentences(self):
        blocks = self.page.blocks
        if not blocks:
            return
        # Each tag one character of the private use planes while sentences are found: the
        # splitter cuts lines at line breaks and sentences after a ". ", which a tag's
        # attributes may hold.
        tags = []

        def hidden(match):
            if _HIDDEN + len(tags) > 0x10FFFD:  # a page of more tags: the rest as they are
                return match.group(0)
            tags.append(match.group(0))
            return chr(_HIDDEN + len(tags) - 1)

        texts = [block.text for block in blocks]
        hide = not any(_PRIVATE.search(text) for text in texts)
        if hide:
            texts = [_TAG.sub(hidden, text) for text in texts]
        pieces, is_sentence = self.split(tf.constant(texts))
        for block, row, sentences in zip(blocks, pieces.to_list(), is_sentence.to_list()):
            block.between = [""]
            for piece, sentence in zip(row, sentences):
                piece = piece.decode("utf-8")
                if hide:
                    piece = _PRIVATE.sub(lambda match: tags[ord(match.group(0)) - _HIDDEN],
                                         piece)
                if sentence and _LETTER.search(markup.decoded(_TAG.sub("", piece))):
                    block.sentences.append(len(self.page.texts))
                    self.page.texts.append(piece)
                    block.between.append("")
                else:
                    block.between[-1] += piece


def _with_kept_elements(tokens):
    """The tokens with each element not to translate (`_kept`) as one ("kept", start, end,
    tag, attributes) token: up to its end tag, or (unclosed) to the next block boundary."""
    out, index = [], 0
    while index < len(tokens):
        kind, start, end, tag, attributes = tokens[index]
        if kind not in ("start", "startend") or not _kept(tag, attributes):
            out.append(tokens[index])
            index += 1
            continue
        stop, depth = index + 1, 1 if kind == "start" and tag not in VOID else 0
        while stop < len(tokens) and depth:
            depth += {"start": 1, "end": -1}.get(tokens[stop][0], 0) * (tokens[stop][3] == tag)
            stop += 1
        if depth:
            stop = next((n for n in range(index + 1, len(tokens)) if tokens[n][0] in (
                "start", "end", "startend") and tokens[n][3] in BLOCKS), len(tokens))
        out.append(("kept", start, tokens[stop - 1][2], tag, attributes))
        index = stop
    return out


def _edges(run, raw):
    """(first, last): run[first:last] is what the run's edges enclose: not its whitespace,
    comments, lone tags and kept elements at either end, nor a tag pair around all of it."""
    def at_edge(token):
        kind, tag = token[0], token[3]
        return (kind in ("other", "startend", "kept") or (kind == "start" and tag in VOID)
                or (kind == "data" and not raw(token).strip()))

    first, last = 0, len(run)
    while True:
        while first < last and at_edge(run[first]):
            first += 1
        while last > first and at_edge(run[last - 1]):
            last -= 1
        if first < last and run[first][0] == "start" and _partner(run, first, last) == last - 1:
            first, last = first + 1, last - 1
            continue
        return first, last


def _partner(run, first, last):
    """The index of the end tag closing the start tag run[first] within run[first:last]."""
    tag, depth = run[first][3], 0
    for index in range(first, last):
        if run[index][3] == tag and run[index][0] in ("start", "end"):
            depth += 1 if run[index][0] == "start" else -1
            if depth == 0:
                return index
    return None
