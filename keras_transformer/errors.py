"""The base of every error a user can cause: a flag, file, line, field or request that cannot be
used. Its message names what and why.

The commands catch `UserError` (and OSError, for a path they cannot read or write) and print
`kt-<command>: error: <message>` with exit code 2; anything else escaping a command is a bug in
this package, and shows its traceback. It subclasses ValueError, as each of these errors did
before they shared a base, so `except ValueError` in callers' code still catches them.
"""


class UserError(ValueError):
    """Input that cannot be used, as its message says (see the module docstring)."""


def check_one_of(what, value, choices, error=UserError):
    """`value`, if it is one of `choices`; else raises `error` (a UserError, or the ValueError a
    caller's `except` expects) saying "<what> must be one of a, b, got 'c'": `choices` joined by
    ", " in their given order, and `value` as its repr.

    `what` names the field or flag as the user wrote it (`"hparams field 'model'"`,
    `"--keep_best"`, `"evaluation.keep_best"`); `choices` is any collection (a dict: its keys).

    >>> check_one_of("layout", "split", ("interleaved", "split"))
    'split'
    >>> check_one_of("layout", "diagonal", ("interleaved", "split"))
    Traceback (most recent call last):
    ...
    keras_transformer.errors.UserError: layout must be one of interleaved, split, got 'diagonal'
    """
    if value not in choices:
        raise error(f"{what} must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value
