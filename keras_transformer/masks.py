"""Special token ids and the attention masks built from them.

Token ids follow tensor2tensor: 0 pads, 1 ends a sentence. Masks are boolean, True = may attend.
"""

from keras import ops

PAD_ID = 0
EOS_ID = 1


def padding_mask(ids):
    """[batch, length] int ids -> [batch, length] bool, True on real tokens (id != PAD_ID)."""
    return ops.not_equal(ids, PAD_ID)


def causal_mask(query_length, key_length=None, start_index=0):
    """[1, query_length, key_length] bool: query i, at position start_index + i, sees keys <= it.

    With the defaults it is the lower-triangular mask of section 3.2.3; `key_length` and
    `start_index` place the queries inside a longer decoding cache.
    """
    key_length = query_length if key_length is None else key_length
    query_positions = ops.arange(query_length) + start_index
    return (ops.arange(key_length)[None, :] <= query_positions[:, None])[None]
