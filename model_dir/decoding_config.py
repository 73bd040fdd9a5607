"""A trained model's decoding settings: a `DecodingConfig` (keras_transformer/search/settings.py)
resolved once from the model's own defaults, the one place the commands, the Python API, the
SavedModel, the CTranslate2 export and the Trainer's dev BLEU take them from (here, below
trainer/ and export/, for both).

    from keras_transformer.export import DecodingConfig, Translator
    translator = Translator.from_model_dir("runs/demo")  # as kt-translate --model_dir runs/demo
    wider = Translator.from_model_dir("runs/demo", DecodingConfig(beam_size=8))

A field left None takes the model's default (`resolved`): the run's hparams (decode_beam_size,
decode_alpha, decode_length_normalization, an imported model's decode_max_output_length), the
preset of what it was trained on (translation, or parsing for a treebank: section 6.3's beam
21, alpha 0.3, input + 300) and the run's longest training input.
"""

from keras_transformer.data import treebank
from keras_transformer.model_dir.loading import ModelDirError, load
from keras_transformer.runtime import devices
from keras_transformer.search.settings import DecodingConfig, DecodingConfigError


def preset_of(corpus):
    """The decode preset of a model trained on --data `corpus`: parsing for a treebank."""
    return "parsing" if treebank.is_treebank(corpus) else "translation"


def resolved_for(decoding, hparams, run_data):
    """`decoding` (a `DecodingConfig`; None: every field the model's) with every field set
    (max_output_length None: each input's length + extra_length) for a model with `HParams`
    `hparams` trained on `run_data` (a `DataConfig`: the preset and the longest input); the
    device gives the batch size (`DecodingConfig.resolved_for`). The Trainer's, for the model
    it trains.

    Raises:
        DecodingConfigError: tree_constraint True for a model that does not write trees.
    """
    decoding = decoding or DecodingConfig()
    parser = treebank.is_treebank(run_data.corpus)
    if decoding.tree_constraint and not parser:
        raise DecodingConfigError(
            f"tree_constraint: the model was trained on --data {run_data.corpus}, a "
            f"translation corpus; only a parser (trained on ptb: data) writes trees")
    return decoding.resolved_for(hparams, preset=preset_of(run_data.corpus), parser=parser,
                                 max_input_length=run_data.max_pair_length,
                                 batch_size=devices.decode_batch_size())


def resolved(decoding, loaded):
    """`resolved_for` the model `loaded` (a `model_dir.Loaded`): its hparams and its run's data
    section."""
    return resolved_for(decoding, loaded.hparams, loaded.run.data)


def tree_leaves(decoding, loaded):
    """What the trees of the parser `loaded` have as leaves ("words", "tags" or "XX") when
    `decoding` (resolved) holds it to trees; else None."""
    return treebank.leaves_of(loaded.run.data.corpus) if decoding.tree_constraint else None


def dtype_choice(decoding):
    """(dtype, why or None) the models of `decoding` (a `DecodingConfig`) are loaded in: its
    dtype, or for "auto" the one this machine decodes fastest in
    (`devices.choose_decoding_dtype`), with the reason ("--dtype auto: bfloat16 matmuls ran
    ...")."""
    if decoding.dtype != "auto":
        return decoding.dtype, None
    choice = devices.choose_decoding_dtype()
    return choice.policy, f"--dtype auto: {choice.reason}"


def load_members(path, decoding=None, *, checkpoints=None, ensemble=()):
    """[model_dir.Loaded]: the model_dir `path` with each of `checkpoints` (None: its default
    one), then each model_dir of `ensemble` (its default checkpoint), in `decoding`'s dtype
    (`dtype_choice`: "auto", the default, chosen once for all; its reason in each member's
    `dtype_reason`) and with its ema choice; more than one is an ensemble.

    Raises:
        ModelDirError: as `model_dir.load`, or members whose vocabularies differ (naming both
            files).
    """
    decoding = decoding or DecodingConfig()
    dtype, reason = dtype_choice(decoding)
    members = [load(path, checkpoint, dtype, decoding.ema)._replace(dtype_reason=reason)
               for checkpoint in checkpoints or [None]]
    members += [load(other, None, dtype, decoding.ema)._replace(dtype_reason=reason)
                for other in ensemble]
    first = members[0].vocabulary
    for member in members[1:]:
        if member.vocabulary.serialized != first.serialized:
            raise ModelDirError(
                f"{member.vocabulary.path} and {first.path} are different vocabularies; the "
                f"members of an ensemble must share one")
    return members
