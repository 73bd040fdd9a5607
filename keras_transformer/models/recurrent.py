"""A bidirectional LSTM that can be built while a model loads (the MT-LSTM's encoder, the BCN's).

`keras.layers.Bidirectional` copies the LSTM it wraps by serializing it. While
`keras.saving.load_model` runs, Keras 3.15 records every serialized object's config by `id()`
(its object-sharing scope), so a temporary LSTM that reuses a freed one's id is taken for that
one: the copy comes back as another Bidirectional's layer, and the load fails ("Forward layer and
backward layer should have different `go_backwards` value") or, worse, two layers share weights,
at random (11 of 200 constructions in one measured loop; tests/test_bcn.py). Building the layer
outside that scope copies the LSTM as it is.
"""

import contextlib

import keras

# The object-sharing scope's state (keras.src.saving.serialization_lib.ObjectSharingScope).
_SHARING_KEYS = ("shared_objects/id_to_obj_map", "shared_objects/id_to_config_map")


@contextlib.contextmanager
def _outside_object_sharing():
    from keras.src.backend.common import global_state

    saved = {key: global_state.get_global_attribute(key) for key in _SHARING_KEYS}
    for key in _SHARING_KEYS:
        global_state.set_global_attribute(key, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            global_state.set_global_attribute(key, value)


def bidirectional_lstm(units, name=None):
    """`keras.layers.Bidirectional(keras.layers.LSTM(units, return_sequences=True))`:
    [batch, n, d] -> [batch, n, 2 units], forward and backward outputs concatenated."""
    with _outside_object_sharing():
        return keras.layers.Bidirectional(keras.layers.LSTM(units, return_sequences=True),
                                          name=name)
