"""Tools that keep the upstream patch series in ``patches/`` healthy (``python -m tools.series``)
and their one error type. Nothing here imports sglang or ``sglang_overlay``."""

from tools import ToolError


class SeriesError(ToolError):
    """A failure the user can act on: the message, and the exit code (1 failed, 2 bad input)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def usage(message: str) -> SeriesError:
    """Bad input or a missing prerequisite (git, a release that does not exist): exit 2."""
    return SeriesError(message, 2)
