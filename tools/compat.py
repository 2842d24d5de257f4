"""``python -m tools.compat``: the overlay's A/B on every sglang release that imports here.

For each release, installs that sglang wheel ``--no-deps`` into a cached folder that shadows the
venv's sglang (``PYTHONPATH``), asks the overlay what it finds (``sglang-overlay status``) and
runs the registered tests in both modes through ``python -m ci run``. Prints one row per
release; exit 1 when a release the overlay patches does not pass with the change or does not
reproduce the bug without it. Releases that need GPU-only packages to import are run on the
H200 instead (README, "Compatibility").
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from ci import results

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "compat"
DEFAULT_VERSIONS = ("0.5.21", "0.5.22", "0.5.23")


def install(version: str) -> Path:
    target = CACHE / f"sglang-{version}"
    if not (target / "sglang").is_dir():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                str(target),
                f"sglang=={version}",
            ],
            check=True,
        )
    return target


def check(version: str, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(install(version)))
    env.pop("SGLANG_OVERLAY_DISABLE", None)
    status = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "sglang_overlay", "status", "--json"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
    )
    try:
        record = json.loads(status.stdout)[0]
    except (ValueError, IndexError):
        tail = (status.stderr.strip().splitlines() or ["no output"])[-1]
        return {"version": version, "state": "does not import", "reason": tail}
    row = {"version": version, "state": record["state"], "reason": record["reason"]}
    if record["state"] != "applied":
        return row
    run = subprocess.run(
        [sys.executable, "-m", "ci", "run", "--backend", "cpu", "--out", str(out / version)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    model = results.load(str(out / version))
    row.update(counts=model.counts(), change_ok=model.change_ok() and run.returncode == 0)
    return row


def verdict(row: dict) -> "bool | None":
    """True ok, False failed, None not testable here (the release does not import)."""
    if row["state"] == "does not import":
        return None
    if row["state"] != "applied":
        return row["state"] in ("not-present", "upstream-fixed")
    return row["change_ok"] and row["counts"].get("regression", 0) > 0


VERDICTS = {True: "ok", False: "FAILED", None: "not run here"}


def render(rows) -> str:
    lines = [
        "| sglang | overlay | fail unmodified, pass with change | pass both | skipped | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        counts = row.get("counts", {})
        lines.append(
            f"| {row['version']} | {row['state']}: {row['reason']} | "
            f"{counts.get('regression', '-')} | {counts.get('preservation', '-')} | "
            f"{counts.get('skipped', '-')} | {VERDICTS[verdict(row)]} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compat", description=__doc__)
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--out", type=Path, default=REPO / "out" / "compat")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [check(v, args.out) for v in args.versions]
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 1 if any(verdict(r) is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
