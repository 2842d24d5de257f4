"""The release watch: each sglang release newer than the project knows (or named) checked, kept
in ONE tracking issue. Rows another job wrote are validated; cells and body capped."""

import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ci.evidence import model as evidence
from ci.evidence import shards
from ci.evidence.model import bounded, load_object
from ci.reporter.escape import clip, escape_inline
from sglang_overlay import PATCH_IDS
from sglang_overlay.config import DISABLE_ENV
from tools.series import SeriesError, base, matrix, seriesdir, usage
from tools.series.seriesdir import RELEASE, REPO_ROOT  # RELEASE: no packaging when posting

MARKER = "<!-- sglang-overlay:release-watch -->"
TITLE = "Release watch: sglang releases newer than the overlay knows"
ROWS_FILE = "watch.json"
MAX_TEXT, MAX_CELL = 4000, 300  # characters of one value in a row, of one rendered cell
MAX_BODY = 60000  # GitHub refuses an issue body over 65,536 characters
# Fixed, or on purpose not fixed on this release; anything else is the patch's failure there.
OK_STATES = ("applied", "not-present", "upstream-fixed")
_SHA256 = re.compile(r"sha256 ([0-9a-f]{12})")


@dataclass(frozen=True)
class PatchRow:
    """A carried patch on a release: its state, each method's sha256, whether its fix applies."""

    patch: str = bounded(MAX_TEXT)
    state: str = bounded(MAX_TEXT)
    sha256: str | None = bounded(MAX_TEXT)
    series: str = bounded(MAX_TEXT)


@dataclass(frozen=True)
class SeriesCell:
    status: str = bounded(MAX_TEXT)
    detail: str = bounded(MAX_TEXT, default="")


@dataclass(frozen=True)
class Row:
    """A release's row as ``check`` writes it; ``load_rows`` holds another job's rows to it."""

    version: str = bounded(RELEASE)
    state: str = bounded(MAX_TEXT)
    reason: str = bounded(MAX_TEXT)
    sha256: str | None = bounded(MAX_TEXT, default=None)
    error: str = bounded(MAX_TEXT, default="")
    series: SeriesCell | None = bounded(default=None)
    counts: dict[str, int] = bounded((16, 100, range(10**9)), default_factory=dict)
    change_ok: bool = bounded(default=False)
    patches: tuple[PatchRow, ...] = bounded((32, None), default=())


def _run(argv, env, cwd, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _last_line(text: str) -> str:
    return clip((text.strip().splitlines() or ["no output"])[-1], MAX_TEXT)


def newest_known() -> str:
    """The newest release the series matrix or an overlay shape (its releases "A-B") names."""
    from packaging.version import Version

    from sglang_overlay.shapes import KNOWN_SHAPES

    ends = (shape.releases.rpartition("-")[2] for shape in KNOWN_SHAPES)
    return str(max(map(Version, [*matrix.DSV4_RELEASES, *ends])))


def index_versions(index_url=None) -> list:
    """sglang's releases on pip's index (or ``index_url``), yanked ones left out."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]
    command += ["index", "versions", "sglang"] + (["--index-url", index_url] if index_url else [])
    proc = _run(command, None, REPO_ROOT, 300)
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    raise usage(f"pip index versions sglang: {_last_line(proc.stderr)}")


def newer_releases(available, newest: str) -> list:
    """Final releases (a dev release is a pre-release too) newer than ``newest``."""
    from packaging.version import Version

    found = [v for v in map(Version, available) if v > Version(newest) and not v.is_prerelease]
    return [str(version) for version in sorted(found)]


def install(version: str) -> Path:
    """The release's wheel (the series' fetcher) unpacked into the cache, for ``PYTHONPATH``."""

    def unpack(folder: Path) -> None:
        with zipfile.ZipFile(base.wheel_path(version)) as archive:  # a SeriesError: exit 2
            archive.extractall(folder)

    return base.built_once(base.CACHE_DIR / "compat" / f"sglang-{version}", unpack)


def patch_rows(records, fixes: dict) -> list:
    """One {patch, state, sha256, series} per status record; ``fixes``: number -> applies?"""
    found = []
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("patch"), str):
            state, sha = state_of(record)
            fix = fixes.get(record["patch"][:4], "no such fix in the series")
            found.append({"patch": record["patch"], "state": state, "sha256": sha, "series": fix})
    return found


def state_of(record: dict) -> tuple:
    """(state, the sha256 of each method it read joined by ``/``, or None) of a status record."""
    state, reason = str(record.get("state")), str(record.get("reason", ""))
    if state == "failed" and "failed to import " in reason:
        state = "does not import"
    sha = "/".join(dict.fromkeys(_SHA256.findall(reason)))
    return state, sha or None


def overlay_state(version: str, env: dict) -> tuple:
    """({state, reason, sha256} of the first patch in a fresh process, every patch's record)."""
    argv = [sys.executable, "-W", "ignore", "-m", "sglang_overlay", "status", "--json"]
    status = _run(argv, env, "/")
    try:
        records = json.loads(status.stdout)
        record = records[0]
    except (ValueError, IndexError, KeyError):
        return {"state": "does not import", "reason": _last_line(status.stderr), "sha256": None}, []
    if record.get("sglang_version") not in (version, "unknown", None):
        raise usage(f"asked for sglang {version}, found {record['sglang_version']}")
    state, sha = state_of(record)
    reason = record["reason"]
    if state == "does not import":  # not testable here; the row keeps the import's error
        reason = reason.partition("failed to import ")[2].partition(": ")[2] or reason
    return {"state": state, "reason": clip(reason, MAX_TEXT), "sha256": sha}, records


def series_status(version: str) -> tuple:
    """({status, detail} of the first fix on the release's wheel, {fix number: one line})."""
    try:
        series = seriesdir.load()
        row = matrix.release_row(series, version)
    except SeriesError as err:
        return {"status": "not checked", "detail": clip(str(err).splitlines()[0], MAX_TEXT)}, {}
    fixes = {
        f.number: clip(matrix.cell(row["patches"][f.patches[0].name]), MAX_TEXT)
        for f in series.fixes
    }
    first = row["patches"][series.fixes[0].patches[0].name]
    detail = clip(matrix.short_detail(first["detail"]), MAX_TEXT)
    return {"status": first["status"], "detail": detail}, fixes


def ab(version: str, env: dict, out: Path) -> dict:
    """The proofs on both sides on CPU: {counts, change_ok}."""
    argv = [sys.executable, "-m", "ci", "run", "--backend", "cpu", "--out", str(out / version)]
    argv += ["--tests", "test/registered", "test/proofs", f"--unmodified-env={DISABLE_ENV}=1"]
    argv += [f"--change-env={DISABLE_ENV}=0"]
    run = _run(argv, env, REPO_ROOT, 3600)
    try:
        model = shards.load(str(out / version))
    except evidence.EvidenceError as exc:
        error = clip(f"{exc}: {_last_line(run.stderr)}", MAX_TEXT)
        return {"counts": {}, "change_ok": False, "error": error}
    row = {"counts": model.counts(), "change_ok": model.verdict == "ok" and run.returncode == 0}
    if run.returncode != 0:
        row["error"] = clip(f"ci run exited {run.returncode}: {_last_line(run.stderr)}", MAX_TEXT)
    return row


def check(version: str, out: Path, installed: bool = False) -> dict:
    """One release's row: overlay state, whether each fix applies, the A/B when the overlay
    applies. ``installed``: this venv's sglang, not the release's wheel."""
    env = {k: v for k, v in os.environ.items() if k not in (DISABLE_ENV, "PYTHONPATH")}
    if not installed:
        env["PYTHONPATH"] = str(install(version))
    overlay, records = overlay_state(version, env)
    series, fixes = series_status(version)
    row = {"version": version, **overlay, "series": series, "patches": patch_rows(records, fixes)}
    if row["state"] == "applied":
        row.update(ab(version, env, out))
    return row


def verdict(row: dict) -> "bool | None":
    """True ok, False failed, None not testable here (the release does not import)."""
    if row["state"] == "does not import":
        return None
    if any(p["state"] not in OK_STATES for p in row.get("patches") or []):
        return False  # one patch's shape broke on this release
    if row["state"] != "applied":
        return row["state"] in ("not-present", "upstream-fixed")
    return row["change_ok"] and row["counts"].get("regression", 0) > 0


VERDICTS = {True: "ok", False: "FAILED", None: "not run here"}
HEADER = (
    "| sglang | overlay | method sha256 | 0001 applies | "
    + "".join(f"{p[:4]} | " for p in PATCH_IDS)
    + "fail unmodified, pass with change | pass both | skipped | verdict |"
)


def _patch_cell(patch) -> str:
    """A carried patch's state, sha256, and whether its fix applies."""
    sha = f" {patch['sha256']}" if patch and patch["sha256"] else ""
    return f"{patch['state']}{sha}; fix {patch['series']}" if patch else "-"


def render(rows) -> str:
    """The table, release text escaped as the sticky comment's (a cell stays one inert cell),
    each cell at most MAX_CELL characters."""
    lines = [HEADER, "|" + " --- |" * len(HEADER.split(" | "))]
    for row in rows:
        counts = row.get("counts", {})
        series = row.get("series") or {"status": "-", "detail": ""}
        applies = series["status"] + (f" ({series['detail']})" if series.get("detail") else "")
        cells = [row["version"], f"{row['state']}: {row['reason']}", row.get("sha256") or "-"]
        by_id = {p["patch"][:4]: p for p in row.get("patches") or []}
        cells += [applies, *(_patch_cell(by_id.get(p[:4])) for p in PATCH_IDS)]
        cells += [counts.get(kind, "-") for kind in ("regression", "preservation", "skipped")]
        cells.append(VERDICTS[verdict(row)])
        lines.append("| " + " | ".join(escape_inline(clip(str(c), MAX_CELL)) for c in cells) + " |")
    return "\n".join(lines)


def issue_body(rows, newest_known: str, requested: bool = False) -> str:
    """The tracking issue's text, cut to MAX_BODY by whole rows; no timestamp (an unchanged
    run leaves the issue untouched)."""
    known = f"{newest_known} is the newest release the overlay and the patch series know"
    which = "checked on request" if requested else f"on the package index newer than {newest_known}"
    lead = f"sglang releases {which} ({known})."
    if not rows:
        return f"{MARKER}\n\n{lead}\n\nNone: {newest_known} is the newest release there.\n"
    table = render(rows).splitlines()
    note = (
        "Each release's wheel over the pinned CPU closure: the overlay's state and method sha256, "
        "then whether each carried patch applies (`python -m tools.series matrix`) and the "
        "registered tests on both sides (`python -m ci run --backend cpu`). Any verdict but `ok` "
        "needs a new shape in `sglang_overlay/shapes.py` or a rebased series."
    )
    room = MAX_BODY - len(MARKER) - len(lead) - len(note) - 200
    kept = 2
    while kept < len(table) and sum(len(line) + 1 for line in table[: kept + 1]) <= room:
        kept += 1
    if kept < len(table):
        table[kept:] = [f"{len(table) - kept} more rows (truncated): see {ROWS_FILE}"]
    return "\n".join([MARKER, "", lead, "", *table, "", note]) + "\n"


def load_rows(path: Path) -> tuple:
    """(rows, newest known, requested) another job wrote, validated."""
    if not Path(path).is_file():  # a pipe would block the read
        raise usage(f"{path}: not a plain file")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise usage(f"{path}: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise usage(f"{path}: expected {{'newest_known': ..., 'rows': [...]}}")
    newest = data.get("newest_known")
    if not isinstance(newest, str) or not RELEASE.fullmatch(newest):
        raise usage(f"{path}: newest_known {newest!r} is not a release version")
    for number, row in enumerate(rows):
        try:
            load_object(row, f"row {number}", Row)  # types checked so rendering cannot fail
        except evidence.EvidenceError as exc:
            raise usage(f"{path}: {exc}") from None
        if row["state"] == "applied" and "change_ok" not in row:
            raise usage(f"{path}: row {number}: an applied release's row has no change_ok")
    return rows, newest, data.get("requested") is True
