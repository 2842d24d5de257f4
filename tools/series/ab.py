"""``ab --fix N --out DIR``: the base and the base + that fix materialised, and ``ci run`` of the
fix's own tests on both from a plain environment (this project left out); ``demo``: make demo."""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import venv
from collections import namedtuple
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from ci.evidence import model
from sglang_overlay.config import DISABLE_ENV
from tools.series import SeriesError, base, check, seriesdir, usage
from tools.series.seriesdir import REPO_ROOT

# Exit 0 only when this project is neither importable nor imported (its start-up hook) there.
_PLAIN_PROBE = (
    "import importlib.util, sys\n"
    "held = sorted(m for m in sys.modules if m.split('.')[0] == 'sglang_overlay')\n"
    "found = importlib.util.find_spec('sglang_overlay')\n"
    "sys.exit(f'{found.origin if found else held[0]}' if found or held else 0)\n"
)


# The base materialised, the base with the fix applied alone, ci run's --out, its argv after
# "python -m", the plain environment it runs from, and the series file its --series names.
Plan = namedtuple("Plan", "unmodified change results ci_run env series")


def plan(series, fix, out, backend: str) -> Plan:
    """The trees and the ``ci run`` of every test ``fix`` adds, on patches/BASE's release."""
    out = Path(out).resolve()
    version = series.base.version
    tests = sorted(fix.added_files())
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
    return Plan(unmodified, change, results, argv, out / "trees" / "plain-venv", series_file)


def plain_env(folder: Path) -> Path:
    """A venv at ``folder`` (its python returned) linking this interpreter's site-packages but
    this project's files; a usage error when this project is importable there all the same."""
    venv.EnvBuilder(symlinks=True).create(folder)
    paths = {"base": str(folder), "platbase": str(folder)}
    target = Path(sysconfig.get_paths(vars=paths)["purelib"])
    try:
        files = metadata.distribution("sglang-overlay").files or ()  # this project's, left out
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


def run_ab(series, fix, out, backend: str) -> Plan:
    """The plan, carried out; an existing ``out/trees`` is refused (exit 2), a ``ci run`` that
    fails is exit 1."""
    made = plan(series, fix, out, backend)
    if made.unmodified.parent.exists():
        raise usage(f"{made.unmodified.parent} exists; give ab a new --out folder")
    base.materialize(series.base.version, made.unmodified)
    base.materialize(series.base.version, made.change)
    check.apply_to(fix, made.change)
    python = plain_env(made.env)
    made.series.write_text(json.dumps(seriesdir.summary(series)))
    proc = subprocess.run([python, "-m", *made.ci_run], cwd=REPO_ROOT, check=False)
    if (path := made.results / "results.json").is_file():  # the mark pr-body asks for
        results = model.load(str(path))
        plain = replace(results, environment={**results.environment, "plain": True})
        path.write_bytes(model.dumps(plain))
    if proc.returncode != 0:
        raise SeriesError(f"ci run exited {proc.returncode}: see {made.results}/summary.txt")
    return made


TICK_S = 20  # the longest the demo stays silent


def demo(out: Path, jobs: int = max(2, (os.cpu_count() or 2) // 2)) -> int:
    """``make demo``: the overlay's A/B (OUT) with the bot's preview, and each fix's ``series ab``
    (OUT-fix-N), ``jobs`` at a time; a line at least every TICK_S seconds. 0 when all are ok."""
    import torch

    backend = "cuda" if torch.cuda.is_available() else "cpu"
    series = seriesdir.load()
    version, python = series.base.version, sys.executable
    out.parent.mkdir(parents=True, exist_ok=True)
    described = Path(f"{out}-series.json")
    described.write_text(json.dumps(seriesdir.summary(series), indent=2) + "\n")
    ci_run = [python, "-m", "ci", "run", "--out", out, "--tests", "test/registered"]
    ci_run += ["--backend", backend, "--series", described]
    ci_run += [f"--unmodified-env={DISABLE_ENV}=1", f"--change-env={DISABLE_ENV}=0"]
    tasks = {"the overlay's A/B": (ci_run, Path(f"{out}.txt"))}  # label -> (argv, its log)
    for fix in series.fixes:
        folder = Path(f"{out}-fix-{fix.number}")
        shutil.rmtree(folder, ignore_errors=True)
        argv = [python, "-m", "tools.series", "ab", "--fix", fix.number, "--backend", backend]
        tasks[f"fix {fix.number}"] = ([*argv, "--out", folder], Path(f"{folder}.txt"))
    print(
        f"demo: sglang {version} ({backend}): the overlay's A/B and the bot's preview; each of "
        f"{len(series.fixes)} fixes' A/B and PR description ({out}-fix-N); {jobs} at a time",
        flush=True,
    )
    started, failed = time.monotonic(), []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_run, *task): label for label, task in tasks.items()}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=TICK_S, return_when=FIRST_COMPLETED)
            took = time.monotonic() - started
            for future in done:
                bad, said = future.result()
                label = futures[future]
                failed += [f"{label} ({bad})"] if bad else []
                print(f"demo: {took:3.0f} s: {label}: {said}", flush=True)
            if not done:
                waiting = ", ".join(sorted(futures[f] for f in pending))
                print(f"demo: {took:3.0f} s: running or queued: {waiting}", flush=True)
    preview = [python, "-m", "ci", "report", "--results", str(out)]
    with open(f"{out}-bot-preview.md", "w") as body, open(f"{out}-bot-preview.log", "w") as log:
        if subprocess.run(preview, stdout=body, stderr=log, cwd=REPO_ROOT).returncode:
            failed.append(f"the bot's preview ({log.name})")
    print(f"the evidence: {out}/report.md, {out}/results.json, JUnit and logs in {out}/")
    if failed:
        print(f"demo: FAILED: {', '.join(failed)}")
        return 1
    print(
        f"demo: ok: {len(series.fixes)} fixes: every regression test fails on sglang {version} "
        f"and passes with its fix ({time.monotonic() - started:.0f} s)"
    )
    return 0


def _run(argv, log: Path) -> tuple:
    """Run ``argv`` into ``log``: (``log`` if it failed, else None; its last ``ci run: `` line)."""
    with open(log, "w") as sink:
        argv = [str(a) for a in argv]
        code = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT).returncode
    lines = [line for line in log.read_text().splitlines() if line.startswith("ci run: ")]
    said = lines[-1].removeprefix("ci run: ") if lines else "no summary"
    return (log if code else None), said


if __name__ == "__main__":
    try:
        sys.exit(demo(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "out" / "demo"))
    except (SeriesError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(getattr(err, "code", 2))
