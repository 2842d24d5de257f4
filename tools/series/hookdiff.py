"""What a hook says is wrong, compared before and after the series: a failure counts against
the series only where it brought the problem in (``check``'s pinned hooks, and a checkout's own
hooks). Pure functions of the hooks' output.
"""

import re

_POSITION = re.compile(r":\d+(:\d+)?:")


def problem_lines(output: str) -> set:
    """What a hook's output says is wrong, without positions: a diff's added and removed
    lines, or a report line with its ``:LINE:`` numbers taken out."""
    lines = [line for line in output.splitlines() if not line.startswith(("+++", "---", "@@"))]
    return {
        line if line.startswith(("+", "-")) else _POSITION.sub(":", line)
        for line in lines
        if line.startswith(("+", "-")) or _POSITION.search(line)
    }


def introduced(base_output: str, patched_output: str) -> list:
    """The problems a hook reports after the series that it did not report on the base."""
    return sorted(problem_lines(patched_output) - problem_lines(base_output))
