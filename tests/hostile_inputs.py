"""Inputs a public translation endpoint will receive besides sentences.

Shared by tests/test_hostile_input.py (every case, plus hypothesis-generated ones),
tests/test_export.py and reliability/soak.py (mixed into its load). Texts are bytes: what arrives
on the wire need not be UTF-8. The tests import it as `hostile_inputs` (pytest puts tests/ on
sys.path); from the repository root it is `tests.hostile_inputs`.
"""

import numpy as np

# name -> one request's text
TEXTS = {
    "empty": b"",
    "whitespace only": b" \t\r\n\x0b\x0c\xc2\xa0\xe2\x80\x83\xe3\x80\x80",  # incl. NBSP, em space
    "100k characters, one word": b"a" * 100_000,
    "100k characters, multibyte": "\u00e9\u4e2d\U0001f600".encode() * 25_000,
    "10k tokens": b" ".join([b"word"] * 10_000),
    "invalid UTF-8": b"caf\xe9 \xff\xfe \xc0\xaf \xed\xa0\x80 \xf8\x88\x80\x80\x80 end",
    "truncated UTF-8 sequence": "Se\u00f1or".encode()[:3],
    "NUL bytes": b"In the\x00 beginning\x00\x00",
    "control characters": b"\x01\x02\x07\x08\x1b[31mred\x1b[0m\x7f\x85 text",
    "right-to-left marks": "\u202eIn the beginning\u202c \u200f\u200e \u2067x\u2069".encode(),
    "right-to-left scripts": "בראשית في البدء".encode(),
    "emoji and ZWJ sequences": ("\U0001f468\u200d\U0001f469\u200d\U0001f467 "
                                "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f44d\U0001f3fd").encode(),
    "combining marks stacked": ("e" + "\u0301\u0308\u0323" * 300).encode(),
    "zalgo": "Z\u0334\u0321\u031b\u0329a\u0338l\u0337g\u0336o\u0335".encode(),
    "byte-order mark and noncharacters": "\ufeffIn\ufffe the \uffff\U0010ffff \ue000".encode(),
    "one character": b".",
    "sentence": b"In the beginning God created the heaven and the earth.",
}

# The batch-level cases: what one request carries.
EMPTY_BATCH = []
HUGE_BATCH_SIZE = 10_000


def random_text(rng):
    """A random hostile text (bytes) of one of several kinds; `rng` a numpy Generator."""
    kind = rng.integers(5)
    length = int(rng.integers(0, 400))
    if kind == 0:  # arbitrary bytes
        return rng.integers(0, 256, length, dtype=np.uint8).tobytes()
    if kind == 1:  # arbitrary code points, surrogates excluded (not encodable)
        points = rng.integers(0, 0x110000, length)
        return "".join(chr(p) for p in points if not 0xD800 <= p <= 0xDFFF).encode()
    if kind == 2:  # ASCII control characters and spaces
        return bytes(rng.choice(list(range(0, 33)) + [127], length).astype(np.uint8))
    if kind == 3:  # a fixed case
        return list(TEXTS.values())[int(rng.integers(len(TEXTS)))]
    return b" ".join([b"word"] * int(rng.integers(0, 3000)))  # long token runs
