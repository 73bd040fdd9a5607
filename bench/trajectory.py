"""How translation quality and length move during one training run: every kept checkpoint of a
model_dir on the dev set, greedy and beam search, beside the scale of the token embeddings.

    python -m bench.trajectory --model_dir /tmp/q/0-ours
    python -m bench.trajectory --model_dir D --decoders "greedy=1,0;beam 4=4,0.6;beam 4 a1=4,1.0"

A length ratio that drifts, or a gap between greedy and beam search that grows, shows when a
run starts to under-translate, which one final checkpoint cannot. The embedding column is the
median root-mean-square of the sqrt(d_model)-scaled token embedding rows, the signal the
sinusoidal positions (root-mean-square 0.71) are added to; the dev loss is the cross-entropy
per real target token without label smoothing (nats).
"""

import argparse
import pathlib

import numpy as np
import sacrebleu
import tensorflow as tf

from bench.common import append_results, markdown_table
from keras_transformer import data
from keras_transformer.export.lines import translate_lines
from keras_transformer.export.translator import Translator
from keras_transformer.model_dir import checkpoints, loading
from keras_transformer.model_dir.decoding_config import DecodingConfig
from keras_transformer.training.losses import smoothed_cross_entropy, token_weights


def parse_decoders(text):
    """"greedy=1,0;beam 4=4,0.6" -> [("greedy", 1, 0.0), ("beam 4", 4, 0.6)]."""
    decoders = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, setting = item.partition("=")
        beam_size, alpha = setting.split(",")
        decoders.append((name.strip(), int(beam_size), float(alpha)))
    return decoders


def embedding_scale(model):
    """Median root-mean-square of the scaled target embedding rows (1.0 at initialization; the
    one matrix where the model shares it)."""
    rows = np.asarray(model.embedding.embeddings, np.float32)
    return float(np.median(np.sqrt((rows ** 2).mean(axis=1)) * np.sqrt(rows.shape[1])))


def dev_loss(model, batches):
    """Cross-entropy (no smoothing) per real target token, in nats."""
    total = tokens = 0.0
    for (source_ids, target_input_ids), target_ids in batches:
        logits = model((source_ids, target_input_ids), training=False)
        weights = token_weights(target_ids)
        total += float(tf.reduce_sum(smoothed_cross_entropy(target_ids, logits, 0.0) * weights))
        tokens += float(tf.reduce_sum(weights))
    return total / tokens


def score(loaded, sources, references, beam_size, alpha):
    """BLEU of `loaded` decoding as kt-translate would with `beam_size` and `alpha`."""
    translator = Translator.from_loaded(loaded, DecodingConfig(beam_size=beam_size, alpha=alpha))
    translations, _ = translate_lines(translator, sources, batch_size=64)
    return sacrebleu.BLEU().corpus_score(translations, [references])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--decoders", default="greedy=1,0;beam 4=4,0.6",
                        help='";"-separated "name=beam_size,alpha" (default "%(default)s")')
    parser.add_argument("--split", default="dev")
    parser.add_argument("--title", default="Quality during training")
    args = parser.parse_args()
    model_dir = pathlib.Path(args.model_dir)
    decoders = parse_decoders(args.decoders)
    first = loading.load(model_dir)
    source = first.run.data.open()
    sources, references = data.first_pairs(source, args.split, 10**9)
    batches = data.pipeline(source, first.vocabulary, args.split,
                            batch_tokens=first.run.batching.batch_tokens,
                            max_pair_length=first.run.data.max_pair_length, training=False)
    rows = []
    for path in checkpoints.CheckpointDirectory(model_dir / "checkpoints").paths():
        loaded = loading.load(model_dir, path)
        cells = [checkpoints.step_in_name(path), f"{embedding_scale(loaded.model):.2f}",
                 f"{dev_loss(loaded.model, batches):.3f}"]
        for _, beam_size, alpha in decoders:
            bleu = score(loaded, sources, references, beam_size, alpha)
            cells += [f"{bleu.score:.2f}", f"{bleu.sys_len / bleu.ref_len:.3f}"]
        print(" | ".join(str(cell) for cell in cells), flush=True)
        rows.append(cells)
    columns = ["step", "embedding RMS", "dev loss"]
    for name, beam_size, alpha in decoders:
        columns += [f"{name} BLEU", f"{name} length ratio"]
    append_results(args.title, f"The {args.split} set of {first.run.data.corpus}, "
                   f"{len(sources)} sentences; model_dir config: hparams "
                   f"{first.run.model.hparams_name}, batch_tokens "
                   f"{first.run.batching.batch_tokens}, "
                   f"{first.run.compute.mixed_precision}.\n\n" + markdown_table(columns, rows))


if __name__ == "__main__":
    main()
