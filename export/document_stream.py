"""kt-translate --documents in bounded pieces: a document read, translated and written about
PIECE_BYTES at a time, so that memory stays flat in the document's size and the output grows
as it is made.

A document is cut into sentences line by line (`data.documents.split`: no sentence spans a line
break), so cutting it after a line break changes nothing; a line longer than a piece is cut
after a sentence's end followed by a space (or, failing one, at a space), where the sentence
splitter would end a sentence too, bar an abbreviation it knows.
"""

import re
import sys
import time

from keras_transformer import cli
from keras_transformer.export.documents import translate_document

PIECE_BYTES = 65_536
# Where a line too long for a piece is cut: after ". ", "! ", "? " (closing quotes and brackets
# between) and the spaces that follow; failing that, after a space.
_SENTENCE_END = re.compile(rb"[.!?](?:[\"')\]]|\xe2\x80\x9d|\xc2\xbb)*[ \t]+(?=\S)")
_SPACE = re.compile(rb"[ \t]+(?=\S)")


def pieces_of(stream, piece_bytes=None):
    """Yields the bytes of a binary `stream` in pieces of whole lines (with their line breaks)
    of about `piece_bytes` (default PIECE_BYTES), a longer line cut as the module says; the
    pieces joined are the stream."""
    piece_bytes = piece_bytes or PIECE_BYTES
    pending = b""
    while block := stream.read(piece_bytes):
        pending += block
        while len(pending) > piece_bytes:
            cut = _cut(pending, piece_bytes)
            yield pending[:cut]
            pending = pending[cut:]
    if pending:
        yield pending


def _cut(data, piece_bytes):
    """Where to end the piece that starts `data` (longer than piece_bytes)."""
    line_end = data.rfind(b"\n", 0, piece_bytes)
    if line_end >= 0:
        return line_end + 1
    for pattern in (_SENTENCE_END, _SPACE):
        ends = [match.end() for match in pattern.finditer(data, 0, piece_bytes)]
        if ends:
            return ends[-1]
    # No space in a whole piece: no language, cut where a character starts.
    cut = piece_bytes
    while cut < len(data) and data[cut] & 0xC0 == 0x80:
        cut += 1
    return cut


def translate_stream(translator, stream, write, *, batch_size, sampling=None,
                     keep_markup=False, progress_every=None):
    """Translates the document read from the binary `stream`, a piece at a time (`pieces_of`,
    each as `translate_document` translates a document), passing each piece's translation
    (str) to `write` as it is made; with `progress_every` (seconds), a progress line on stderr
    that often. Returns (sentences, split after clause marks, clauses split into windows).

    Raises:
        markup.MarkupError: with keep_markup, a sentence with more items than markup allows
            (the pieces before it written).
    """
    counts, done, began = [0, 0, 0], 0, time.perf_counter()
    reported = began
    for piece in pieces_of(stream):
        cli.raise_if_stopped()
        translated, split = translate_document(
            translator, piece.decode("utf-8", errors="replace"), batch_size=batch_size,
            sampling=sampling, keep_markup=keep_markup, first_sentence=counts[0] + 1)
        write(translated)
        for index, count in enumerate((split.sentences, split.split_at_clauses,
                                       split.split_into_windows)):
            counts[index] += int(count[0])
        done += len(piece)
        if progress_every and time.perf_counter() - reported > progress_every:
            reported = time.perf_counter()
            print(f"{done / 1e6:.1f} MB, {counts[0]} sentences done "
                  f"({counts[0] / (reported - began):.1f}/s)", file=sys.stderr, flush=True)
    return tuple(counts)
