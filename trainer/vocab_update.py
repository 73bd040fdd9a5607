"""Fine-tuning with a new vocabulary: `kt-train --init_from RUN --update_vocab [--vocab NEW]`
(OpenNMT-tf's `update_vocab`).

A new domain's words cut into many pieces of the old vocabulary; a vocabulary built for the new
data (`--vocab`, or built from this run's `--data` when it does not give one) holds them whole.
The new model starts as the old one, except in the weights that hold one row per vocabulary id
(`model.vocabulary_weights()`: the Transformer's embedding tables and output bias, shared or
not as its hparams say; an MT-LSTM's target embedding and output projection): there the row of
a piece both vocabularies hold (same piece string, special pieces included) is the old model's,
exactly; a piece only the new one holds starts as a fresh model initializes it; a piece only the
old one held is dropped. model_dir/vocab_update.json records the counts and the id mapping.
"""

import json

import numpy as np

from keras_transformer.cli import replace_atomically

RECORD_FILE = "vocab_update.json"


def piece_mapping(old, new):
    """(new_ids, old_ids): int arrays of the ids, in `new` and in `old` (vocabularies with
    `pieces`), of every piece both hold, in `new`'s id order."""
    old_ids = {piece: i for i, piece in enumerate(old.pieces(range(old.vocab_size)))}
    pairs = [(i, old_ids[piece]) for i, piece in enumerate(new.pieces(range(new.vocab_size)))
             if piece in old_ids]
    new_ids, kept_old_ids = zip(*pairs) if pairs else ((), ())
    return np.array(new_ids, np.int64), np.array(kept_old_ids, np.int64)


def transfer(old_model, model, mapping):
    """Sets built `model`'s weights to `old_model`'s (the same architecture, another vocabulary
    size), remapping each vocabulary weight's slices by `mapping` (`piece_mapping`); the slices
    of new pieces keep `model`'s initial values."""
    new_ids, old_ids = mapping
    axes = {id(variable): axis for variable, axis in model.vocabulary_weights()}
    old_vocabulary = {id(variable) for variable, _ in old_model.vocabulary_weights()}
    for variable, old in zip(model.weights, old_model.weights, strict=True):
        # Paths below the model's own name, which Keras makes unique (transformer_1/...).
        if ((id(variable) in axes) != (id(old) in old_vocabulary)
                or variable.path.partition("/")[2] != old.path.partition("/")[2]):
            raise ValueError(f"the models' weights differ: {variable.path} against {old.path}")
        if id(variable) not in axes:
            variable.assign(old.numpy())
            continue
        axis = axes[id(variable)]
        value = np.moveaxis(variable.numpy(), axis, 0).copy()
        value[new_ids] = np.moveaxis(old.numpy(), axis, 0)[old_ids]
        variable.assign(np.moveaxis(value, 0, axis))


def record(model_dir, source, old, new, mapping):
    """Writes model_dir/vocab_update.json (what `describe` says, and the id mapping); returns
    that line."""
    new_ids, old_ids = mapping
    counts = {"kept": len(new_ids), "new": new.vocab_size - len(new_ids),
              "dropped": old.vocab_size - len(new_ids)}
    text = json.dumps({"from": str(source), "old_vocab_size": old.vocab_size,
                       "new_vocab_size": new.vocab_size, **counts,
                       "new_ids": new_ids.tolist(), "old_ids": old_ids.tolist()}) + "\n"
    replace_atomically(model_dir / RECORD_FILE,
                       lambda path: path.write_text(text, encoding="utf-8"))
    return (f"a new vocabulary of {new.vocab_size} ids: {counts['kept']} pieces kept from "
            f"{old.vocab_size}, {counts['new']} new, {counts['dropped']} dropped "
            f"({model_dir / RECORD_FILE})")
