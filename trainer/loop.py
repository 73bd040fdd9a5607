"""The part of `Trainer.fit` after the model is built: the input pipelines, the callbacks
(progress, checkpoints, time limit, signals, dev evaluation), `model.fit`, and the end of the run
(a last evaluation, the weights' checksum, the average of the last checkpoints)."""

import sys

import numpy as np
import tensorflow as tf

from keras_transformer import data
from keras_transformer.model_dir import averaging, checkpoints, decoding_config, layout
from keras_transformer.search.settings import DecodingConfig
from keras_transformer.trainer import callbacks, distribute, evaluation
from keras_transformer.trainer.preparation import bucket_growth


def checksum_of(model):
    """The sum of the weights' absolute values: workers that agree print the same."""
    return sum(float(np.abs(w).sum()) for w in model.get_weights())


class TrainingLoop:
    """One `model.fit` of a prepared run (`Trainer.fit` makes it).

    Args:
        trainer: the `Trainer` (its model_dir, log_every, max_minutes).
        setup: what `Trainer` prepared (the run, strategy, corpus, vocabularies).
        model, optimizer: compiled under the strategy, restored or initialized.
        saved: the run's `checkpoints.CheckpointDirectory`.
        best: a `keep_best.KeepBest`, or None.
        train_steps: the step budget; `step` the model's step now.
    """

    def __init__(self, trainer, setup, *, model, optimizer, saved, best, train_steps, step):
        self.trainer, self.setup = trainer, setup
        self.run, self.distribution = setup.run, setup.distribution
        self.multi_worker = distribute.is_multi_worker(self.distribution)
        self.model, self.optimizer = model, optimizer
        self.saved, self.best = saved, best
        self.train_steps, self.step = train_steps, step

    def pipeline(self, split, training, input_context=None, seed=None, corpus=None):
        """The batches of a split (`data.pipeline`) of the run's corpus (or `corpus`, one of its
        several); a training batch holds an update's micro-batches (`data.update_batches`)."""
        run = self.run
        return data.pipeline(
            corpus or self.setup.corpus, self.setup.vocabulary, split,
            batch_tokens=run.batching.batch_tokens, max_pair_length=run.data.max_pair_length,
            overlong=run.data.overlong, training=training,
            seed=run.optimization.seed if seed is None else seed,
            deterministic=run.optimization.deterministic,
            batch_size_multiple=1 if input_context else self.distribution.num_replicas_in_sync,
            input_context=input_context, source_vocabulary=self.setup.words,
            accumulate_steps=run.batching.accumulate_steps if training else 1,
            bucket_growth=bucket_growth(run), static_shapes=run.compute.jit_compile,
            subword_alpha=run.data.subword_alpha if training else 0.0)

    def train_batches(self, input_context=None):
        if self.run.optimization.deterministic:
            # Exactly the batches an uninterrupted run would see next.
            per_update = self.setup.batches.per_update
            return self.pipeline("train", True, input_context).skip(self.step * per_update)
        # A fresh shuffle, cheaper than skipping.
        return self.pipeline("train", True, input_context,
                             seed=self.run.optimization.seed + self.step)

    def datasets(self):
        """(the training batches, `dev_batches`)."""
        if self.multi_worker:
            # Workers would disagree on the number of dev batches; they evaluate afterwards.
            return self.distribution.distribute_datasets_from_function(self.train_batches), None
        return self.train_batches(), self.dev_batches()

    def dev_batches(self):
        """The counted dev batches, None without a dev split; of several corpora
        (`data.WeightedCorpora`), a list of each one's that has a dev split."""
        corpus = self.setup.corpus
        if "dev" not in corpus.splits():
            return None
        if isinstance(corpus, data.WeightedCorpora):
            return [data.counted(self.pipeline("dev", False, corpus=one))
                    for _, one in corpus.with_split("dev")]
        return data.counted(self.pipeline("dev", False))

    def evaluator(self, dev, writer):
        """The dev `evaluation.Evaluation` callback (BLEU of the spread dev sentences, and a
        parser's F1), or None without dev batches."""
        if dev is None:
            return None
        run, corpus = self.run, self.setup.corpus
        sentences = run.evaluation.sentences if self.setup.chief else 0
        several = ()
        if isinstance(dev, list):
            # Each corpus scored apart: BLEU of its own dev sentences (as many as one corpus
            # would get), and the mean of the corpora's for keep-best.
            several = [evaluation.DevCorpus(name, batches, *data.spread_pairs(one, "dev",
                                                                              sentences))
                       for (name, one), batches in zip(corpus.with_split("dev"), dev)]
            dev, sentences = None, 0
        sources, references = data.spread_pairs(corpus, "dev", sentences)
        parsing = data.is_treebank(run.data.corpus)
        leaves = data.treebank.leaves_of(run.data.corpus) if parsing else None
        # The dev BLEU decodes as kt-translate would decode this model (greedy, or the beam
        # --eval_beam_size asks for): its alpha, length normalization and output limit.
        decoding = decoding_config.resolved_for(
            DecodingConfig(beam_size=run.evaluation.beam_size), self.setup.hp, run.data)
        return evaluation.Evaluation(
            dev, self.setup.vocabulary, sources=sources, references=references,
            every=run.evaluation.every, decoding=decoding, writer=writer, keep_best=self.best,
            gold_trees=[tree for _, _, tree in data.spread(corpus.trees("dev"), len(sources))]
            if parsing else None,
            predicts_tags=leaves == "tags", source_vocabulary=self.setup.words,
            tree_constraints=data.treebank.tree_constraints(self.setup.vocabulary, leaves)
            if decoding.tree_constraint else None, corpora=several)

    def callbacks(self, writer, evaluator):
        """(the fit's callbacks, the StopOnSignal, the PeriodicCheckpoint)."""
        run, hp = self.run, self.setup.hp
        saver = callbacks.PeriodicCheckpoint(self.saved if self.setup.chief else None,
                                             run.checkpoints.every_steps,
                                             run.checkpoints.every_minutes)
        log = callbacks.TrainingLog(self.trainer.log_every, writer,
                                    print_lines=not sys.stdout.isatty())
        fit_callbacks = [log, saver, callbacks.KeepTrainedWeights()]
        stop = callbacks.StopOnSignal()
        if not self.multi_worker:  # workers would stop at different steps
            fit_callbacks.insert(0, stop)
        time_limit = None
        if self.trainer.max_minutes:
            time_limit = callbacks.TimeLimit(
                self.trainer.max_minutes, hp.cooldown_fraction,
                self.optimizer.learning_rate_schedule, self.train_steps,
                max_warmup_fraction=hp.max_warmup_fraction)
            fit_callbacks.append(time_limit)
        if evaluator is not None:
            evaluator.ends_at = (time_limit.expected_end if time_limit
                                 else lambda: self.train_steps)
            fit_callbacks.append(evaluator)
        return fit_callbacks, stop, saver

    def run_fit(self, result, *, evaluate_first=False):
        """Trains; returns `result` (a `TrainingResult` of the start) completed."""
        batches, dev = self.datasets()
        model_dir = self.trainer.model_dir
        writer = (tf.summary.create_file_writer(str(model_dir / layout.LOG_DIR))
                  if self.setup.chief else None)
        evaluator = self.evaluator(dev, writer)
        fit_callbacks, stop, saver = self.callbacks(writer, evaluator)
        if evaluate_first and evaluator is not None:  # fine-tuning: where it starts, on new data
            evaluator.set_model(self.model)
            evaluator.evaluate()
        if not self.multi_worker:
            stop.install()
        try:
            self.model.fit(batches, epochs=1, steps_per_epoch=self.train_steps - self.step,
                           callbacks=fit_callbacks, verbose=1 if sys.stdout.isatty() else 0,
                           shuffle=False)
        finally:
            stop.uninstall()
        evaluations = evaluator.history if evaluator is not None else []
        if stop.received:  # preempted: the checkpoint is written, the time left may be short
            print(f"stopped by {stop.received} at step {checkpoints.step_of(self.model)}"
                  f"{', checkpoint ' + str(saver.last_saved) if saver.last_saved else ''}; run "
                  f"the same command to continue", flush=True)
            return result._replace(status="stopped", stopped_by=stop.received,
                                   step=checkpoints.step_of(self.model), evaluations=evaluations)
        if evaluator is not None:
            evaluator.evaluate()
        return self.finish(result._replace(evaluations=evaluations))

    def finish(self, result):
        """The end of a run: the checksum line and the average of the last checkpoints."""
        model, model_dir = self.model, self.trainer.model_dir
        step, checksum = checkpoints.step_of(model), checksum_of(model)
        traces = model.train_step_traces // distribute.local_replicas(self.distribution)
        print(f"done: step {step}, weights checksum {checksum:.9e}, train step traced {traces} "
              f"time(s), checkpoints in {checkpoints.default_directory(model_dir)}", flush=True)
        result = result._replace(status="done", step=step, checksum=checksum,
                                 train_step_traces=traces)
        average_last = self.run.checkpoints.average_last
        if average_last and self.setup.chief:
            kept = len(self.saved.paths())
            output, chosen = averaging.average_last(model_dir, min(average_last, kept),
                                                  overwrite=True)
            print(f"averaged {', '.join(p.name for p in chosen)} into {output}"
                  f"{f' (only {kept} checkpoint(s) exist)' if kept < average_last else ''}",
                  flush=True)
            result = result._replace(averaged=output)
        return result
