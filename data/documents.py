"""Documents into sentences and back, in TensorFlow ops (the production-translation issue).

    pieces, is_sentence = documents.split(tf.constant([document]))
    translated = tf.ragged.map_flat_values(translate, pieces)      # each sentence piece
    documents.join(tf.where(is_sentence, translated, pieces))       # the rest kept verbatim

A document is cut into lines at each line break, and each line into sentences by
tensorflow-text's `StateBasedSentenceBreaker`, whose breaks are undone where they are not a
sentence's end: before a lower-case letter or closing punctuation, after a common
abbreviation (Mr., Dr., e.g., ...), and where no space follows (`1.5`). Everything between the
sentences (spaces, line breaks, blank lines) is kept as pieces of its own, so joining the pieces
gives the document back byte for byte, and joining translated sentences with the same pieces
keeps every line and paragraph break in place. The same ops run eagerly (kt-translate
--documents) and in an exported graph, so both split alike.
"""

import tensorflow as tf
import tensorflow_text

# Break points that are no sentence's end (RE2 syntax: the graph's regex engine).
_ABBREVIATION = (r"(?is).*(?:^|[^\pL])(?:mr|mrs|ms|dr|prof|st|sr|sra|srta|jr|vs|etc|e\.g|i\.e|"
                 r"cf|no|vol|pp?|fig|ch|art|núm)\.")
_NOT_A_START = r"(?s)(?:[\p{Ll}”’»)\]}]|[\"'](?:\s|$)).*"  # a lower-case word, a closing quote


def substrings(texts, rows, starts, ends):
    """texts[rows[i]][starts[i]:ends[i]] for each i (byte offsets, clipped to the text): tf.string
    [pieces], at a cost linear in the texts' and the pieces' bytes.

    Not `tf.strings.substr(tf.gather(texts, rows), ...)`: the gather copies a whole text once per
    piece, so a one-line document of 64 KiB cut into its ~10,000 words took ~2 GB.
    """
    rows = tf.cast(rows, tf.int32)
    characters = tf.strings.bytes_split(texts).with_row_splits_dtype(tf.int32)  # [n, (bytes)]
    length = tf.gather(characters.row_lengths(), rows)
    first = tf.gather(characters.row_starts(), rows)
    starts, ends = (tf.clip_by_value(tf.cast(offsets, tf.int32), 0, length)
                    for offsets in (starts, ends))
    indices = tf.ragged.range(first + starts, first + tf.maximum(ends, starts))
    return tf.strings.reduce_join(tf.gather(characters.flat_values, indices), axis=1)


def _sentence_spans(lines):
    """(starts, ends) int32 RaggedTensors [lines, (sentences)]: each line's sentences' byte
    spans, the breaker's fragments joined where a break is no sentence's end."""
    _, starts, ends = tensorflow_text.StateBasedSentenceBreaker().break_sentences_with_offsets(
        lines)
    # int32: oneDNN logs an error line for int64 arithmetic on this machine.
    starts, ends = (tf.cast(offsets, tf.int32).with_row_splits_dtype(tf.int32)
                    for offsets in (starts, ends))
    fragments = substrings(lines, starts.value_rowids(), starts.flat_values, ends.flat_values)
    # For each fragment: is the next one in its line a continuation?
    has_next = tf.concat([starts.value_rowids()[1:] == starts.value_rowids()[:-1],
                          tf.zeros([tf.minimum(tf.size(fragments), 1)], tf.bool)], axis=0)
    next_start = tf.concat([starts.flat_values[1:], tf.zeros([tf.minimum(
        tf.size(fragments), 1)], tf.int32)], axis=0)
    next_fragment = tf.concat([fragments[1:], tf.fill([tf.minimum(tf.size(fragments), 1)], "")],
                              axis=0)
    continues = has_next & (
        (next_start == ends.flat_values) |
        tf.strings.regex_full_match(fragments, _ABBREVIATION) |
        tf.strings.regex_full_match(next_fragment, _NOT_A_START))
    # A sentence is a run of fragments each continued by the next.
    begins = tf.concat([[True], ~continues[:-1]], axis=0)[:tf.size(fragments)]
    sentence_of = tf.cumsum(tf.cast(begins, tf.int32)) - 1
    count = tf.reduce_sum(tf.cast(begins, tf.int32))
    sentence_starts = tf.math.unsorted_segment_min(starts.flat_values, sentence_of, count)
    sentence_ends = tf.math.unsorted_segment_max(ends.flat_values, sentence_of, count)
    line_of = tf.boolean_mask(starts.value_rowids(), begins)
    # The breaker leaves the spaces after a sentence in it: they are the gap's.
    texts = substrings(lines, line_of, sentence_starts, sentence_ends)
    length = tf.strings.length(texts)
    sentence_starts += length - tf.strings.length(tf.strings.regex_replace(texts, r"^\s+", ""))
    sentence_ends -= length - tf.strings.length(tf.strings.regex_replace(texts, r"\s+$", ""))
    keep = sentence_ends > sentence_starts
    nrows = tf.shape(lines, out_type=tf.int32)[0]
    return tuple(tf.RaggedTensor.from_value_rowids(tf.boolean_mask(offsets, keep),
                                                   tf.boolean_mask(line_of, keep), nrows,
                                                   validate=False)
                 for offsets in (sentence_starts, sentence_ends))


def _interleave(texts, starts, ends):
    """Each of `texts` (tf.string [n]) as pieces around its spans (int32 RaggedTensors [n,
    (spans)] of byte offsets, in order): (pieces, is_span), RaggedTensors [n, (2 spans + 1)],
    gap, span, gap, ..., span, gap, the gaps the text between (empty where there is none)."""
    spans = starts.row_lengths()
    # Gap j of a text (j = 0 ... its spans) runs from the end of span j - 1 (the text's start
    # for j = 0) to the start of span j (the text's end for the last).
    text_of_gap = tf.repeat(tf.range(tf.size(texts)), spans + 1)
    gap_in_text = tf.range(tf.size(text_of_gap)) - tf.gather(tf.cumsum(spans + 1, exclusive=True),
                                                             text_of_gap)
    span = tf.gather(starts.row_splits, text_of_gap) + gap_in_text  # the one after the gap
    first, last = gap_in_text == 0, gap_in_text == tf.gather(spans, text_of_gap)
    padded_ends, padded_starts = (tf.concat([offsets.flat_values, [0]], axis=0)
                                  for offsets in (ends, starts))  # gathers in range when empty
    gap_starts = tf.where(first, 0, tf.gather(padded_ends, tf.maximum(span - 1, 0)))
    gap_ends = tf.where(last, tf.gather(tf.strings.length(texts), text_of_gap),
                        tf.gather(padded_starts, span))
    gaps = substrings(texts, text_of_gap, gap_starts, gap_ends)
    span_texts = substrings(texts, starts.value_rowids(), starts.flat_values, ends.flat_values)
    # Written with positions: a ragged concatenation transposes integers, which makes oneDNN
    # log an E line.
    gap_position = tf.gather(tf.cumsum(2 * spans + 1, exclusive=True), text_of_gap) + \
        2 * gap_in_text
    span_position = tf.gather(gap_position, starts.value_rowids() + tf.range(
        tf.size(span_texts))) + 1  # after the gap of the same index
    positions = [gap_position, span_position]
    return (tf.RaggedTensor.from_row_lengths(
                tf.dynamic_stitch(positions, [gaps, span_texts]), 2 * spans + 1,
                validate=False),
            tf.RaggedTensor.from_row_lengths(tf.dynamic_stitch(positions, [
                tf.zeros_like(gaps, tf.bool), tf.ones_like(span_texts, tf.bool)]),
                2 * spans + 1, validate=False))


def split(documents):
    """tf.string [docs] -> (pieces, is_sentence): tf.string and bool RaggedTensors [docs,
    (pieces)], each document's sentences and, between them, everything else (spaces, line
    breaks; empty strings where there is nothing), so that `join(pieces)` is `documents`."""
    lines = tf.strings.split(documents, "\n").with_row_splits_dtype(tf.int32)  # [docs, (lines)]
    pieces, is_sentence = _interleave(lines.flat_values, *_sentence_spans(lines.flat_values))
    # Every line but a document's first starts with the line break before it.
    first_line = tf.gather(lines.row_splits, lines.value_rowids()) == tf.range(
        tf.size(lines.flat_values))
    first_pieces = tf.gather(pieces.values, pieces.row_splits[:-1])
    first_pieces = tf.where(first_line, first_pieces, tf.strings.join(["\n", first_pieces]))
    pieces = pieces.with_values(tf.tensor_scatter_nd_update(
        pieces.values, pieces.row_splits[:-1, None], first_pieces))
    return (lines.with_values(pieces).merge_dims(1, 2),
            lines.with_values(is_sentence).merge_dims(1, 2))


def refine(pieces, is_sentence, where, starts, ends):
    """Sentence pieces cut further: each piece where `where` (bool [docs, (pieces)]) becomes
    its spans (`starts`, `ends`: int32 RaggedTensors [pieces where, (spans)], byte offsets in
    the piece) with the text between them as gaps; the others stay. Returns (pieces,
    is_sentence) as `split` does."""
    chosen = tf.where(where.flat_values)[:, 0]
    sub_pieces, sub_is_span = _interleave(tf.gather(pieces.flat_values, chosen), starts, ends)
    # Each piece as a list of pieces: itself, or its interleaved spans.
    lengths = tf.tensor_scatter_nd_update(tf.ones_like(pieces.flat_values, tf.int32),
                                          chosen[:, None], sub_pieces.row_lengths())
    kept = tf.where(~where.flat_values)[:, 0]
    start_of = tf.cumsum(lengths, exclusive=True)
    positions = [tf.gather(start_of, kept),
                 tf.gather(start_of, tf.gather(chosen, sub_pieces.value_rowids())) +
                 tf.range(tf.size(sub_pieces.flat_values)) -
                 tf.gather(sub_pieces.row_splits, sub_pieces.value_rowids())]
    values = tf.dynamic_stitch(positions, [tf.gather(pieces.flat_values, kept),
                                           sub_pieces.flat_values])
    flags = tf.dynamic_stitch(positions, [tf.gather(is_sentence.flat_values, kept),
                                          sub_is_span.flat_values])
    per_document = tf.math.unsorted_segment_sum(lengths, pieces.value_rowids(), pieces.nrows())
    return (tf.RaggedTensor.from_row_lengths(values, per_document, validate=False),
            tf.RaggedTensor.from_row_lengths(flags, per_document, validate=False))


def clause_spans(texts):
    """tf.string [n] -> (starts, ends), int32 RaggedTensors [n, (clauses)]: each text cut after
    each `,`, `;` or `:` followed by white space (the mark stays with its clause)."""
    _, starts, ends = tensorflow_text.regex_split_with_offsets(texts, r"[,;:]\s+")
    starts, ends = (tf.cast(offsets, tf.int32).with_row_splits_dtype(tf.int32)
                    for offsets in (starts, ends))
    mark = substrings(texts, ends.value_rowids(), ends.flat_values, ends.flat_values + 1)
    return starts, ends.with_flat_values(ends.flat_values + tf.cast(
        tf.strings.regex_full_match(mark, "[,;:]"), tf.int32))


def word_windows(texts, count_tokens, limit):
    """tf.string [n] -> (starts, ends), int32 RaggedTensors [n, (windows)]: each text's words
    (runs of non-space) packed greedily into windows of at most `limit` tokens, as
    `count_tokens` (tf.string [words] -> int32 [words]) counts a word's tokens; a word of more
    tokens is a window alone."""
    _, starts, ends = tensorflow_text.regex_split_with_offsets(texts, r"\s+")
    starts, ends = (tf.cast(offsets, tf.int32).with_row_splits_dtype(tf.int32)
                    for offsets in (starts, ends))
    words = substrings(texts, starts.value_rowids(), starts.flat_values, ends.flat_values)
    first = tf.range(tf.size(words)) == tf.gather(starts.row_splits, starts.value_rowids())

    def pack(state, word):
        tokens, window = state
        count, starts_text = word
        new = starts_text | (tokens + count > limit)
        return tf.where(new, count, tokens + count), window + tf.cast(new, tf.int32)

    _, window_of = tf.scan(pack, (tf.cast(count_tokens(words), tf.int32), first),
                           initializer=(tf.constant(0), tf.constant(-1)))
    count = tf.reduce_max(tf.concat([window_of, [-1]], axis=0)) + 1
    text_of = tf.math.unsorted_segment_max(starts.value_rowids(), window_of, count)
    nrows = tf.size(texts)
    return (tf.RaggedTensor.from_value_rowids(
                tf.math.unsorted_segment_min(starts.flat_values, window_of, count), text_of,
                nrows, validate=False),
            tf.RaggedTensor.from_value_rowids(
                tf.math.unsorted_segment_max(ends.flat_values, window_of, count), text_of,
                nrows, validate=False))


def join(pieces):
    """tf.string RaggedTensor [docs, (pieces)] -> tf.string [docs]: each document's pieces
    joined (`split`'s pieces with the sentences translated)."""
    return tf.strings.reduce_join(pieces, axis=1)
