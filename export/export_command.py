"""kt-export: a SavedModel that TF Serving serves, raw strings in and translations out.

    kt-export --model_dir runs/demo --output exported/demo     # writes exported/demo/1/
    kt-export --model_dir runs/demo --format ctranslate2 --quantization int8 --output ct2/demo

With --format ctranslate2 the export is a CTranslate2 model directory instead (the optional
extra: pip install "keras-transformer[ctranslate2]"; export/ctranslate2.py says what is written);
what follows is about SavedModels.

Signatures:
- `serving_default`: `inputs` tf.string [batch] -> `translations` tf.string [batch], `scores`
  float32 [batch] (log-probability / length penalty of each translation), and the signs of
  trouble (`stopped_at_limit`, `repeated_ngrams` bool, `uncovered` float32 [batch]) and, for a
  model_dir calibrated by kt-calibrate, `confidence` float32 [batch] (keras_transformer/
  confidence.py).
- `translate_ids`: `source_ids` int32 [batch, length] (subwords + end of sentence 1, 0-padded)
  -> `ids` int32 [batch, output_length] (0 after end of sentence), `scores` float32 [batch].
- `tokenize`: `inputs` tf.string [batch] -> `source_ids`, for clients that want the ids.
- `translate_n_best`: `inputs` tf.string [batch] -> every hypothesis of the beam, best first:
  `translations` tf.string [batch, beam_size], `scores` and `log_probs` float32 [batch,
  beam_size] (-inf: no such hypothesis).
- `score`: `inputs` and `targets` tf.string [batch] -> the model's log P(target | input):
  `scores` (log-probability / length penalty, as beam search ranks), `log_probs`, `lengths`
  (target tokens scored, end of sentence included) and `truncated` (input or target cut to
  the bounds below) [batch].
- `translate_document` (with --documents): `documents` tf.string [batch] -> `translations`
  tf.string [batch], each document cut into sentences and put back with its line breaks and
  spacing (export/documents.py), and int32 [batch] counts: `sentences`, `split_at_clauses`,
  `split_into_windows` (sentences too long for the model, split rather than cut).
- `translate_with_glossary` (with --glossaries): `inputs` tf.string [batch], `glossary_sources`
  and `glossary_targets` tf.string [terms] -> `translations`, `scores`, `terms_required` int32
  [batch]: each translation holds the target terms of the source terms in its sentence
  (export/glossary.py).
- `translate_with_markup` (with --markup; a model trained with --markup_rate): `inputs` tf.string
  [batch] of tagged text -> `translations`, `scores`: each translation holds its input's tags
  (attributes verbatim), placeholders, URLs, e-mail addresses and numbers exactly once, tags
  well nested, as kt-translate --markup gives it (export/markup_translator.py).

Tokenizing and detokenizing run in the graph with tensorflow-text's SentencePiece ops, which
stock TF Serving includes, and (translate_document) its sentence breaker; no other custom op
is used. Loading in Python needs only
`import tensorflow, tensorflow_text`. The vocabulary and the settings travel as assets.

Each export is a new numbered version directory under --output, the layout TF Serving watches
(it serves the highest number); an existing version is never replaced.
"""

import argparse
import sys
import time

from keras_transformer import model_dir
from keras_transformer.cli import at_least
from keras_transformer.errors import UserError
from keras_transformer.export import request_bounds
from keras_transformer.export.ctranslate2 import QUANTIZATIONS, export_ctranslate2
from keras_transformer.export.flags import (
    add_decoding_flags,
    beam_description,
    checkpoints,
    translator_from_flags,
)
from keras_transformer.export.saved_model import ExportError, export, provenance, version_path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kt-export", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    add_decoding_flags(parser)
    parser.add_argument("--output", required=True,
                        help="directory of versions; the export goes to OUTPUT/<version>")
    parser.add_argument("--version", type=at_least(1),
                        help="version number (default: one more than the highest in --output)")
    parser.add_argument("--max_batch_size", type=request_bounds.flag_type("max_batch_size"),
                        default=64,
                        help="most sentences one request may carry; more is an error "
                             "(default %(default)s)")
    parser.add_argument("--max_search_positions",
                        type=request_bounds.flag_type("max_search_positions"),
                        help="most positions one beam search of a request may hold: sentences "
                             "x beam size x the longest output limit among them (what its "
                             "memory and time grow with), at least beam size x "
                             "max_output_length; past it, INVALID_ARGUMENT before the search "
                             "(translate_document takes fewer sentences a search instead; "
                             "default: no bound beyond --max_batch_size, --max_input_length "
                             "and --max_output_length; docs/serving.md)")
    parser.add_argument("--documents", action="store_true",
                        help="also the translate_document signature: whole documents in, each "
                             "cut into sentences in the graph and put back together, long "
                             "sentences split, never cut (docs/serving.md)")
    parser.add_argument("--glossaries", action="store_true",
                        help="also the translate_with_glossary signature: each request brings "
                             "its glossary (source and target terms), and each translation "
                             "holds the target terms of the source terms in its sentence "
                             "(docs/serving.md)")
    parser.add_argument("--markup", action="store_true",
                        help="also the translate_with_markup signature: tagged text in, each "
                             "translation holding its tags, placeholders, URLs and numbers "
                             "exactly once (a model trained with --markup_rate; "
                             "docs/serving.md)")
    parser.add_argument("--format", choices=("savedmodel", "ctranslate2"), default="savedmodel",
                        help="savedmodel (TF Serving; default) or ctranslate2 (OpenNMT's C++ "
                             "engine; kt-translate --engine ctranslate2 reads it)")
    parser.add_argument("--quantization", choices=QUANTIZATIONS,
                        help="--format ctranslate2: the weights' type (default float32; int8 "
                             "is the fast one on CPUs)")
    args = parser.parse_args(argv)
    if args.quantization and args.format != "ctranslate2":
        parser.error("--quantization is for --format ctranslate2")
    if args.format == "ctranslate2" and (args.ensemble or len(args.checkpoint or []) > 1):
        parser.error("--format ctranslate2 exports one model; an ensemble is a SavedModel only")
    if args.format == "ctranslate2" and args.jit_compile:
        parser.error("--jit_compile is for a SavedModel: CTranslate2 compiles its own kernels")
    if args.format == "ctranslate2" and args.tree_constraint:
        parser.error("--tree_constraint is for a SavedModel: CTranslate2 decodes any sequence")
    if args.format == "ctranslate2" and args.documents:
        parser.error("--documents is for a SavedModel; kt-translate --documents splits "
                     "documents for --engine tensorflow")
    if args.format == "ctranslate2" and args.glossaries:
        parser.error("--glossaries is for a SavedModel; CTranslate2 has no glossary search")
    if args.format == "ctranslate2" and args.max_search_positions:
        parser.error("--max_search_positions bounds a SavedModel's requests; kt-translate "
                     "--engine ctranslate2 batches its own input")
    if args.format == "ctranslate2" and args.markup:
        parser.error("--markup is for a SavedModel; CTranslate2 cannot hold a search to markup")
    if args.format == "ctranslate2" and args.dtype not in ("auto", "float32"):
        parser.error("--dtype is for a SavedModel; a CTranslate2 export's weights are "
                     "--quantization's")
    if args.format == "ctranslate2":
        args.tree_constraint = False  # what its export.json records
        args.dtype = "float32"  # converted from the trained weights; --quantization rounds them
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        version_path(args.output, args.version)  # a bad --output fails before loading
        translator, members = translator_from_flags(args, args.max_batch_size,
                                                    args.max_search_positions)
        if args.markup and translator.tree_leaves:
            raise ExportError(f"--markup: {args.model_dir} is a parser; its outputs are trees")
        if args.format == "ctranslate2":
            path = export_ctranslate2(members[0], version_path(args.output, args.version),
                                      args.quantization or "float32", translator.settings(),
                                      provenance(*members),
                                      vmap=(f"{args.model_dir}/{model_dir.SHORTLIST_FILE}"
                                            if translator.shortlist else None))
        else:
            path = export(translator, args.output, args.version, provenance(*members),
                          documents=args.documents, glossaries=args.glossaries,
                          markup=args.markup)
    except (UserError, OSError) as error:
        print(f"kt-export: error: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    search_bound = (f", at most {translator.bounds.max_search_positions} search positions a request"
                    if translator.bounds.max_search_positions else "")
    if args.format == "ctranslate2":
        print(f"exported {checkpoints(members)} to {path} in {seconds:.1f} s: a CTranslate2 "
              f"model, {args.quantization or 'float32'} weights"
              f"{', with the shortlist as its vmap' if translator.shortlist else ''}; "
              f"kt-translate --engine "
              f"ctranslate2 --ctranslate2_dir {args.output} translates with it")
        return 0
    print(f"exported {checkpoints(members)} to {path} in {seconds:.1f} s; "
          f"signatures serving_default (strings), translate_ids, tokenize, translate_n_best, "
          f"score{', translate_document' if args.documents else ''}"
          f"{', translate_with_glossary' if args.glossaries else ''}"
          f"{', translate_with_markup' if args.markup else ''}"
          f"{'; with a confidence (calibration.json)' if translator.calibration else ''}; "
          f"{beam_description(translator)}, inputs cut at {translator.decoding.max_input_length} "
          f"tokens, at most {translator.bounds.max_batch_size} sentences a request"
          f"{search_bound}")
    if members[0].dtype_reason:
        print(f"the export computes in {translator.decoding.dtype} wherever it is served, as "
              f"chosen for this machine ({members[0].dtype_reason}); for a server of another "
              f"kind, name it: --dtype float32 or --dtype bfloat16 (docs/serving.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
