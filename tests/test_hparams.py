import dataclasses
import inspect

import keras
import pytest
from conftest import run_main

import keras_transformer as kt
from keras_transformer import hparams
from keras_transformer.errors import check_one_of
from keras_transformer.hparams import __main__ as hparams_command
from keras_transformer.models.builders import MODEL_FIELDS
from keras_transformer.models.table3 import format_table3, table3_rows

TABLE3_NAMES = [
    "table3_a_h1", "table3_a_h4", "table3_a_h16", "table3_a_h32", "table3_b_dk16", "table3_b_dk32",
    "table3_c_n2", "table3_c_n4", "table3_c_n8", "table3_c_d256", "table3_c_d1024",
    "table3_c_ff1024", "table3_c_ff4096", "table3_d_drop0", "table3_d_drop02", "table3_d_ls0",
    "table3_d_ls02", "table3_e_learned_pos"]


def test_every_named_set_is_registered():
    assert set(TABLE3_NAMES + ["transformer_base", "transformer_big", "transformer_tiny"]) <= set(
        hparams.names())


def test_base_and_big_are_the_papers():
    base = hparams.get("transformer_base")
    assert (base.num_layers, base.d_model, base.d_ff, base.num_heads, base.dropout,
            base.label_smoothing, base.warmup_steps, base.train_steps) == (
        6, 512, 2048, 8, 0.1, 0.1, 4000, 100_000)
    assert (base.adam_beta_1, base.adam_beta_2, base.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (base.attention_dropout, base.relu_dropout, base.decode_alpha) == (0.0, 0.0, 0.6)
    big = hparams.get("transformer_big")
    assert (big.d_model, big.d_ff, big.num_heads, big.dropout, big.train_steps) == (
        1024, 4096, 16, 0.3, 300_000)


# Table 3 of the paper, typed in from the paper: the columns each row changes from base.
PAPER_TABLE3 = {
    "table3_a_h1": dict(num_heads=1, d_k=512, d_v=512),
    "table3_a_h4": dict(num_heads=4, d_k=128, d_v=128),
    "table3_a_h16": dict(num_heads=16, d_k=32, d_v=32),
    "table3_a_h32": dict(num_heads=32, d_k=16, d_v=16),
    "table3_b_dk16": dict(d_k=16),
    "table3_b_dk32": dict(d_k=32),
    "table3_c_n2": dict(num_layers=2),
    "table3_c_n4": dict(num_layers=4),
    "table3_c_n8": dict(num_layers=8),
    "table3_c_d256": dict(d_model=256, d_k=32, d_v=32),
    "table3_c_d1024": dict(d_model=1024, d_k=128, d_v=128),
    "table3_c_ff1024": dict(d_ff=1024),
    "table3_c_ff4096": dict(d_ff=4096),
    "table3_d_drop0": dict(dropout=0.0),
    "table3_d_drop02": dict(dropout=0.2),
    "table3_d_ls0": dict(label_smoothing=0.0),
    "table3_d_ls02": dict(label_smoothing=0.2),
    "table3_e_learned_pos": dict(position_encoding="learned"),
    "transformer_big": dict(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3,
                            train_steps=300_000),
}


@pytest.mark.parametrize("name", sorted(PAPER_TABLE3))
def test_table3_rows_change_only_the_papers_columns(name):
    base = hparams.get("transformer_base").to_dict()
    row = hparams.get(name).to_dict()
    changed = {k: v for k, v in row.items() if base[k] != v}
    # d_k = d_v = d_model / h may be stated or derived (None): compare what the model gets.
    for key in ("d_k", "d_v"):
        derived = row["d_model"] // row["num_heads"]
        if (row[key] or derived) == (base[key] or 64):
            changed.pop(key, None)
    expected = {k: v for k, v in PAPER_TABLE3[name].items()
                if (v or 0) != (base[k] or 64 if k in ("d_k", "d_v") else base[k])}
    assert changed == expected


def test_parameter_counts_match_table3():
    """Our counts with a 37k shared vocabulary against the paper's, within 5% or 3M."""
    # A count needs the weights' shapes, not their values: built without initial values,
    # transformer_big takes 0.1 s instead of 1.5 (the 20 models 37 s of the suite's time).
    try:
        with keras.StatelessScope(initialize_variables=False):
            rows = list(table3_rows(hparams.TABLE3_VOCAB_SIZE))
    finally:
        # Keras keeps such variables to initialize when the next stateless scope closes.
        keras.utils.clear_session()
    print("\n" + format_table3(rows, hparams.TABLE3_VOCAB_SIZE))
    base_count = next(count for name, _, count, _ in rows if name == "transformer_base")
    for name, hp, count, paper in rows:
        if paper.params_millions is None:
            # Rows without a count have base's, plus learned positions' two small tables.
            extra = 2 * hp.max_positions * hp.d_model if hp.position_encoding == "learned" else 0
            assert count == base_count + extra, name
        else:
            tolerance = max(0.05 * paper.params_millions, 3.0)
            assert abs(count / 1e6 - paper.params_millions) <= tolerance, (name, count)


def test_get_applies_overrides():
    hp = hparams.get("transformer_base", dropout=0.3, num_layers=4)
    assert (hp.dropout, hp.num_layers) == (0.3, 4)
    assert hparams.get("transformer_base").dropout == 0.1  # the registry is untouched


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(kt.HParamsError, match="unknown hparams set 'transformer_huge'.*"
                                              "transformer_base.*transformer_big"):
        hparams.get("transformer_huge")


def test_unknown_field_lists_the_valid_ones():
    with pytest.raises(kt.HParamsError, match=r"unknown hparams field\(s\) \['dropuot'\].*dropout"):
        hparams.get("transformer_base", dropuot=0.2)


@pytest.mark.parametrize("field,value,message", [
    ("num_layers", 2.5, "'num_layers' must be int"),
    ("num_layers", True, "'num_layers' must be int"),
    ("dropout", "0.1", "'dropout' must be float"),
    ("d_k", 3.0, "'d_k' must be int or None"),
    ("dropout", 1.0, r"'dropout' must be in \[0, 1\)"),
    ("num_heads", 0, "'num_heads' must be >= 1"),
    ("num_heads", 7, "not divisible by num_heads=7"),
    ("position_encoding", "rotary", "'position_encoding' must be one of"),
    ("ffn_activation", "tanh", "'ffn_activation' must be one of"),
    ("sinusoid_layout", "concatenated", "'sinusoid_layout' must be one of"),
    ("attention_bias", 1, "'attention_bias' must be bool"),
    ("decode_alpha", -0.1, "'decode_alpha' must be at least 0.0, got -0.1"),
    ("decode_alpha", float("inf"), "'decode_alpha' must be at least 0.0, got inf"),
    ("decode_beam_size", 0, "'decode_beam_size' must be at least 1, got 0"),
    ("cooldown_fraction", 1.0, r"'cooldown_fraction' must be in \[0, 1\)"),
])
def test_bad_values_are_refused_with_the_field_named(field, value, message):
    with pytest.raises(kt.HParamsError, match=message):
        hparams.get("transformer_base", **{field: value})


def test_check_one_of_returns_a_choice_and_refuses_the_rest_with_the_given_error():
    assert check_one_of("layout", "split", ("interleaved", "split"), kt.HParamsError) == "split"
    with pytest.raises(kt.HParamsError) as refused:
        check_one_of("hparams field 'layout'", "diagonal", ("interleaved", "split"),
                     kt.HParamsError)
    assert str(refused.value) == ("hparams field 'layout' must be one of interleaved, split, "
                                  "got 'diagonal'")
    with pytest.raises(kt.UserError, match="--keep_best must be one of bleu, loss, got 3"):
        check_one_of("--keep_best", 3, {"bleu": 1, "loss": 2})  # UserError unless told


def test_override_string_is_typed_by_field():
    hp = hparams.get("transformer_base").override_from_string(
        "dropout=0.2, num_layers=4,d_k=None,d_v=32,position_encoding=learned,"
        "learning_rate_multiplier=2,attention_bias=True,scale_embeddings=False")
    assert (hp.dropout, hp.num_layers, hp.d_k, hp.d_v, hp.position_encoding,
            hp.learning_rate_multiplier, hp.attention_bias, hp.scale_embeddings) == (
        0.2, 4, None, 32, "learned", 2.0, True, False)
    assert hparams.parse_overrides("") == {}


@pytest.mark.parametrize("text,message", [
    ("num_layers=four", r"num_layers='four': expected int"),
    ("output_bias=yes", r"output_bias='yes': expected bool"),
    ("dropout", "not of the form name=value"),
    ("depth=3", "unknown hparams field 'depth'"),
])
def test_bad_override_strings_are_named(text, message):
    with pytest.raises(kt.HParamsError, match=message):
        hparams.parse_overrides(text)


def test_hparams_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        hparams.get("transformer_base").dropout = 0.5


def test_model_fields_are_exactly_the_transformer_arguments():
    arguments = set(inspect.signature(kt.Transformer).parameters) - {"vocab_size", "kwargs"}
    assert set(MODEL_FIELDS) == arguments
    assert set(MODEL_FIELDS) <= set(hparams.field_names())


def test_build_model_accepts_a_name_or_hparams():
    by_name = kt.build_model("transformer_tiny", vocab_size=50)
    by_set = kt.build_model(hparams.get("transformer_tiny"), vocab_size=50)
    assert by_name.count_params() == by_set.count_params() > 0
    assert by_name.get_config()["num_layers"] == 2


def run_cli(*args):
    return run_main(hparams_command.main, *args)


def test_cli_lists_shows_and_refuses():
    listing = run_cli()
    assert listing.returncode == 0 and "table3_e_learned_pos" in listing.stdout.split()
    shown = run_cli("--show", "transformer_big")
    assert shown.returncode == 0 and "d_model = 1024" in shown.stdout
    refused = run_cli("--show", "nope")
    assert refused.returncode == 2 and "unknown hparams set 'nope'" in refused.stderr
