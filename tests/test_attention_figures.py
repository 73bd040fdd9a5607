"""kt-attention and export.attention_figures: a sentence's attention maps, drawn as heatmaps."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.export import Translator
from keras_transformer.export import attention_figures as attention

TEXT = "And God said, Let there be light: and there was light."


@pytest.fixture
def translator(trained):
    return Translator(trained.model, trained.vocabulary, max_input_length=64)


def test_maps_label_every_weight_with_its_tokens(translator, trained):
    maps = attention.attention_maps(translator, TEXT)
    source, target = len(maps.source_tokens), len(maps.target_tokens)
    layers, heads = trained.model.num_layers, trained.model.num_heads
    assert maps.weights["encoder_self_attention"].shape == (layers, heads, source, source)
    assert maps.weights["decoder_self_attention"].shape == (layers, heads, target, target)
    assert maps.weights["encoder_decoder_attention"].shape == (layers, heads, target, source)
    assert maps.source_tokens[-1] == "</s>" and "▁light" in maps.source_tokens
    assert maps.decoder_inputs == ["<s>"] + maps.target_tokens[:-1]
    # The translation drawn is the one the translator gives (kt-translate's, the export's).
    expected = translator.translate(tf.constant([TEXT]))["translations"][0].numpy().decode()
    assert maps.translation == expected
    assert "".join(maps.target_tokens).replace("▁", " ").strip().startswith(
        expected.split()[0])


def test_a_given_target_is_attended_as_teacher_forcing(translator):
    maps = attention.attention_maps(translator, TEXT, target="Y dijo Dios: Sea la luz.")
    assert maps.target_tokens[-1] == "</s>" and maps.translation == "Y dijo Dios: Sea la luz."
    for name, weights in maps.weights.items():
        np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5, err_msg=name)


def test_the_figure_shows_the_chosen_layer_and_head(translator, trained):
    maps = attention.attention_maps(translator, TEXT)
    fig = attention.figure(maps, layer=2, head=3)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == [title for _, title in attention.PANELS]
    for ax, (name, _) in zip(panels, attention.PANELS):
        np.testing.assert_array_equal(ax.images[0].get_array(), maps.weights[name][1, 2])
    labels = attention.token_labels
    assert [t.get_text() for t in panels[2].get_xticklabels()] == labels(maps.source_tokens)
    assert [t.get_text() for t in panels[2].get_yticklabels()] == labels(maps.target_tokens)
    assert [t.get_text() for t in panels[1].get_xticklabels()] == labels(maps.decoder_inputs)
    assert [t.get_text() for t in panels[1].get_yticklabels()] == labels(maps.decoder_inputs)
    assert "layer 2 of 2, head 3 of 4" in fig.get_suptitle()
    for layer, head, message in ((3, 1, "--layer 3 does not exist: the model has layers 1 to 2"),
                                 (1, 5, "--head 5 does not exist: the model has heads 1 to 4")):
        with pytest.raises(attention.AttentionError, match=message):
            attention.figure(maps, layer, head)


def test_token_labels_drop_the_word_mark_and_mark_continuations():
    assert attention.token_labels(["\u2581And", "\u2581G", "od", ",", "\u2581", "<0xE2>", "</s>",
                                   "<s>", "2"]) == [
        "And", "G", "##od", ",", "\u2423", "<0xE2>", "</s>", "<s>", "##2"]


@pytest.mark.parametrize("text,target", [(TEXT, None), ("Jesus wept.", "Lloró.")])
def test_the_panels_cells_are_equal_squares_and_no_titles_or_labels_meet(translator, text,
                                                                        target):
    """What made the demo's picture hard to read: panels of different cell sizes, a narrow
    panel's title running into its neighbour's, the word mark drawn as a stray bar."""
    fig = attention.figure(attention.attention_maps(translator, text, target), 2, 1)
    panels = [ax for ax in fig.axes if ax.get_title()]
    cells = []
    for ax in panels:
        box, (rows, columns) = ax.get_window_extent(), ax.images[0].get_array().shape
        cells += [box.width / columns, box.height / rows]
    np.testing.assert_allclose(cells, cells[0], rtol=1e-6)
    texts = [ax.title for ax in panels] + [ax.xaxis.label for ax in panels]
    boxes = [t.get_window_extent() for t in texts]
    for i, first in enumerate(boxes):
        for j, second in enumerate(boxes[i + 1:], i + 1):
            assert not first.overlaps(second), (texts[i].get_text(), texts[j].get_text())
    for ax in panels:
        for label in ax.get_xticklabels() + ax.get_yticklabels():
            assert "\u2581" not in label.get_text()


def test_kt_attention_writes_a_png_and_refuses_bad_requests(trained_model_dir, tmp_path,
                                                            capsys):
    output = tmp_path / "a.png"
    argv = ["--model_dir", str(trained_model_dir), "--text", TEXT, "--output", str(output)]
    assert attention.main(argv) == 0
    out = capsys.readouterr().out
    assert "▁God ▁said" in out and f"wrote {output}" in out
    assert output.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    written = output.read_bytes()

    with pytest.raises(SystemExit) as exit_info:  # never replaces a file unasked
        attention.main(argv)
    assert exit_info.value.code == 2 and "pass --overwrite" in capsys.readouterr().err
    assert output.read_bytes() == written
    assert attention.main([*argv, "--overwrite", "--layer", "9"]) == 2
    assert "--layer 9 does not exist: the model has layers 1 to 2" in capsys.readouterr().err
    assert attention.main([*argv[:2], "--text", "  ", "--output", str(output), "--overwrite"]) == 2
    assert "--text has no tokens" in capsys.readouterr().err
    assert output.read_bytes() == written
    assert attention.main(["--model_dir", str(tmp_path), "--text", TEXT,
                           "--output", str(tmp_path / "b.png")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]  # no leftovers
