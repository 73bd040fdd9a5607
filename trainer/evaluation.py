"""Dev evaluation while training: dev loss, perplexity, accuracy and BLEU (sacrebleu) of greedy
or beam-search translations; for a run on a treebank, also EVALB's F1 of those outputs read back
into trees."""

import contextlib
import sys
import typing

import keras
import sacrebleu
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import data
from keras_transformer.data import evalb, trees
from keras_transformer.model_dir.checkpoints import step_of
from keras_transformer.search.decode import beam_decode, greedy_decode
from keras_transformer.trainer.callbacks import inner_optimizer, scalar


def translate_ids(model, source_ids, decoding, *, batch_size=64, tree_constraints=None):
    """Translations of int [n, length] source ids, as a list of id arrays, decoded as
    `decoding` says (a resolved `DecodingConfig`: model_dir.decoding_config `resolved` or
    `resolved_for`): greedy, or the best of a beam search when its beam_size > 1 (a
    Transformer's; an MT-LSTM's are greedy), with its alpha, length normalization and output
    limit; for a parser, `tree_constraints` (`data.treebank.tree_constraints`) holds them to
    trees."""
    outputs = [None] * len(source_ids)
    mt_lstm = isinstance(model, kt.MTLSTM)
    if mt_lstm and (decoding.beam_size > 1 or tree_constraints):
        raise ValueError("an MT-LSTM translates greedily (beam_size 1), without constraint")
    for rows, batch in data.length_sorted_batches(source_ids, batch_size):
        tree = tree_constraints(tf.constant(batch, tf.int32)) if tree_constraints else None
        if mt_lstm:
            ids = model.greedy_translate(batch, decoding.output_limits(batch.shape[1]))
        elif decoding.beam_size > 1:
            ids = beam_decode(model, batch, decoding, tree_constraint=tree)[0][:, 0]
        else:
            ids, _ = greedy_decode(model, batch, decoding, tree_constraint=tree)
        for row, row_ids in zip(rows, ids.numpy()):
            outputs[row] = row_ids
    return outputs


def source_ids(vocabulary, sources, max_input_length):
    """Dev sentences (str) as the model's input, int32 [n, length], 0-padded: `Vocabulary.encode`,
    as in training and in the Translator."""
    return vocabulary.encode(tf.constant(sources), max_input_length).to_tensor().numpy()


def bleu(model, vocabulary, sources, references, decoding, *, source_vocabulary=None,
         tree_constraints=None):
    """sacrebleu corpus BLEU of translations decoded as `decoding` says (its max_input_length
    cuts the sources; the rest as for `translate_ids`); returns (BLEUScore, signature,
    hypotheses). `source_vocabulary` encodes the sources instead of `vocabulary` (an MT-LSTM's
    words); `tree_constraints` as for `translate_ids`."""
    ids = translate_ids(model, source_ids(source_vocabulary or vocabulary, sources,
                                          decoding.max_input_length),
                        decoding, tree_constraints=tree_constraints)
    hypotheses = [text.decode("utf-8")
                  for text in vocabulary.detokenize(tf.ragged.constant(ids)).numpy()]
    metric = sacrebleu.BLEU()
    return metric.corpus_score(hypotheses, [references]), str(metric.get_signature()), hypotheses


def chrf(hypotheses, references):
    """sacrebleu's corpus chrF (character 6-grams, beta 2): kinder than BLEU to a morphology
    rich target such as Spanish, where a wrong ending costs a whole word in BLEU."""
    return sacrebleu.CHRF().corpus_score(hypotheses, [references]).score


def uses_ema(optimizer):
    """True for an optimizer keeping a moving average of the weights (also under loss scaling)."""
    return bool(getattr(inner_optimizer(optimizer), "use_ema", False))


@contextlib.contextmanager
def averaged_weights(model):
    """Inside, `model` holds its optimizer's moving averages of the weights (--ema_decay), and
    its own weights again after; without a moving average, nothing changes."""
    if not uses_ema(model.optimizer):
        yield
        return
    variables = model.trainable_variables
    trained = [variable.numpy() for variable in variables]
    model.optimizer.finalize_variable_values(variables)  # copies the averages in
    try:
        yield
    finally:
        for variable, value in zip(variables, trained):
            variable.assign(value)


def parse_f1(hypotheses, gold_trees, tags=False):
    """EVALB's F1 (all sentences) of linearized trees (str) read back over the gold trees' words
    as kt-parse reads them (`trees.parsed`; `tags`: the leaves are predicted tags)."""
    parsed = [trees.parsed(text.split(), gold.words(), gold, tags)
              for text, gold in zip(hypotheses, gold_trees)]
    return evalb.evaluate(gold_trees, parsed)[0].f1


class DevCorpus(typing.NamedTuple):
    """One corpus of several (`data.WeightedCorpora`) as `Evaluation` scores it apart."""

    name: str
    batches: object  # its dev pipeline (one pass)
    sources: list  # dev sentences (str) for BLEU; may be empty
    references: list


class Evaluation(keras.callbacks.Callback):
    """Every `every` steps: dev loss, perplexity, accuracy and BLEU (`evaluate()` for another
    moment, e.g. the end of training; it does nothing twice at one step). A periodic evaluation
    within a quarter of `every` before the step the run will end at (`ends_at`) is skipped:
    the final one follows it, and a short timed run's last minute is better spent training.
    With a moving average of the weights (--ema_decay), of the averaged weights; a best
    checkpoint (`keep_best`) holds both.

    Args:
        dev_batches: the dev split's pipeline (one pass), or None.
        vocabulary: for BLEU.
        sources, references: dev sentences (str) for BLEU; may be empty.
        every: steps between evaluations.
        decoding: how the dev sources are translated for BLEU, a resolved `DecodingConfig`
            (the Trainer's: the model's own, `decoding_config.resolved_for`, with
            --eval_beam_size; beam_size 1 is greedy): its max_input_length cuts them, as the
            Translator cuts its inputs. None without `sources`.
        writer: TensorBoard writer, or None.
        keep_best: a `KeepBest` that sees each evaluation's results, or None.
        gold_trees: for a treebank run, the `trees.Tree` of each of `sources`: the outputs are
            also scored as parses (`dev_f1`).
        predicts_tags: the run's trees have part-of-speech tags as leaves (ptb-tags:), scored
            as kt-parse scores them.
        source_vocabulary: encodes the dev sources instead of `vocabulary` (an MT-LSTM's words).
        tree_constraints: for a parser, decode only trees, as kt-parse does by default
            (`data.treebank.tree_constraints`); None: any output.
        ends_at: a callable giving the step the run is expected to end at (the step budget,
            or a time limit's plan), or None when unknown; settable after construction.
        corpora: several corpora's `DevCorpus`es instead of `dev_batches`, `sources` and
            `references`: each scored apart (`dev_bleu/NAME`, ...), and `dev_bleu`, `dev_loss`,
            ... the mean of the corpora's, which `keep_best` follows.
    """

    def __init__(self, dev_batches, vocabulary, *, every, decoding=None, sources=(),
                 references=(), writer=None, keep_best=None, gold_trees=None,
                 predicts_tags=False, source_vocabulary=None, tree_constraints=None,
                 ends_at=None, corpora=()):
        super().__init__()
        if (sources or any(corpus.sources for corpus in corpora)) and decoding is None:
            raise ValueError("an Evaluation with dev sources needs the decoding to translate "
                             "them with")
        self.dev_batches = dev_batches
        self.vocabulary = vocabulary
        self.sources, self.references = sources, references
        self.every = every
        self.decoding = decoding
        self.writer = writer
        self.keep_best = keep_best
        self.gold_trees, self.predicts_tags = gold_trees, predicts_tags
        self.source_vocabulary = source_vocabulary
        self.tree_constraints = tree_constraints
        self.ends_at = ends_at
        self.corpora = tuple(corpora)
        self._last_step = None
        self.history = []

    def evaluate(self):
        step = step_of(self.model)
        if step == self._last_step:
            return
        self._last_step = step
        with averaged_weights(self.model):
            results, line = self._results()
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in results.items():
                    tf.summary.scalar(name, value)
        self.history.append((step, results))
        print(f"\nevaluation at step {step}: {line}", file=sys.stdout, flush=True)
        if self.keep_best is not None and self.keep_best.update(self.model, step, results):
            self.model.stop_training = True

    def _results(self):
        """({result name: value}, a line saying them)."""
        if not self.corpora:
            return self._scores(self.dev_batches, self.sources, self.references)
        by_corpus = [(corpus.name, *self._scores(corpus.batches, corpus.sources,
                                                 corpus.references))
                     for corpus in self.corpora]
        shared = set.intersection(*(set(results) for _, results, _ in by_corpus))
        means = {key: sum(results[key] for _, results, _ in by_corpus) / len(by_corpus)
                 for key in by_corpus[0][1] if key in shared}
        line = "mean of the corpora: " + ", ".join(
            f"{key} {value:.4g}" for key, value in means.items())
        results = dict(means)
        for name, scores, scores_line in by_corpus:
            results.update({f"{key}/{name}": value for key, value in scores.items()})
            line += f"\n  {name}: " + scores_line.replace("\n", "\n  ")
        return results, line

    def _scores(self, dev_batches, sources, references):
        """The results and line of one dev set (`_results`)."""
        results = {}
        if dev_batches is not None:
            metrics = self.model.evaluate(dev_batches, verbose=0, return_dict=True)
            # evaluate shares the training metrics and leaves its dev totals in them.
            self.model.reset_metrics()
            results.update({f"dev_{k}": scalar(v) for k, v in metrics.items()
                            if k != "target_tokens"})
        line = ", ".join(f"{k} {v:.4g}" for k, v in results.items())
        if sources:
            score, signature, hypotheses = bleu(self.model, self.vocabulary, sources,
                                                references, self.decoding,
                                                source_vocabulary=self.source_vocabulary,
                                                tree_constraints=self.tree_constraints)
            results["dev_bleu"] = score.score
            results["dev_chrf"] = chrf(hypotheses, references)
            beam_size = self.decoding.beam_size
            search = f"beam {beam_size}" if beam_size > 1 else "greedy"
            search += ", trees only" if self.tree_constraints else ""
            line += (f", dev BLEU {score.score:.2f}, chrF {results['dev_chrf']:.2f} on "
                     f"{len(sources)} sentences ({search}; sacrebleu {signature})")
            if self.gold_trees:
                results["dev_f1"] = parse_f1(hypotheses, self.gold_trees, self.predicts_tags)
                line += f", dev F1 {results['dev_f1']:.2f} (EVALB, COLLINS.prm)"
            line += f"\n  example: {sources[0]!r} -> {hypotheses[0]!r}"
        return results, line

    def on_train_batch_end(self, batch, logs=None):
        # A stop asked for at this step (time limit, preemption) leaves the evaluation to
        # whoever stopped training: a preempted run may have seconds left.
        step = step_of(self.model)
        if step % self.every or self.model.stop_training:
            return
        end = self.ends_at() if self.ends_at is not None else None
        if end is None or end - step >= self.every / 4:
            self.evaluate()


