"""``ab --fix N --out DIR``: the evidence a fix's pull request description is rendered from,
made end to end from the series' own trees: the base materialised, the base with that fix
applied alone (its pull request's branch), and ``ci run`` of the fix's own tests with
``--unmodified-src BASE --change-src BASE+FIX`` (the overlay plays no part), then ``pr-body``
from that folder. ``plan`` is pure; ``run_ab`` does the work. Not for the installed sglang
or the overlay's A/B: that is ``python -m ci run`` with no source sides.
"""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.series import apply, basearg, seriesdir, usage
from tools.series.seriesdir import REPO_ROOT


@dataclass(frozen=True)
class Plan:
    unmodified: Path  # the base, materialised
    change: Path  # the base with the fix applied alone
    results: Path  # ci run's --out
    ci_run: tuple  # argv after "python -m"


def plan(series, fix, out, backend: str, where=None) -> Plan:
    """The trees and the ``ci run`` that prove ``fix`` on ``backend``: every test the fix adds
    (ci run keeps the files registered for that backend). ``where`` (a ``basearg.Where``;
    default: patches/BASE's release) is the base: a release or a checkout's commit."""
    out = Path(out).resolve()
    version = (where or basearg.Where(series.base.version)).short
    tests = sorted(path for path, new in fix.touched_files().items() if new)
    if not tests:
        raise usage(f"fix {fix.number} adds no test file: there is nothing to run")
    unmodified = out / "trees" / f"sglang-{version}"
    change = out / "trees" / f"sglang-{version}-fix-{fix.number}"
    results = out / backend
    # ci run never reads patches/ (ci/ imports no tools/): the series' id comes as a file.
    series_file = out / "series.json"
    argv = ("ci", "run", "--out", str(results), "--backend", backend, "--tests", *tests)
    argv += ("--series", str(series_file))
    argv += ("--unmodified-src", str(unmodified), "--change-src", str(change))
    return Plan(unmodified, change, results, argv)


def run_ab(series, fix, out, backend: str, where=None) -> tuple:
    """(ci run's exit code, the plan) after making the trees and running the A/B; the trees
    are made fresh, so an existing ``out/trees`` is refused (exit 2)."""
    where = where or basearg.Where(series.base.version)
    made = plan(series, fix, out, backend, where)
    if made.unmodified.parent.exists():
        raise usage(f"{made.unmodified.parent} exists; give ab a new --out folder")
    where.materialize(made.unmodified)
    where.materialize(made.change)
    apply.apply_to(series, made.change, fix)
    described = seriesdir.describe(seriesdir.PATCHES_DIR)
    (made.unmodified.parent.parent / "series.json").write_text(json.dumps(described))
    proc = subprocess.run([sys.executable, "-m", *made.ci_run], cwd=REPO_ROOT)
    return proc.returncode, made
