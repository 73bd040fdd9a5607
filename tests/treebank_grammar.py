"""A small probabilistic grammar of English-like trees for the parsing tests.

Seeded, so every run writes the same treebank; recursive (PPs in NPs and VPs, clauses under SBAR,
coordination) but unambiguous: the attachment of a PP is decided by its preposition ("of" attaches
to the noun, "with", "in", "near" to the verb), noun phrases recurse only to the right and
coordinate only base noun phrases, so a parser can get every bracket right from the words.
Subjects carry PTB's function tag (NP-SBJ) and some clauses an empty element, as the WSJ's .mrg
files do, so reading them exercises `trees.normalize`.
"""

import pathlib
import random

LEXICON = {
    "DT": ["the", "a", "every", "some", "this"],
    "NN": ["dog", "cat", "man", "woman", "telescope", "park", "house", "idea", "book", "river",
           "city", "letter", "garden", "friend"],
    "NNS": ["dogs", "books", "rivers", "ideas", "letters", "friends"],
    "NNP": ["John", "Mary", "London", "Paris", "Alice"],
    "PRP": ["he", "she", "they", "we"],
    "JJ": ["big", "old", "green", "happy", "small", "quiet"],
    "RB": ["very", "quite", "rather"],
    "VBD": ["saw", "liked", "found", "took", "wrote", "visited"],
    "VBZ": ["is", "seems"],
    "VBP": ["think", "know", "believe"],
    "MD": ["will", "can"],
    "VB": ["see", "take", "find", "visit"],
    "RP": ["up", "out"],
}
VERB_PREPOSITIONS = ["with", "in", "near"]


class Grammar:
    def __init__(self, seed):
        self.random = random.Random(seed)

    def word(self, tag):
        return f"({tag} {self.random.choice(LEXICON[tag])})"

    def choose(self, options):
        total = sum(weight for weight, _ in options)
        pick = self.random.uniform(0, total)
        for weight, make in options:
            pick -= weight
            if pick <= 0:
                return make()
        return options[-1][1]()

    def base_noun_phrase(self, label="NP"):
        return self.choose([(4, lambda: f"({label} {self.word('DT')} {self.word('NN')})"),
                            (2, lambda: f"({label} {self.word('DT')} {self.word('JJ')} "
                                        f"{self.word('NN')})"),
                            (2, lambda: f"({label} {self.word('NNP')})"),
                            (1, lambda: f"({label} {self.word('PRP')})"),
                            (1, lambda: f"({label} {self.word('NNS')})")])

    def noun_phrase(self, depth, label="NP"):
        # Recursion only to the right of a base noun phrase, and coordination only of base noun
        # phrases: every sentence has one tree, so a parser can reach an F1 of 100.
        options = [(6, lambda: self.base_noun_phrase(label))]
        if depth < 3:
            options += [(2, lambda: f"({label} {self.base_noun_phrase()} (PP (IN of) "
                                    f"{self.noun_phrase(depth + 1)}))"),
                        (1, lambda: f"({label} {self.base_noun_phrase()} (CC and) "
                                    f"{self.base_noun_phrase()})")]
        return self.choose(options)

    def verb_phrase(self, depth):
        preposition = self.random.choice(VERB_PREPOSITIONS)
        options = [(4, lambda: f"(VP {self.word('VBD')} {self.noun_phrase(depth + 1)})"),
                   (2, lambda: f"(VP {self.word('VBD')} {self.noun_phrase(depth + 1)} (PP (IN "
                               f"{preposition}) {self.noun_phrase(depth + 1)}))"),
                   (2, lambda: f"(VP {self.word('VBZ')} (ADJP {self.word('RB')} "
                               f"{self.word('JJ')}))"),
                   (1, lambda: f"(VP {self.word('VBZ')} (ADJP {self.word('JJ')}))"),
                   (2, lambda: f"(VP {self.word('MD')} (VP {self.word('VB')} "
                               f"{self.noun_phrase(depth + 1)}))"),
                   (1, lambda: f"(VP {self.word('VBD')} (PRT {self.word('RP')}) "
                               f"{self.noun_phrase(depth + 1)})")]
        if depth < 2:
            options.append((2, lambda: f"(VP {self.word('VBP')} (SBAR (IN that) "
                                       f"{self.clause(depth + 1)}))"))
            options.append((1, lambda: f"(VP {self.word('VBP')} (SBAR (-NONE- 0) "
                                       f"{self.clause(depth + 1)}))"))
        return self.choose(options)

    def clause(self, depth):
        return f"(S {self.noun_phrase(depth, 'NP-SBJ')} {self.verb_phrase(depth)})"

    def sentence(self):
        """A PTB-style tree: the unlabelled root, a function tag, final punctuation."""
        clause = self.clause(0)
        return f"( (S {clause[3:-1]} (. .)) )"


def treebank(count, seed, exclude=()):
    """`count` distinct trees (str) whose sentences are not among `exclude` (a set of str)."""
    from keras_transformer.data import trees

    grammar, found, seen = Grammar(seed), [], set(exclude)
    while len(found) < count:
        text = grammar.sentence()
        words = " ".join(next(trees.parse_trees([text]))[1].words())
        if words not in seen:
            seen.add(words)
            found.append(text)
    return found


def write_wsj(root, splits):
    """Writes `splits` (split -> list of tree strings) in LDC's layout under `root`:
    parsed/mrg/wsj/SS/wsj_SSNN.mrg, train spread over sections 02-21, dev in 22, test in 23,
    a tree over several lines as the .mrg files have them; returns the wsj directory."""
    wsj = pathlib.Path(root, "parsed", "mrg", "wsj")
    sections = {"train": range(2, 22), "dev": [22], "test": [23]}
    for split, texts in splits.items():
        numbers = list(sections[split])
        for index, number in enumerate(numbers):
            part = texts[index::len(numbers)]
            directory = wsj / f"{number:02d}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"wsj_{number:02d}01.mrg").write_text(
                "".join(text.replace(" (VP", "\n    (VP") + "\n\n" for text in part))
    (wsj / "00").mkdir(exist_ok=True)  # a section no split uses
    (wsj / "00" / "wsj_0001.mrg").write_text("( (S (NP-SBJ (PRP it)) (VP (VBZ is)) (. .)) )\n")
    return wsj


def write_parsing_treebank(root):
    """The parsing tests' treebank under `root` (write_wsj's layout): 3,000 training trees, 100
    held-out dev trees and 400 test trees whose sentences are not in the training ones, the
    same on every call (tests/data/trained_parser was trained on it); returns the wsj
    directory."""
    from keras_transformer.data import trees

    train = treebank(3000, seed=1)
    seen = {" ".join(trees.normalize(next(trees.parse_trees([t]))[1]).words()) for t in train}
    held_out = treebank(500, seed=2, exclude=seen)
    return write_wsj(root, {"train": train, "dev": held_out[:100], "test": held_out[100:]})
