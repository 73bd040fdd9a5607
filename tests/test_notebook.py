"""notebooks/quickstart.ipynb, executed end to end by papermill with tiny settings."""

import pathlib

import nbformat
import papermill
import pytest

NOTEBOOK = pathlib.Path(__file__).parent.parent / "notebooks" / "quickstart.ipynb"
TINY = {"DATASET": "bible_en_es", "HPARAMS": "transformer_tiny", "VOCAB_SIZE": 600,
        "MAX_PAIR_LENGTH": 64, "BATCH_TOKENS": 1024, "EPOCHS": 2, "STEPS_PER_EPOCH": 10,
        "BLEU_SENTENCES": 8}


@pytest.mark.slow
def test_quickstart_runs_and_shows_its_plots(tmp_path):
    executed = tmp_path / "quickstart.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(executed), parameters=TINY, cwd=str(tmp_path),
                               kernel_name="python3", progress_bar=False,
                               execution_timeout=600)
    cells = nbformat.read(executed, as_version=4).cells
    outputs = [output for cell in cells if cell.cell_type == "code" for output in cell.outputs]
    text = "".join(output.get("text", "") for output in outputs)
    images = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(images) == 3  # the learning-rate schedule, the dev loss, the attention maps
    assert "BLEU = " in text and "exported to quickstart/export/1" in text
    # The Trainer's run: evaluations every 10 steps, the best kept, the last 3 averaged.
    assert "done at step 20; averaged into quickstart/run/averaged/ckpt-20" in text
    assert "evaluation at step 10: dev_loss" in text and "evaluation at step 20" in text
    assert list((tmp_path / "quickstart" / "run" / "best").glob("ckpt-*"))
    assert (tmp_path / "quickstart" / "export" / "1" / "saved_model.pb").is_file()
