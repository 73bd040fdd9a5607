"""The best checkpoint by a dev metric, kept apart from the periodic ones, and early stopping.

`kt-train --keep_best bleu|chrf|loss|f1` saves the model into model_dir/best/ckpt-<step> each time
an evaluation improves on the best value so far (BLEU, chrF or a parser's F1 higher, dev loss
lower),
replacing the one
before; `--keep_checkpoints` rotates only model_dir/checkpoints/, so a best checkpoint from early
in a run outlives the periodic ones of its time. `--early_stopping N` ends training after N
evaluations in a row without improvement. model_dir/best/best.json records the metric, the best
value and its step, and the evaluations since, so a resumed run counts on from there (and one
that early stopping ended stays ended). kt-translate, kt-export and kt-score load it with
`--checkpoint best`.
"""

import json
import pathlib

from keras_transformer.cli import replace_atomically
from keras_transformer.errors import check_one_of
from keras_transformer.model_dir import checkpoints, config, layout

# --keep_best value -> (the evaluation's result name, whether larger is better)
METRICS = {"bleu": ("dev_bleu", True), "chrf": ("dev_chrf", True), "loss": ("dev_loss", False),
           "f1": ("dev_f1", True)}  # parsing runs (--data ptb:DIR): EVALB's F1
STATE_FILE = "best.json"


class KeepBest:
    """Keeps the best checkpoint of model_dir by `metric` (a key of `METRICS`, or METRIC:CORPUS
    for one of several corpora's), and says when
    `patience` evaluations in a row have not improved it (0: never).

    Args:
        model_dir: the run's directory; the checkpoint goes to model_dir/best/.
        metric: a key of `METRICS`, or METRIC:CORPUS.
        patience: --early_stopping.
    """

    def __init__(self, model_dir, metric, patience=0):
        name, _, corpus = metric.partition(":")
        check_one_of("--keep_best", name, METRICS, config.ConfigError)
        self.directory = pathlib.Path(model_dir) / layout.BEST_DIR
        self.metric, self.patience = metric, patience
        self.result, self.larger_is_better = METRICS[name]
        if corpus:  # one of several corpora's (trainer.evaluation.Evaluation's `corpora`)
            self.result += f"/{corpus}"
        self.best_value, self.best_step, self.since = None, None, 0
        state = self._load()
        if state is not None and state["metric"] == metric:
            self.best_value, self.best_step, self.since = (state["value"], state["step"],
                                                           state["evaluations_since"])

    @property
    def state_path(self):
        return self.directory / STATE_FILE

    def _load(self):
        if not self.state_path.exists():
            return None
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            return {"metric": str(state["metric"]), "value": float(state["value"]),
                    "step": int(state["step"]),
                    "evaluations_since": int(state["evaluations_since"])}
        except (ValueError, KeyError, TypeError) as error:
            raise config.ConfigError(f"{self.state_path} is damaged ({error!r}); delete it to "
                                     f"start keeping the best afresh") from None

    def _save_state(self):
        text = json.dumps({"metric": self.metric, "value": self.best_value,
                           "step": self.best_step, "evaluations_since": self.since},
                          indent=1) + "\n"
        replace_atomically(self.state_path, lambda path: path.write_text(text, encoding="utf-8"))

    @property
    def stopped(self):
        """True once `patience` evaluations in a row have not improved the best."""
        return bool(self.patience) and self.best_step is not None and \
            self.since >= self.patience

    def describe(self):
        return (f"best {self.result} {self.best_value:.4g} at step {self.best_step}, kept in "
                f"{self.directory / f'ckpt-{self.best_step}'}")

    def update(self, model, step, results):
        """Takes one evaluation's `results` (with the metric's key) at `step`: saves `model` if
        it improved, counts it otherwise. Returns True when training should stop."""
        value = results[self.result]
        improved = self.best_value is None or (value > self.best_value if self.larger_is_better
                                               else value < self.best_value)
        if improved:
            checkpoints.CheckpointDirectory(self.directory, keep=1).save(model, step)
            self.best_value, self.best_step, self.since = value, step, 0
            print(f"new {self.describe()}", flush=True)
        else:
            self.since += 1
        self._save_state()
        if self.stopped:
            print(f"early stopping: no better {self.result} in {self.since} evaluations; "
                  f"{self.describe()}", flush=True)
        return self.stopped

