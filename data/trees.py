"""Constituency trees as text, and as the bracket sequences a Transformer learns to write.

Section 6.3 of the paper parses by translation, in the setup of Vinyals, Kaiser et al. (2015,
"Grammar as a Foreign Language"): the source is a sentence's words, the target its tree written
as a sequence of tokens. The linearization here:

    tree    (TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))
    source  John has a dog .
    target  (S (NP John )NP (VP has (NP a dog )NP )VP . )S       leaves="words" (the default)
            (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S        leaves="tags"
            (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S         leaves="XX"

- an opening bracket is one token with its label, `(NP`; a closing bracket repeats it, `)NP`;
- each preterminal is one leaf token (`LEAVES`): its word (brackets in it written as the PTB
  writes a bracket word, `-LRB-`/`-RRB-`, as in the written trees); its part-of-speech tag, as
  tensor2tensor's parsing problems (the paper's code) wrote it; or `XX` for every tag, as Vinyals
  et al. normalized them. The words are the default because a model can find its place in the
  sentence by copying them, where with tags or `XX` it must count the leaves it has written: a
  small parser on the test suite's grammar reached a held-out F1 of 97 with words and 31-32 with
  either of the others at the same budget (docs/data.md);
- the root that wraps a treebank tree (an unlabelled `( ... )` in the PTB's .mrg files, `TOP` or
  `ROOT` elsewhere) is not written; `delinearize` puts a `TOP` back.

`delinearize(tokens, words)` is the inverse for what a model writes, well-formed or not: a closing
bracket closes the innermost open constituent whatever its label, one with nothing open is dropped,
constituents still open at the end are closed; any other token is a leaf; then the leaf count is
made the word count (extra leaves removed from the end, missing ones added at the end of the first
constituent) and empty constituents are dropped, so the tree always holds the input's words in
order (the leaves' own text is not used: a model's misspelt copy cannot change the sentence).

Trees are read from PTB `.mrg` files or from files of one tree a line alike (`read_trees`);
`normalize` prepares a treebank tree for training and scoring as parsers are evaluated: empty
elements (`-NONE-`) and the constituents left empty removed, function tags and indices dropped
from labels (`NP-SBJ-1` -> `NP`), the root renamed `TOP`.
"""

import gzip
import os
import re

from keras_transformer.data.errors import CorpusError
from keras_transformer.errors import check_one_of

ROOT = "TOP"
ROOT_LABELS = ("", "TOP", "ROOT")  # what treebanks call the wrapper around a sentence's tree
TAG = "XX"  # the part-of-speech tag of a tree read back from leaves that are not tags
LEAVES = ("words", "tags", "XX")  # what a linearized tree writes for each preterminal
EMPTY_ELEMENT = "-NONE-"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")
# Brackets in words are written as the PTB writes a bracket word, so that no word reads back
# as a bracket: "(" -> "-LRB-", "f(x)" -> "f-LRB-x-RRB-".
ESCAPES = {"(": "-LRB-", ")": "-RRB-"}
_ESCAPES = str.maketrans(ESCAPES)


class TreeError(CorpusError):
    """Bracketed text that is not a tree; the message names the file and line."""


class Tree:
    """A constituent: `label` and `children`, each a Tree; a preterminal's one child is its word.

    Args:
        label: str, e.g. "NP" (a part-of-speech tag for a preterminal).
        children: list of Tree, or a one-item list holding a word (str).
    """

    __slots__ = ("label", "children")

    def __init__(self, label, children):
        self.label = label
        self.children = list(children)
        # Every function over trees tells a word from a phrase by this rule, so a node that
        # mixes them is refused here rather than failing later in one of them.
        if not (self.is_preterminal or all(isinstance(c, Tree) for c in self.children)):
            raise TypeError(f"Tree {label!r}: children must be Trees, or one word (str) for a "
                            f"part-of-speech node; got "
                            f"{[type(child).__name__ for child in self.children]}")

    @property
    def is_preterminal(self):
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def preterminals(self):
        """The preterminals left to right (each a Tree whose one child is the word)."""
        return [node for event, node in walk(self) if event == "leaf"]

    def words(self):
        return [leaf.children[0] for leaf in self.preterminals()]

    def tags(self):
        return [leaf.label for leaf in self.preterminals()]

    def __str__(self):
        # A piece starts with the space that separates it from the one before, but a closing
        # bracket after a phrase's children.
        pieces = []
        for event, node in walk(self):
            if event == "leaf":
                pieces.append(f" ({node.label} {node.children[0].translate(_ESCAPES)})")
            elif event == "open":
                pieces.append(f" ({node.label}")
            else:
                pieces.append(")" if node.children else " )")
        return "".join(pieces)[1:]

    def __repr__(self):
        return f"Tree({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Tree) and list(_shape(self)) == list(_shape(other))


def walk(tree):
    """Yields (event, node) through `tree` in written order: ("open", phrase) and ("close",
    phrase) around a phrase's children, ("leaf", preterminal) for a preterminal.

    Without recursion: a parser's output may nest deeper than Python's recursion limit (a model
    that writes `(NP` 500 times), and every function here reads trees through this one.
    """
    stack = [(False, tree)]
    while stack:
        closing, node = stack.pop()
        if closing:
            yield "close", node
        elif node.is_preterminal:
            yield "leaf", node
        else:
            yield "open", node
            stack.append((True, node))
            stack.extend((False, child) for child in reversed(node.children))


def _shape(tree):
    for event, node in walk(tree):
        yield event, node.label, node.children if event == "leaf" else None


def _rebuilt(tree, leaf, phrase):
    """A tree made bottom-up from `tree`: `leaf(preterminal)` and `phrase(node, children)` (the
    children already made) each return a Tree, or None to leave it out; None if the root is."""
    made = [[]]  # the children made so far of each open phrase, the root's holder first
    for event, node in walk(tree):
        if event == "open":
            made.append([])
            continue
        new = leaf(node) if event == "leaf" else phrase(node, made.pop())
        if new is not None:
            made[-1].append(new)
    return made[0][0] if made[0] else None


def parse_trees(lines, name="<text>"):
    """Yields (line number, Tree) for each bracketed tree in `lines` (an iterable of str), where
    a tree may span lines and a line may hold several trees (.mrg files, one-tree-a-line files).

    Raises:
        TreeError: unbalanced brackets, empty brackets, a word outside any bracket, or a bracket
            holding several words, naming `name` and the line.
    """
    stack = []  # open brackets: [label or None, children, line number]
    line_number = 0
    for line_number, line in enumerate(lines, 1):
        for token in _TOKEN.findall(line):
            if token == "(":
                stack.append([None, [], line_number])
            elif token == ")":
                if not stack:
                    raise TreeError(f"{name}:{line_number}: unbalanced brackets: a ')' closes "
                                    f"nothing")
                label, children, start = stack.pop()
                if stack and not label:
                    raise TreeError(f"{name}:{start}: a bracket without a label inside a tree "
                                    f"(only the root may be unlabelled)")
                node = _close(label, children, start, name)
                if stack:
                    stack[-1][1].append(node)
                else:
                    yield start, node
            elif not stack:
                raise TreeError(f"{name}:{line_number}: {token!r} outside any bracket")
            elif stack[-1][0] is None and not stack[-1][1]:
                stack[-1][0] = token
            else:
                stack[-1][1].append(token)
    if stack:
        raise TreeError(f"{name}:{stack[0][2]}: unbalanced brackets: the tree that starts here "
                        f"has {len(stack)} '(' still open at the end (line {line_number})")


def _close(label, children, line_number, name):
    label = label or ""
    words = [child for child in children if isinstance(child, str)]
    if not children:
        raise TreeError(f"{name}:{line_number}: empty brackets ({label}) hold no word: an empty "
                        f"tree or constituent")
    if words and (len(children) > 1 or not label):
        raise TreeError(f"{name}:{line_number}: ({label} {' '.join(map(str, children))[:60]}"
                        f"...) is not a constituent: a part-of-speech bracket holds one word "
                        f"after its tag, a phrase holds only brackets")
    return Tree(label, children)


def read_trees(path):
    """[(line number, Tree)] of a file of bracketed trees (plain or gzip).

    Raises:
        TreeError: as `parse_trees`, naming the file; also a file with no tree.
        CorpusError: the file is missing or not UTF-8.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CorpusError(f"{path}: no such file")
    with open(path, "rb") as probe:
        opener = gzip.open if probe.read(2) == b"\x1f\x8b" else open
    try:
        with opener(path, "rt", encoding="utf-8") as stream:
            trees = list(parse_trees(stream, path))
    except UnicodeDecodeError as error:
        raise CorpusError(f"{path}: not UTF-8 text ({error})") from None
    if not trees:
        raise TreeError(f"{path}: holds no tree")
    return trees


def _plain_label(label):
    """A label without function tags and indices: NP-SBJ-1 -> NP, NP=2 -> NP (-LRB- stays)."""
    if re.fullmatch(r"-[A-Z]+-", label):
        return label
    return re.split(r"(?<=.)[-=]", label, maxsplit=1)[0]


def normalize(tree):
    """The tree as parsers train and are scored on: empty elements gone, plain labels, root TOP.

    Returns:
        a new Tree labelled TOP, or None if nothing but empty elements was in it.
    """
    def leaf(preterminal):
        return None if preterminal.label == EMPTY_ELEMENT else Tree(preterminal.label,
                                                                    preterminal.children)

    def phrase(node, children):
        return Tree(_plain_label(node.label), children) if children else None

    # A root that holds a word directly, (TOP hello), is that word's preterminal.
    body = tree.children if tree.label in ROOT_LABELS and not tree.is_preterminal else [tree]
    children = [kept for kept in (_rebuilt(node, leaf, phrase) for node in body)
                if kept is not None]
    return Tree(ROOT, children) if children else None


def linearize(tree, leaves="words"):
    """(words, target tokens) of a normalized tree (see the module docstring), both lists of str.

    Args:
        tree: a normalized Tree.
        leaves: one of LEAVES, what each preterminal is written as.
    """
    check_one_of("leaves", leaves, LEAVES, ValueError)
    tokens = []
    for child in tree.children:
        for event, node in walk(child):
            if event == "leaf":
                tokens.append(_leaf(node, leaves))
            else:
                tokens.append(("(" if event == "open" else ")") + node.label)
    return tree.words(), tokens


def _leaf(preterminal, leaves):
    if leaves == "tags":
        return preterminal.label
    return preterminal.children[0].translate(_ESCAPES) if leaves == "words" else TAG


def delinearize(tokens, words, tags=False):
    """The tree a target token sequence describes, over `words`; repairs malformed sequences.

    Args:
        tokens: list of str, e.g. "(S (NP John )NP".split(); any token that is not a bracket is
            read as a preterminal.
        words: list of str, the sentence.
        tags: whether the leaves are part-of-speech tags (linearized with leaves="tags"), kept
            as the preterminals' labels; otherwise every preterminal is labelled `XX`.

    Returns:
        a Tree labelled TOP whose preterminals hold `words`, in order.
    """
    root = Tree(ROOT, [])
    open_nodes = [root]
    for token in tokens:
        if token.startswith("(") and len(token) > 1:
            node = Tree(token[1:], [])
            open_nodes[-1].children.append(node)
            open_nodes.append(node)
        elif token.startswith(")"):
            if len(open_nodes) > 1:
                open_nodes.pop()
        else:
            open_nodes[-1].children.append(Tree(token if tags else TAG, [""]))
    leaves = root.preterminals()
    for extra in leaves[len(words):]:
        extra.children = []  # pruned below, with constituents left empty
    if len(leaves) < len(words):
        host = next((child for child in root.children if not child.is_preterminal), root)
        host.children.extend(Tree(TAG, [""]) for _ in range(len(words) - len(leaves)))
    root = _pruned(root) or Tree(ROOT, [])
    for leaf, word in zip(root.preterminals(), words):
        leaf.children = [word]
    return root


def _pruned(node):
    """`node` without the phrases that hold no preterminal (None if nothing is left); the
    preterminals are the same objects."""
    return _rebuilt(node, lambda leaf: leaf,
                    lambda phrase, children: Tree(phrase.label, children) if children else None)


def parsed(tokens, words, gold=None, tags=False):
    """A parser's tree: `delinearize(tokens, words, tags)`, whose preterminals carry the gold
    tree's tags where the model predicts brackets only (not `tags`) and a gold tree is given, so
    that EVALB reads both as it reads the gold."""
    tree = delinearize(tokens, words, tags=tags)
    return with_tags(tree, gold.tags()) if gold is not None and not tags else tree


def with_tags(tree, tags):
    """A copy of `tree` whose preterminals carry `tags` (a list as long as its words)."""
    tags = iter(tags)
    return _rebuilt(tree, lambda leaf: Tree(next(tags), leaf.children),
                    lambda phrase, children: Tree(phrase.label, children))
