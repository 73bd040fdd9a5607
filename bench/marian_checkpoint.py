"""Random Marian checkpoints in Hugging Face's format, made with `transformers`, and what
`transformers` computes with them: the reference kt-import is checked against.

    pip install -e ".[bench]"   # torch, transformers (safetensors comes with them)
    python -m bench.marian_checkpoint --shape tiny --output tests/data/marian_tiny

"tiny" (2+2 layers of width 16, 561 ids) made tests/data/marian_tiny, which tests/test_marian.py
reads (so the suite needs neither PyTorch nor transformers); "opus-mt" is OPUS-MT's shape (6+6
layers, d_model 512, 8 heads, d_ff 2048, 58,101 ids), which bench/marian_import.py makes in a
scratch directory (300 MB). What it writes:
    source.spm, target.spm   SentencePiece unigram models (nmt_nfkc, as OPUS-MT's; identity)
                             trained on the bundled tatoeba_en_es English and Spanish
    vocab.json               </s> 0, <unk> 1, a >>spa<< language code, both models' pieces,
                             for "opus-mt" pieces no text makes up to its size, <pad> last
                             (what Marian's converter writes)
    config.json, generation_config.json   a MarianConfig (swish, scaled embeddings) and
                             OPUS-MT's generation settings (beam 4, length_penalty 1.0,
                             bad_words [[pad]], renormalize_logits, forced end of sentence)
    model.safetensors        the weights as save_pretrained writes them (no position tables)
    pytorch_model.bin        the same weights as torch.save of the state dict in PyTorch's
                             legacy format, position tables and tied copies (sharing one
                             storage) included, as the 2020 hub uploads
    zip_format/pytorch_model.bin   the state dict in PyTorch's zip format (1.6 and later)
    reference.npz            teacher-forced logits on a padded batch; greedy and beam-4
                             `generate` ids for the first 50 held-out sentences
    reference.json           those sentences, their ids as MarianTokenizer makes them, and
                             the decoded translations

The random weights are drawn wider than Marian's init and end of sentence is favoured by the
logits' bias, so that outputs differ in length: about a third end early, the others loop until
max_length, where generate forces end of sentence (forced_eos_token_id).
"""

import argparse
import gzip
import json
import pathlib

import numpy as np
import sentencepiece

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
CORPUS = REPOSITORY / "data" / "corpora" / "tatoeba_en_es"
SENTENCES = 50
LOGIT_ROWS = 6
MAX_LENGTH = 64
# init_std: the weights' spread; eos_bias: added to end of sentence's logit.
SHAPES = {
    "tiny": dict(d_model=16, layers=2, heads=2, d_ff=32, pieces=300, ids=None, init_std=0.3,
                 eos_bias=5.0),
    "opus-mt": dict(d_model=512, layers=6, heads=8, d_ff=2048, pieces=8000, ids=58_101,
                    init_std=0.05, eos_bias=5.0),
}


def corpus_lines(name, count):
    with gzip.open(CORPUS / name, "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for _, line in zip(range(count), file)]


def train_spm(texts, path, normalization, pieces):
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(path.with_suffix("")), vocab_size=pieces,
        model_type="unigram", normalization_rule_name=normalization, character_coverage=0.98,
        num_threads=1, minloglevel=2)
    path.with_suffix(".model").rename(path)
    path.with_suffix(".vocab").unlink()


def write_vocabulary(output, pieces, ids):
    lines = 5000 if pieces < 1000 else 200_000
    english, spanish = corpus_lines("train.en.gz", lines), corpus_lines("train.es.gz", lines)
    train_spm(english, output / "source.spm", "nmt_nfkc", pieces)
    train_spm(spanish, output / "target.spm", "identity", pieces)
    vocab = {"</s>": 0, "<unk>": 1, ">>spa<<": 2}
    for name in ("source.spm", "target.spm"):
        processor = sentencepiece.SentencePieceProcessor(model_file=str(output / name))
        for i in range(processor.get_piece_size()):
            if not (processor.is_control(i) or processor.is_unknown(i)):
                vocab.setdefault(processor.id_to_piece(i), len(vocab))
    while ids and len(vocab) < ids - 1:  # OPUS-MT's size: pieces only the model can write
        vocab[f"\u2581unused{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (output / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1) + "\n",
                                       encoding="utf-8")
    return vocab


def random_model(vocab_size, pad, shape):
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(20261127)
    config = MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=shape["d_model"],
        encoder_layers=shape["layers"], decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["d_ff"], decoder_ffn_dim=shape["d_ff"],
        activation_function="swish", max_position_embeddings=512, scale_embedding=True,
        pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
        init_std=shape["init_std"], dropout=0.1, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        bias = torch.randn(1, vocab_size) * 0.5
        bias[0, 0] += shape["eos_bias"]  # outputs of a few to a few tens of tokens
        bias[0, pad] = 0.0
        model.final_logits_bias.copy_(bias)
        model.model.shared.weight[pad].zero_()  # Marian's converter's zero <pad> row
    return model


def generation_settings(pad):
    return {"num_beams": 4, "max_length": MAX_LENGTH, "length_penalty": 1.0,
            "bad_words_ids": [[pad]], "renormalize_logits": True, "forced_eos_token_id": 0,
            "decoder_start_token_id": pad, "eos_token_id": 0, "pad_token_id": pad}


def references(model, tokenizer, pad, output):
    import torch

    sources = corpus_lines("dev.en.gz", SENTENCES)
    targets = corpus_lines("dev.es.gz", LOGIT_ROWS)
    sources[3] = ">>spa<< " + sources[3]  # a language code, read as one piece
    batch = tokenizer(sources[:LOGIT_ROWS], text_target=targets, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.numpy()
    settings = generation_settings(pad)
    found = {}
    for name, beams in (("greedy", 1), ("beam4", 4)):
        ids = []
        for source in sources:  # one by one: generate's batches would share a limit
            encoded = tokenizer([source], return_tensors="pt")
            with torch.no_grad():
                out = model.generate(**encoded, **dict(settings, num_beams=beams),
                                     do_sample=False)
            ids.append(out[0, 1:].tolist())  # without the start token
        found[name] = ids
        ended = sum(row.count(0) > 0 and len(row) < MAX_LENGTH - 1 for row in ids)
        print(f"{name}: {ended}/{len(ids)} end before the limit; lengths "
              f"{sorted(len(row) for row in ids)}")
    width = max(len(row) for rows in found.values() for row in rows)
    arrays = {name: np.array([row + [pad] * (width - len(row)) for row in rows], np.int32)
              for name, rows in found.items()}
    np.savez_compressed(output / "reference.npz", logits=logits.astype(np.float32),
                        labels=batch["labels"].numpy(), input_ids=batch["input_ids"].numpy(),
                        **arrays)
    (output / "reference.json").write_text(json.dumps({
        "sources": sources, "targets": targets,
        "source_ids": [tokenizer(s)["input_ids"] for s in sources],
        "target_ids": [tokenizer(text_target=t)["input_ids"] for t in targets],
        "greedy": tokenizer.batch_decode(found["greedy"], skip_special_tokens=True),
        "beam4": tokenizer.batch_decode(found["beam4"], skip_special_tokens=True)},
        ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def write_checkpoint(output, shape, pytorch_file=True):
    """Writes a random Marian checkpoint of `shape` (a `SHAPES` entry) into directory `output`;
    returns (the MarianMTModel, its MarianTokenizer, the pad id)."""
    import torch
    from transformers import MarianTokenizer

    output.mkdir(parents=True, exist_ok=True)
    vocab = write_vocabulary(output, shape["pieces"], shape["ids"])
    pad = vocab["<pad>"]
    model = random_model(len(vocab), pad, shape)
    model.save_pretrained(output)  # config.json, model.safetensors
    (output / "generation_config.json").write_text(
        json.dumps(generation_settings(pad), indent=2) + "\n")
    tokenizer = MarianTokenizer(str(output / "source.spm"), str(output / "target.spm"),
                                str(output / "vocab.json"))
    if not pytorch_file:
        return model, tokenizer, pad
    # As the 2020 uploads: PyTorch's legacy format, the tied copies sharing the embedding's
    # storage, the position tables included. PyTorch's zip format beside it, in zip_format/.
    state = model.state_dict()
    for side in ("encoder", "decoder"):
        state[f"model.{side}.embed_tokens.weight"] = state["model.shared.weight"]
        state[f"model.{side}.embed_positions.weight"] = \
            getattr(model.model, side).embed_positions.weight.detach()
    state.pop("lm_head.weight", None)
    torch.save(state, output / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    (output / "zip_format").mkdir(exist_ok=True)
    torch.save(model.state_dict(), output / "zip_format" / "pytorch_model.bin")
    return model, tokenizer, pad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--output", default=str(REPOSITORY / "tests" / "data" / "marian_tiny"))
    args = parser.parse_args()
    output = pathlib.Path(args.output)
    model, tokenizer, pad = write_checkpoint(output, SHAPES[args.shape])
    references(model, tokenizer, pad, output)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
