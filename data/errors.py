"""The error every reader of corpora raises: its message names the file and line."""

from keras_transformer.errors import UserError


class CorpusError(UserError):
    """A corpus that cannot be read as sentence pairs; the message names the file and line."""
