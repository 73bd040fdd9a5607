"""Every Table 3 row built, its parameter count beside the paper's (`python -m
keras_transformer.hparams --table3`). Apart from the sets themselves, since building them needs
the model (builders.py imports the sets)."""

from keras_transformer.hparams import TABLE3, TABLE3_VOCAB_SIZE, get
from keras_transformer.models.builders import build_model


def table3_rows(vocab_size: int = TABLE3_VOCAB_SIZE):
    """Yields (name, hparams, our parameter count, the paper's row) for every Table 3 row."""
    for name, (_, paper) in TABLE3.items():
        hp = get(name)
        model = build_model(hp, vocab_size)
        yield name, hp, model.count_params(), paper
        del model


def format_table3(rows, vocab_size: int) -> str:
    """Formats `table3_rows(vocab_size)` as a text table, ours beside the paper's."""
    header = (f"{'name':22} {'N':>2} {'d_model':>7} {'d_ff':>5} {'h':>3} {'d_k':>4} {'d_v':>4} "
              f"{'P_drop':>6} {'e_ls':>4} {'pos':>10} {'ours(M)':>8} {'paper(M)':>8} "
              f"{'paper PPL':>9} {'paper BLEU':>10}")
    lines = [f"Table 3 with a {vocab_size:,}-token shared vocabulary", header]
    for name, hp, count, paper in rows:
        d_k = hp.d_k or hp.d_model // hp.num_heads
        d_v = hp.d_v or hp.d_model // hp.num_heads
        paper_params = "-" if paper.params_millions is None else f"{paper.params_millions:g}"
        lines.append(
            f"{name:22} {hp.num_layers:>2} {hp.d_model:>7} {hp.d_ff:>5} {hp.num_heads:>3} "
            f"{d_k:>4} {d_v:>4} {hp.dropout:>6} {hp.label_smoothing:>4} "
            f"{hp.position_encoding:>10} {count / 1e6:>8.1f} {paper_params:>8} "
            f"{paper.perplexity:>9.2f} {paper.bleu:>10.1f}")
    return "\n".join(lines)
