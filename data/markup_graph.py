"""`data.markup`'s masking and unmasking as TensorFlow ops, for a graph that takes tagged text
(the SavedModel's `translate_with_markup`, kt-export --markup): the same patterns (RE2 reads
`markup.ITEM_PATTERN` as Python's re does), the same tokens, tag pairs and spacing. Tests hold the
two to the same results on generated texts.

A batch of texts is split around what the pattern finds: pieces [batch, (2k + 1)], text at even
positions, a match (an item, or a "word" that is not one) at odd positions.
"""

import typing

import tensorflow as tf

from keras_transformer.data import markup

# Bytes never in UTF-8 text: where a text is split around a match; before a number; before a
# character reference.
_MARK, _NUMBER_MARK, _REFERENCE_MARK = b"\xff", b"\xfe", b"\xfd"
# The pattern's groups, one per kind: a match is rewritten as other + _NUMBER_MARK + number +
# _REFERENCE_MARK + reference, two of the three empty.
_OTHER_GROUPS = "".join(f"\\{k + 1}" for k, kind in enumerate(markup.ITEM_KINDS)
                        if kind not in ("number", "reference"))
_NUMBER_GROUP, _REFERENCE_GROUP = (f"\\{markup.ITEM_KINDS.index(kind) + 1}"
                                   for kind in ("number", "reference"))
_TAG_TOKEN = "｟/?t[0-9]+/?｠"


class MaskedTexts(typing.NamedTuple):
    """A batch of texts masked as `markup.mask` masks each.

    text: tf.string [batch], `Masked.text`; untagged: tf.string [batch], the text of
    `markup.without_tags`. The rest are ragged [batch, (items)], in source order, one entry per
    `Masked.items` entry: items (tf.string, the source's text), tokens (tf.string), is_tag, and
    the `markup.Item` spacing flags space_before, space_after, word_before, word_after (bool).
    """

    text: tf.Tensor
    untagged: tf.Tensor
    items: tf.RaggedTensor
    tokens: tf.RaggedTensor
    is_tag: tf.RaggedTensor
    space_before: tf.RaggedTensor
    space_after: tf.RaggedTensor
    word_before: tf.RaggedTensor
    word_after: tf.RaggedTensor
    escaped: tf.Tensor  # bool [batch]: the text holds a character reference (`Masked.escaped`)


def _ends_with(pieces, characters):
    return tf.strings.regex_full_match(pieces, f"(?s).*[{characters}]")


def _starts_with(pieces, characters):
    return tf.strings.regex_full_match(pieces, f"(?s)[{characters}].*")


def _neighbours(values, row_starts, row_lengths, offset):
    """For each flat position of a ragged tensor's values, the value `offset` positions away in
    its row, and whether there is one."""
    position = tf.range(tf.size(values, out_type=tf.int32)) - row_starts
    inside = (position + offset >= 0) & (position + offset < row_lengths)
    index = tf.clip_by_value(tf.range(tf.size(values, out_type=tf.int32)) + offset, 0,
                             tf.maximum(tf.size(values, out_type=tf.int32) - 1, 0))
    return tf.gather(values, index), inside


def _characters_around(values, starts, lengths):
    """For the pieces of split texts (flat values, each row's start and length): functions
    before(characters, at_edge) and after(characters, at_edge) -> bool per piece, whether the
    character just before (after) the piece in its text is one of `characters` (a class's
    contents); `at_edge` where the text starts (ends) there. A match is never empty, so an
    empty text piece's neighbour beyond it holds that character."""
    empty = tf.strings.length(values) == 0

    def beside(edge_test, offset, characters, at_edge):
        touching = edge_test(values, characters)
        near, near_inside = _neighbours(touching, starts, lengths, offset)
        near_empty = _neighbours(empty, starts, lengths, offset)[0]
        far, far_inside = _neighbours(touching, starts, lengths, 2 * offset)
        return tf.where(near_inside & ~near_empty, near, tf.where(near_inside & far_inside, far,
                                                                  at_edge))

    return (lambda characters, at_edge: beside(_ends_with, -1, characters, at_edge),
            lambda characters, at_edge: beside(_starts_with, 1, characters, at_edge))


def _pair_tags(names, closing, single):
    """Each tag's partner, as `markup._tag_tokens` pairs them: a closing tag pairs with the
    nearest open tag of its name, closing the tags opened inside the pair. Dense [batch, tags]
    inputs (names tf.string, padded with ""; closing, single bool: `</...>`; `/>` or padding)
    -> int32 [batch, tags], the partner's column or -1."""
    batch, width = tf.shape(names)[0], tf.shape(names)[1]
    columns = tf.range(width)

    def step(column, stack, depth, partner):
        here = columns == column  # [tags]
        name = names[:, column][:, None]
        stacked = tf.gather(names, stack, batch_dims=1)
        candidates = (columns[None, :] < depth[:, None]) & (stacked == name)
        match = tf.reduce_max(tf.where(candidates, columns[None, :], -1), axis=1)
        closes = closing[:, column] & (match >= 0)
        opener = tf.gather(stack, tf.maximum(match, 0), batch_dims=1)
        partner = tf.where(closes[:, None] & here[None, :], opener[:, None], partner)
        partner = tf.where(closes[:, None] & (columns[None, :] == opener[:, None]), column,
                           partner)
        opens = ~closing[:, column] & ~single[:, column]
        stack = tf.where(opens[:, None] & (columns[None, :] == depth[:, None]), column, stack)
        depth = tf.where(closes, match, tf.where(opens, depth + 1, depth))
        return column + 1, stack, depth, partner

    start = (0, tf.zeros([batch, width], tf.int32), tf.zeros([batch], tf.int32),
             tf.fill([batch, width], -1))
    return tf.while_loop(lambda column, *_: column < width, step, start)[3]


def _tag_tokens(tags):
    """ragged tf.string [batch, (tags)] -> their tokens as `markup._tag_tokens` numbers them:
    pairs in the order they open, then the tags left alone, in order."""
    names = tf.strings.lower(tf.strings.regex_replace(
        tags, r"(?s)^</?([A-Za-z][0-9A-Za-z_:.-]*).*$", r"\1")).to_tensor("")
    closing = tf.strings.regex_full_match(tags, "(?s)</.*").to_tensor(False)
    # Self-closing; or a comment, CDATA, <!DOCTYPE> or <?...?>, alone by nature; or padding.
    single = tf.strings.regex_full_match(tags, "(?s)(<[!?].*|.*/>)").to_tensor(True) & ~closing
    partner = _pair_tags(names, closing, single)
    opens_pair = (partner >= 0) & ~closing
    pairs = tf.cumsum(tf.cast(opens_pair, tf.int32), axis=1)
    number = tf.where(opens_pair, pairs, tf.gather(pairs, tf.maximum(partner, 0), batch_dims=1))
    alone = tf.cumsum(tf.cast(partner < 0, tf.int32), axis=1) + pairs[:, -1:]
    tokens = tf.where(opens_pair, "｟t" + tf.strings.as_string(number) + "｠",
                      tf.where(partner >= 0, "｟/t" + tf.strings.as_string(number) + "｠",
                               "｟t" + tf.strings.as_string(alone) + "/｠"))
    return tf.RaggedTensor.from_tensor(tokens, lengths=tags.row_lengths())


def _rows(values, like):
    return tf.RaggedTensor.from_row_splits(values, like.row_splits, validate=False)


def _flat_positions(pieces):
    """int32 for each of a ragged tensor's values: its row's start in the values, its row's
    length, its row."""
    lengths = tf.cast(pieces.row_lengths(), tf.int32)
    starts = tf.cast(pieces.row_starts(), tf.int32)
    return tf.repeat(starts, lengths), tf.repeat(lengths, lengths), tf.repeat(
        tf.range(tf.size(lengths)), lengths)


_TOO_MANY_TAGS = f"a text holds more than {markup.MAX_ITEMS} tag pairs and lone tags"


def _assert_fits(texts, is_tag, is_other):
    """Ops that fail, as `markup.mask` raises, for a text with more than MAX_ITEMS other items,
    or more than 2 x MAX_ITEMS tags (so more than MAX_ITEMS pairs and lone tags: checked before
    pairing them costs tags^2), or holding a placeholder token already."""
    limit = markup.MAX_ITEMS
    return [tf.debugging.assert_less_equal(
                tf.reduce_sum(tf.cast(is_other, tf.int32), axis=1), limit, message=(
                    f"a text holds more than {limit} placeholders, URLs, e-mail addresses and "
                    f"numbers")),
            tf.debugging.assert_less_equal(tf.reduce_sum(tf.cast(is_tag, tf.int32), axis=1),
                                           2 * limit, message=_TOO_MANY_TAGS),
            tf.debugging.assert_equal(
                tf.reduce_any(tf.strings.regex_full_match(
                    texts, f"(?s).*{markup.TOKEN_PATTERN}.*")), False,
                message="a text already holds a placeholder token (it could not be told from "
                        "an item's)")]


def mask(texts):
    """tf.string [batch] -> `MaskedTexts`: each text masked as `markup.mask` masks it.

    Raises (when run): InvalidArgumentError for a text that `markup.mask` refuses.
    """
    pieces = tf.strings.split(tf.strings.regex_replace(
        texts, markup.ITEM_PATTERN,
        _MARK + _OTHER_GROUPS.encode() + _NUMBER_MARK + _NUMBER_GROUP.encode() +
        _REFERENCE_MARK + _REFERENCE_GROUP.encode() + _MARK), _MARK)
    starts, lengths, _ = _flat_positions(pieces)
    position = tf.range(tf.size(pieces.flat_values, out_type=tf.int32)) - starts
    is_reference = tf.strings.substr(pieces.flat_values, 0, 2) == _NUMBER_MARK + _REFERENCE_MARK
    is_number = (tf.strings.substr(pieces.flat_values, 0, 1) == _NUMBER_MARK) & ~is_reference
    values = pieces.flat_values
    for mark in (_NUMBER_MARK, _REFERENCE_MARK):
        values = tf.strings.reduce_join(tf.strings.split(values, mark), axis=1)
    before, after = _characters_around(values, starts, lengths)
    is_item = (position % 2 == 1) & ~is_reference & ~(is_number & (
        before(markup.NOT_BEFORE_A_NUMBER, False) | after(markup.NOT_AFTER_A_NUMBER, False)))
    is_tag = is_item & tf.strings.regex_full_match(values, "(?s)<.*")
    space_before, space_after = before(markup.SPACE, True), after(markup.SPACE, True)
    word_before, word_after = before(markup.WORD, False), after(markup.WORD, False)
    # Right after another item (no text between): its token's trailing space serves both.
    previous_empty, previous_but_one = (_neighbours(flags, starts, lengths, offset) for
                                        flags, offset in ((tf.strings.length(values) == 0, -1),
                                                          (is_item, -2)))
    joined = previous_empty[0] & previous_empty[1] & previous_but_one[0] & previous_but_one[1]

    is_other = is_item & ~is_tag
    with tf.control_dependencies(_assert_fits(texts, _rows(is_tag, pieces),
                                              _rows(is_other, pieces))):
        tags = tf.ragged.boolean_mask(_rows(values, pieces), _rows(is_tag, pieces))
        tag_tokens = _tag_tokens(tags)
    others = tf.cumsum(tf.cast(is_other, tf.int32))
    number = others - tf.gather(others - tf.cast(is_other, tf.int32), starts)
    tokens = tf.tensor_scatter_nd_update(
        "｟" + tf.strings.as_string(number) + "｠", tf.where(is_tag), tag_tokens.flat_values)
    opened_or_alone = ~tf.strings.regex_full_match(tag_tokens, "｟/t.*")
    with tf.control_dependencies([tf.debugging.assert_less_equal(tf.reduce_sum(tf.cast(
            opened_or_alone, tf.int32), axis=1), markup.MAX_ITEMS, message=_TOO_MANY_TAGS)]):
        tokens = tf.identity(tokens)  # whatever reads the tokens runs after the checks
    masked = tf.where(is_item, tf.where(space_before | joined, "", " ") + tokens +
                      tf.where(space_after, "", " "),
                      _references_decoded(values, is_reference))
    text = tf.strings.reduce_join(_rows(masked, pieces), axis=1)
    untagged = tf.strings.regex_replace(tf.strings.regex_replace(
        tf.strings.regex_replace(text, _TAG_TOKEN, " "), f"[{markup.SPACE}]+", " "), "^ | $", "")

    def items_of(flat):
        return tf.ragged.boolean_mask(_rows(flat, pieces), _rows(is_item, pieces))

    return MaskedTexts(text, untagged, items_of(values), items_of(tokens), items_of(is_tag),
                       items_of(space_before), items_of(space_after), items_of(word_before),
                       items_of(word_after),
                       tf.reduce_any(_rows(is_reference, pieces), axis=1))


def _references_decoded(values, is_reference):
    """tf.string [n] with the references among them (bool [n]) replaced by their characters."""
    at = tf.where(is_reference)
    return tf.tensor_scatter_nd_update(values, at, characters_of(tf.gather_nd(values, at)))


def characters_of(references):
    """tf.string [n] of references (`markup.REFERENCE`) -> what each stands for, as
    `markup.character_of` reads it."""
    names = tf.strings.regex_replace(references, "^&|;$", "")
    named = _named_characters(names)
    is_numbered = tf.strings.regex_full_match(references, "&#.*")
    is_hex = tf.strings.regex_full_match(references, "&#[xX].*")
    digits = tf.where(is_numbered, tf.strings.regex_replace(names, "^#[xX]?0*", ""), "0")
    too_long = tf.strings.length(digits) > tf.where(is_hex, 6, 7)
    digits = tf.where(too_long | (digits == ""), "0", digits)
    codes = tf.strings.unicode_decode(tf.where(is_hex, digits, "0"), "UTF-8")
    flat = tf.cast(codes.flat_values, tf.int64)
    hex_digits = tf.where(flat <= ord("9"), flat - ord("0"),
                          tf.bitwise.bitwise_or(flat, 32) - ord("a") + 10)
    powers = tf.ragged.range(codes.row_lengths() - 1, -1, -1, dtype=tf.int64).flat_values
    number = tf.where(is_hex, tf.reduce_sum(codes.with_flat_values(
        hex_digits * tf.bitwise.left_shift(tf.ones_like(powers), 4 * powers)), axis=1),
                      tf.strings.to_number(tf.where(is_hex, "0", digits), tf.int64))
    number = tf.where(too_long, tf.constant(0x110000, tf.int64), number)
    invalid = (number == 0) | (number > 0x10FFFF) | ((number >= 0xD800) & (number <= 0xDFFF))
    windows = tf.gather(tf.constant([ord(c) for c in markup.WINDOWS_1252], tf.int64),
                        tf.clip_by_value(number - 0x80, 0, 31))
    code = tf.where(invalid, tf.constant(0xFFFD, tf.int64),
                    tf.where((number >= 0x80) & (number <= 0x9F), windows, number))
    character = tf.strings.unicode_encode(tf.RaggedTensor.from_tensor(
        tf.cast(code, tf.int32)[:, None]), "UTF-8")
    numbered = tf.where(tf.strings.regex_full_match(character, "[｟｠]"), references, character)
    return tf.where(is_numbered, numbered, tf.where(named[1], named[0], references))


_NAMES = sorted(markup.NAMED_REFERENCES)


def _named_characters(names):
    """tf.string [n] of reference names ("amp") -> (their characters, whether HTML names them):
    found by the names' 64-bit fingerprints, sorted (no table to track in a SavedModel)."""
    keys = tf.constant(_NAMES)
    fingerprints = tf.strings.to_hash_bucket_fast(keys, 2**62)
    order = tf.argsort(fingerprints)
    wanted = tf.strings.to_hash_bucket_fast(names, 2**62)
    found = tf.gather(order, tf.minimum(
        tf.searchsorted(tf.gather(fingerprints, order), wanted), len(_NAMES) - 1))
    characters = tf.constant([markup.NAMED_REFERENCES[name] for name in _NAMES])
    return tf.gather(characters, found), tf.gather(keys, found) == names


def unmask(translations, masked):
    """Masked translations, tf.string [batch], with each token replaced by its item's source
    text and spaced as `markup.unmask` spaces it, its &, < and > escaped first where its source
    holds a character reference; `masked` is their sources' `MaskedTexts`.

    Raises (when run): InvalidArgumentError for a token that is not one of its source's, or a
    source item whose token is missing or repeated (as `markup.unmask` does; the nesting of tag
    pairs is `MarkupConstraint`'s guarantee, not checked again here).
    """
    escaped = translations
    for character, reference in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        escaped = tf.strings.regex_replace(escaped, character, reference)
    translations = tf.where(masked.escaped, escaped, translations)
    parts = tf.strings.split(tf.strings.regex_replace(
        translations, f"( ?)({markup.TOKEN_PATTERN})( ?)",
        _MARK + b"\\1" + _MARK + b"\\2" + _MARK + b"\\3" + _MARK), _MARK)
    # per row: text, then (space, token, space, text) per token
    values = parts.flat_values
    starts, lengths, rows = _flat_positions(parts)
    position = tf.range(tf.size(values, out_type=tf.int32)) - starts
    is_token = position % 4 == 2
    source_tokens = tf.gather(_at_least_one_column(masked.tokens.to_tensor(""), ""), rows)
    same = source_tokens == values[:, None]
    column = tf.argmax(tf.cast(same, tf.int32), axis=1, output_type=tf.int32)

    def of_item(flags):
        return tf.gather(tf.gather(_at_least_one_column(flags.to_tensor(False), False), rows),
                         column, batch_dims=1)

    previous_word = _neighbours(_ends_with(values, markup.WORD), starts, lengths, -2)[0]
    next_word = _neighbours(_starts_with(values, markup.WORD), starts, lengths, 2)[0]
    keep_before = of_item(masked.space_before) | (previous_word & ~of_item(masked.word_before))
    keep_after = of_item(masked.space_after) | (next_word & ~of_item(masked.word_after))
    item_texts = tf.gather(tf.gather(_at_least_one_column(masked.items.to_tensor(""), ""), rows),
                           column, batch_dims=1)
    # Each of a source's items once in its translation (nesting: MarkupConstraint's guarantee).
    counts = tf.math.unsorted_segment_sum(tf.cast(same & is_token[:, None], tf.int32), rows,
                                          tf.size(translations))
    checks = [tf.debugging.assert_equal(
                  tf.reduce_all(tf.reduce_any(same, axis=1) | ~is_token), True,
                  message="a translation holds a token its source does not"),
              tf.debugging.assert_equal(
                  counts, tf.cast(_at_least_one_column(masked.tokens.to_tensor(""), "") != "",
                                  tf.int32),
                  message="a translation does not hold each of its source's items once")]
    with tf.control_dependencies(checks):
        restored = tf.where(is_token, item_texts, values)
    kept = tf.where(position % 4 == 1, _neighbours(keep_before, starts, lengths, 1)[0],
                    tf.where(position % 4 == 3, _neighbours(keep_after, starts, lengths, -1)[0],
                             True))
    return tf.strings.reduce_join(_rows(tf.where(kept, restored, ""), parts), axis=1)


def constraint_inputs(tokens, token_ids):
    """`markup.constraint_inputs` in the graph: ragged tf.string tokens [batch, (items)] (a
    `MaskedTexts`' tokens, or some of them) and int32 token_ids [len(markup.TOKENS)]
    (`Vocabulary.markup_ids`) -> (item_ids, opening), int32 [batch, max(1, most items)]."""
    # Over the flat values: a `tf.where` of ragged tensors tiles its scalars to their rows and
    # traces assertion branches.
    flat = tokens.flat_values
    number = tf.strings.to_number(tf.strings.regex_replace(flat, "[^0-9]", ""), tf.int32)
    closing = tf.strings.regex_full_match(flat, "｟/t.*")
    # markup.TOKENS' order: ｟N｠, ｟tN｠, ｟/tN｠, ｟tN/｠ for N = 1..MAX_ITEMS.
    kind = tf.where(closing, 2, tf.where(tf.strings.regex_full_match(flat, ".*/｠"), 3, tf.where(
        tf.strings.regex_full_match(flat, "｟t.*"), 1, 0)))
    item_ids = _at_least_one_column(tokens.with_flat_values(
        tf.gather(token_ids, kind * markup.MAX_ITEMS + number - 1)).to_tensor(0), 0)
    dense = _at_least_one_column(tokens.to_tensor(""), "")
    # A closing tag's entry: the column of its opening ("｟/tN｠" -> "｟tN｠").
    same = dense[:, None, :] == tf.strings.regex_replace(dense, "^｟/t", "｟t")[:, :, None]
    opening = tf.where(_at_least_one_column(tokens.with_flat_values(closing).to_tensor(False),
                                            False),
                       tf.argmax(tf.cast(same, tf.int32), axis=2, output_type=tf.int32), -1)
    return item_ids, opening


def _at_least_one_column(values, padding):
    """[batch, columns] -> [batch, max(1, columns)], padded with `padding`: a batch without
    items still has a column to read."""
    return tf.pad(values, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(values)[1])]],
                  constant_values=padding)
