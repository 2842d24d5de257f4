"""The one exception base of ``python -m ci`` and the exit rule every verb follows.

0: the run or report is green; 1: it judged a failure (or a void proof), or GitHub refused a
write; 2: bad input, told in one line, never a traceback; 130: interrupted. Every error the bot
raises on purpose is a ``CiError``; its ``code`` says which exit it means.
"""

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CiError(Exception):
    """Input or a request the bot cannot act on; the message is the one line a user sees."""

    code = EXIT_USAGE
