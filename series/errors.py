"""The one error type the series tools raise, carrying the exit code the CLI returns.

Not for bugs: an unexpected exception still surfaces as a traceback.
"""

OK = 0
CHECK_FAILED = 1
BAD_USAGE = 2


class SeriesError(Exception):
    """A failure the user can act on; ``str(err)`` is the whole message."""

    def __init__(self, message: str, exit_code: int = CHECK_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


def usage(message: str) -> SeriesError:
    """Bad input or a missing prerequisite (git, a release that does not exist)."""
    return SeriesError(message, BAD_USAGE)
