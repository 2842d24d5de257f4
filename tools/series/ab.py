"""``ab --fix N --out DIR``: the evidence a fix's pull request description is rendered from,
made end to end from the series' own trees: the base materialised, the base with that fix
applied alone (its pull request's branch), and ``ci run`` of the fix's own tests with
``--unmodified-src BASE --change-src BASE+FIX``, then ``pr-body`` from that folder. ``ci run``
runs from a plain environment (``plain_env``): a venv that sees every package this interpreter
sees except this project, so each side is sglang alone, and each file a fresh ``python FILE``
(no preloading), the command the description prints. ``plan`` is pure; ``run_ab`` does the
work. Not for the installed sglang or the overlay's A/B: that is ``python -m ci run``.
"""

import json
import site
import subprocess
import sysconfig
import venv
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from ci.evidence import model
from tools.series import base, check, seriesdir, usage
from tools.series.seriesdir import REPO_ROOT

PROJECT = "sglang-overlay"  # the distribution a plain environment leaves out
# Run in the plain environment: exit 0 only when this project cannot be imported there and its
# start-up hook imported nothing.
_PLAIN_PROBE = (
    "import importlib.util, sys\n"
    "held = sorted(m for m in sys.modules if m.split('.')[0] == 'sglang_overlay')\n"
    "found = importlib.util.find_spec('sglang_overlay')\n"
    "sys.exit(f'{found.origin if found else held[0]}' if found or held else 0)\n"
)


@dataclass(frozen=True)
class Plan:
    unmodified: Path  # the base, materialised
    change: Path  # the base with the fix applied alone
    results: Path  # ci run's --out
    ci_run: tuple  # argv after "python -m"
    env: Path  # the plain environment ci run runs from


def plan(series, fix, out, backend: str) -> Plan:
    """The trees and the ``ci run`` that prove ``fix`` on ``backend``: every test the fix adds
    (ci run keeps the files registered for that backend), on patches/BASE's release."""
    out = Path(out).resolve()
    version = series.base.version
    tests = sorted(path for path, new in fix.touched_files().items() if new)
    if not tests:
        raise usage(f"fix {fix.number} adds no test file: there is nothing to run")
    unmodified = out / "trees" / f"sglang-{version}"
    change = out / "trees" / f"sglang-{version}-fix-{fix.number}"
    results = out / backend
    # ci run never reads patches/ (ci/ imports no tools/): the series' id comes as a file.
    series_file = out / "series.json"
    argv = ("ci", "run", "--out", str(results), "--backend", backend, "--tests", *tests)
    argv += ("--series", str(series_file), "--preload", "none")
    argv += ("--unmodified-src", str(unmodified), "--change-src", str(change))
    return Plan(unmodified, change, results, argv, out / "trees" / "plain-venv")


def plain_env(folder: Path) -> Path:
    """A venv at ``folder`` (its python returned) whose site-packages links every entry of this
    interpreter's site-packages except this project's files (its package and its start-up
    ``.pth``); a usage error when this project is importable there all the same."""
    venv.EnvBuilder(symlinks=True).create(folder)
    paths = {"base": str(folder), "platbase": str(folder)}
    target = Path(sysconfig.get_paths(vars=paths)["purelib"])
    try:
        files = metadata.distribution(PROJECT).files or ()
    except metadata.PackageNotFoundError:
        files = ()
    ours = {Path(str(f)).parts[0] for f in files}
    for source in map(Path, site.getsitepackages()):
        for entry in sorted(source.iterdir()) if source.is_dir() else ():
            link = target / entry.name
            if entry.name not in ours and not link.exists():
                link.symlink_to(entry)
    python = folder / "bin" / "python"
    probe = subprocess.run(
        [python, "-c", _PLAIN_PROBE], cwd=folder, capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        found = (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise usage(f"this project is importable without its package ({found}); unset PYTHONPATH")
    return python


def record_plain(results_dir: Path) -> None:
    """Mark the results as made from the plain environment, the mark ``pr-body`` asks for."""
    path = results_dir / "results.json"
    results = model.load(str(path))
    environment = {**results.environment, "plain": True}
    path.write_bytes(model.dumps(replace(results, environment=environment)))


def run_ab(series, fix, out, backend: str) -> tuple:
    """(ci run's exit code, the plan) after making the trees and running the A/B; the trees
    are made fresh, so an existing ``out/trees`` is refused (exit 2)."""
    made = plan(series, fix, out, backend)
    if made.unmodified.parent.exists():
        raise usage(f"{made.unmodified.parent} exists; give ab a new --out folder")
    base.materialize(series.base.version, made.unmodified)
    base.materialize(series.base.version, made.change)
    check.apply_to(series, made.change, fix)
    python = plain_env(made.env)
    described = seriesdir.describe(seriesdir.PATCHES_DIR)
    (made.unmodified.parent.parent / "series.json").write_text(json.dumps(described))
    proc = subprocess.run([python, "-m", *made.ci_run], cwd=REPO_ROOT, check=False)
    if (made.results / "results.json").is_file():
        record_plain(made.results)
    return proc.returncode, made
