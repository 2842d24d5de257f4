"""Untrusted text on its way to a workflow log, a job summary or an error message: no runner
command can start in it.

The Actions runner takes a line whose trimmed text starts with ``::`` as a command
(``::error::``, ``::add-mask::``, ``::stop-commands::``), and ``##[`` anywhere in a line as an
older one (``##[error]``, ``##[add-mask]``). ``inert`` puts a word joiner (U+2060, invisible)
inside every ``::`` and ``##[``, so neither is left anywhere in the text. It is the one helper for
this: error messages that quote an artifact or a release row, every line ``python -m ci`` prints
(``one_line``) and the text ``ci.reporter.render`` escapes all go through it.
"""

import re

JOINER = "\u2060"
_COMMAND = re.compile(r"(?<=:)(?=:)|(?<=#)(?=#\[)")


def inert(text) -> str:
    """``text`` (any value: str() of it) without ``::`` or ``##[`` anywhere."""
    return _COMMAND.sub(JOINER, str(text))


def printable(text) -> str:
    """``text`` with every character that does not print (a line break, a control or format
    character) written as its escape (``\\n``, ``\\u202e``)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


def one_line(text) -> str:
    """``text`` as one line for a log: ``printable``, with no workflow command in it."""
    return inert(printable(text))
