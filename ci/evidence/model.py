"""The evidence model, one test up to a whole A/B run. A results folder is untrusted input, so
loading it checks every field against its type and bound (``_check``): EvidenceError names the
field at fault."""

import enum
import functools
import json
import os
import re
import typing
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
PER_MODE = (len(MODES), MODES, None)  # the bound of a map of mode -> record
# Each is matched whole (fullmatch): a trailing newline is not part of a name.
_SUITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_TEST_PATH = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_./-]{1,300}\.py")
_PICTURE = re.compile(r"pictures/[A-Za-z0-9_.-]{1,130}\.png")
_LOG = re.compile(r"logs/[A-Za-z0-9_.-]+")
_HEX = re.compile(r"[0-9a-f]{7,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class EvidenceError(CiError, ValueError):
    """Evidence that is not what the runner writes; the message names the field."""


def bounded(bound=None, **kwargs):
    """A field whose JSON value ``_check`` holds to ``bound``; the JSON may leave it out only
    where it has a default."""
    return field(metadata={"bound": bound}, **kwargs)


def _ensure(ok, where: str, why: str, *args) -> None:
    if not ok:
        raise EvidenceError(f"{where}: {why.format(*args)}")


@functools.cache
def _shape(kind) -> tuple:
    """A type as ``_check`` reads it: (its class, its arguments' shapes, None allowed)."""
    nullable = type(None) in typing.get_args(kind)
    kind = typing.get_args(kind)[0] if nullable else kind
    of = tuple(_shape(arg) for arg in typing.get_args(kind) if arg is not ...)
    return typing.get_origin(kind) or kind, of, nullable


def _check(value, where: str, shape, bound):
    """``value`` from JSON as a field's type (its ``_shape``) held to ``bound``: for str a length, a
    pattern or the choices; for int a range; for float a maximum (from 0); for an enum the
    choices, or all; for tuple[X, ...] (count, X's bound); for dict[str, X] (count, the keys'
    bound, X's bound); a bare dict is a free-form record, nested at most MAX_NESTING."""
    kind, of, nullable = shape
    if value is None and nullable:
        return None
    if kind is tuple:
        count, item = bound
        ok = isinstance(value, list) and len(value) <= count
        _ensure(ok, where, "expected a list of at most {} items", count)
        return tuple(_check(v, f"{where}[{i}]", of[0], item) for i, v in enumerate(value))
    if kind is dict and of:
        count, keys, item = bound
        ok = isinstance(value, dict) and len(value) <= count
        _ensure(ok, where, "expected an object of at most {} keys", count)
        named, loaded = isinstance(keys, tuple), {}  # a key among choices is safe to print
        for key, v in value.items():
            key = _check(key, where, of[0], keys)
            loaded[key] = _check(v, f"{where}.{key}" if named else where, of[1], item)
        return loaded
    if kind is dict:
        depth, level = 0, [value]
        while level := [v for v in level if isinstance(v, (dict, list))]:  # no recursion
            depth += 1
            level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
        ok = isinstance(value, dict) and depth <= MAX_NESTING
        _ensure(ok, where, "expected an object nested at most {}", MAX_NESTING)
        return value
    if isinstance(kind, enum.EnumMeta) or isinstance(bound, tuple):
        choices = bound or kind.__members__.values()
        if value not in choices:
            raise EvidenceError(f"{where}: {str(value)!r:.40} is not one of {', '.join(choices)}")
        return kind(value)
    if kind is bool:
        _ensure(isinstance(value, bool), where, "expected true or false")
        return value
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value in bound
        _ensure(ok, where, "{!s:.40} is not an integer from {} to {}", value, bound[0], bound[-1])
        return value
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and 0 <= value <= bound  # False for NaN and infinities; an int is never cast
        _ensure(ok, where, "expected a number from 0 to {}", bound)
        return float(value)
    if kind is not str:
        return load_object(value, where, kind)
    _ensure(isinstance(value, str), where, "expected text, got {.__name__}", type(value))
    if isinstance(bound, re.Pattern):
        _ensure(bound.fullmatch(value), where, "{!r:.80} does not match {}", value, bound.pattern)
    else:
        _ensure(len(value) <= bound, where, "{} characters; at most {}", len(value), bound)
    return value


@functools.cache
def _fields(cls) -> tuple:
    return tuple((f, _shape(f.type)) for f in fields(cls))


def load_object(data, where: str, cls):
    """A ``cls`` from JSON ``data``, every field checked, no other key."""
    _ensure(isinstance(data, dict), where, "expected an object, got {.__name__}", type(data))
    values = {}
    for f, shape in _fields(cls):
        if f.name in data:
            values[f.name] = _check(data[f.name], f"{where}.{f.name}", shape, f.metadata["bound"])
        else:
            optional = MISSING is not f.default or MISSING is not f.default_factory
            _ensure(optional, where, "missing field {!r}", f.name)
    unknown = sorted(set(data) - set(values))
    _ensure(not unknown, where, "unknown field {!r:.40}", unknown and unknown[0])
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

    test: str = bounded(MAX_NAME)  # "Class.test", "test_function[param]", "Class.setUpClass"
    outcome: Outcome = bounded()
    duration_s: float | None = bounded(MAX_S, default=None)
    peak_mib: float | None = bounded(MAX_S, default=None)  # CUDA memory at its peak
    detail: str = bounded(MAX_TEXT, default="")  # a skip's reason, a traceback's end
    # each call of the test method in order, where the runner saw them (CI retries once)
    attempts: tuple[Outcome, ...] = bounded((20, ATTEMPTS), default=())
    unobserved: bool = bounded(default=False)  # passed, yet no call of its method seen

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

    returncode: int | None = bounded(range(-(2**31), 2**31))  # None: killed
    duration_s: float = bounded(MAX_S)
    timed_out: bool = bounded(default=False)
    tests: int = bounded(range(MAX_CASES + 1), default=0)  # results it reported
    log: str | None = bounded(_LOG, default=None)


@dataclass(frozen=True)
class Side:
    """What one mode ran: the sglang it imported and whether this change was applied."""

    label: str = bounded(200)  # "sglang 0.5.23", "sglang 0.5.23 + this change"
    sglang: str | None = bounded(100, default=None)  # what the test process imported
    tree: str | None = bounded(1000, default=None)  # a source tree first on PYTHONPATH
    commit: str | None = bounded(_HEX, default=None)  # the tree's
    overlay: bool = bounded(default=False)  # the runtime overlay on in it


@dataclass(frozen=True)
class FixId:
    """One independent fix of the series (``tools.series.seriesdir.Fix``)."""

    id: str = bounded(_SHA256)
    patches: tuple[str, ...] = bounded((100, 200))


@dataclass(frozen=True)
class SeriesId:
    """The patch series the evidence was made with: pr-body checks it holds the fix it shows."""

    id: str = bounded(_SHA256)
    release: str = bounded(100)
    patches: tuple[str, ...] = bounded((100, 200), default=())
    fixes: tuple[FixId, ...] = bounded((100, None), default=())


@dataclass(frozen=True)
class Case:
    """One test across the modes, judged."""

    file: str = bounded(_TEST_PATH)
    test: str = bounded(MAX_NAME)
    kind: Kind = bounded()
    modes: dict[str, TestResult] = bounded(PER_MODE)
    line: int | None = bounded(range(1, 10**6 + 1), default=None)  # its def, for annotations

    @property
    def key(self) -> str:
        return f"{self.file}::{self.test}"


@dataclass(frozen=True)
class FileResult:
    """One test file across the modes."""

    path: str = bounded(_TEST_PATH)
    suite: str | None = bounded(_SUITE)
    modes: dict[str, ProcessEnd] = bounded(PER_MODE)
    flags: tuple[str, ...] = bounded((20, 300), default=())


@dataclass(frozen=True)
class Results:
    """One A/B run, judged: every stage after the judge reads it and changes it by ``replace``."""

    backend: str = bounded(BACKENDS)
    modes: tuple[str, ...] = bounded((len(MODES), MODES))
    sides: dict[str, Side] = bounded(PER_MODE)
    files: tuple[FileResult, ...] = bounded((MAX_FILES, None))
    cases: tuple[Case, ...] = bounded((MAX_CASES, None))
    verdict: str = bounded(VERDICTS, default="ok")  # ``judge.with_verdict``'s
    reasons: tuple[str, ...] = bounded((20, 500), default=())  # one line per reason it is not ok
    selection: dict = bounded(default_factory=dict)  # what was asked for, as typed
    environment: dict = bounded(default_factory=dict)  # the machine, per-mode process records
    series: SeriesId | None = bounded(default=None)
    pictures: dict[str, str] = bounded((MAX_CASES, 2 * MAX_NAME, _PICTURE), default_factory=dict)
    schema: int = bounded(range(SCHEMA, SCHEMA + 1), kw_only=True)  # no default: always said

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
        modes = results.modes
        ok = modes and len(set(modes)) == len(modes)
        _ensure(ok, f"{where}.modes", "expected some of {} once each", ", ".join(MODES))
        maps = [("sides", results.sides)]
        maps += [(f"files[{i}].modes", f.modes) for i, f in enumerate(results.files)]
        maps += [(f"cases[{i}].modes", c.modes) for i, c in enumerate(results.cases)]
        for at, per_mode in maps:
            extra = sorted(set(per_mode) - set(modes))[:1]
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


def load(path: str) -> Results:
    """results.json at ``path`` (a file, or the folder holding it), checked whole."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    if os.path.islink(path) or not os.path.isfile(path):
        raise EvidenceError(f"{path}: not a plain file (did `python -m ci run` write it?)")
    if os.path.getsize(path) > MAX_RESULTS_BYTES:
        raise EvidenceError(f"{path}: larger than {MAX_RESULTS_BYTES} bytes")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise EvidenceError(f"{path}: not readable: {type(exc).__name__}") from None
    except ValueError as exc:  # Python refuses an integer of more than 4300 digits, too
        raise EvidenceError(f"{path}: not JSON: {exc}") from None
    return Results.from_json(data, path)


def dumps(results: Results) -> bytes:
    """results.json's bytes: keys sorted, ASCII only."""
    text = json.dumps(results.to_json(), indent=2, sort_keys=True, ensure_ascii=True)
    return (text + "\n").encode("ascii")


def save(results: Results, folder: str) -> None:
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(dumps(results))
