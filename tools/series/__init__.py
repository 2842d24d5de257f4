"""Tools that keep the upstream patch series in ``patches/`` healthy (``python -m tools.series``)
and the tools' one error type. Nothing here imports sglang or ``sglang_overlay``."""

from ci.errors import CiError


class SeriesError(CiError):
    """A failure the user can act on: the message, and ``code`` its exit (1 failed, 2 bad input:
    one line, never a traceback)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def usage(message: str) -> SeriesError:
    """Bad input or a missing prerequisite (git, a release that does not exist): exit 2."""
    return SeriesError(message, 2)
