"""The error every reader of corpora raises: its message names the file and line."""


class CorpusError(ValueError):
    """A corpus that cannot be read as sentence pairs; the message names the file and line."""
