"""Tools that keep the upstream patch series in ``patches/`` healthy (``python -m tools.series``,
patches/README.md) and their one error type. Nothing here imports sglang or ``sglang_overlay``:
the runtime overlay is a separate route to the same fix.
"""

OK, CHECK_FAILED, BAD_USAGE = 0, 1, 2


class SeriesError(Exception):
    """A failure the user can act on (not a bug): the whole message, and the CLI's exit code."""

    def __init__(self, message: str, exit_code: int = CHECK_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


def usage(message: str) -> SeriesError:
    """Bad input or a missing prerequisite (git, a release that does not exist)."""
    return SeriesError(message, BAD_USAGE)
