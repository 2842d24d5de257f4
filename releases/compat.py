"""``python -m releases.compat``: the overlay's A/B on every sglang release that imports here.

Each release is installed ``--no-deps`` into a cached folder that shadows the venv's sglang
(``PYTHONPATH``), over the venv's pinned closure; then the overlay's state and the allocating
method's sha256 (``sglang-overlay status``), whether patch 0001 applies to the wheel (the series
matrix), and the proofs in both modes (``python -m ci run``). One row per release (the README's
compatibility table); exit 1 when a release the overlay should cover fails.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from abtest import modes
from evidence import model as evidence
from report.render import escape_inline
from series import SeriesError, matrix, seriesdir

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "compat"
DEFAULT_VERSIONS = ("0.5.21", "0.5.22", "0.5.23")
SERIES_PATCH = "0001"  # the fix; 0002 (the test file) applies wherever the tree exists
PROOFS = ("test/registered", "proofs")
_SHA256 = re.compile(r"sha256 ([0-9a-f]{12})")


class CompatError(RuntimeError):
    """A release could not be checked (bad input or a missing prerequisite); nothing ran."""


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]


def install(version: str) -> Path:
    target = CACHE / f"sglang-{version}"
    if not (target / "sglang").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        proc = subprocess.run(
            [*pip, "--no-deps", "--target", str(target), f"sglang=={version}"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            why = _last_line(proc.stderr)
            raise CompatError(f"sglang=={version}: pip could not install it: {why}")
    return target


def overlay_state(version: str, env: dict) -> dict:
    """{state, reason, sha256} from ``sglang-overlay status`` in a fresh process."""
    status = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "sglang_overlay", "status", "--json"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        record = json.loads(status.stdout)[0]
    except (ValueError, IndexError, KeyError):
        return {"state": "does not import", "reason": _last_line(status.stderr), "sha256": None}
    if record.get("sglang_version") not in (version, "unknown", None):
        raise CompatError(f"asked for sglang {version}, found {record['sglang_version']}")
    found = _SHA256.search(record["reason"])
    state, reason = record["state"], record["reason"]
    if state == "failed" and "failed to import " in reason:
        # status's own child could not import the module: not testable here; keep the error
        state = "does not import"
        reason = reason.partition("failed to import ")[2].partition(": ")[2] or reason
    return {"state": state, "reason": reason, "sha256": found[1] if found else None}


def series_status(version: str) -> dict:
    """How the series' first patch (the fix) applies to the release's wheel: {status, detail}."""
    try:
        series = seriesdir.load()
        row = matrix.release_row(series, version)
    except SeriesError as err:
        return {"status": "not checked", "detail": str(err).splitlines()[0]}
    name = next(n for n in series.names if n.startswith(SERIES_PATCH))
    result = row["patches"][name]
    return {"status": result["status"], "detail": matrix.short_detail(result["detail"])}


def ab(version: str, env: dict, out: Path) -> dict:
    """The proofs in both modes on CPU: {counts, change_ok}."""
    run = subprocess.run(
        [sys.executable, "-m", "ci", "run", "--backend", "cpu", "--out", str(out / version)]
        + ["--tests", *PROOFS],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    try:
        model = evidence.load(str(out / version))
    except evidence.EvidenceError as exc:
        return {"counts": {}, "change_ok": False, "error": f"{exc}: {_last_line(run.stderr)}"}
    row = {"counts": model.counts(), "change_ok": model.verdict == "ok" and run.returncode == 0}
    if run.returncode != 0:
        row["error"] = f"ci run exited {run.returncode}: {_last_line(run.stderr)}"
    return row


def check(version: str, out: Path, installed: bool = False) -> dict:
    """One release: overlay state and sha256, whether 0001 applies, and (when the overlay
    applies) the A/B. ``installed`` checks this venv's sglang instead of a fresh install."""
    env = dict(os.environ)
    env.pop(modes.DISABLE_ENV, None)
    if installed:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = str(install(version))
    row = {"version": version, **overlay_state(version, env), "series": series_status(version)}
    if row["state"] == "applied":
        row.update(ab(version, env, out))
    return row


def verdict(row: dict) -> "bool | None":
    """True ok, False failed, None not testable here (the release does not import)."""
    if row["state"] == "does not import":
        return None
    if row["state"] != "applied":
        return row["state"] in ("not-present", "upstream-fixed")
    return row["change_ok"] and row["counts"].get("regression", 0) > 0


VERDICTS = {True: "ok", False: "FAILED", None: "not run here"}
HEADER = (
    "| sglang | overlay | method sha256 | 0001 applies | fail unmodified, pass with change "
    "| pass both | skipped | verdict |"
)


def render(rows) -> str:
    """The table; release data is escaped like the sticky comment's text (a pipe or a line
    break cannot break the row; a mention, a reference, HTML, a link or our marker does nothing)."""
    lines = [HEADER, "|" + " --- |" * len(HEADER.split(" | "))]
    for row in rows:
        counts = row.get("counts", {})
        series = row.get("series") or {"status": "-", "detail": ""}
        patch = series["status"] + (f" ({series['detail']})" if series.get("detail") else "")
        cells = [
            row["version"],
            f"{row['state']}: {row['reason']}",
            row.get("sha256") or "-",
            patch,
            counts.get("regression", "-"),
            counts.get("preservation", "-"),
            counts.get("skipped", "-"),
            VERDICTS[verdict(row)],
        ]
        lines.append("| " + " | ".join(escape_inline(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m releases.compat", description=__doc__)
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--out", type=Path, default=REPO / "out" / "compat")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        rows = [check(v, args.out) for v in args.versions]
    except CompatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 1 if any(verdict(r) is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
