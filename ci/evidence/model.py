"""The evidence model, one test up to a whole A/B run. A results folder is untrusted input, so
loading it checks every shape and bound (each field's check is in its metadata): EvidenceError
names the field at fault."""

import enum
import functools
import json
import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields

from ci.errors import CiError

SCHEMA = 2
MODES = ("unmodified", "change")
BACKENDS = ("cuda", "cpu")
VERDICTS = ("ok", "failed", "void")
FILE_CASE = "(whole file)"  # stands for a file whose process failed outside any test
MAX_RESULTS_BYTES = 32 * 1024 * 1024
MAX_FILES, MAX_CASES, MAX_SUITES, MAX_NESTING = 1000, 10000, 50, 16
MAX_NAME, MAX_TEXT, MAX_S = 500, 20000, 10**7
# Each is matched whole (fullmatch): a trailing newline is not part of a name.
_SUITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_TEST_PATH = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_./-]{1,300}\.py")
_PICTURE = re.compile(r"pictures/[A-Za-z0-9_.-]{1,130}\.png")
_LOG = re.compile(r"logs/[A-Za-z0-9_.-]+")
_HEX = re.compile(r"[0-9a-f]{7,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class EvidenceError(CiError, ValueError):
    """Evidence that is not what the runner writes; the message names the field."""


def _field(check, *args, nullable=False, required=None, **kwargs):
    """A field loaded through ``check(value, where, *args)``; None passes where nullable."""
    if required is None:
        required = "default" not in kwargs and "default_factory" not in kwargs
    nullable = nullable or kwargs.get("default", MISSING) is None
    metadata = {"check": (check, args), "nullable": nullable, "required": required}
    return field(metadata=metadata, **kwargs)


def _ensure(ok, where: str, why: str, *args) -> None:
    if not ok:
        raise EvidenceError(f"{where}: {why.format(*args)}")


def _text(value, where, limit) -> str:
    _ensure(isinstance(value, str), where, "expected text, got {.__name__}", type(value))
    _ensure(len(value) <= limit, where, "{} characters; at most {}", len(value), limit)
    return value


def _matching(value, where, pattern, what) -> str:
    ok = isinstance(value, str) and pattern.fullmatch(value)
    _ensure(ok, where, "{!r:.80} is not {}", value, what)
    return value


def _one_of(value, where, choices):
    for choice in choices:
        if choice == value:
            return choice
    raise EvidenceError(f"{where}: {str(value)[:40]!r} is not one of {', '.join(choices)}")


def _integer(value, where, low, high) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    _ensure(ok, where, "{!s:.40} is not an integer from {} to {}", value, low, high)
    return value


def _number(value, where, limit) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and 0 <= value <= limit
    _ensure(ok, where, "expected a number from 0 to {}", limit)
    return float(value)


def _flag(value, where) -> bool:
    _ensure(isinstance(value, bool), where, "expected true or false")
    return value


def _list_of(value, where, limit, check, *args) -> tuple:
    _ensure(isinstance(value, list), where, "expected a list, got {.__name__}", type(value))
    _ensure(len(value) <= limit, where, "{} items; at most {}", len(value), limit)
    return tuple(check(item, f"{where}[{i}]", *args) for i, item in enumerate(value))


def _per_mode(value, where, cls) -> dict:
    """mode -> ``cls``; ``Results.from_json`` checks the modes are the run's."""
    _ensure(isinstance(value, dict), where, "expected an object of modes")
    for mode in value:
        _ensure(mode in MODES, where, "{!r:.40} is not one of the run's modes", mode)
    return {mode: load_object(item, f"{where}.{mode}", cls) for mode, item in value.items()}


def _run_modes(value, where) -> tuple:
    modes = _list_of(value, where, len(MODES), _one_of, MODES)
    _ensure(modes and len(set(modes)) == len(modes), where, "expected some of {}", MODES)
    return modes


def _record(value, where) -> dict:
    """A free-form object (what was asked for, the machine's record), nested at most so deep."""
    depth, level = 0, [value]
    while level := [v for v in level if isinstance(v, (dict, list))]:  # no recursion
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    ok = isinstance(value, dict) and depth <= MAX_NESTING
    _ensure(ok, where, "expected an object nested at most {}", MAX_NESTING)
    return value


def _pictures(value, where) -> dict:
    _ensure(isinstance(value, dict) and len(value) <= MAX_CASES, where, "expected case -> picture")
    for key, path in value.items():
        _matching(path, where, _PICTURE, "pictures/NAME.png")
        _text(key, where, 2 * MAX_NAME)
    return value


_fields = functools.cache(fields)


def load_object(data, where: str, cls):
    """A ``cls`` from JSON ``data``, every field checked, no other key."""
    _ensure(isinstance(data, dict), where, "expected an object, got {.__name__}", type(data))
    checks = _fields(cls)
    missing = [f.name for f in checks if f.metadata["required"] and f.name not in data]
    _ensure(not missing, where, "missing field {!r}", missing and missing[0])
    unknown = sorted(set(data) - {f.name for f in checks})
    _ensure(not unknown, where, "unknown field {!r:.40}", unknown and unknown[0])
    values = {}
    for f in checks:
        if f.name in data:
            value = data[f.name]
            if value is not None or not f.metadata["nullable"]:
                check, args = f.metadata["check"]
                value = check(value, f"{where}.{f.name}", *args)
            values[f.name] = value
    return cls(**values)


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
    MASKED_BY_RETRY = "masked-by-retry"  # failed first unmodified, passed on a retry
    FLAKY = "flaky"  # failed first with the change, passed on a retry
    UNPROVEN = "unproven"  # passed, its method's calls not counted: a retry may hide a failure


ATTEMPTS = (Outcome.PASS, Outcome.FAIL, Outcome.ERROR)


@dataclass(frozen=True)
class TestResult:
    """One test as it ended in one process; also one line of the runner's result channel."""

    __test__ = False  # not a pytest test class

    test: str = _field(_text, MAX_NAME)  # "Class.test", "test_function[param]", "Class.setUpClass"
    outcome: Outcome = _field(_one_of, Outcome)
    duration_s: float | None = _field(_number, MAX_S, default=None)
    peak_mib: float | None = _field(_number, MAX_S, default=None)  # CUDA memory at its peak
    detail: str = _field(_text, MAX_TEXT, default="")  # a skip's reason, a traceback's end
    # each call of the test method in order, where the runner saw them (CI retries once)
    attempts: tuple[Outcome, ...] = _field(_list_of, 20, _one_of, ATTEMPTS, default=())
    unobserved: bool = _field(_flag, default=False)  # passed, yet no call of its method seen

    @property
    def passed_on_retry(self) -> bool:
        """Passed, its last attempt after one that failed: no pass at all to upstream."""
        a = self.attempts
        return self.outcome == Outcome.PASS and a[-1:] == (Outcome.PASS,) and set(a) != {"pass"}

    @property
    def unproven(self) -> bool:
        return self.outcome == Outcome.PASS and self.unobserved


@dataclass(frozen=True)
class ProcessEnd:
    """How one file's process ended in one mode."""

    returncode: int | None = _field(_integer, -(2**31), 2**31 - 1, nullable=True)  # None: killed
    duration_s: float = _field(_number, MAX_S)
    timed_out: bool = _field(_flag, default=False)
    tests: int = _field(_integer, 0, MAX_CASES, default=0)  # results it reported
    log: str | None = _field(_matching, _LOG, "logs/NAME", default=None)


@dataclass(frozen=True)
class Side:
    """What one mode ran: the sglang it imported and whether this change was applied."""

    label: str = _field(_text, 200)  # "sglang 0.5.23", "sglang 0.5.23 + this change"
    sglang: str | None = _field(_text, 100, default=None)  # what the test process imported
    tree: str | None = _field(_text, 1000, default=None)  # a source tree first on PYTHONPATH
    commit: str | None = _field(_matching, _HEX, "a hex commit id", default=None)  # the tree's
    overlay: bool = _field(_flag, default=False)  # the runtime overlay on in it


@dataclass(frozen=True)
class FixId:
    """One independent fix of the series (``tools.series.seriesdir.Fix``)."""

    id: str = _field(_matching, _SHA256, "a sha256")
    patches: tuple[str, ...] = _field(_list_of, 100, _text, 200)


@dataclass(frozen=True)
class SeriesId:
    """The patch series the evidence was made with: pr-body checks it holds the fix it shows."""

    id: str = _field(_matching, _SHA256, "a sha256")
    release: str = _field(_text, 100)
    patches: tuple[str, ...] = _field(_list_of, 100, _text, 200, default=())
    fixes: tuple[FixId, ...] = _field(_list_of, 100, load_object, FixId, default=())


@dataclass(frozen=True)
class Case:
    """One test across the modes, judged."""

    file: str = _field(_matching, _TEST_PATH, "a relative test-file path")
    test: str = _field(_text, MAX_NAME)
    kind: Kind = _field(_one_of, Kind)
    modes: dict = _field(_per_mode, TestResult)  # mode -> TestResult
    line: int | None = _field(_integer, 1, 10**6, default=None)  # its def, for annotations

    @property
    def key(self) -> str:
        return f"{self.file}::{self.test}"


@dataclass(frozen=True)
class FileResult:
    """One test file across the modes."""

    path: str = _field(_matching, _TEST_PATH, "a relative test-file path")
    suite: str | None = _field(_matching, _SUITE, "a suite name", nullable=True)
    modes: dict = _field(_per_mode, ProcessEnd)  # mode -> ProcessEnd
    flags: tuple[str, ...] = _field(_list_of, 20, _text, 300, default=())


@dataclass(frozen=True)
class Results:
    """One A/B run, judged: every stage after the judge reads it and changes it by ``replace``."""

    backend: str = _field(_one_of, BACKENDS)
    modes: tuple[str, ...] = _field(_run_modes)
    sides: dict = _field(_per_mode, Side)  # mode -> Side
    files: tuple[FileResult, ...] = _field(_list_of, MAX_FILES, load_object, FileResult)
    cases: tuple[Case, ...] = _field(_list_of, MAX_CASES, load_object, Case)
    # ``ci.evidence.judge.with_verdict``'s, with one line per reason it is not ok
    verdict: str = _field(_one_of, VERDICTS, default="ok")
    reasons: tuple[str, ...] = _field(_list_of, 20, _text, 500, default=())
    # what was asked for, as typed; the machine and per-mode process records
    selection: dict = _field(_record, default_factory=dict)
    environment: dict = _field(_record, default_factory=dict)
    series: SeriesId | None = _field(load_object, SeriesId, default=None)
    pictures: dict = _field(_pictures, default_factory=dict)  # case key -> pictures/NAME.png
    schema: int = _field(_integer, SCHEMA, SCHEMA, default=SCHEMA, required=True)

    def __post_init__(self):
        for name in ("modes", "files", "cases", "reasons"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def counts(self) -> dict:
        return {kind.value: sum(case.kind == kind for case in self.cases) for kind in Kind}

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
        """Checked whole: each field, the modes every map names, each file and case once."""
        results = load_object(data, where, cls)
        maps = [("sides", results.sides)]
        maps += [(f"files[{i}].modes", f.modes) for i, f in enumerate(results.files)]
        maps += [(f"cases[{i}].modes", c.modes) for i, c in enumerate(results.cases)]
        for at, per_mode in maps:
            extra = sorted(set(per_mode) - set(results.modes))[:1]
            _ensure(not extra, f"{where}.{at}", "{!r:.40} is not one of the run's modes", *extra)
        suites = len({f.suite for f in results.files})
        _ensure(suites <= MAX_SUITES, f"{where}.files", "more than {} suites", MAX_SUITES)
        keyed = {"files": [f.path for f in results.files], "cases": [c.key for c in results.cases]}
        for at, keys in keyed.items():  # listed twice: which of two outcomes is the run's?
            first: dict = {}
            for i, key in enumerate(keys):
                twice = first.setdefault(key, i) != i
                _ensure(not twice, f"{where}.{at}[{i}]", "{!r:.200} is listed twice", key)
        return results


def checked(results: Results) -> Results:
    """``results`` as a report loads them back (EvidenceError where it refuses them)."""
    return Results.from_json(json.loads(dumps(results)))


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
            data = json.load(handle, parse_int=lambda text: _parse_int(text, path))
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise EvidenceError(f"{path}: not readable: {type(exc).__name__}") from None
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{path}: not JSON: {exc}") from None
    return Results.from_json(data, path)


def _parse_int(text: str, path: str) -> int:
    if len(text.lstrip("-")) > 15:
        raise EvidenceError(f"{path}: an integer of {len(text)} digits")
    return int(text)


def dumps(results: Results) -> bytes:
    """results.json's bytes: keys sorted, ASCII only."""
    text = json.dumps(results.to_json(), indent=2, sort_keys=True, ensure_ascii=True)
    return (text + "\n").encode("ascii")


def save(results: Results, folder: str) -> None:
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(dumps(results))
