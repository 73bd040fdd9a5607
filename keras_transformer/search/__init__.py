"""Searching for a model's outputs (paper section 6.1), as TensorFlow graph code:

- `settings.py`: `DecodingConfig`, how to decode, one object from the command line (or Python,
  or export.json) to the search, with its bounds, presets and the output-limit rule;
- `contract.py`: the step-function contract every search takes, and its loop shapes;
- `beam.py` and `sampling.py`: beam search, and greedy decoding and sampling, pure functions of
  a step function and a cache;
- `steps.py`: a Transformer (or an ensemble) as that step function;
- `decode.py`: `beam_decode`, `greedy_decode`, `sample_decode` over it, each taking a
  `DecodingConfig` whole;
- `scoring.py` and `confidence.py`: the model's probability of given outputs, and the signs
  that a translation went wrong;
- `processors.py` and `constraints/`: what changes a step's logits (prefixes, trees, markup,
  glossaries), which the searches apply without knowing what they mean.

The searches know nothing of how a model is built (tests/test_structure.py)."""
