"""keras_transformer/search/constraints/glossary.py: searches whose every hypothesis holds its
sentence's required target phrases; data/glossary.py: which a sentence requires; kt-translate
--glossary."""


import json
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
from client_process import run_client
from conftest import PRODUCTION_FLAGS, run_main
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_beam_search import exhaustive, table_step

import keras_transformer as kt
from keras_transformer.data import glossary
from keras_transformer.export import translate
from keras_transformer.search.constraints.glossary import GlossaryConstraint

# A toy vocabulary of 6 ids: 1 ends a sentence, the rest are words. Sentence 0 must hold the
# phrase 3 4, sentence 1 nothing, sentence 2 the phrase 5 (with a limit that leaves room for it
# and the end of sentence only, or for a word before it).
VOCAB, LIMITS = 6, [4, 3, 2]
PHRASES = [[[3, 4], [0, 0]], [[0, 0], [0, 0]], [[5, 0], [0, 0]]]


def holds(sentence, tokens):
    return all(any(tokens[i:i + len(phrase)] == tuple(phrase) for i in range(len(tokens)))
               for phrase in ([p for p in row if p] for row in PHRASES[sentence]) if phrase)


def end_bonuses(log_probs, sentence, limit, previous, tokens):
    """What each token's score gains from the end's probability (`give_the_end_to`): while
    the sentence's one phrase is owed, the allowed tokens that continue or start it share it."""
    phrase = [p for p in PHRASES[sentence][0] if p]
    matched, done, bonuses = 0, not phrase, []
    for t, (p, y) in enumerate(zip(previous, tokens)):
        owed = set()
        if not done:
            steps_left = limit - t
            if len(phrase) - matched - 1 <= steps_left - 1:
                owed.add(phrase[matched])
            if len(phrase) - 1 <= steps_left - 1:
                owed.add(phrase[0])
        bonuses.append(np.logaddexp(0.0, log_probs[t, p, 1] - np.log(len(owed)) -
                                    log_probs[t, p, y]) if y in owed else 0.0)
        if not done:
            matched = matched + 1 if y == phrase[matched] else int(y == phrase[0])
            done = matched == len(phrase)
    return bonuses


def enumeration(table, sentence, limit, alpha):
    """Every hypothesis holding the sentence's phrases, with its penalized score, best first."""
    return exhaustive(table, sentence, limit, alpha, vocab=VOCAB,
                      keeps=lambda tokens: holds(sentence, tokens),
                      bonuses=lambda log_probs, previous, tokens: end_bonuses(
                          log_probs, sentence, limit, previous, tokens))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_beam_search_finds_the_best_hypotheses_that_hold_the_phrases(rng, jit_compile):
    """A beam as wide as every prefix returns the enumeration's best among the hypotheses that
    hold every phrase: the deadline rule never drops one that could still make it."""
    table = rng.normal(scale=2.0, size=(3, max(LIMITS), VOCAB, VOCAB))
    step_fn, cache = table_step(table)
    search = tf.function(lambda: kt.beam_search(
        step_fn, cache, LIMITS, beam_size=VOCAB ** (max(LIMITS) - 1),
        buffer_length=max(LIMITS), processors=[GlossaryConstraint(tf.constant(PHRASES))]),
        jit_compile=jit_compile)
    ids, scores = search()
    for sentence, limit in enumerate(LIMITS):
        expected = enumeration(table, sentence, limit, 0.6)
        for k, (score, tokens) in enumerate(expected[:8]):
            np.testing.assert_allclose(scores[sentence, k], score, rtol=1e-5)
            assert ids[sentence, k].numpy().tolist()[:len(tokens)] == list(tokens)
        finite = int(np.isfinite(scores[sentence]).sum())
        assert finite == min(len(expected), VOCAB ** (max(LIMITS) - 1))  # the others: none


def test_greedy_and_sampled_outputs_hold_the_phrases(rng):
    table = rng.normal(scale=2.0, size=(3, max(LIMITS), VOCAB, VOCAB))
    step_fn, cache = table_step(table)
    for temperature, seed in [(0.0, None), (1.0, [1, 0]), (1.0, [2, 0]), (3.0, [3, 0])]:
        ids, _ = kt.sampling_search(step_fn, cache, tf.constant(LIMITS),
                                    temperature=temperature, seed=seed,
                                    processors=[GlossaryConstraint(tf.constant(PHRASES))])
        for sentence, row in enumerate(ids.numpy().tolist()):
            tokens = tuple(row[:row.index(1) + 1] if 1 in row else row[:LIMITS[sentence]])
            assert holds(sentence, tokens), (temperature, sentence, tokens)


def test_terms_are_looked_for_only_where_their_words_are_and_found_alike():
    """Glossary.targets_of looks only for terms whose words all occur (the rest cannot): the
    same targets as looking for every term, overlaps and terms without words included."""
    pairs = [("New York", "Nueva York"), ("York City", "Ciudad de York"), ("C++", "C++"),
             ("++", "más más"), ("New", "Nuevo"), ("naïve_x", "ingenuo"), ("City", "Ciudad"),
             *((f"absent {n}", f"ausente {n}") for n in range(200))]
    terms = glossary.Glossary(pairs)
    sentences = ["New York City is big.", "I code in C++ and i ++ .", "naïve_x, New", "",
                 "absent", b"New \xff York"]
    every = glossary.required_terms(tf.constant(sentences), tf.constant(terms.sources)).numpy()
    expected = [list(dict.fromkeys(terms.targets[source] for source, hit in zip(
        terms.sources, row) if hit)) for row in every]
    assert terms.targets_of(sentences) == expected
    assert expected[:4] == [["Ciudad de York", "Nuevo"], ["C++", "más más"],
                            ["ingenuo", "Nuevo"], []]


def required_by_definition(texts, sources):
    """bool [texts, terms], the module docstring's rule in plain Python: each term, longest
    first, occurs where it stands with no letter, number or _ (Unicode's L and N categories) at
    either end; its occurrences in the text as it is before it is looked for (leftmost first,
    not overlapping) then count as found and become a control character, so no shorter term
    is found inside one."""
    def word_character(character):
        return character == "_" or unicodedata.category(character)[0] in "LN"

    found = np.zeros([len(texts), len(sources)], bool)
    for row, text in enumerate(texts):
        for column, term in enumerate(sources):
            pieces, start = [], 0
            while start < len(text):
                end = start + len(term)
                if (text.startswith(term, start)
                        and (start == 0 or not word_character(text[start - 1]))
                        and (end == len(text) or not word_character(text[end]))):
                    found[row, column] = True
                    pieces.append("\x01")
                    start = end
                else:
                    pieces.append(text[start])
                    start += 1
            text = "".join(pieces)
    return found


# Few pieces, so that terms overlap, touch and repeat: words, word characters that are not
# letters, signs, spaces (also no-break), a tab, a regular expression's special characters.
PIECES = ["a", "b", "ab", "é", "日本", "_", "1", "+", "(", "\\", ".", " ", " ", "\u00a0", "\t"]


@st.composite
def texts_and_terms(draw):
    """Up to 6 terms (no control character: Glossary refuses them) and texts made of the pieces,
    the terms themselves (so that terms occur, overlap and touch) and the control characters
    the search writes into texts."""
    terms = draw(st.lists(st.lists(st.sampled_from(PIECES[:-1]), min_size=1, max_size=4).map(
        "".join), min_size=1, max_size=6))
    texts = draw(st.lists(st.lists(st.sampled_from(PIECES + terms + ["\x01", "\x02", "\x03"]),
                                   max_size=10).map("".join), min_size=1, max_size=4))
    return texts, terms


@settings(max_examples=200)
@given(case=texts_and_terms())
# A term right after a found one; one occurrence made to look whole by blanking the next (the
# two-pass patterns before the boundary marks counted it); adjacent occurrences; overlaps.
@example(case=(["ab+", "+aa", "a+a+", "a a a"], ["ab", "a+", "+", "aa", "a"]))
@example(case=(["New York City", "C++ i ++ .", "x\x01++\x02New"], ["York City", "New York",
                                                                    "C++", "++", "New"]))
def test_terms_are_found_as_the_definition_says(case):
    texts, terms = case
    sources = sorted({t.strip() for t in terms if t.strip()}, key=lambda t: (-len(t), t))
    np.testing.assert_array_equal(glossary.required_terms(tf.constant(texts),
                                                          tf.constant(sources, tf.string)),
                                  required_by_definition(texts, sources))


def test_kt_translate_holds_every_line_to_its_glossary_terms(trained_model_dir, tmp_path):
    (tmp_path / "terms.tsv").write_text(
        "# source<TAB>target\nGod\tel Creador\nthe Lord\tel Señor Dios\nLord\tAmo\n"
        "Moses\tMoisés\n\n", encoding="utf-8")
    lines = ["In the beginning God created the heavens and the earth.",
             "Moses said to the Lord, Lord, God is here.", "Nothing to require here.", ""]
    (tmp_path / "input.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    terms = glossary.Glossary.load(tmp_path / "terms.tsv")
    assert [terms.targets_in(line) for line in lines] == [
        ["el Creador"], ["el Señor Dios", "Moisés", "Amo", "el Creador"], [], []]
    for flags in ([], ["--beam_size", "1"], ["--sampling_temperature", "1", "--seed", "5"]):
        result = run_main(translate.main, "--model_dir", trained_model_dir, "--glossary",
                          tmp_path / "terms.tsv", "--input", tmp_path / "input.en", *flags)
        assert result.returncode == 0, result.stderr
        outputs = result.stdout.split("\n")[:-1]
        assert len(outputs) == len(lines) and outputs[3] == ""
        for line, output in zip(lines, outputs):
            assert all(term in output for term in terms.targets_in(line)), (flags, output)
    (tmp_path / "bad.tsv").write_text("God\tDios\nLord\n", encoding="utf-8")
    bad = run_main(translate.main, "--model_dir", trained_model_dir, "--glossary",
                   tmp_path / "bad.tsv", "--input", tmp_path / "input.en")
    assert bad.returncode == 2 and f"{tmp_path / 'bad.tsv'}:2: expected 'source term<TAB>" \
        "target term', got 'Lord'" in bad.stderr
    (tmp_path / "control.tsv").write_text("God\tDios\nhome\x01\tcasa\n", encoding="utf-8")
    control = run_main(translate.main, "--model_dir", trained_model_dir, "--glossary",
                       tmp_path / "control.tsv", "--input", tmp_path / "input.en")
    assert control.returncode == 2 and f"{tmp_path / 'control.tsv'}:2: a glossary term holds " \
        "a control character" in control.stderr
    (tmp_path / "long.tsv").write_text("God\t" + " ".join(["Creador"] * 80) + "\n")
    no_room = run_main(translate.main, "--model_dir", trained_model_dir, "--glossary",
                       tmp_path / "long.tsv", "--input", tmp_path / "input.en")
    assert no_room.returncode == 2 and "line 1: its glossary terms need" in no_room.stderr
    combined = run_main(translate.main, "--model_dir", trained_model_dir, "--glossary",
                        tmp_path / "terms.tsv", "--markup")
    assert combined.returncode == 2 and "--markup and --glossary cannot be combined" in \
        combined.stderr


GLOSSARY_CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

serve = tf.saved_model.load(sys.argv[1]).signatures["translate_with_glossary"]
request = json.loads(sys.stdin.read())
replies = []
for glossary in request["glossaries"]:
    try:
        # Lone surrogates in the JSON stand for bytes that are not UTF-8.
        sources, targets = ([term.encode("utf-8", "surrogateescape") for term in terms]
                            for terms in glossary[:2])
        out = serve(inputs=tf.constant(request["lines"][:glossary[2]], tf.string),
                    glossary_sources=tf.constant(sources, tf.string),
                    glossary_targets=tf.constant(targets, tf.string))
        replies.append({"translations": [t.decode() for t in out["translations"].numpy()],
                        "terms_required": out["terms_required"].numpy().tolist()})
    except tf.errors.InvalidArgumentError as error:
        replies.append({"error": error.message})
print(json.dumps(replies))
"""


@pytest.mark.slow
def test_the_saved_model_holds_each_request_to_its_glossary_as_kt_translate_does(
        trained_model_dir, production_export, tmp_path):
    pairs = [("God", "el Creador"), ("the Lord", "el Señor Dios"), ("Lord", "Amo"),
             ("Moses", "Moisés")]
    (tmp_path / "terms.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    lines = ["In the beginning God created.", "Moses said to the Lord, Lord.", ""]  # 3 at most
    (tmp_path / "input.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_main(translate.main, "--model_dir", trained_model_dir, "--glossary",
                      tmp_path / "terms.tsv", "--input", tmp_path / "input.en",
                      "--batch_size", "3", *PRODUCTION_FLAGS)
    assert result.returncode == 0, result.stderr
    sources, targets = map(list, zip(*pairs))
    glossaries = [(sources[::-1], targets[::-1]),  # any order: the longest source term first
                  ([], []), (["God"], ["Creador " * 30]), (["God"], [""]),
                  (sources, targets[:3]), (["God"] * 257, ["Dios"] * 257),
                  (sources, targets, 0),  # an empty batch, answered empty
                  (["Go\udcffd"], ["Dios"]),  # b"Go\xffd"
                  # What found terms are overwritten with, in data.glossary
                  (["God", "\x01"], ["Dios", "Señor"])]
    glossaries = [(*glossary, 3)[:3] for glossary in glossaries]  # (sources, targets, lines)
    reply = run_client(GLOSSARY_CLIENT, production_export,
                       input=json.dumps({"lines": lines, "glossaries": glossaries}))
    assert reply.returncode == 0, reply.stderr
    held, free, no_room, empty, unpaired, too_many, no_lines, not_utf8, control = json.loads(
        reply.stdout)
    assert held["translations"] == result.stdout.split("\n")[:-1]
    assert held["terms_required"] == [1, 3, 0]
    assert "Amo" in held["translations"][1] and free["terms_required"] == [0, 0, 0]
    assert "the glossary terms of the sentence at this index need more tokens" in (
        no_room["error"])
    assert "a glossary term is empty" in empty["error"]
    assert "must pair up" in unpaired["error"]
    assert "too many glossary terms in one request: the limit is 256" in too_many["error"]
    assert no_lines == {"translations": [], "terms_required": []}
    assert "a glossary term is not UTF-8" in not_utf8["error"]
    assert "a glossary term holds a control character" in control["error"]
