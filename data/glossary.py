"""Glossaries: source terms whose translation must come out one fixed way (the
production-translation issue; kt-translate --glossary terms.tsv).

A glossary file holds one term pair a line, `source term<TAB>target term` (UTF-8; blank lines and
lines starting with `#` are skipped). A source term occurs in a sentence where it stands as whole
words (case-sensitive; where terms overlap, the longest is taken); its target term is then
required in the translation (`keras_transformer.glossary_constraint.GlossaryConstraint` holds
the search to it).
"""

import pathlib
import re


class GlossaryError(ValueError):
    """A glossary that cannot be used; the message names the file and line."""


class Glossary:
    """Term pairs, source -> target.

    Args:
        pairs: (source term, target term) str pairs; a source term given twice must have one
            target term.
    """

    def __init__(self, pairs):
        self.targets = {}
        for source, target in pairs:
            if self.targets.setdefault(source, target) != target:
                raise GlossaryError(f"{source!r} has two target terms: "
                                    f"{self.targets[source]!r} and {target!r}")
        # Longest first: an alternation takes the first term that matches at a position.
        terms = sorted(self.targets, key=len, reverse=True)
        self._pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, terms)) + r")(?!\w)"
                                   ) if terms else None

    @classmethod
    def load(cls, path):
        """The glossary of a file; a GlossaryError names the file and line of what is wrong."""
        path = pathlib.Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise GlossaryError(f"cannot read glossary {path}: {error.strerror}") from None
        except UnicodeDecodeError as error:
            raise GlossaryError(f"{path}: not UTF-8 at byte {error.start}") from None
        pairs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not all(field.strip() for field in fields):
                raise GlossaryError(f"{path}:{number}: expected 'source term<TAB>target term', "
                                    f"got {line!r}")
            pairs.append(tuple(field.strip() for field in fields))
        try:
            return cls(pairs)
        except GlossaryError as error:
            raise GlossaryError(f"{path}: {error}") from None

    def __len__(self):
        return len(self.targets)

    def targets_in(self, sentence):
        """The target terms `sentence`'s source terms require, each once, in the order their
        source terms occur."""
        if self._pattern is None:
            return []
        return list(dict.fromkeys(self.targets[match.group(0)]
                                  for match in self._pattern.finditer(sentence)))
