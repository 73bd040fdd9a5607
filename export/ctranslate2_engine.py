"""Translating with a CTranslate2 export (export/ctranslate2.py writes one): the engine
behind kt-translate --engine ctranslate2.

    kt-translate --engine ctranslate2 --ctranslate2_dir ct2/demo --input dev.en
"""

import json
import pathlib

import numpy as np
import tensorflow as tf

from keras_transformer.data import load_vocabulary, vocabulary_file
from keras_transformer.export.ctranslate2 import (
    MODEL_FILE,
    POSITIONS,
    Ctranslate2Error,
    _ctranslate2,
)
from keras_transformer.export.request_bounds import input_bytes
from keras_transformer.export.translator import RECORDED, source_ids_of
from keras_transformer.search.beam import length_penalty
from keras_transformer.search.settings import DecodingConfig
from keras_transformer.token_ids import EOS_ID, PAD_ID


def recorded_decoding(recorded, directory, given):
    """The `DecodingConfig` export.json's facts `recorded` hold (`Translator.settings`, which
    kt-export records: every field a search reads, as the model it came from decoded),
    `DecodingConfig.overridden_by` the one `given`. One made before it recorded a length
    normalization ranked as the paper, the only one then.

    Raises:
        Ctranslate2Error: a setting neither recorded nor given, naming it.
    """
    recorded = dict({"length_normalization": "gnmt"}, **recorded)
    decoding = DecodingConfig(**{name: recorded.get(name) for name in RECORDED}).overridden_by(
        given)
    for name in RECORDED:
        if getattr(decoding, name) is None and name != "max_output_length":
            raise Ctranslate2Error(f"{directory / 'export.json'} records no {name}; export "
                                   f"the model again (kt-export --format ctranslate2)")
    return decoding


def resolve(directory):
    """A CTranslate2 export's version directory: `directory` itself, or its highest version."""
    directory = pathlib.Path(directory)
    if (directory / MODEL_FILE).is_file():
        return directory
    versions = sorted((int(p.name) for p in directory.glob("*")
                       if p.name.isdigit() and (p / MODEL_FILE).is_file()), reverse=True)
    if not versions:
        raise Ctranslate2Error(f"--ctranslate2_dir {directory}: neither a CTranslate2 model "
                               f"({MODEL_FILE}) nor a directory of versions holding one; "
                               f"write one with kt-export --format ctranslate2")
    return directory / str(versions[0])


# CTranslate2's beam stops once beam_size * patience hypotheses have ended; the model's goes on
# while an open one could still outrank the ended ones. Waiting longer (patience 2) helped a
# trained model and hurt a weak one, so CTranslate2's own default stays. Beam 4, alpha 1.0, the
# best hypothesis differing from the TensorFlow engine's: transformer_small on tatoeba_en_es dev
# (2,766 sentences), 38 sentences at patience 1 and 16 at 2 (BLEU 37.43 and 37.51; the
# TensorFlow engine 37.47); the tests' 300-step transformer_tiny on the first 200 bible dev
# sentences, 9 at patience 1 and 76 at 2, patience 2 choosing long repetitions that its
# length ** alpha ranking favours and the model's GNMT penalty does not (2026-11-25).
PATIENCE = 1


class Ctranslate2Translator:
    """Beam search with a CTranslate2 export, behind the `Translator` methods `export.lines`
    calls (`tokenize`, `translate_n_best_ids`, `detokenize`), so kt-translate's sorting,
    batching, n-best lists and scoring run on either engine.

    Its `decoding` is the `DecodingConfig` the export recorded (`recorded_decoding`: the
    settings of the model it came from) overridden by the one given, bounded by the converted
    position table as a `Translator` bounds its own (`DecodingConfig.for_model`). A CTranslate2
    export decodes with beam search alone, in its own weights' type: tree_constraint,
    jit_compile, dtype and ema are kt-translate's to refuse
    (`translate_flags.check_engine_flags`).

    Args:
        directory: a CTranslate2 export (a version directory, or the directory of versions).
        decoding: a `DecodingConfig`; its None fields: what the export recorded (a preset fills
            what it says).
        compute_type: CTranslate2's ("default": the type the weights were saved in).
        intra_threads: threads of one translation (0: CTranslate2's default).
        patience: CTranslate2's beam stops once beam_size * patience hypotheses have ended
            (default `PATIENCE`, 1 as CTranslate2's).
        **settings: `DecodingConfig` fields as keywords (beam_size=, alpha=, ...): a
            convenience that sets them in `decoding`.
    """

    def __init__(self, directory, decoding=None, *, compute_type="default", intra_threads=0,
                 patience=None, **settings):
        ctranslate2 = _ctranslate2()
        self.directory = resolve(directory)
        try:
            self.recorded = json.loads((self.directory / "export.json").read_text())
        except ValueError as error:  # not JSON, or not UTF-8
            raise Ctranslate2Error(f"{self.directory / 'export.json'}: not a kt-export "
                                   f"settings file ({error})") from None
        # Exported with a shortlist (its vmap.txt): decoded over each batch's candidates.
        self.shortlist = bool(self.recorded.get("shortlist"))
        self.vocabulary = load_vocabulary(vocabulary_file(self.directory))
        self.pieces = self.vocabulary.pieces(list(range(self.vocabulary.vocab_size)))
        self.ids = {piece: index for index, piece in enumerate(self.pieces)}
        given = (decoding or DecodingConfig()).replace(**settings)
        self.decoding = recorded_decoding(self.recorded, self.directory, given).for_model(
            # An export before the table's rows were recorded has the sinusoids' POSITIONS, or
            # a learned table its recorded limits already respect.
            None, max_positions=self.recorded.get("max_positions", POSITIONS))
        self.max_input_bytes = input_bytes(self.decoding.max_input_length)
        self.patience = PATIENCE if patience is None else patience
        if not 1 <= self.patience < float("inf"):
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        self.engine = ctranslate2.Translator(str(self.directory), device="cpu",
                                             compute_type=compute_type,
                                             intra_threads=intra_threads)

    def tokenize(self, texts):
        """As `Translator.tokenize`: {"source_ids": int32 [batch, length]}."""
        return {"source_ids": source_ids_of(self.vocabulary, texts, self.decoding.max_input_length,
                                            self.max_input_bytes)}

    def detokenize(self, ids):
        return self.vocabulary.detokenize(ids)

    def _search(self, rows, limit):
        """CTranslate2's beam search over source pieces `rows` with output limit `limit`: for
        each row, [(log P, output pieces)].

        CTranslate2 scores log P / length ** alpha (its length counts the end of sentence),
        which gives log P back. Under "hf", as generate's forced_eos_token_id, a hypothesis
        still open one token before the limit ends there, its last token the end of sentence
        at no cost. An immediate end of sentence is allowed, as in the model's search.
        """
        hf = self.decoding.length_normalization == "hf"
        results = self.engine.translate_batch(
            rows, beam_size=self.decoding.beam_size, num_hypotheses=self.decoding.beam_size,
            length_penalty=self.decoding.alpha, patience=self.patience,
            max_decoding_length=int(limit) - 1 if hf else int(limit), min_decoding_length=0,
            max_input_length=0, return_scores=True, return_end_token=True,
            use_vmap=self.shortlist,
            suppress_sequences=[[self.pieces[PAD_ID]]])
        end = self.pieces[EOS_ID]
        return [[(score * len(tokens) ** self.decoding.alpha,
                  tokens + [end] if hf and tokens[-1:] != [end] else tokens)
                 for tokens, score in zip(result.hypotheses, result.scores)]
                for result in results]

    def translate_n_best_ids(self, source_ids):
        """As `Translator.translate_n_best_ids`, numpy in and tf out: {"ids" int32 [batch,
        beam_size, length], "scores", "log_probs" float32 [batch, beam_size]}."""
        source_ids = np.asarray(source_ids)[:, :self.decoding.max_input_length]
        batch = len(source_ids)
        rows = [[self.pieces[i] for i in row if i != PAD_ID] for row in source_ids]
        limits = self.decoding.output_limits(np.count_nonzero(source_ids, axis=1))
        found = [[] for _ in range(batch)]
        # One call per output limit: CTranslate2 takes one limit a batch.
        for limit in np.unique(limits[[bool(row) for row in rows]]):
            chosen = [i for i in range(batch) if rows[i] and limits[i] == limit]
            for i, hypotheses in zip(chosen, self._search([rows[i] for i in chosen], limit)):
                found[i] = hypotheses
        width = max([1] + [len(tokens) for hypotheses in found for _, tokens in hypotheses])
        ids = np.zeros([batch, self.decoding.beam_size, width], np.int32)
        scores = np.full([batch, self.decoding.beam_size], -np.inf, np.float32)
        log_probs = np.full([batch, self.decoding.beam_size], -np.inf, np.float32)
        # The length penalty the model's beam search divides by (`kt.length_penalty`), once
        # for every length here rather than once for each hypothesis.
        penalty = length_penalty(np.arange(width + 1), self.decoding.alpha,
                                 self.decoding.length_normalization).numpy()
        for i, hypotheses in enumerate(found):
            if not rows[i]:  # an empty input: one empty translation, as the model gives
                scores[i, 0] = log_probs[i, 0] = 0.0
            # The model's beam search ranks by log P / its length penalty (GNMT's unless "hf"):
            # CTranslate2's hypotheses are given the model's scores and ranked by them.
            ranked = sorted(hypotheses, key=lambda h: -h[0] / penalty[len(h[1])])
            for j, (log_prob, tokens) in enumerate(ranked):
                ids[i, j, :len(tokens)] = [self.ids[token] for token in tokens]
                log_probs[i, j] = log_prob
                scores[i, j] = log_prob / penalty[len(tokens)]
        return {"ids": tf.constant(ids), "scores": tf.constant(scores),
                "log_probs": tf.constant(log_probs)}
