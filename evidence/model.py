"""The evidence model: one test in one process, up to a whole A/B run, as every stage reads it.

A test's result is born in the test's own process (``abtest/file_process.py`` writes one JSON
line per finished test on a channel the runner owns), is judged once (``evidence.judge``) and
is stored as results.json; every later stage (the report, the series' PR description, the
benchmarks) only loads that file back through ``Results.from_json``. A results folder is
untrusted input in the fork path, so loading is the one place that checks every shape and
bound: sizes, names, paths, numbers. Loading raises ``EvidenceError`` naming the field; it
never runs, judges or renders anything.
"""

import enum
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field

SCHEMA = 2
MODES = ("unmodified", "change")
BACKENDS = ("cuda", "cpu")
FILE_CASE = "(whole file)"  # stands for a file whose process failed outside any test
MAX_RESULTS_BYTES = 32 * 1024 * 1024
MAX_FILES, MAX_CASES, MAX_SUITES = 1000, 10000, 50
MAX_NAME_CHARS, MAX_TEXT_CHARS = 500, 20000
MAX_LINE = 10**6  # a test's def line, for its annotation
MAX_MIB = 10**7  # a peak beyond 10 TiB is not a measurement
MAX_NESTING = 16
_SUITE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_TEST_PATH = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_./-]{1,300}\.py$")
_PICTURE = re.compile(r"^pictures/[A-Za-z0-9_.-]{1,130}\.png$")
_HEX = re.compile(r"^[0-9a-f]{7,64}$")


class EvidenceError(ValueError):
    """Evidence that is not what the runner writes; the message names the field."""


class Outcome(enum.StrEnum):
    """What one test did in one mode."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    MISSING = "missing"  # the mode ran, the test never reported


class Kind(enum.StrEnum):
    """What a case proves, from its outcomes in both modes."""

    REGRESSION = "regression"  # fails unmodified, passes with the change
    PRESERVATION = "preservation"  # passes both ways
    NOT_REPRODUCED = "not-reproduced"  # listed as a regression, yet passes unmodified
    BROKEN = "broken"  # fails, errors or is missing with the change
    SKIPPED = "skipped"
    NO_BASELINE = "no-baseline"  # passes with the change; unmodified gave no verdict


@dataclass(frozen=True)
class TestResult:
    """One test as it ended in one process; also one line of the runner's result channel."""

    __test__ = False  # not a pytest test class

    test: str  # "Class.test_name", "test_function[param]", or "Class.setUpClass"
    outcome: Outcome
    duration_s: float | None = None
    peak_mib: float | None = None  # CUDA memory allocated at the test's peak (the runner's)
    detail: str = ""  # the skip reason, or the end of the failure's traceback

    @classmethod
    def from_json(cls, data, where: str) -> "TestResult":
        _keys(data, where, {"test", "outcome"}, {"duration_s", "peak_mib", "detail"})
        return cls(
            test=_text(data, "test", where, MAX_NAME_CHARS),
            outcome=_member(Outcome, data["outcome"], f"{where}.outcome"),
            duration_s=_number(data, "duration_s", where, 10**7),
            peak_mib=_number(data, "peak_mib", where, MAX_MIB),
            detail=_text(data, "detail", where, MAX_TEXT_CHARS, default=""),
        )


@dataclass(frozen=True)
class ProcessEnd:
    """How one file's process ended in one mode."""

    returncode: int | None  # None when it was killed at its timeout
    duration_s: float
    timed_out: bool = False
    tests: int = 0  # results it reported
    log: str | None = None  # the log's path inside the results folder

    @classmethod
    def from_json(cls, data, where: str) -> "ProcessEnd":
        _keys(data, where, {"returncode", "duration_s"}, {"timed_out", "tests", "log"})
        code = data["returncode"]
        if code is not None and not _is_int(code, -(2**31), 2**31):
            raise EvidenceError(f"{where}.returncode: expected an exit status, got {code!r}")
        log = data.get("log")
        if log is not None and not (isinstance(log, str) and re.fullmatch(r"logs/[\w.-]+", log)):
            raise EvidenceError(f"{where}.log: expected logs/NAME")
        return cls(
            returncode=code,
            duration_s=_number(data, "duration_s", where, 10**7, required=True),
            timed_out=_flag(data, "timed_out", where),
            tests=_count(data, "tests", where, MAX_CASES),
            log=log,
        )


@dataclass(frozen=True)
class Side:
    """What one mode ran: the sglang it imported and whether this change was applied."""

    label: str  # "sglang 0.5.23", "sglang 0.5.23 + this change", "sglang 0.5.23 @ 1a2b3c4d5e6f"
    sglang: str | None = None  # the version the test process imported
    tree: str | None = None  # a source tree first on PYTHONPATH, or None: the installed one
    commit: str | None = None  # that tree's git commit, read by ci run itself
    overlay: bool = False  # the runtime overlay on in this mode

    @classmethod
    def from_json(cls, data, where: str) -> "Side":
        _keys(data, where, {"label"}, {"sglang", "tree", "commit", "overlay"})
        commit = data.get("commit")
        if commit is not None and not (isinstance(commit, str) and _HEX.match(commit)):
            raise EvidenceError(f"{where}.commit: expected a hex commit id")
        return cls(
            label=_text(data, "label", where, 200),
            sglang=_text(data, "sglang", where, 100, default=None),
            tree=_text(data, "tree", where, 1000, default=None),
            commit=commit,
            overlay=_flag(data, "overlay", where),
        )


@dataclass(frozen=True)
class SeriesId:
    """The patch series the evidence was made with (``series.seriesdir``): pr-body checks it."""

    id: str
    release: str
    patches: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data, where: str) -> "SeriesId":
        _keys(data, where, {"id", "release"}, {"patches"})
        if not (isinstance(data["id"], str) and re.fullmatch(r"[0-9a-f]{64}", data["id"])):
            raise EvidenceError(f"{where}.id: expected a sha256")
        patches = _list(data.get("patches", []), f"{where}.patches", 100)
        return cls(
            id=data["id"],
            release=_text(data, "release", where, 100),
            patches=tuple(_plain_text(p, f"{where}.patches", 200) for p in patches),
        )


@dataclass(frozen=True)
class Case:
    """One test across the modes, judged."""

    file: str
    test: str
    kind: Kind
    modes: dict  # mode -> TestResult
    line: int | None = None  # its ``def`` in ``file``, for check-run annotations

    @property
    def key(self) -> str:
        return f"{self.file}::{self.test}"


@dataclass(frozen=True)
class FileResult:
    """One test file across the modes."""

    path: str
    suite: str | None
    modes: dict  # mode -> ProcessEnd
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Results:
    """One A/B run, judged: every stage after the judge reads it and changes it by ``replace``."""

    backend: str
    modes: tuple[str, ...]
    sides: dict  # mode -> Side
    files: tuple[FileResult, ...]
    cases: tuple[Case, ...]
    verdict: str = "ok"  # "ok", "failed" or "void" (``evidence.judge.verdict``)
    reasons: tuple[str, ...] = ()  # one line each: why the verdict is not ok
    selection: dict = field(default_factory=dict)  # what was asked for, as typed
    environment: dict = field(default_factory=dict)  # machine and per-mode process records
    series: SeriesId | None = None
    pictures: dict = field(default_factory=dict)  # case key -> pictures/NAME.png
    schema: int = SCHEMA

    def __post_init__(self):
        for name in ("modes", "files", "cases", "reasons"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def counts(self) -> dict:
        totals = {kind.value: 0 for kind in Kind}
        for case in self.cases:
            totals[case.kind] += 1
        return totals

    def suites(self) -> dict:
        """suite -> its files' cases, for one commit status per suite."""
        by_file = {f.path: f.suite or "unregistered" for f in self.files}
        grouped: dict = {suite: [] for suite in by_file.values()}
        for case in self.cases:
            grouped.setdefault(by_file.get(case.file, "unregistered"), []).append(case)
        return grouped

    def label(self, mode: str) -> str:
        side = self.sides.get(mode)
        return side.label if side else mode

    def to_json(self) -> dict:
        return json.loads(json.dumps(asdict(self)))  # enums are str: plain JSON types

    @classmethod
    def from_json(cls, data, where: str = "results.json") -> "Results":
        return _load(data, where)


def load(path: str) -> Results:
    """results.json at ``path`` (a file, or the folder holding it), checked whole."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            raise EvidenceError(f"{path}: not a plain file (did `python -m ci run` write it?)")
        if os.path.getsize(path) > MAX_RESULTS_BYTES:
            raise EvidenceError(f"{path}: larger than {MAX_RESULTS_BYTES} bytes")
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle, parse_int=lambda text: _integer(text, path))
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise EvidenceError(f"{path}: not readable: {type(exc).__name__}") from None
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{path}: not JSON: {exc}") from None
    return _load(data, path)


def _integer(text: str, path: str) -> int:
    # A line number, an exit status or a count; 10**400 is none, and no float holds it.
    if len(text.lstrip("-")) > 15:
        raise EvidenceError(f"{path}: an integer of {len(text)} digits")
    return int(text)


def save(results: Results, folder: str) -> str:
    path = os.path.join(folder, "results.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results.to_json(), handle, indent=2, sort_keys=True, ensure_ascii=True)
        handle.write("\n")
    return path


def read_channel(text: str) -> tuple[tuple[TestResult, ...], tuple[str, ...]]:
    """The results a test process wrote on its channel, in order, and one error per line that
    is not one (the channel is PR code's output: a bad line is data, not an exception)."""
    results, errors = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"result line {number}"
        try:
            data = json.loads(line)
            if nesting(data) > MAX_NESTING:
                raise EvidenceError(f"{where}: nested deeper than {MAX_NESTING} levels")
            results.append(TestResult.from_json(data, where))
        except ValueError as exc:  # JSONDecodeError and EvidenceError both are
            errors.append(f"{where}: {exc}"[:300])
        except RecursionError:
            errors.append(f"{where}: nested deeper than the JSON parser allows")
    return tuple(results), tuple(errors)


def nesting(value) -> int:
    """How many lists and objects deep ``value`` goes (without recursing itself)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in value)
    return deepest


# ---- loading: every shape and bound, once ----


def _load(data, where: str) -> Results:
    _keys(
        data,
        where,
        {"schema", "backend", "modes", "sides", "files", "cases"},
        {"verdict", "reasons", "selection", "environment", "series", "pictures"},
    )
    if data["schema"] != SCHEMA:
        raise EvidenceError(f"{where}.schema: {data['schema']!r} is not the supported {SCHEMA}")
    if data["backend"] not in BACKENDS:
        raise EvidenceError(
            f"{where}.backend: {str(data['backend'])[:40]!r} is not one of {BACKENDS}"
        )
    modes = tuple(_list(data["modes"], f"{where}.modes", len(MODES)))
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        raise EvidenceError(f"{where}.modes: expected some of {MODES}")
    sides = {
        mode: Side.from_json(value, f"{where}.sides.{mode}")
        for mode, value in _mode_map(data["sides"], f"{where}.sides", modes).items()
    }
    files = []
    for i, f in enumerate(_list(data["files"], f"{where}.files", MAX_FILES)):
        at = f"{where}.files[{i}]"
        _keys(f, at, {"path", "suite", "modes"}, {"flags"})
        suite = f["suite"]
        if suite is not None and not (isinstance(suite, str) and _SUITE.match(suite)):
            raise EvidenceError(f"{at}.suite: {str(suite)[:80]!r} is not a suite name")
        ends = {
            m: ProcessEnd.from_json(v, f"{at}.modes.{m}")
            for m, v in _mode_map(f["modes"], f"{at}.modes", modes).items()
        }
        flags = _list(f.get("flags", []), f"{at}.flags", 20)
        files.append(
            FileResult(
                _path(f["path"], f"{at}.path"),
                suite,
                ends,
                tuple(_plain_text(x, f"{at}.flags", 300) for x in flags),
            )
        )
    if len({f.suite for f in files}) > MAX_SUITES:
        raise EvidenceError(f"{where}.files: more than {MAX_SUITES} suites")
    cases = []
    for i, c in enumerate(_list(data["cases"], f"{where}.cases", MAX_CASES)):
        at = f"{where}.cases[{i}]"
        _keys(c, at, {"file", "test", "kind", "modes"}, {"line"})
        line = c.get("line")
        if line is not None and not _is_int(line, 1, MAX_LINE + 1):
            raise EvidenceError(f"{at}.line: expected a line number up to {MAX_LINE}")
        results = {
            m: TestResult.from_json(v, f"{at}.modes.{m}")
            for m, v in _mode_map(c["modes"], f"{at}.modes", modes).items()
        }
        cases.append(
            Case(
                _path(c["file"], f"{at}.file"),
                _plain_text(c["test"], f"{at}.test", MAX_NAME_CHARS),
                _member(Kind, c["kind"], f"{at}.kind"),
                results,
                line,
            )
        )
    verdict = data.get("verdict", "ok")
    if verdict not in ("ok", "failed", "void"):
        raise EvidenceError(f"{where}.verdict: expected ok, failed or void")
    reasons = _list(data.get("reasons", []), f"{where}.reasons", 20)
    pictures = data.get("pictures") or {}
    if (
        not isinstance(pictures, dict)
        or len(pictures) > MAX_CASES
        or not all(
            isinstance(k, str) and isinstance(v, str) and _PICTURE.match(v)
            for k, v in pictures.items()
        )
    ):
        raise EvidenceError(f"{where}.pictures: expected case -> pictures/NAME.png")
    series = data.get("series")
    for name in ("selection", "environment"):
        value = data.get(name, {})
        if not isinstance(value, dict) or nesting(value) > MAX_NESTING:
            raise EvidenceError(f"{where}.{name}: expected an object nested at most {MAX_NESTING}")
    return Results(
        backend=data["backend"],
        modes=modes,
        sides=sides,
        files=tuple(files),
        cases=tuple(cases),
        verdict=verdict,
        reasons=tuple(_plain_text(r, f"{where}.reasons", 500) for r in reasons),
        selection=data.get("selection", {}),
        environment=data.get("environment", {}),
        series=None if series is None else SeriesId.from_json(series, f"{where}.series"),
        pictures=pictures,
    )


def _keys(data, where, required, optional) -> None:
    if not isinstance(data, dict):
        raise EvidenceError(f"{where}: expected an object, got {type(data).__name__}")
    missing = sorted(required - data.keys())
    if missing:
        raise EvidenceError(f"{where}: missing field {missing[0]!r}")
    unknown = sorted(k for k in data if k not in required and k not in optional)
    if unknown:
        raise EvidenceError(f"{where}: unknown field {str(unknown[0])[:40]!r}")


def _mode_map(value, where, modes) -> dict:
    if not isinstance(value, dict):
        raise EvidenceError(f"{where}: expected an object of modes")
    for key in value:
        if key not in modes:
            raise EvidenceError(f"{where}: {str(key)[:40]!r} is not one of the run's modes")
    return value


def _list(value, where, limit) -> list:
    if not isinstance(value, list):
        raise EvidenceError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise EvidenceError(f"{where}: {len(value)} items; at most {limit}")
    return value


def _member(enum_type, value, where):
    try:
        return enum_type(value)
    except (ValueError, TypeError):
        choices = ", ".join(m.value for m in enum_type)
        raise EvidenceError(f"{where}: {str(value)[:40]!r} is not one of {choices}") from None


def _plain_text(value, where, limit) -> str:
    if not isinstance(value, str):
        raise EvidenceError(f"{where}: expected text, got {type(value).__name__}")
    if len(value) > limit:
        raise EvidenceError(f"{where}: {len(value)} characters; at most {limit}")
    return value


def _text(data, key, where, limit, default=...):
    if key not in data or (data[key] is None and default is None):
        if default is ...:
            raise EvidenceError(f"{where}: missing field {key!r}")
        return default
    return _plain_text(data[key], f"{where}.{key}", limit)


def _is_int(value, low, high) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < high


def _number(data, key, where, limit, required=False):
    value = data.get(key)
    if value is None and not required:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= limit:
        raise EvidenceError(f"{where}.{key}: expected a number from 0 to {limit}")
    return float(value)


def _count(data, key, where, limit) -> int:
    value = data.get(key, 0)
    if not _is_int(value, 0, limit + 1):
        raise EvidenceError(f"{where}.{key}: expected a count up to {limit}")
    return value


def _flag(data, key, where) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise EvidenceError(f"{where}.{key}: expected true or false")
    return value


def _path(value, where) -> str:
    if not (isinstance(value, str) and _TEST_PATH.match(value)):
        raise EvidenceError(f"{where}: {str(value)[:80]!r} is not a relative test-file path")
    return value
