"""The one way the benchmarks start a child process and read its result back.

A child hands back one JSON document on a file descriptor of its own (``$BENCH_RESULT_FD``,
``hand_back``), never in what it prints, as upstream's fork worker reports a test file; run by
hand, it prints the document instead. ``run`` also times the child (wall and CPU seconds), so
the timing parts start their commands the same way. ``side_env`` is one side of the A/B: the
installed sglang with the overlay off (``unmodified``) or on (``change``).
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sglang_overlay.config import DISABLE_ENV
from tools import ToolError

ROOT = Path(__file__).resolve().parents[2]
RESULT_FD = "BENCH_RESULT_FD"
MODES = ("unmodified", "change")


class BenchmarkError(ToolError):
    """A child failed or a figure cannot be measured; the part that raised it is recorded."""


@dataclass(frozen=True)
class Ran:
    result: "dict | None"  # what the child handed back, None if it handed back nothing
    wall_s: float
    cpu_s: float  # user + system of the child and its children
    returncode: int
    stderr: str


def side_env(mode: str, base=None) -> dict:
    env = dict(os.environ if base is None else base)
    env.pop(DISABLE_ENV, None)
    if mode == "unmodified":
        env[DISABLE_ENV] = "1"
    return env


def run(command, env=None, timeout_s: float = 600, check: bool = True) -> Ran:
    """``command`` in a fresh process from the repository root; ``check``: a non-zero exit is a
    BenchmarkError (the time of a command that failed measures nothing)."""
    with tempfile.TemporaryFile("w+") as result, tempfile.TemporaryFile("w+") as stderr:
        env = {**(os.environ if env is None else env), RESULT_FD: str(result.fileno())}
        before = _children_cpu()
        started = time.perf_counter()
        proc = subprocess.run(
            [str(c) for c in command], env=env, cwd=ROOT, timeout=timeout_s,
            stdout=subprocess.DEVNULL, stderr=stderr, pass_fds=(result.fileno(),),
        )  # fmt: skip
        wall = time.perf_counter() - started
        result.seek(0)
        stderr.seek(0)
        text, err = result.read(), stderr.read()
    ran = Ran(json.loads(text) if text else None, wall, _children_cpu() - before,
              proc.returncode, err)  # fmt: skip
    if check and proc.returncode != 0:
        tail = err.strip().splitlines()[-1:] or ["no output"]
        raise BenchmarkError(
            f"{' '.join(map(str, command))[:200]} exited {proc.returncode}: {tail[0]}"
        )
    return ran


def alternate(commands: dict, repeats: int, env=None) -> dict:
    """Each command once per repeat, in order then in reverse, so that a busy machine slows
    them alike: {name: [Ran of each repeat]}. A command may be a function of the repeat."""
    runs: dict = {name: [] for name in commands}
    for r in range(repeats):
        for name in list(commands)[:: 1 if r % 2 == 0 else -1]:
            command = commands[name]
            runs[name].append(run(command(r) if callable(command) else command, env))
    return runs


def over(runs: dict, kinds, yardstick: str) -> dict:
    """The median wall time of each of ``kinds`` over the ``yardstick``'s."""
    median = {k: statistics.median(r.wall_s for r in runs[k]) for k in (*kinds, yardstick)}
    return {kind: round(median[kind] / median[yardstick], 2) for kind in kinds}


def hand_back(result) -> None:
    """The child's side: ``result`` on the parent's descriptor, or on stdout when run by hand."""
    fd = os.environ.get(RESULT_FD)
    if fd is None:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    with os.fdopen(int(fd), "w") as out:
        json.dump(result, out)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
