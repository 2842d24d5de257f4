"""Tools that keep the upstream patch series in ``patches/`` healthy (``python -m series``:
materialize, check, apply, refresh, matrix, pr-body), and their one error type: git, pip and
pre-commit do the work, what is left here reads ``patches/`` and renders. Not for the runtime
overlay: nothing here imports sglang or ``sglang_overlay``, the two are separate routes to the
same fix.
"""

OK, CHECK_FAILED, BAD_USAGE = 0, 1, 2


class SeriesError(Exception):
    """A failure the user can act on; ``str(err)`` is the whole message, ``exit_code`` what the
    CLI returns. Not for bugs: an unexpected exception still surfaces as a traceback."""

    def __init__(self, message: str, exit_code: int = CHECK_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


def usage(message: str) -> SeriesError:
    """Bad input or a missing prerequisite (git, a release that does not exist)."""
    return SeriesError(message, BAD_USAGE)
