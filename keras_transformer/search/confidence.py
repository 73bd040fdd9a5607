"""Which translations to trust: signs that a translation went wrong, read from the search's
output and the model's cross-attention, and a confidence in [0, 1] calibrated on them.

The signs (per sentence):
- `stopped_at_limit`: the hypothesis never ended; the search stopped it at the length limit
  (a model "filling x250 words").
- `repeated_ngrams`: some 1- to 4-gram of subwords comes three times or more in a row, the
  loop a degenerate decoder falls into.
- `uncovered`: the share of source subwords that the translation's cross-attention (summed
  over its tokens) gave less than `COVERED`: words that were dropped rather than translated
  (Tu et al. 2016's coverage; GNMT's coverage penalty reads the same sums).

The cross-attention is the encoder-decoder attention of the penultimate decoder layer,
averaged over its heads, teacher-forced on the translation: the layer Garg et al. (2019,
"Jointly Learning to Align and Translate with Transformer Models") found aligns best. Its
argmax per target token is also a word alignment (`alignment`).

`Calibration` maps the length-normalized log-probability (what beam search ranks by), the signs
and the source length to a confidence: a logistic fit against sentence chrF on a dev set
(export/calibrate.py), so that 0.6 means "chrF about 60 on sentences like these".
"""

import json
import typing

import numpy as np
import tensorflow as tf

from keras_transformer.search.scoring import target_mask
from keras_transformer.search.settings import members
from keras_transformer.token_ids import EOS_ID, PAD_ID

COVERED = 0.5  # attention a source subword must receive, summed over the translation's tokens
LOOP_NGRAM = 4  # longest n-gram whose repetition counts as a loop
LOOP_REPEATS = 3  # times in a row
FEATURES = ("score", "stopped_at_limit", "repeated_ngrams", "uncovered", "source_length")


def cross_attention(model, source_ids, target_ids):
    """float32 [batch, target_length, source_length]: the attention each target token's
    prediction paid to the source tokens, in the penultimate decoder layer (the last of a
    one-layer model), averaged over heads and ensemble members; teacher-forced on `target_ids`
    (int32 [batch, target_length], subwords + end of sentence, 0-padded; anything after the end
    of sentence is dropped). Rows sum to 1 (0 for padding)."""
    target_ids = tf.where(target_mask(target_ids), target_ids, PAD_ID)
    decoder_inputs = tf.pad(target_ids[:, :-1], [[0, 0], [1, 0]], constant_values=PAD_ID)
    maps = []
    for member in members(model):
        _, weights = member((source_ids, decoder_inputs), return_attention_scores=True)
        layers = weights["encoder_decoder_attention"]  # [batch, layers, heads, target, source]
        layer = max(0, layers.shape[1] - 2)
        maps.append(tf.reduce_mean(tf.cast(layers[:, layer], tf.float32), axis=1))
    mask = tf.cast(target_mask(target_ids), tf.float32)[:, :, None]
    return tf.add_n(maps) / len(maps) * mask


def stopped_at_limit(target_ids, limits=None):
    """bool [batch]: hypotheses (int32 [batch, length]) with tokens but no end of sentence;
    with `limits` (int32 [batch], for a search that writes end of sentence at the limit, as
    "hf" does), also those as long as their limit."""
    stopped = tf.reduce_any(target_ids != PAD_ID, axis=1) & ~tf.reduce_any(
        target_ids == EOS_ID, axis=1)
    if limits is None:
        return stopped
    lengths = tf.reduce_sum(tf.cast(target_mask(target_ids), tf.int32), axis=1)
    return stopped | (lengths >= tf.cast(limits, tf.int32))


def repeated_ngrams(target_ids, longest=LOOP_NGRAM, repeats=LOOP_REPEATS):
    """bool [batch]: hypotheses in which some n-gram (n <= `longest`) comes `repeats` times or
    more in a row. An n-gram repeated r times in a row is a run of (r - 1) n positions where
    each token equals the one n before it."""
    tokens = tf.where(target_mask(target_ids) & (target_ids != EOS_ID), target_ids, -1)
    found = tf.zeros([tf.shape(tokens)[0]], tf.bool)
    for n in range(1, longest + 1):
        same = tf.cast((tokens[:, n:] == tokens[:, :-n]) & (tokens[:, n:] >= 0), tf.int32)
        run = (repeats - 1) * n
        totals = tf.pad(tf.cumsum(same, axis=1), [[0, 0], [1, 0]])
        found |= tf.reduce_any(totals[:, run:] - totals[:, :-run] == run, axis=1)
    return found


def _source_words_mask(source_ids):
    return (source_ids != PAD_ID) & (source_ids != EOS_ID)


def uncovered(attention, source_ids):
    """float32 [batch]: the share of each source's subwords (end of sentence aside) whose
    attention from the translation (`cross_attention`), summed over its tokens, is below
    COVERED; 0 for an empty source."""
    words = tf.cast(_source_words_mask(source_ids), tf.float32)
    received = tf.reduce_sum(attention, axis=1)
    missed = tf.reduce_sum(tf.cast(received < COVERED, tf.float32) * words, axis=1)
    return missed / tf.maximum(tf.reduce_sum(words, axis=1), 1.0)


def alignment(attention, source_ids, target_ids):
    """int32 [batch, target_length]: for each target subword, the source subword it attends to
    most (end of sentence and padding excluded); -1 for the target's end of sentence, padding,
    and every token of a sentence whose source is empty."""
    scores = tf.where(_source_words_mask(source_ids)[:, None, :], attention, -1.0)
    best = tf.argmax(scores, axis=2, output_type=tf.int32)
    aligned = (target_mask(target_ids) & (target_ids != EOS_ID)
               & tf.reduce_any(_source_words_mask(source_ids), axis=1)[:, None])
    return tf.where(aligned, best, -1)


def features(scores, source_ids, target_ids, attention, limits=None):
    """float32 [batch, len(FEATURES)]: the confidence's inputs, in FEATURES' order (`limits`:
    see `stopped_at_limit`)."""
    source_length = tf.reduce_sum(tf.cast(_source_words_mask(source_ids), tf.float32), axis=1)
    return tf.stack([tf.cast(scores, tf.float32),
                     tf.cast(stopped_at_limit(target_ids, limits), tf.float32),
                     tf.cast(repeated_ngrams(target_ids), tf.float32),
                     uncovered(attention, source_ids), source_length], axis=1)


def signs(model, source_ids, target_ids, scores, calibration=None, limits=None):
    """Everything this module reads of translations, in one teacher-forced pass.

    Args:
        model: a `Transformer` (or an ensemble's list).
        source_ids: int32 [batch, length], subwords + end of sentence, 0-padded.
        target_ids: int32 [batch, length], their translations (subwords, end of sentence
            unless the search stopped them at the limit, 0-padded).
        scores: float32 [batch], the translations' scores (log-probability / length penalty).
        calibration: a `Calibration`, or None.
        limits: int32 [batch], each translation's length limit, for a search that writes end
            of sentence there ("hf"); None: a translation stopped there has none.

    Returns:
        {"stopped_at_limit", "repeated_ngrams": bool [batch], "uncovered": float32 [batch],
        "alignment": int32 [batch, target length] (`alignment`), "features": float32 [batch,
        len(FEATURES)] (what a calibration reads), and with a calibration "confidence":
        float32 [batch] in [0, 1]}.
    """
    attention = cross_attention(model, source_ids, target_ids)
    inputs = features(scores, source_ids, target_ids, attention, limits)
    result = {"stopped_at_limit": inputs[:, 1] > 0, "repeated_ngrams": inputs[:, 2] > 0,
              "uncovered": inputs[:, 3], "alignment": alignment(attention, source_ids,
                                                                target_ids),
              "features": inputs}
    if calibration is not None:
        result["confidence"] = calibration.confidence(inputs)
    return result


class Calibration(typing.NamedTuple):
    """A logistic map from `FEATURES` to a confidence in [0, 1]: sigmoid(((x - mean) / scale)
    . weights + bias), fitted (`fit`) so that it predicts sentence chrF / 100.

    Fields: mean, scale, weights (a float per feature), bias (float), about (a dict: how it was
    fitted, kept in its JSON)."""
    mean: tuple
    scale: tuple
    weights: tuple
    bias: float
    about: dict

    @classmethod
    def fit(cls, inputs, targets, l2=1e-3, iterations=50, about=None):
        """Logistic regression on soft targets (chrF / 100, in [0, 1]) by Newton's method.

        Args:
            inputs: float [n, len(FEATURES)], as `features` gives them.
            targets: float [n] in [0, 1].
            l2: the weights' ridge penalty (keeps a feature that never varies, e.g. no loops on
                the dev set, at 0 instead of diverging).
        """
        inputs, targets = np.asarray(inputs, np.float64), np.asarray(targets, np.float64)
        if len(inputs) < 2:
            raise ValueError(f"a calibration needs at least 2 sentences, got {len(inputs)}")
        mean, scale = inputs.mean(axis=0), inputs.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        design = np.concatenate([(inputs - mean) / scale, np.ones([len(inputs), 1])], axis=1)
        theta = np.zeros(design.shape[1])
        penalty = np.diag([l2 * len(inputs)] * (design.shape[1] - 1) + [0.0])
        for _ in range(iterations):
            predicted = 1 / (1 + np.exp(-design @ theta))
            gradient = design.T @ (predicted - targets) + penalty @ theta
            hessian = (design.T * (predicted * (1 - predicted))) @ design + penalty
            step = np.linalg.solve(hessian + 1e-9 * np.eye(len(theta)), gradient)
            theta -= step
            if np.abs(step).max() < 1e-8:
                break
        return cls(tuple(mean), tuple(scale), tuple(theta[:-1]), float(theta[-1]),
                   dict(about or {}))

    def confidence(self, inputs):
        """float32 [batch] in [0, 1] from float32 [batch, len(FEATURES)] (TF or numpy)."""
        inputs = tf.cast(inputs, tf.float32)
        standard = (inputs - tf.constant(self.mean, tf.float32)) / tf.constant(self.scale,
                                                                             tf.float32)
        return tf.sigmoid(tf.linalg.matvec(standard, tf.constant(self.weights, tf.float32))
                          + self.bias)

    def to_json(self):
        return json.dumps({"features": list(FEATURES), **{
            name: list(getattr(self, name)) for name in ("mean", "scale", "weights")},
            "bias": self.bias, "about": self.about}, indent=2)

    @classmethod
    def from_json(cls, text, name="calibration"):
        """Raises ValueError naming `name` and the field when the JSON cannot be used."""
        try:
            fields = json.loads(text)
            if fields.get("features") != list(FEATURES):
                raise ValueError(f"its features are {fields.get('features')}, this version "
                                 f"computes {list(FEATURES)}; calibrate again")
            values = [tuple(float(v) for v in fields[key]) for key in ("mean", "scale",
                                                                        "weights")]
            if any(len(v) != len(FEATURES) for v in values):
                raise ValueError(f"mean, scale and weights need {len(FEATURES)} numbers each")
            return cls(*values, float(fields["bias"]), dict(fields.get("about", {})))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            detail = f"no field {error}" if isinstance(error, KeyError) else str(error)
            raise ValueError(f"{name}: not a usable calibration: {detail}") from None


def spearman(a, b):
    """Spearman's rank correlation of two equal-length sequences (average ranks for ties)."""
    def ranks(values):
        values = np.asarray(values, np.float64)
        order = np.argsort(values, kind="stable")
        ranked = np.empty(len(values))
        ranked[order] = np.arange(len(values))
        for value in np.unique(values):  # ties share their mean rank
            tied = values == value
            ranked[tied] = ranked[tied].mean()
        return ranked
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])
