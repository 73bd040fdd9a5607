"""Beam search against greedy decoding on a trained model_dir: scores and BLEU by beam size.

Both decode as kt-translate decodes the model (its `DecodingConfig`: alpha, length
normalization, output limit; a parser's without its tree constraint), the beam size aside. For each
beam size: the mean length-penalized score of the best hypothesis, on how many sentences it scores
below / above greedy decoding's hypothesis (scored the same way), whether those greedy hypotheses
ended or ran to the length limit, and sacrebleu BLEU on the dev split.

    python -m bench.beam_vs_greedy --model_dir runs/demo --sentences 492
"""

import argparse
import time

import numpy as np
import sacrebleu
import tensorflow as tf

import keras_transformer as kt
from bench.common import append_results, markdown_table
from keras_transformer import model_dir
from keras_transformer.export import DecodingConfig
from keras_transformer.model_dir import decoding_config


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.beam_vs_greedy",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--beam_sizes", default="1,2,4,8")
    parser.add_argument("--alpha", type=float, help="default: the model's own")
    parser.add_argument("--batch_size", type=int, default=50)
    args = parser.parse_args()

    loaded = model_dir.load(args.model_dir)
    decoding = decoding_config.resolved(DecodingConfig(alpha=args.alpha), loaded)
    source = loaded.run.data.open()
    pairs = list(source.pairs("dev").take(args.sentences).as_numpy_iterator())
    sources = [en.decode("utf-8") for en, _ in pairs]
    references = [es.decode("utf-8") for _, es in pairs]
    ids = loaded.vocabulary.encode(tf.constant(sources),
                                   decoding.max_input_length).to_tensor().numpy()

    def decode(beam_size):
        """Best hypotheses' texts and scores; beam_size 0 is greedy decoding."""
        texts, scores, ended = [], [], []
        for start in range(0, len(ids), args.batch_size):
            batch = ids[start:start + args.batch_size]
            batch = batch[:, :max(1, np.count_nonzero(batch, axis=1).max())]
            if beam_size:
                best, score = (t[:, 0] for t in kt.beam_decode(
                    loaded.model, batch, decoding.replace(beam_size=beam_size)))
            else:
                best, log_prob = kt.greedy_decode(loaded.model, batch, decoding)
                has_eos = (best.numpy() == kt.EOS_ID).any(-1)
                lengths = np.where(has_eos, (best.numpy() == kt.EOS_ID).argmax(-1) + 1,
                                   decoding.output_limits(np.count_nonzero(batch, axis=1),
                                                          model=loaded.model))
                score = log_prob / kt.length_penalty(lengths, decoding.alpha,
                                                     decoding.length_normalization)
                ended.extend(has_eos)
            texts.extend(t.decode("utf-8") for t in loaded.vocabulary.detokenize(best).numpy())
            scores.extend(np.asarray(score))
        return texts, np.array(scores), np.array(ended)

    start = time.perf_counter()
    greedy_texts, greedy_scores, greedy_ended = decode(0)
    rows = [["greedy", f"{greedy_scores.mean():.3f}", "-", "-",
             f"{sacrebleu.corpus_bleu(greedy_texts, [references]).score:.2f}"]]
    for beam_size in (int(b) for b in args.beam_sizes.split(",")):
        texts, scores, _ = decode(beam_size)
        worse = scores < greedy_scores - 1e-5
        rows.append([f"beam {beam_size}", f"{scores.mean():.3f}",
                     f"{worse.sum()} ({(worse & ~greedy_ended).sum()} where greedy ran to the "
                     f"limit)", (scores > greedy_scores + 1e-5).sum(),
                     f"{sacrebleu.corpus_bleu(texts, [references]).score:.2f}"])
    cap = f", at most {decoding.max_output_length}" if decoding.max_output_length else ""
    table = (f"{args.model_dir} ({loaded.run.model.hparams_name}, {loaded.checkpoint.name}), "
             f"the first "
             f"{len(ids)} dev sentences, alpha {decoding.alpha} ({decoding.length_normalization}); "
             f"greedy hypotheses ended on {greedy_ended.sum()} of them, the rest ran to the "
             f"output limit (input + {decoding.extra_length} tokens{cap}). "
             f"{time.perf_counter() - start:.0f} s in all.\n\n" + markdown_table(
                 ["decoding", "mean score", "below greedy", "above greedy", "BLEU"], rows))
    append_results("Beam search against greedy decoding", table)


if __name__ == "__main__":
    tf.get_logger().setLevel("ERROR")
    main()
