"""The release watch (``python -m tools.releases watch``): sglang releases on PyPI that the project
does not know yet (or those named with ``--versions``), each checked (``check``, below) and kept
in ONE tracking issue (ci/README.md). Rows another job wrote (``--rows``) are validated
against ``ROW_SCHEMA`` before anything is posted. Two jobs run it in two environments (the
checking one has no github3, the posting one only github3), so the top imports only the project
and the standard library; each path imports what it needs.
"""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ci.evidence import model as evidence
from ci.evidence import shards
from ci.evidence.inert import inert
from ci.reporter.render import escape_inline
from ci.runner import modes
from tools.releases import patch_columns
from tools.series import SeriesError, matrix, seriesdir
from tools.series.seriesdir import RELEASE  # not `packaging`: the posting job has only github3.py

PROJECT = "sglang"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
MARKER = "<!-- sglang-overlay:release-watch -->"
TITLE = "Release watch: sglang releases newer than the overlay knows"
ROWS_FILE = "watch.json"
# A row as ``check`` writes it: key -> the types it may have (exactly; True is no count).
ROW_SCHEMA = {
    "version": (str,),
    "state": (str,),
    "reason": (str,),
    "sha256": (str, type(None)),
    "series": (dict, type(None)),
    "counts": (dict,),
    "change_ok": (bool,),
    "error": (str,),
    "patches": (list,),  # one record per carried patch (patch_columns)
}
REQUIRED = ("version", "state", "reason")
MAX_TEXT = 4000  # a reason is the last line of an import's stderr: one line, not a book
_HEX = re.compile(r"[0-9a-f]{12,64}")
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "compat"
SERIES_PATCH = "0001"  # the fix; 0002 (the test file) applies wherever the tree exists
PROOFS = ("test/registered", "test/proofs")


class WatchError(RuntimeError):
    """Discovery, input or a release's install failed; nothing more was checked or posted. The
    message may quote a release's output or a row: it carries no workflow command."""

    def __init__(self, message: str):
        super().__init__(inert(message))


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
            raise WatchError(f"sglang=={version}: pip could not install it: {why}")
    return target


def overlay_state(version: str, env: dict) -> dict:
    """{state, reason, sha256} of the first patch from ``sglang-overlay status`` in a fresh
    process, and ``records``: every patch's record as status gave it."""
    status = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "sglang_overlay", "status", "--json"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        records = json.loads(status.stdout)
        record = records[0]
    except (ValueError, IndexError, KeyError):
        return {"state": "does not import", "reason": _last_line(status.stderr), "sha256": None}
    if record.get("sglang_version") not in (version, "unknown", None):
        raise WatchError(f"asked for sglang {version}, found {record['sglang_version']}")
    state, sha = patch_columns.state_of(record)
    reason = record["reason"]
    if state == "does not import":  # not testable here; the row keeps the import's error
        reason = reason.partition("failed to import ")[2].partition(": ")[2] or reason
    return {"state": state, "reason": reason, "sha256": sha, "records": records}


def series_status(version: str) -> tuple:
    """How the series' first patch (the fix) applies to the release's wheel, {status,
    detail}, and how each fix's first patch does, by fix number (one line each)."""
    try:
        series = seriesdir.load()
        row = matrix.release_row(series, version)
    except SeriesError as err:
        line = str(err).splitlines()[0]
        return {"status": "not checked", "detail": line}, {}
    fixes = {}
    for fix in series.fixes:
        result = row["patches"][fix.patches[0].name]
        detail = matrix.short_detail(result["detail"])
        fixes[fix.number] = result["status"] + (f" ({detail})" if detail else "")
    name = next(n for n in series.names if n.startswith(SERIES_PATCH))
    result = row["patches"][name]
    return {"status": result["status"], "detail": matrix.short_detail(result["detail"])}, fixes


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
        model = shards.load(str(out / version))
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
    overlay = overlay_state(version, env)
    records = overlay.pop("records", [])
    series, fixes = series_status(version)
    row = {"version": version, **overlay, "series": series}
    row["patches"] = patch_columns.from_status(records, fixes)
    if row["state"] == "applied":
        row.update(ab(version, env, out))
    return row


def verdict(row: dict) -> "bool | None":
    """True ok, False failed, None not testable here (the release does not import)."""
    if row["state"] == "does not import":
        return None
    if patch_columns.broken(row):  # one patch's shape broke on this release
        return False
    if row["state"] != "applied":
        return row["state"] in ("not-present", "upstream-fixed")
    return row["change_ok"] and row["counts"].get("regression", 0) > 0


VERDICTS = {True: "ok", False: "FAILED", None: "not run here"}
HEADER = (
    "| sglang | overlay | method sha256 | 0001 applies | "
    + "".join(f"{p} | " for p in patch_columns.header_cells())
    + "fail unmodified, pass with change | pass both | skipped | verdict |"
)


def render(rows) -> str:
    """The table; release data is escaped like the sticky comment's text (a pipe or a line
    break cannot break the row; a mention, a reference, HTML, a link or our marker does nothing)."""
    lines = [HEADER, "|" + " --- |" * len(HEADER.split(" | "))]
    for row in rows:
        counts = row.get("counts", {})
        series = row.get("series") or {"status": "-", "detail": ""}
        patch = series["status"] + (f" ({series['detail']})" if series.get("detail") else "")
        overlay = f"{row['state']}: {row['reason']}"
        cells = [row["version"], overlay, row.get("sha256") or "-", patch]
        cells += patch_columns.cells(row)
        cells += [counts.get(kind, "-") for kind in ("regression", "preservation", "skipped")]
        cells.append(VERDICTS[verdict(row)])
        lines.append("| " + " | ".join(escape_inline(c) for c in cells) + " |")
    return "\n".join(lines)


def known_releases() -> list:
    """Every release the project names: the series matrix's and the overlay shapes'."""
    from packaging.version import Version

    from sglang_overlay.sites import KNOWN_SHAPES

    names = set(matrix.DSV4_RELEASES)
    for shape in KNOWN_SHAPES:
        names.update(part.strip() for part in re.split(r"[-,]", shape.releases) if part.strip())
    return sorted(names, key=Version)


def index_versions(payload: dict) -> list:
    """Versions with at least one file that is not yanked, from a PEP 691 project page."""
    from packaging import utils
    from packaging.version import InvalidVersion, Version

    if not isinstance(payload, dict) or not isinstance(payload.get("files"), list):
        raise WatchError("the index answer is not a PEP 691 project page (no 'files' list)")
    live = set()
    for item in payload["files"]:
        if not isinstance(item, dict) or item.get("yanked") not in (None, False):
            continue
        name = str(item.get("filename"))  # no version parses from anything but a file name
        parse = utils.parse_wheel_filename if name.endswith(".whl") else utils.parse_sdist_filename
        try:
            live.add(str(parse(name)[1]))
        except (utils.InvalidWheelFilename, utils.InvalidSdistFilename, InvalidVersion):
            continue
    return sorted(live, key=Version)


def newer_releases(available, known) -> list:
    """Final releases (a dev release is a pre-release too) newer than every known one."""
    from packaging.version import Version

    newest = max(map(Version, known))
    found = [v for v in map(Version, available) if v > newest and not v.is_prerelease]
    return [str(version) for version in sorted(found)]


def fetch_project_page(index_url: str, project: str = PROJECT, timeout: float = 30) -> dict:
    """The edge to the index: one GET of ``INDEX/PROJECT/`` asking for the JSON form."""
    url = f"{index_url.rstrip('/')}/{project}/"
    request = urllib.request.Request(url, headers={"Accept": SIMPLE_JSON})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            kind = response.headers.get("Content-Type", "")
            data = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise WatchError(f"could not read {url}: {exc}") from None
    if SIMPLE_JSON not in kind:
        raise WatchError(f"{url} answered {kind or 'no content type'}, not {SIMPLE_JSON}")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise WatchError(f"{url}: not JSON ({exc})") from None


def load_rows(path: Path) -> tuple:
    """(rows, newest known, requested) that another job wrote; validated, because whatever wrote
    them ran a release's code."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise WatchError(f"{path}: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise WatchError(f"{path}: expected {{'newest_known': ..., 'rows': [...]}}")
    newest = data.get("newest_known")
    if not isinstance(newest, str) or not RELEASE.fullmatch(newest):
        raise WatchError(f"{path}: newest_known {newest!r} is not a release version")
    for number, row in enumerate(rows):
        problem = _row_problem(row)
        if problem:
            raise WatchError(f"{path}: row {number}: {problem}")
    return rows, newest, data.get("requested") is True


def _row_problem(row) -> str | None:
    """What is wrong with one row, in one line (values repr'd), or None."""
    if not isinstance(row, dict):
        return f"expected an object, got {type(row).__name__}"
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        return f"no text in {', '.join(missing)}"
    for key, value in row.items():
        kinds = ROW_SCHEMA.get(key)
        if kinds is None:
            return f"unknown key {key[:40]!r}"
        if type(value) not in kinds:
            return f"{key}: {type(value).__name__} is not {'/'.join(k.__name__ for k in kinds)}"
        if isinstance(value, str) and len(value) > MAX_TEXT:
            return f"{key}: {len(value)} characters; at most {MAX_TEXT}"
    if not RELEASE.fullmatch(row["version"]):
        return f"{row['version'][:40]!r} is not a release version"
    if row.get("sha256") is not None and not _HEX.fullmatch(row["sha256"]):
        return f"sha256 {row['sha256'][:80]!r} is not hex"
    counts = row.get("counts", {})
    if not all(type(k) is str and type(n) is int and 0 <= n < 10**6 for k, n in counts.items()):
        return "counts: expected kind -> a count"
    series = row.get("series") or {}
    if not all(k in ("status", "detail") and type(v) is str and len(v) <= MAX_TEXT
               for k, v in series.items()) or (series and "status" not in series):  # fmt: skip
        return "series: expected {status, detail} text"
    if "patches" in row:
        problem = patch_columns.problem(row["patches"], MAX_TEXT)
        if problem:
            return problem
    if row["state"] == "applied" and "change_ok" not in row:
        return "an applied release's row has no change_ok"
    return None


def issue_body(rows, newest_known: str, index_url: str, requested: bool = False) -> str:
    """The tracking issue's text: the marker, then the compat table of the new releases (or of
    the ``requested`` ones). No timestamps, so a run that finds nothing new leaves the issue
    untouched."""
    known = f"{newest_known} is the newest release the overlay and the patch series know"
    if requested:
        lead = f"sglang releases checked on request ({known})."
    else:
        lead = f"sglang releases on {index_url} newer than {newest_known} ({known})."
    lines = [MARKER, "", lead, ""]
    if rows:
        lines += [render(rows), ""]
        lines.append(
            "Each release installed `--no-deps` over the pinned CPU closure: the overlay's state "
            "and the allocating method's sha256, whether patch 0001 applies to the wheel, then "
            "one column per carried patch (its state and sha256, and whether its fix applies) "
            "(`python -m tools.series matrix`), and the registered tests unmodified and with the change "
            "(`python -m ci run --backend cpu`). Any verdict but `ok` needs a new shape in "
            "`sglang_overlay/sites.py` or a rebased series."
        )
    else:
        lines.append(f"None: {newest_known} is the newest release there.")
    return "\n".join(lines) + "\n"


def upsert_issue(gh, owner, repo, title, body, author, policy) -> tuple:
    """(outcome, number): edit the issue that starts with MARKER and was opened by ``author``,
    or open one. A closed one is reopened only when its text changes. Duplicates left by two
    racing runs are closed, keeping the oldest. Only ``author``'s issues are listed (GitHub
    filters by ``creator``), oldest first: never every issue of the repository."""
    from github3.issues.issue import ShortIssue  # needs github3: the posting job's alone

    from ci.reporter.publish import Publisher, upsert_sticky

    def create():
        created = gh.create_issue(owner, repo, title, body)
        if created is None:
            raise RuntimeError(f"could not open an issue in {owner}/{repo}")
        return created

    def authors_issues() -> list:
        reader = Publisher(gh, owner, repo, None, policy)
        wanted = {"creator": author, "state": "all", "sort": "created", "direction": "asc"}
        found = reader.pages(f"issues opened by {author}", "issues", params=wanted)
        issues = [item for item in found if isinstance(item, dict) and "pull_request" not in item]
        return [ShortIssue(item, gh.session) for item in issues]

    def once():
        outcome, issue = upsert_sticky(
            sorted(authors_issues(), key=lambda issue: issue.number),
            MARKER,
            author,
            create=create,
            unchanged=lambda keep: keep.body == body and keep.title == title,
            edit=lambda keep: keep.edit(title=title, body=body, state="open"),
            retire=lambda duplicate: duplicate.state == "closed" or duplicate.edit(state="closed"),
        )
        return outcome, issue.number

    # The whole find-then-write repeats on a retry, so a retried create cannot duplicate.
    return policy.call("tracking issue", once)
