"""Strings in, translations out, in one TensorFlow graph: run by kt-translate, saved by kt-export.

Because `kt-translate` and the exported SavedModel call the same `tf.function`s of one
`Translator`, an exported model translates as its checkpoint does.
"""

import json

import tensorflow as tf

from keras_transformer import model_dir
from keras_transformer.data import treebank
from keras_transformer.data.vocab import append_end_of_sentence
from keras_transformer.errors import UserError
from keras_transformer.export.candidates import CandidateTable
from keras_transformer.export.constrained import IDS, ConstrainedSearches
from keras_transformer.export.length_batches import search_in_batches
from keras_transformer.export.request_bounds import RequestBounds, input_bytes
from keras_transformer.export.sampled import SampledSearches
from keras_transformer.export.xla_padding import XlaShapes
from keras_transformer.model_dir import decoding_config
from keras_transformer.model_dir.decoding_config import load_members
from keras_transformer.runtime import devices
from keras_transformer.search import confidence, scoring
from keras_transformer.search.beam import length_penalty
from keras_transformer.search.contract import graph_function
from keras_transformer.search.decode import beam_decode, search_config
from keras_transformer.search.processors import forced_ids
from keras_transformer.search.settings import members
from keras_transformer.search.steps import source_lengths
from keras_transformer.token_ids import EOS_ID, PAD_ID

TEXTS = tf.TensorSpec([None], tf.string, name="inputs")
TARGETS = tf.TensorSpec([None], tf.string, name="targets")
TARGET_IDS = tf.TensorSpec([None, None], tf.int32, name="target_ids")
SCORES = tf.TensorSpec([None], tf.float32, name="scores")
# The decoding settings an export records (export.json), before its request bounds.
RECORDED = ("beam_size", "alpha", "length_normalization", "extra_length", "max_input_length",
            "max_output_length")


def source_ids_of(vocabulary, texts, max_input_length, max_input_bytes):
    """tf.string [batch] -> int32 [batch, length]: each text cut to `max_input_bytes` bytes,
    bytes that are not UTF-8 read as U+FFFD, then `Vocabulary.encode` cut to
    `max_input_length` tokens, 0-padded (see `Translator.tokenize`)."""
    texts = tf.strings.substr(texts, 0, max_input_bytes)
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    ids = vocabulary.encode(texts, max_input_length).to_tensor(PAD_ID)
    # A batch of only empty texts still gets a (padding) column for the encoder to read.
    ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])
    return tf.cast(ids, tf.int32)


class Translator(ConstrainedSearches, SampledSearches, tf.Module):
    """A trained `Transformer` and its vocabulary, with its decoding settings and request bounds.

    It keeps one `DecodingConfig` (`decoding`: every field a search reads set, bounded by the
    model's position tables) and the `RequestBounds` of what one request may cost
    (`bounds`): at most max_batch_size sentences (more is an error), each cut to
    max_input_bytes bytes and then to the decoding's max_input_length tokens (end of sentence
    included) before translating, at most its max_output_length tokens produced for each, and
    with max_search_positions, at most that many beam positions one search.

    Args:
        model: a `Transformer`, or a list of them trained with one vocabulary: an ensemble,
            whose members' probabilities are averaged at every step
            (`keras_transformer.search.steps.ensemble_step`).
        vocabulary: the `data.Vocabulary` it was trained with.
        decoding: a `DecodingConfig`; fields it leaves None are the paper's (beam 4, alpha
            0.6, "gnmt", input + 50; `search_config`) and max_input_length 256; max_output_length
            None: max_input_length + extra_length (each translation's limit:
            `DecodingConfig.output_limits`). jit_compile: beam search compiled with XLA (for
            GPUs; on CPUs it is slower), on inputs padded to a few shapes (export/xla_padding.py).
            batch_size: the most sentences one search runs (None: `devices.decode_batch_size()`,
            kt-translate's); a larger request is searched in length-sorted batches of it, as
            kt-translate batches lines (export/length_batches.py).
        max_batch_size, max_input_bytes, max_search_positions: the `RequestBounds`;
            max_input_bytes defaults to 16 per input token, far more than real text needs, so
            tokenizing a huge string costs no more than a long one.
        tree_leaves: for a parser (a model trained on a treebank) held to trees (the decoding's
            tree_constraint), what its trees' leaves are, "words", "tags" or "XX"
            (`data.trees.LEAVES`): every output is then a well-formed tree over the sentence's
            words (`data.treebank.tree_constraints`). None: any output the model writes.
        processors: a list of decoding processors (`keras_transformer.search.processors`) for
            every search, beam or sampling, after a prefix's and the tree constraint's; each
            must take any batch (its state made in its `start`). Exported with the functions.
        calibration: a `keras_transformer.search.confidence.Calibration`
            (model_dir/calibration.json, written by kt-calibrate): `check_ids` and `translate`
            then give a confidence.
        shortlist: a `data.shortlist.Shortlist` (model_dir/shortlist.vmap, written by
            kt-shortlist): every search (beam and sampling) computes its logits only over the
            union of its batch's candidates: its source pieces' candidates, the shortlist's
            pieces always kept, and what its constraints force (`processors.forced_ids`); a
            candidate's log-probability is the model's softmax restricted to them and
            renormalized. Scoring given translations (`score_ids`, `check_ids`) stays over
            the whole vocabulary. Not with jit_compile (refused, a UserError: the candidates
            change size with every batch, and XLA compiles a program for each size).
        **settings: `DecodingConfig` fields as keywords (beam_size=, alpha=, ...): a
            convenience that sets them in `decoding`.
    """

    def __init__(self, model, vocabulary, decoding=None, *, max_batch_size=64,
                 max_input_bytes=None, max_search_positions=None, tree_leaves=None,
                 processors=(), calibration=None, shortlist=None, name="translator",
                 **settings):
        super().__init__(name=name)
        for member in members(model):
            vocabulary.check_size(member.vocab_size)
        decoding = search_config(decoding, **settings)
        if decoding.max_input_length is None:
            decoding = decoding.replace(max_input_length=256)
        if decoding.batch_size is None:
            decoding = decoding.replace(batch_size=devices.decode_batch_size())
        self.decoding = decoding.for_model(model)
        self.bounds = RequestBounds(
            max_batch_size=max_batch_size,
            max_input_bytes=max_input_bytes or input_bytes(self.decoding.max_input_length),
            max_search_positions=max_search_positions, decoding=self.decoding)
        self.model = model
        self.vocabulary = vocabulary
        # Keras keeps the model's layers in lists that tf.Module does not follow; the SavedModel
        # needs every variable the functions read to be tracked.
        self.model_variables = [v for member in members(model) for v in member.variables]
        self.tree_leaves = tree_leaves
        self._tree_constraint = (treebank.tree_constraints(vocabulary, tree_leaves)
                                 if tree_leaves else lambda source_ids: None)
        self.processors = list(processors)
        self.calibration = calibration
        self.dtype_reason = None  # from_loaded: --dtype auto's measurement, where it chose
        self.xla_shapes = (XlaShapes(self.decoding.max_input_length, max_batch_size)
                           if self.decoding.jit_compile else None)
        self.shortlist = shortlist and CandidateTable(shortlist, vocabulary.vocab_size)
        if self.shortlist and self.xla_shapes:
            raise UserError("a shortlist (--shortlist) and jit_compile (--jit_compile) do not "
                            "go together: the candidates change size with every batch, and XLA "
                            "would compile each size")

    @classmethod
    def from_model_dir(cls, path, decoding=None, *, checkpoints=None, ensemble=(),
                       max_batch_size=None, max_search_positions=None, processors=(),
                       shortlist=False):
        """The model_dir `path`'s model decoded as `decoding` (a `DecodingConfig`; None: every
        setting the model's own, as kt-translate --model_dir `path` decodes), with its
        calibration if it has one.

        Args:
            checkpoints: checkpoint directories of `path` (None: its default one, as
                kt-translate picks it); several are an ensemble.
            ensemble: more model_dirs, each with its default checkpoint, ensembled with it.
            max_batch_size: as for `Translator`; None: `decoding.batch_size` if it says one,
                else 64.
            max_search_positions, processors: as for `Translator`.
            shortlist: True: decode with `path`'s vocabulary shortlist (shortlist.vmap, which
                kt-shortlist writes), as kt-translate --shortlist does.

        Raises:
            ModelDirError, ConfigError, DecodingConfigError, VocabularyError: what
                `model_dir.load` and `decoding_config.resolved` raise (all `kt.UserError`s).
        """
        loaded = load_members(path, decoding, checkpoints=checkpoints, ensemble=ensemble)
        calibration = model_dir.load_calibration(path) if len(loaded) == 1 else None
        return cls.from_loaded(loaded, decoding, max_batch_size=max_batch_size,
                               max_search_positions=max_search_positions,
                               processors=processors, calibration=calibration,
                               shortlist=shortlist and model_dir.load_shortlist(
                                   path, loaded[0].vocabulary))

    @classmethod
    def from_loaded(cls, loaded, decoding=None, *, max_batch_size=None,
                    max_search_positions=None, processors=(), calibration=None,
                    shortlist=None):
        """`from_model_dir` for models already loaded: a `model_dir.Loaded`, or a list of them
        (an ensemble; the first one's run decides the defaults)."""
        loaded = list(loaded) if isinstance(loaded, (list, tuple)) and not isinstance(
            loaded, model_dir.Loaded) else [loaded]
        models = [member.model for member in loaded]
        resolved = decoding_config.resolved(decoding, loaded[0])
        translator = cls(models if len(models) > 1 else models[0], loaded[0].vocabulary, resolved,
                   max_batch_size=max_batch_size or (decoding and decoding.batch_size) or 64,
                   max_search_positions=max_search_positions, processors=processors,
                   calibration=calibration, shortlist=shortlist or None,
                   tree_leaves=decoding_config.tree_leaves(resolved, loaded[0]))
        # Why it computes in its dtype where --dtype auto chose it (the commands' closing lines).
        translator.dtype_reason = loaded[0].dtype_reason
        return translator

    def settings(self):
        """The decoding settings and request bounds, as a JSON-able dict (export.json's; a
        CTranslate2 export's engine reads its decoding back, `recorded_decoding`)."""
        settings = {name: getattr(self.decoding, name) for name in RECORDED}
        settings.update(self.bounds.settings(), tree_leaves=self.tree_leaves,
                        jit_compile=self.decoding.jit_compile)
        settings["calibration"] = self.calibration and json.loads(self.calibration.to_json())
        settings["shortlist"] = bool(self.shortlist)
        return settings

    def _length_penalty(self, lengths):
        return length_penalty(lengths, self.decoding.alpha,
                              self.decoding.length_normalization)

    # Without autograph (keras_transformer.search.contract.graph_function): kt-export's
    # serving_default traced in 1.5 s instead of 4.5 s.
    @graph_function(input_signature=[TEXTS])
    def tokenize(self, texts):
        """tf.string [batch] -> {"source_ids": int32 [batch, length]}: subwords + end of
        sentence, 0-padded.

        Bytes that are not UTF-8 become U+FFFD; an empty or blank text (white space only, as
        `str.isspace` has it) becomes a row of zeros (no end of sentence), which
        `translate_ids` answers with an empty translation.
        """
        with tf.control_dependencies([self.bounds.check_batch(tf.size(texts))]):
            texts = tf.identity(texts)
        return {"source_ids": source_ids_of(self.vocabulary, texts,
                                            self.decoding.max_input_length,
                                            self.bounds.max_input_bytes)}

    def _cut_sources(self, source_ids):
        """Rows cut to max_input_length, ending with end of sentence as `tokenize` cuts texts;
        bool [batch], the rows of only zeros (empty texts); bool [batch], the rows cut."""
        with tf.control_dependencies([self.bounds.check_batch(tf.shape(source_ids)[0])]):
            cut = tf.reduce_any(source_ids[:, self.decoding.max_input_length:] != PAD_ID,
                                axis=1)
        source_ids = source_ids[:, :self.decoding.max_input_length]
        width = tf.shape(source_ids)[1]
        last_column = tf.range(width) == width - 1
        source_ids = tf.where(cut[:, None] & last_column, EOS_ID, source_ids)
        return source_ids, tf.reduce_all(source_ids == PAD_ID, axis=1), cut

    def output_limits_of(self, source_ids):
        """int32 [batch]: the most tokens each translation of `source_ids` (int32 [batch,
        length], already cut to max_input_length: `limits_of` cuts them) may have."""
        return self.decoding.output_limits(source_lengths(source_ids))

    def limits_of(self, source_ids):
        """int32 [batch]: the most tokens (end of sentence included) the searches let each
        translation of `source_ids` (as for `translate_ids`) have."""
        return self.output_limits_of(self._cut_sources(source_ids)[0])

    @graph_function(input_signature=[IDS])
    def translate_n_best_ids(self, source_ids):
        """int32 source ids [batch, length] -> every hypothesis of the beam, best first:
        {"ids": int32 [batch, beam_size, output_length] (0 after end of sentence), "scores"
        float32 [batch, beam_size] (log-probability / length penalty), "log_probs" float32
        [batch, beam_size]}. Inputs are cut as `translate_ids` cuts them; a row of zeros gets
        one empty hypothesis with score 0, and -inf scores for the rest.
        """
        return self._n_best(source_ids)

    def _n_best(self, source_ids, constraints=(), *, room=None):
        """`translate_n_best_ids` held to `constraints` (processors from `constraints`); room:
        int32 [batch], the output length each sentence needs at least (a kept text and its
        tags), or None."""
        source_ids, empty, _ = self._cut_sources(source_ids)
        limits = tf.where(empty, 1, self.output_limits_of(source_ids))
        if room is not None:
            limits = tf.maximum(limits, room)
        source_ids = self.bounds.checked_search(source_ids, limits, self.decoding.beam_size)
        ids, scores = search_in_batches(self._search, source_ids, limits, constraints,
                                        batch_size=self.decoding.batch_size,
                                        beam_size=self.decoding.beam_size)
        first = tf.range(self.decoding.beam_size) == 0
        ids = tf.where(empty[:, None, None], PAD_ID, ids)
        scores = tf.where(empty[:, None], tf.where(first, 0.0, float("-inf")), scores)
        lengths = tf.reduce_sum(tf.cast(scoring.target_mask(ids), tf.int32), axis=-1)
        return {"ids": ids, "scores": scores,
                "log_probs": scores * self._length_penalty(lengths)}

    def _search(self, source_ids, limits, constraints):
        """The beam search of one batch of `_n_best`'s: (ids, scores) as `beam_decode` gives."""
        if not self.xla_shapes:
            return self._beam_decode(source_ids, limits, constraints)
        return self.xla_shapes.beam_decode(
            self._beam_decode, source_ids, limits, constraints,
            lambda padded_length: self.decoding.replace(
                max_output_length=None).output_limits(padded_length, model=self.model))

    def _beam_decode(self, source_ids, limits, constraints):
        # Under XLA (the decoding's jit_compile), extra_length sizes the output buffer (source
        # length + extra_length).
        processors = self._processors(constraints, self._tree_constraint(source_ids))
        return beam_decode(self.model, source_ids, self.decoding, max_output_length=limits,
                           processors=processors,
                           candidates=self._candidates(source_ids, processors))

    def _candidates(self, source_ids, processors):
        """The shortlist's candidates of a search of `source_ids` held by `processors`
        (`CandidateTable.of`), or None without a shortlist."""
        return self.shortlist.of(source_ids, forced_ids(processors)) if self.shortlist else None

    @graph_function(input_signature=[IDS])
    def translate_ids(self, source_ids):
        """int32 source ids [batch, length] (subwords + end of sentence, 0-padded) ->
        {"ids": int32 [batch, output_length] (0 after end of sentence), "scores": float32
        [batch], log-probability / length penalty}. Rows longer than max_input_length are cut
        and end with end of sentence, as `tokenize` cuts texts; a row of zeros gets an empty
        output with score 0.
        """
        best = self.translate_n_best_ids(source_ids)
        return {"ids": best["ids"][:, 0], "scores": best["scores"][:, 0]}

    @graph_function(input_signature=[IDS, TARGET_IDS, SCORES])
    def check_ids(self, source_ids, target_ids, scores):
        """`keras_transformer.search.confidence.signs` of translations (`translate_ids`' ids and
        scores, float32 [batch]) of source_ids, with this translator's calibration: the signs
        that they went wrong, word alignments, and a confidence if calibrated."""
        source_ids, _, _ = self._cut_sources(source_ids)
        # Under "hf" a translation stopped at its limit ends with end of sentence all the same.
        limits = (self.output_limits_of(source_ids) if self.decoding.length_normalization == "hf"
                  else None)
        return confidence.signs(self.model, source_ids, target_ids, scores, self.calibration,
                                limits)

    @graph_function(input_signature=[IDS, TARGET_IDS])
    def score_ids(self, source_ids, target_ids):
        """The model's log P(target | source) of given pairs, as `keras_transformer.score`
        computes it, with the request bounds of `translate_ids`: sources cut as it cuts them,
        each target cut to the length limit its translation would have (a target that reaches
        it scores without its end of sentence, as a hypothesis stopped there would; under "hf"
        its last token there costs nothing, as the search's forced end of sentence); a blank
        source reads as an end of sentence alone.

        Args:
            source_ids: int32 [batch, length], as for `translate_ids`.
            target_ids: int32 [batch, length], subwords + end of sentence, 0-padded.

        Returns:
            {"scores" float32 [batch] (log-probability / length penalty, with this
            translator's alpha), "log_probs" float32 [batch], "token_log_probs" float32
            [batch, length], "lengths" int32 [batch] (the tokens scored), "truncated" bool
            [batch] (the source or the target was cut)}.
        """
        source_ids, empty, source_cut = self._cut_sources(source_ids)
        # A blank source reads as an end of sentence alone: an encoder given only padding would
        # attend over however much padding its batch mates bring.
        first_column = tf.range(tf.shape(source_ids)[1]) == 0
        source_ids = tf.where(empty[:, None] & first_column, EOS_ID, source_ids)
        limits = self.output_limits_of(source_ids)
        target_cut = tf.reduce_sum(tf.cast(scoring.target_mask(target_ids), tf.int32),
                                   axis=1) > limits
        # The decoder reads no more columns than a translation could have, within the bound
        # of a search (max_search_positions).
        target_ids = self.bounds.checked_scoring(
            target_ids[:, :self.decoding.max_output_length])
        keep = tf.range(tf.shape(target_ids)[1])[None, :] < limits[:, None]
        result = scoring.score(self.model, source_ids, tf.where(keep, target_ids, PAD_ID),
                               self.decoding.alpha,
                               length_normalization=self.decoding.length_normalization)
        if self.decoding.length_normalization == "hf":
            result = scoring.with_forced_end(result, limits, self.decoding.alpha)
        return dict(result, truncated=source_cut | target_cut)

    @graph_function(input_signature=[TEXTS])
    def tokenize_targets(self, texts):
        """tf.string [batch] -> {"target_ids": int32 [batch, length]}: subwords + end of
        sentence, 0-padded, what a translation of the text would be; an empty text is an end
        of sentence alone. Read up to max_input_bytes bytes, as `tokenize` reads sources."""
        return {"target_ids": append_end_of_sentence(self._target_subwords(texts),
                                                     empty_rows=True).to_tensor(PAD_ID)}

    @graph_function(input_signature=[TEXTS])
    def tokenize_prefixes(self, texts):
        """tf.string [batch] -> {"prefix_ids": int32 [batch, length]}: target prefixes as
        subwords without end of sentence, 0-padded, at most max_output_length of them."""
        tokens = self._target_subwords(texts)[:, :self.decoding.max_output_length]
        return {"prefix_ids": tokens.to_tensor(PAD_ID)}

    def _target_subwords(self, texts):
        with tf.control_dependencies([self.bounds.check_batch(tf.size(texts))]):
            return self.target_subwords(texts)

    def target_subwords(self, texts):
        """tf.string [n] -> int32 ragged [n, (subwords)]: each text read up to max_input_bytes
        bytes (not UTF-8: U+FFFD) as the target vocabulary's subwords, for any number of texts
        (no max_batch_size: callers bound what they pass)."""
        texts = tf.strings.substr(texts, 0, self.bounds.max_input_bytes)
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
        return tf.cast(self.vocabulary.target.tokenize(texts), tf.int32)

    @graph_function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detokenize(self, ids):
        """int32 [batch, length] -> tf.string [batch], each read up to its end of sentence."""
        return self.vocabulary.detokenize(ids)

    @graph_function(input_signature=[TEXTS])
    def translate(self, texts):
        """tf.string [batch] -> {"translations": tf.string [batch], "scores": float32 [batch],
        and `check_ids`' signs: "stopped_at_limit", "repeated_ngrams" bool [batch], "uncovered"
        float32 [batch], and with a calibration "confidence" float32 [batch]}."""
        source_ids = self.tokenize(texts)["source_ids"]
        result = self.translate_ids(source_ids)
        checks = self.check_ids(source_ids, result["ids"], result["scores"])
        for name in ("alignment", "features"):  # subword positions, calibration inputs
            del checks[name]
        return {"translations": self.detokenize(result["ids"]), "scores": result["scores"],
                **checks}

    @graph_function(input_signature=[TEXTS])
    def translate_n_best(self, texts):
        """tf.string [batch] -> every hypothesis of the beam, best first: {"translations":
        tf.string [batch, beam_size], "scores" and "log_probs": float32 [batch, beam_size]} (a
        score of -inf: no such hypothesis)."""
        result = self.translate_n_best_ids(self.tokenize(texts)["source_ids"])
        ids = result["ids"]
        shape = tf.shape(ids)
        # Not [-1, length]: an empty batch's ids are [0, beam, 0], which -1 cannot divide.
        texts = self.detokenize(tf.reshape(ids, [shape[0] * shape[1], shape[2]]))
        return {"translations": tf.reshape(texts, shape[:2]),
                "scores": result["scores"], "log_probs": result["log_probs"]}

    @graph_function(input_signature=[TEXTS, TARGETS])
    def score(self, texts, targets):
        """Sources and their translations, tf.string [batch] each -> `score_ids`' results
        without the per-token ones: {"scores", "log_probs", "lengths", "truncated"} [batch]."""
        # A control dependency, so that no op reading both fails first with its own message.
        with tf.control_dependencies([tf.debugging.assert_equal(
                tf.size(texts), tf.size(targets),
                message="score needs as many targets as inputs")]):
            texts, targets = tf.identity(texts), tf.identity(targets)
        result = self.score_ids(self.tokenize(texts)["source_ids"],
                                self.tokenize_targets(targets)["target_ids"])
        return {name: result[name] for name in ("scores", "log_probs", "lengths", "truncated")}
