"""The results model: what each case did in each mode, what that means, and results.json.

For judging and storing results, not for running or rendering them. A case is keyed by
``FILE::Class.test``. Its kind says what it proves:

- ``regression``: fails (OOM) on unmodified sglang and passes with the change: the bug, fixed.
- ``preservation``: passes both ways: behaviour the change must keep.
- ``not-reproduced``: listed in ``ci/regressions.txt`` but passes unmodified: the proof is void.
- ``broken``: fails, errors or is missing with the change: the run fails.
- ``skipped``: skipped with the change (for example the CUDA class on a CPU runner).
- ``no-baseline``: passes with the change, but the unmodified mode did not give a verdict.

A file whose every case that ran passes in unmodified mode is flagged "does not reproduce the
bug" as a whole, whether or not it is listed.
"""

import fnmatch
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace

from ci import case_result
from ci.case_result import Kind, Outcome, RecordError
from ci.runner import MODES, FileRun

SCHEMA = 1
OUTCOMES = tuple(Outcome)
KINDS = tuple(Kind)
EXCERPT_CHARS = 1500
REGRESSIONS_FILE = os.path.join(os.path.dirname(__file__), "regressions.txt")
FILE_CASE = "(whole file)"  # the case that stands for a file that crashed outside any test
FLAG_NOT_REPRODUCED = "does not reproduce the bug"
_PICTURE = re.compile(r"^pictures/[A-Za-z0-9_.-]{1,130}\.png$")


class ResultsError(ValueError):
    """results.json is missing or malformed; the message names the file and the field."""


@dataclass(frozen=True)
class ModeOutcome:
    """One case in one mode, as results.json stores it (loaded through its fields, once)."""

    outcome: Outcome
    duration_s: float | None = None
    peak_mib: float | None = None
    budget_mib: float | None = None
    detail: str | None = None
    excerpt: str = ""
    evidence: tuple[dict, ...] = ()  # the harness's records the test read


@dataclass(frozen=True)
class Case:
    """One test across the modes, judged: what it proves (``kind``) and how each mode went."""

    file: str
    case_id: str
    kind: Kind
    modes: dict  # mode -> ModeOutcome
    line: int | None = None  # where the test is defined in ``file``, for check-run annotations

    @property
    def key(self) -> str:
        return f"{self.file}::{self.case_id}"


@dataclass(frozen=True)
class FileResult:
    """One test file across the modes: how each mode's process ended, and what is wrong with it."""

    path: str
    suite: str | None
    modes: dict  # mode -> {returncode, duration_s, timed_out, ran, summary, log}
    flags: list = field(default_factory=list)


@dataclass(frozen=True)
class Results:
    """One run, judged: every stage after ``build`` reads it and changes it only by ``replace``."""

    backend: str
    modes: tuple[str, ...]
    selection: dict
    environment: dict
    files: tuple[FileResult, ...]
    cases: tuple[Case, ...]
    schema: int = SCHEMA
    pictures: dict = field(default_factory=dict)  # case key -> PNG path inside the results folder

    def __post_init__(self):
        # Callers build these as lists (``replace(model, cases=[...])``); store them as tuples.
        for name in ("modes", "files", "cases"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def change_ok(self) -> bool:
        """Every case passes (or skips) with the change, and the change mode ran at all."""
        if "change" not in self.modes:
            return True
        if any(f.modes.get("change", {}).get("timed_out") for f in self.files):
            return False
        return all(c.kind != "broken" for c in self.cases)

    def counts(self) -> dict:
        totals = {kind: 0 for kind in KINDS}
        for case in self.cases:
            totals[case.kind] += 1
        return totals

    def suites(self) -> dict:
        """suite -> its files' cases, for one commit status per suite."""
        by_file = {f.path: f.suite or "unregistered" for f in self.files}
        grouped: dict = {}
        for case in self.cases:
            grouped.setdefault(by_file.get(case.file, "unregistered"), []).append(case)
        for suite in by_file.values():
            grouped.setdefault(suite, [])
        return grouped

    def to_json(self) -> dict:
        data = asdict(self)
        # Lists, as json.load gives them back: to_json() equals the parsed results.json.
        for name in ("modes", "files", "cases"):
            data[name] = list(data[name])
        return data

    @classmethod
    def from_json(cls, data, source: str = "results.json") -> "Results":
        return _load(data, source)


def load_regression_patterns(path: str = REGRESSIONS_FILE) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        lines = (line.strip() for line in handle)
        return [line for line in lines if line and not line.startswith("#")]


def build(
    runs: list[FileRun],
    suites: dict,
    backend: str,
    modes: list[str],
    selection: dict,
    environment: dict,
    log_paths: dict | None = None,
    regression_patterns: list[str] | None = None,
) -> Results:
    """Judge raw runs. ``suites`` maps path -> suite; ``log_paths`` (path, mode) -> log file."""
    patterns = load_regression_patterns() if regression_patterns is None else regression_patterns
    per_file: dict = {}
    file_modes_by_path = {}
    for path in dict.fromkeys(r.path for r in runs):
        file_modes = {}
        for run in (r for r in runs if r.path == path):
            per_file.setdefault(path, {})[run.mode] = _mode_cases(run)
            file_modes[run.mode] = {
                "returncode": run.returncode,
                "duration_s": run.duration_s,
                "timed_out": run.timed_out,
                "ran": len(per_file[path][run.mode]),
                "log": (log_paths or {}).get((path, run.mode)),
            }
        file_modes_by_path[path] = file_modes

    cases = []
    for path, by_mode in per_file.items():
        ids = list(dict.fromkeys(cid for mode in modes for cid in by_mode.get(mode, {})))
        for cid in ids:
            outcomes = {
                mode: by_mode.get(mode, {}).get(cid, ModeOutcome(outcome=Outcome.MISSING))
                for mode in modes
            }
            expected = any(fnmatch.fnmatchcase(f"{path}::{cid}", p) for p in patterns)
            cases.append(Case(path, cid, _kind(outcomes, expected), outcomes))

    files = [
        FileResult(
            path=path,
            suite=suites.get(path),
            modes=file_modes,
            flags=_file_flags(file_modes, [c for c in cases if c.file == path]),
        )
        for path, file_modes in file_modes_by_path.items()
    ]
    return Results(backend, list(modes), selection, environment, files, cases)


def rejudge(model: Results, regression_patterns: list[str] | None = None) -> Results:
    """``model`` judged again from its raw per-mode outcomes with this checkout's rules and
    ``regressions.txt``: the kinds and file flags that a results.json claims are not read (the
    report's copy of the judge is the base commit's; the artifact's was written by PR code)."""
    patterns = load_regression_patterns() if regression_patterns is None else regression_patterns
    missing = ModeOutcome(outcome=Outcome.MISSING)
    cases = []
    for case in model.cases:
        outcomes = {mode: case.modes.get(mode, missing) for mode in model.modes}
        expected = any(fnmatch.fnmatchcase(case.key, p) for p in patterns)
        cases.append(replace(case, kind=_kind(outcomes, expected)))
    by_file: dict = {}
    for case in cases:
        by_file.setdefault(case.file, []).append(case)
    files = [replace(f, flags=_file_flags(f.modes, by_file.get(f.path, []))) for f in model.files]
    return replace(model, cases=cases, files=files)


def save(results: Results, out_dir: str) -> str:
    path = os.path.join(out_dir, "results.json")
    with open(path, "w") as handle:
        json.dump(results.to_json(), handle, indent=2, sort_keys=True)
        handle.write("\n")
    return path


def load(out_dir: str) -> Results:
    path = os.path.join(out_dir, "results.json") if os.path.isdir(out_dir) else out_dir
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ResultsError(f"{path}: not found (did `python -m ci run --out DIR` run?)") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not JSON: {exc}") from None
    return _load(data, path)


def tail(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _mode_cases(run: FileRun) -> dict:
    """The cases one process reported on its result channel (its text output is only kept)."""
    records, errors = case_result.read_channel(run.channel)
    cases = {}
    for record in records:
        evidence = record.evidence
        peaks = [e["peak_allocated_mib"] for e in evidence if _number(e.get("peak_allocated_mib"))]
        budgets = [e["budget_mib"] for e in evidence if _number(e.get("budget_mib"))]
        details = [str(e["detail"]) for e in evidence if e.get("detail")]
        failed = record.outcome in (Outcome.FAIL, Outcome.ERROR)
        skip_reason = record.detail if record.outcome == Outcome.SKIP else None
        cases[record.test] = ModeOutcome(
            outcome=record.outcome,
            duration_s=record.duration_s,
            peak_mib=round(max(peaks), 1) if peaks else None,
            budget_mib=max(budgets) if budgets else None,
            detail="; ".join(details) or skip_reason,
            excerpt=tail(record.detail or "") if failed else "",
            evidence=evidence,
        )
    # A crash, a timeout, a non-zero exit that no case explains or a result line that is not
    # one is a failure of its own.
    clean_exit = run.returncode == 0
    explained = any(c.outcome in (Outcome.FAIL, Outcome.ERROR) for c in cases.values())
    if run.timed_out or errors or not records or (not clean_exit and not explained):
        why = "timed out" if run.timed_out else f"exited {run.returncode}"
        cases[FILE_CASE] = ModeOutcome(
            outcome=Outcome.ERROR,
            duration_s=run.duration_s,
            detail="; ".join([f"{run.path} {why}; {len(records)} cases reported", *errors]),
            excerpt=tail(run.output),
        )
    return cases


def _kind(outcomes: dict, expected_regression: bool) -> Kind:
    change = outcomes.get("change")
    base = outcomes.get("unmodified")
    if change is not None:
        if change.outcome in (Outcome.FAIL, Outcome.ERROR, Outcome.MISSING):
            return Kind.BROKEN
        if change.outcome == Outcome.SKIP:
            return Kind.SKIPPED
    if base is None or base.outcome in (Outcome.SKIP, Outcome.MISSING):
        return Kind.NO_BASELINE if change is not None else Kind.SKIPPED
    if base.outcome in (Outcome.FAIL, Outcome.ERROR):
        return Kind.REGRESSION
    return Kind.NOT_REPRODUCED if expected_regression else Kind.PRESERVATION


def _file_flags(file_modes: dict, cases: list) -> list:
    flags = []
    for mode, info in file_modes.items():
        if info.get("timed_out"):
            flags.append(f"timed out ({mode})")
    base = [c.modes["unmodified"].outcome for c in cases if "unmodified" in c.modes]
    ran = [o for o in base if o in ("pass", "fail", "error")]
    if ran and all(o == "pass" for o in ran):
        flags.append(FLAG_NOT_REPRODUCED)
    return flags


def _number(value) -> bool:
    # A result line is PR code's output, and JSON parses NaN and Infinity: not measurements.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---- loading: precise errors instead of KeyErrors deep inside the renderer ----


def _need(data, key, kind, where):
    if not isinstance(data, dict) or key not in data:
        raise ResultsError(f"{where}: missing field {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ResultsError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
    return value


def _load(data, source: str) -> Results:
    if not isinstance(data, dict):
        raise ResultsError(f"{source}: expected a JSON object, got {type(data).__name__}")
    schema = _need(data, "schema", int, source)
    if schema != SCHEMA:
        raise ResultsError(f"{source}.schema: {schema} is not the supported {SCHEMA}")
    modes = _need(data, "modes", list, source)
    for mode in modes:
        if mode not in MODES:
            raise ResultsError(f"{source}.modes: unknown mode {mode!r}")
    files = []
    for i, f in enumerate(_need(data, "files", list, source)):
        where = f"{source}.files[{i}]"
        files.append(
            FileResult(
                path=_need(f, "path", str, where),
                suite=_need(f, "suite", (str, type(None)), where),
                modes=_need(f, "modes", dict, where),
                flags=[str(x) for x in _need(f, "flags", list, where)],
            )
        )
    cases = []
    for i, c in enumerate(_need(data, "cases", list, source)):
        where = f"{source}.cases[{i}]"
        try:
            kind = case_result.member(Kind, _need(c, "kind", str, where), f"{where}.kind")
            outcomes = {
                mode: case_result.from_dict(ModeOutcome, m, f"{where}.modes.{mode}")
                for mode, m in _need(c, "modes", dict, where).items()
            }
        except RecordError as exc:
            raise ResultsError(str(exc)) from None
        line = c.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
            raise ResultsError(f"{where}.line: expected a positive line number, got {line!r}")
        file, case_id = _need(c, "file", str, where), _need(c, "case_id", str, where)
        cases.append(Case(file, case_id, kind, outcomes, line))
    pictures = data.get("pictures") or {}
    if not isinstance(pictures, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _PICTURE.match(v) for k, v in pictures.items()
    ):
        raise ResultsError(f"{source}.pictures: expected case -> pictures/NAME.png")
    return Results(
        pictures=pictures,
        backend=_need(data, "backend", str, source),
        modes=modes,
        selection=_need(data, "selection", dict, source),
        environment=_need(data, "environment", dict, source),
        files=files,
        cases=cases,
    )
