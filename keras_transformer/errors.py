"""The base of every error a user can cause: a flag, file, line, field or request that cannot be
used. Its message names what and why.

The commands catch `UserError` (and OSError, for a path they cannot read or write) and print
`kt-<command>: error: <message>` with exit code 2; anything else escaping a command is a bug in
this package, and shows its traceback. It subclasses ValueError, as each of these errors did
before they shared a base, so `except ValueError` in callers' code still catches them.
"""


class UserError(ValueError):
    """Input that cannot be used, as its message says (see the module docstring)."""
