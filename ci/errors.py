"""The one exception base of ``python -m ci`` and the exit rule every verb follows.

0: green (or nothing to run); 1: a judged failure, a registration sglang's reader rejects, or
GitHub refused a write; 2: bad input, one line, never a traceback; 130: interrupted. An error
raised on purpose is a ``CiError``: ``code`` is its exit, ``prefix`` starts its one line
(printed on stdout where the exit is 0, else on stderr)."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CiError(Exception):
    """Input or a request the bot cannot act on; the message is the line a user sees."""

    code, prefix = EXIT_USAGE, "error: "
