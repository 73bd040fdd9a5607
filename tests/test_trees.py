"""Trees as text: reading, normalizing, the linearization and its inverse, the PTB directory
reader, and EVALB's scoring on hand-worked cases."""

import gzip

import pytest
import tensorflow as tf
import treebank_grammar
from hypothesis import given
from hypothesis import strategies as st

from keras_transformer import data
from keras_transformer.data import evalb, treebank, trees


def tree(text):
    return next(trees.parse_trees([text]))[1]


def normalized(text):
    return trees.normalize(tree(text))


HAND_TREES = [
    "( (S (NP-SBJ (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)) )",
    "(TOP (S (NP (PRP I)) (VP (VBD gave) (PRT (RP up))) (. .)))",
    "(ROOT (S (NP (NP (NNP John))) (VP (VBD ran))))",  # a unary chain
    "( (S (`` ``) (NP-SBJ-1 (PRP We)) (, ,) (VP (VBD won) (NP (-NONE- *-1))) ('' '') (. .)) )",
    "(S (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) (VP (VB go)))",  # no root wrapper
    "( (FRAG (NP (NN Hello)) (. !)) )",
    "( (X (Y (Z (NN deep)))) )",
]


def with_xx(tree_):
    return trees.with_tags(tree_, ["XX"] * len(tree_.words()))


@pytest.mark.parametrize("leaves", trees.LEAVES)
@pytest.mark.parametrize("text", HAND_TREES + treebank_grammar.treebank(300, seed=5))
def test_delinearize_inverts_linearize(text, leaves):
    gold = normalized(text)
    words, tokens = trees.linearize(gold, leaves)
    assert words == gold.words()
    assert len(tokens) == len(words) + 2 * sum(1 for _ in _phrases(gold))
    expected = gold if leaves == "tags" else with_xx(gold)  # tags: the tree itself
    assert trees.delinearize(tokens, words, tags=leaves == "tags") == expected
    # The written tree reads back as the same tree.
    assert normalized(str(trees.delinearize(tokens, words, tags=leaves == "tags"))) == expected


def _phrases(node):
    for child in node.children:
        if not child.is_preterminal:
            yield child
            yield from _phrases(child)


@pytest.mark.parametrize("leaves, expected", [
    ("words", "(S (NP John )NP (VP has (NP a dog )NP )VP . )S"),
    ("tags", "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"),  # tensor2tensor's
    ("XX", "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"),  # Vinyals et al.'s
])
def test_the_linearization_is_vinyals_et_al_with_a_choice_of_leaves(leaves, expected):
    words, tokens = trees.linearize(normalized(HAND_TREES[0]), leaves)
    assert words == "John has a dog .".split()
    assert " ".join(tokens) == expected


def test_words_are_the_default_leaves():
    gold = normalized(HAND_TREES[0])
    assert trees.linearize(gold) == trees.linearize(gold, "words")


def test_leaves_that_would_read_as_brackets_are_escaped():
    tree_ = trees.Tree("TOP", [trees.Tree("X", [trees.Tree("A", ["("]), trees.Tree("B", [")x"]),
                                              trees.Tree("C", ["f(x)"])])])
    _, tokens = trees.linearize(tree_)
    assert tokens == ["(X", "-LRB-", "-RRB-x", "f-LRB-x-RRB-", ")X"]
    back = trees.delinearize(tokens, tree_.words())
    assert back.words() == ["(", ")x", "f(x)"]
    # Written, the words' brackets are escaped too, so the tree reads back (as the PTB's words).
    assert str(back) == "(TOP (X (XX -LRB-) (XX -RRB-x) (XX f-LRB-x-RRB-)))"
    assert tree(str(back)).words() == ["-LRB-", "-RRB-x", "f-LRB-x-RRB-"]
    with pytest.raises(ValueError, match="leaves must be one of words, tags, XX, got 'pos'"):
        trees.linearize(tree_, "pos")


@given(st.lists(st.text(alphabet="ab()x", min_size=1, max_size=4), max_size=5),
       st.sampled_from(["words", "XX"]))
def test_leaf_texts_spell_the_linearized_leaves(words, leaves):
    """What a parser held to trees must write (keras_transformer/search/constraints/tree.py) is what
    the linearization writes for the sentence's words."""
    tree_ = trees.Tree("TOP", [trees.Tree("X", [trees.Tree("A", [word]) for word in words])])
    _, tokens = trees.linearize(tree_, leaves) if words else ([], [])
    texts = treebank.leaf_texts(tf.constant([" ".join(words), ""]), leaves).numpy()
    assert [text.decode() for text in texts] == [" ".join(tokens[1:-1]), ""]


def test_leaf_texts_refuse_tags():
    with pytest.raises(ValueError, match="not tags"):
        treebank.leaf_texts(tf.constant(["a b"]), "tags")


def test_a_parsers_tree_keeps_its_own_tags_or_takes_the_gold_ones():
    gold = normalized(HAND_TREES[0])
    words = gold.words()
    tagged = "(S (NP NN )NP (VP VBZ (NP DT NN )NP )VP . )S".split()  # NNP predicted as NN
    assert trees.parsed(tagged, words, gold, tags=True).tags() == ["NN", "VBZ", "DT", "NN", "."]
    bracketed = "(S (NP John )NP (VP has (NP a dog )NP )VP . )S".split()
    assert trees.parsed(bracketed, words, gold) == gold  # gold tags where brackets only
    assert trees.parsed(bracketed, words).tags() == ["XX"] * 5  # none to take


def test_normalize_drops_empty_elements_function_tags_and_the_root():
    assert str(normalized(HAND_TREES[3])) == \
        "(TOP (S (`` ``) (NP (PRP We)) (, ,) (VP (VBD won)) ('' '') (. .)))"
    assert str(normalized(HAND_TREES[4])) == \
        "(TOP (S (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) (VP (VB go))))"
    assert trees.normalize(tree("( (S (NP (-NONE- *)) (VP (-NONE- *T*))) )")) is None


@pytest.mark.parametrize("tokens, words, expected", [
    # an unclosed constituent, closed at the end
    ("(S (NP XX XX )NP (VP XX", "a b c", "(TOP (S (NP (XX a) (XX b)) (VP (XX c))))"),
    # a closing bracket with nothing open is dropped; a mislabelled one closes the innermost
    (")S (S (NP XX )VP XX )S", "a b", "(TOP (S (NP (XX a)) (XX b)))"),
    # more XX than words: the extra ones go from the end, with constituents left empty
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP )S", "a b", "(TOP (S (NP (XX a)) (VP (XX b))))"),
    # fewer XX than words: the missing ones end the first constituent
    ("(S (NP XX )NP )S", "a b c", "(TOP (S (NP (XX a)) (XX b) (XX c)))"),
    # nothing useful at all
    ("", "a b", "(TOP (XX a) (XX b))"),
    ("(NP )NP (VP )VP", "a", "(TOP (NP (XX a)))"),
])
def test_malformed_outputs_become_trees_of_the_input_words(tokens, words, expected):
    assert str(trees.delinearize(tokens.split(), words.split())) == expected


TOKENS = st.sampled_from(["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")", "(", "XX", "junk"])


@given(st.lists(TOKENS, max_size=30), st.lists(st.sampled_from(["w", "x", "(", "y"]),
                                               max_size=12))
def test_any_token_sequence_gives_a_tree_of_the_words_in_order(tokens, words):
    result = trees.delinearize(tokens, words)
    assert result.words() == words
    assert result.label == trees.ROOT
    assert all(node.children for node in _phrases(result))  # no empty constituent
    if words:  # what kt-parse writes reads back as the same tree
        assert normalized(str(result)).words() == [
            {"(": "-LRB-"}.get(word, word) for word in words]


def test_a_tree_deeper_than_pythons_recursion_limit_is_read_written_and_scored():
    # What a parser that writes `(NP` thousands of times gives kt-parse (a RecursionError in
    # writing its tree failed a test run, 2026-11-26).
    depth = 5000
    tokens = ["(NP"] * depth + ["XX", "XX"] + [")NP"] * depth
    parsed = trees.delinearize(tokens, ["a", "b"])
    text = str(parsed)
    assert text == "(TOP " + "(NP " * depth + "(XX a) (XX b)" + ")" * (depth + 1)
    assert parsed == tree(text) and parsed != tree(text.replace("(XX b)", "(XX c)"))
    assert trees.linearize(trees.normalize(tree(text)), "XX")[1] == tokens
    tagged = trees.with_tags(parsed, ["DT", "NN"])
    assert tagged.tags() == ["DT", "NN"] and tagged.words() == ["a", "b"]
    result = evalb.score_sentence(tree("(TOP (NP (DT a) (NN b)))"), tagged)
    assert (result.gold_brackets, result.test_brackets, result.matched) == (1, depth, 1)


def test_a_node_that_mixes_words_and_trees_is_refused_when_made():
    with pytest.raises(TypeError, match=r"Tree 'NP': children must be Trees, or one word"):
        trees.Tree("NP", [trees.Tree("DT", ["the"]), "dog"])
    with pytest.raises(TypeError, match=r"\['str', 'str'\]"):
        trees.Tree("NN", ["big", "dog"])
    assert str(trees.Tree("NP", [trees.Tree("DT", ["the"]), trees.Tree("NN", ["dog"])])) == (
        "(NP (DT the) (NN dog))")
    assert str(trees.Tree("NP", [])) == "(NP )"  # an empty phrase, as a parser may write


@pytest.mark.parametrize("text, message", [
    ("(S (NP (NN a))", "f.mrg:1: unbalanced brackets: the tree that starts here has 1"),
    ("(S (NP (NN a))))", "f.mrg:1: unbalanced brackets: a ')' closes nothing"),
    ("()", "f.mrg:1: empty brackets () hold no word"),
    ("( )", "f.mrg:1: empty brackets () hold no word"),
    ("(S (NP))", "f.mrg:1: empty brackets (NP) hold no word"),
    ("(S (NN a b))", "f.mrg:1: (NN a b...) is not a constituent"),
    ("(S (NN a) b)", "f.mrg:1: (S (NN a) b...) is not a constituent"),
    ("dangling (S (NN a))", "f.mrg:1: 'dangling' outside any bracket"),
])
def test_malformed_gold_trees_are_refused_naming_file_and_line(text, message):
    with pytest.raises(trees.TreeError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        list(trees.parse_trees([text], "f.mrg"))


def test_read_trees_names_the_line_where_the_bad_tree_starts(tmp_path):
    path = tmp_path / "bad.mrg"
    path.write_text("( (S (NP (NN a)) (VP (VB b))) )\n\n( (S (NP (NN c))\n  (VP (VB d)) )\n")
    with pytest.raises(trees.TreeError, match=f"{path}:3: unbalanced brackets"):
        trees.read_trees(path)
    empty = tmp_path / "empty.mrg"
    empty.write_text("\n")
    with pytest.raises(trees.TreeError, match=f"{empty}: holds no tree"):
        trees.read_trees(empty)
    packed = tmp_path / "good.trees.gz"
    packed.write_bytes(gzip.compress(b"(S (NN a)) (S (NN b))\n(S\n (NN c))\n"))
    assert [(line, t.words()) for line, t in trees.read_trees(packed)] == [
        (1, ["a"]), (1, ["b"]), (2, ["c"])]


def test_the_wsj_reader_splits_by_section(tmp_path):
    splits = {"train": treebank_grammar.treebank(60, seed=1), "dev": ["( (S (NN d)) )"],
              "test": ["( (S (NN t)) )", "( (S (NN u)) )"]}
    wsj = treebank_grammar.write_wsj(tmp_path / "treebank_3", splits)
    assert (wsj / "02" / "wsj_0201.mrg").is_file() and (wsj / "21" / "wsj_2101.mrg").is_file()
    for directory in (wsj, tmp_path / "treebank_3"):  # the wsj directory or the one above
        source = data.get_source(f"ptb:{directory}")
        assert isinstance(source, data.TreebankSource) and source.splits() == [
            "train", "dev", "test"]
        files = source.files
        assert [p.parent.name for p in files["train"]] == [f"{n:02d}" for n in range(2, 22)]
        assert [p.parent.name for p in files["dev"]] == ["22"]
        assert [p.parent.name for p in files["test"]] == ["23"]
        assert len(source.trees("train")) == 60  # section 00 is in no split
        pairs = [(s.decode(), t.decode()) for s, t in source.pairs("test").as_numpy_iterator()]
        assert pairs == [("t", "(S t )S"), ("u", "(S u )S")]
        gold = {" ".join(normalized(text).words()) for text in splits["train"]}
        assert {s.decode() for s, _ in source.pairs("train").as_numpy_iterator()} == gold


@pytest.mark.parametrize("prefix, target", [("ptb:", "(S (NP a )NP (VP b )VP )S"),
                                            ("ptb-tags:", "(S (NP NN )NP (VP VB )VP )S"),
                                            ("ptb-xx:", "(S (NP XX )NP (VP XX )VP )S")])
def test_a_directory_of_split_files_is_a_treebank_too(tmp_path, prefix, target):
    (tmp_path / "train.trees").write_text("(S (NP (NN a)) (VP (VB b)))\n")
    (tmp_path / "dev.trees").write_text("(S (NN c))\n")
    source = data.get_source(f"{prefix}{tmp_path}")
    assert source.splits() == ["train", "dev"] and source.name == f"{prefix}{tmp_path}"
    assert data.is_treebank(source.name)
    assert next(source.pairs("train").as_numpy_iterator()) == (b"a b", target.encode())


def test_a_treebank_vocabulary_keeps_brackets_whole_and_words_as_they_are(tmp_path):
    (tmp_path / "train.trees").write_text(
        "(S (NP (NNP INC)) (VP (VBD rose)) (. .))\n(S (NP (DT the) (NN firm)) (VP (VBD fell)))\n")
    source = data.get_source(f"ptb-tags:{tmp_path}")
    whole = data.corpus_whole_tokens(source)
    assert whole == ["(NP", "(S", "(VP", ")NP", ")S", ")VP"]  # not the tags: IN would cut INC
    vocabulary = data.build_vocabulary(
        [text for _ in range(20) for text in data.corpus_texts(source)], 300,
        tmp_path / "v.model", whole_tokens=whole)
    def pieces(text):
        return vocabulary.pieces(vocabulary.encode([text])[0].numpy().tolist())

    target = pieces("(S (NP NNP )NP")
    assert target[:2] == ["▁(S", "▁(NP"] and target[-2:] == ["▁)NP", "</s>"]
    assert "▁IN" not in pieces("INC")


def test_a_treebank_without_training_trees_is_refused(tmp_path):
    with pytest.raises(data.CorpusError, match="ptb-xx:.*/missing: no such directory"):
        data.get_source(f"ptb-xx:{tmp_path}/missing")
    (tmp_path / "dev.trees").write_text("(S (NN c))\n")
    with pytest.raises(data.CorpusError, match="found no training trees"):
        data.get_source(f"ptb:{tmp_path}")
    (tmp_path / "train.trees").write_text("(S (NN c)\n")
    with pytest.raises(trees.TreeError, match="train.trees:1: unbalanced"):
        data.get_source(f"ptb:{tmp_path}").trees("train")
    assert treebank.is_treebank(f"ptb:{tmp_path}") and not treebank.is_treebank("bible_en_es")


# EVALB with COLLINS.prm, worked by hand: (gold, test, matched, gold brackets, test brackets,
# crossing, words, correct tags). Spans count the words left once punctuation is deleted.
DOG = "(TOP (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .)))"
EVALB_CASES = {
    # NP(0,2) VP(2,3) S(0,3); TOP is not counted, "." not a word.
    "identical": (DOG, DOG, 3, 3, 3, 0, 3, 3),
    # "." inside VP instead of under S: punctuation is deleted before spans are counted.
    "punctuation ignored": (DOG, "(TOP (S (NP (DT the) (NN dog)) (VP (VBD barked) (. .))))",
                            3, 3, 3, 0, 3, 3),
    # PRT(2,3) = ADVP(2,3); the tag RB != RP costs tagging accuracy only.
    "ADVP equals PRT": ("(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up)))))",
                        "(TOP (S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up)))))", 4, 4, 4, 0,
                        3, 2),
    # gold NP(0,1) twice: the test's one NP matches one of them: R 3/4, P 3/3.
    "unary chain in gold": ("(TOP (S (NP (NP (NNP John))) (VP (VBD ran))))",
                            "(TOP (S (NP (NNP John)) (VP (VBD ran))))", 3, 4, 3, 0, 2, 2),
    # the reverse: P 3/4, R 3/3.
    "unary chain in test": ("(TOP (S (NP (NNP John)) (VP (VBD ran))))",
                            "(TOP (S (NP (NP (NNP John))) (VP (VBD ran))))", 3, 3, 4, 0, 2, 2),
    # ADJP(3,4) is not NP(3,4).
    "wrong label": ("(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (NP (NN d)))))",
                    "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (ADJP (NN d)))))", 3, 4, 4, 0, 4, 4),
    "function tags stripped": ("(TOP (S (NP-SBJ-1 (PRP I)) (VP=2 (VBP run))))",
                               "(TOP (S (NP (PRP I)) (VP (VBP run))))", 3, 3, 3, 0, 2, 2),
    # EVALB's README example: traces go, and the SBAR and S that dominate only traces.
    "empty elements": ("(TOP (S (NP-SBJ (-NONE- *)) (VP (VBD reported) (SBAR (-NONE- 0) "
                       "(S (-NONE- *T*-1))))))", "(TOP (S (VP (VBD reported))))", 2, 2, 2, 0,
                       1, 1),
    # X(0,3) crosses VP(2,5): P 2/3, R 2/4, one crossing bracket.
    "crossing": ("(TOP (S (NP (DT the) (NN man)) (VP (VBD saw) (NP (DT a) (NN dog)))))",
                 "(TOP (S (X (DT the) (NN man) (VBD saw)) (NP (DT a) (NN dog))))", 2, 4, 3, 1,
                 5, 5),
    # the PTB's unlabelled root and a tree without one score alike.
    "unlabelled root": ("( (S (NP (NNP A)) (VP (VBD b))) )", "(S (NP (NNP A)) (VP (VBD b)))",
                        3, 3, 3, 0, 2, 2),
    # quotes and commas go; PRN over a comma alone is left empty and not counted.
    "quotes and commas": ("(TOP (S (`` ``) (NP (PRP We)) (, ,) (VP (VBD won)) ('' '') (. .)))",
                          "(TOP (S (`` ``) (NP (PRP We) (, ,)) (PRN (: ;)) (VP (VBD won)) "
                          "('' '') (. .)))",
                          3, 3, 3, 0, 2, 2),
}


@pytest.mark.parametrize("name", sorted(EVALB_CASES))
def test_evalb_counts_as_worked_by_hand(name):
    gold, test, matched, gold_n, test_n, crossing, words, tags = EVALB_CASES[name]
    result = evalb.score_sentence(tree(gold), tree(test))
    assert (result.matched, result.gold_brackets, result.test_brackets, result.crossing,
            result.words, result.correct_tags, result.error) == (
        matched, gold_n, test_n, crossing, words, tags, "")
    summary = evalb.Summary.of([result])
    precision, recall = 100 * matched / test_n, 100 * matched / gold_n
    assert summary.precision == pytest.approx(precision)
    assert summary.recall == pytest.approx(recall)
    assert summary.f1 == pytest.approx(2 * precision * recall / (precision + recall))
    assert summary.complete_match == (100.0 if matched == gold_n == test_n else 0.0)


def test_evalb_figures_by_hand():
    """P, R, F1 typed in from arithmetic done by hand."""
    cases = {"crossing": (200 / 3, 50.0, 400 / 7), "unary chain in gold": (100.0, 75.0, 600 / 7),
             "wrong label": (75.0, 75.0, 75.0), "ADVP equals PRT": (100.0, 100.0, 100.0)}
    for name, (precision, recall, f1) in cases.items():
        gold, test = EVALB_CASES[name][:2]
        every, _, _ = evalb.evaluate([tree(gold)], [tree(test)])
        assert (every.precision, every.recall, every.f1) == pytest.approx(
            (precision, recall, f1)), name
    # ADVP equals PRT: 2 of 3 tags right.
    assert evalb.evaluate([tree(EVALB_CASES["ADVP equals PRT"][0])],
                          [tree(EVALB_CASES["ADVP equals PRT"][1])])[0].tagging_accuracy == \
        pytest.approx(200 / 3)


def test_evalb_sums_brackets_over_sentences_and_skips_errors():
    names = ["identical", "wrong label", "crossing"]
    golds = [tree(EVALB_CASES[n][0]) for n in names] + [tree(DOG)]
    tests = [tree(EVALB_CASES[n][1]) for n in names] + [tree("(S (NN the) (NN cat))")]
    every, short, results = evalb.evaluate(golds, tests)
    assert results[3].error.startswith("length mismatch") or results[3].error == \
        "words mismatch"
    # matched 3 + 3 + 2 of gold 3 + 4 + 4 and test 3 + 4 + 3.
    assert (every.sentences, every.errors) == (4, 1)
    assert every.recall == pytest.approx(800 / 11) and every.precision == pytest.approx(80.0)
    assert every.complete_match == pytest.approx(100 / 3)
    assert every.average_crossing == pytest.approx(1 / 3)
    assert every.no_crossing == pytest.approx(200 / 3)
    assert every.two_or_less_crossing == 100.0
    assert short == every  # all shorter than 41 words
    assert "Bracketing FMeasure       =  76.19" in every.format("All")


def test_evalb_summarizes_sentences_up_to_40_words_apart():
    long_words = " ".join(f"(NN w{i})" for i in range(40))
    long_gold = f"(TOP (S (NP {long_words}) (VP (VB go)) (. .)))"  # 41 words, "." counts too
    forty = f"(TOP (S (NP {long_words}) (. .)))"  # 41 with "."
    thirty_nine = "(TOP (S (NP " + " ".join(f"(NN w{i})" for i in range(39)) + ") (. .)))"
    golds = [tree(long_gold), tree(forty), tree(thirty_nine)]
    every, short, results = evalb.evaluate(golds, golds)
    assert [r.length for r in results] == [42, 41, 40]
    assert (every.sentences, short.sentences) == (3, 1)
    with pytest.raises(ValueError, match="2 gold trees but 1 test trees"):
        evalb.evaluate(golds[:2], golds[:1])


def test_an_unlabelled_bracket_inside_a_tree_is_refused_and_a_word_at_the_root_kept():
    with pytest.raises(trees.TreeError, match=r"f.mrg:2: a bracket without a label inside"):
        list(trees.parse_trees(["( (S", "  ( (NN a)) (VP (VB b))) )"], "f.mrg"))
    assert str(normalized("(TOP hello)")) == "(TOP (TOP hello))"
    assert treebank.leaves_of("ptb-tags:d") == "tags"
    with pytest.raises(ValueError, match="'bible_en_es' is not a treebank"):
        treebank.leaves_of("bible_en_es")
