"""The evidence model: one test in one process, up to a whole A/B run, as every stage reads it.

A results folder is untrusted input in the fork path, so loading it is the one place that checks
every shape and bound (each field through the check its metadata names); it raises
``EvidenceError`` naming the field, and never runs, judges or renders anything.
"""

import enum
import functools
import json
import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields

from evidence.inert import inert

SCHEMA = 2
MODES = ("unmodified", "change")
BACKENDS = ("cuda", "cpu")
VERDICTS = ("ok", "failed", "void")
FILE_CASE = "(whole file)"  # stands for a file whose process failed outside any test
MAX_RESULTS_BYTES = 32 * 1024 * 1024
MAX_FILES, MAX_CASES, MAX_SUITES = 1000, 10000, 50
MAX_NAME_CHARS, MAX_TEXT_CHARS = 500, 20000
MAX_LINE = 10**6  # a test's def line, for its annotation
MAX_MIB = 10**7  # a peak beyond 10 TiB is not a measurement
MAX_ATTEMPTS = 20  # CustomTestCase retries once in CI; SGLANG_TEST_MAX_RETRY may ask for more
MAX_S = 10**7
MAX_NESTING = 16
_SUITE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_TEST_PATH = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_./-]{1,300}\.py$")
_PICTURE = re.compile(r"^pictures/[A-Za-z0-9_.-]{1,130}\.png$")
_LOG = re.compile(r"^logs/[\w.-]+$")
_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class EvidenceError(ValueError):
    """Evidence that is not what the runner writes; the message names the field (and quotes no
    workflow command: ``inert``)."""

    def __init__(self, message: str):
        super().__init__(inert(message))


# ---- checks: (value, where, *args) -> the value as the model holds it ----


def _checked(check, *args, nullable=False, required=None, **kwargs):
    """A dataclass field that loading passes through ``check(value, where, *args)``; required
    unless it has a default, and None passes unchecked where ``nullable`` or the default."""
    if required is None:
        required = "default" not in kwargs and "default_factory" not in kwargs
    nullable = nullable or kwargs.get("default", MISSING) is None
    metadata = {"check": (check, args), "nullable": nullable, "required": required}
    return field(metadata=metadata, **kwargs)


def _text(value, where, limit) -> str:
    if not isinstance(value, str):
        raise EvidenceError(f"{where}: expected text, got {type(value).__name__}")
    if len(value) > limit:
        raise EvidenceError(f"{where}: {len(value)} characters; at most {limit}")
    return value


def _matching(value, where, pattern, what) -> str:
    if not (isinstance(value, str) and pattern.match(value)):
        raise EvidenceError(f"{where}: {str(value)[:80]!r} is not {what}")
    return value


def _one_of(value, where, choices):
    """The one of ``choices`` (strings, or a str enum's members) ``value`` is."""
    for choice in choices:
        if value == choice:
            return choice
    raise EvidenceError(f"{where}: {str(value)[:40]!r} is not one of {', '.join(choices)}")


def _schema(value, where) -> int:
    if value != SCHEMA:
        raise EvidenceError(f"{where}: {value!r:.40} is not the supported {SCHEMA}")
    return SCHEMA


def _integer_in(value, where, low, high) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise EvidenceError(f"{where}: expected an integer from {low} to {high}")
    return value


def _number(value, where, limit) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= limit:
        raise EvidenceError(f"{where}: expected a number from 0 to {limit}")
    return float(value)


def _flag(value, where) -> bool:
    if not isinstance(value, bool):
        raise EvidenceError(f"{where}: expected true or false")
    return value


def _list_of(value, where, limit, check, *args) -> tuple:
    if not isinstance(value, list):
        raise EvidenceError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise EvidenceError(f"{where}: {len(value)} items; at most {limit}")
    return tuple(check(item, f"{where}[{i}]", *args) for i, item in enumerate(value))


def _per_mode(value, where, cls) -> dict:
    """mode -> ``cls``; ``Results`` then checks the modes are the run's."""
    if not isinstance(value, dict):
        raise EvidenceError(f"{where}: expected an object of modes")
    for mode in value:
        if mode not in MODES:
            raise EvidenceError(f"{where}: {str(mode)[:40]!r} is not one of the run's modes")
    return {mode: _load(item, f"{where}.{mode}", cls) for mode, item in value.items()}


def _run_modes(value, where) -> tuple:
    modes = _list_of(value, where, len(MODES), _one_of, MODES)
    if not modes or len(set(modes)) != len(modes):
        raise EvidenceError(f"{where}: expected some of {MODES}")
    return modes


def _object(value, where) -> dict:
    if not isinstance(value, dict) or nesting(value) > MAX_NESTING:
        raise EvidenceError(f"{where}: expected an object nested at most {MAX_NESTING}")
    return value


def _pictures(value, where) -> dict:
    value = value or {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_CASES
        or not all(
            isinstance(k, str) and isinstance(v, str) and _PICTURE.match(v)
            for k, v in value.items()
        )
    ):
        raise EvidenceError(f"{where}: expected case -> pictures/NAME.png")
    return value


@functools.cache
def _checked_fields(cls) -> tuple[tuple, frozenset]:
    checked = tuple(f for f in fields(cls) if "check" in f.metadata)
    return checked, frozenset(f.name for f in checked)


def _load(data, where: str, cls):
    """A ``cls`` from JSON ``data``, every field checked; any other key is refused."""
    if not isinstance(data, dict):
        raise EvidenceError(f"{where}: expected an object, got {type(data).__name__}")
    checked, names = _checked_fields(cls)
    missing = [f.name for f in checked if f.metadata["required"] and f.name not in data]
    if missing:
        raise EvidenceError(f"{where}: missing field {missing[0]!r}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise EvidenceError(f"{where}: unknown field {str(unknown[0])[:40]!r}")
    values = {}
    for f in checked:
        if f.name not in data:
            continue
        value = data[f.name]
        if value is not None or not f.metadata["nullable"]:
            check, args = f.metadata["check"]
            value = check(value, f"{where}.{f.name}", *args)
        values[f.name] = value
    return cls(**values)


# ---- the model ----


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
    # failed first, passed on a retry: upstream's CI would pass it on the unmodified code
    MASKED_BY_RETRY = "masked-by-retry"
    FLAKY = "flaky"  # failed first with the change, passed on a retry


@dataclass(frozen=True)
class TestResult:
    """One test as it ended in one process; also one line of the runner's result channel."""

    __test__ = False  # not a pytest test class

    # "Class.test_name", "test_function[param]", or "Class.setUpClass"
    test: str = _checked(_text, MAX_NAME_CHARS)
    outcome: Outcome = _checked(_one_of, Outcome)
    duration_s: float | None = _checked(_number, MAX_S, default=None)
    # CUDA memory allocated at the test's peak (the runner's)
    peak_mib: float | None = _checked(_number, MAX_MIB, default=None)
    # the skip reason, or the end of the failure's traceback (a retried pass: the first's)
    detail: str = _checked(_text, MAX_TEXT_CHARS, default="")
    # each call of the test method in order, where the runner saw them; () where it did not
    attempts: tuple[Outcome, ...] = _checked(
        _list_of, MAX_ATTEMPTS, _one_of, (Outcome.PASS, Outcome.FAIL, Outcome.ERROR), default=()
    )

    @property
    def passed_on_retry(self) -> bool:
        """Passed in the end, after an attempt that failed: no pass at all to upstream."""
        return self.outcome == Outcome.PASS and any(a != Outcome.PASS for a in self.attempts)


@dataclass(frozen=True)
class ProcessEnd:
    """How one file's process ended in one mode."""

    # None when it was killed at its timeout
    returncode: int | None = _checked(_integer_in, -(2**31), 2**31 - 1, nullable=True)
    duration_s: float = _checked(_number, MAX_S)
    timed_out: bool = _checked(_flag, default=False)
    tests: int = _checked(_integer_in, 0, MAX_CASES, default=0)  # results it reported
    log: str | None = _checked(_matching, _LOG, "logs/NAME", default=None)


@dataclass(frozen=True)
class Side:
    """What one mode ran: the sglang it imported and whether this change was applied."""

    # "sglang 0.5.23", "sglang 0.5.23 + this change", "sglang 0.5.23 @ 1a2b3c4d5e6f"
    label: str = _checked(_text, 200)
    sglang: str | None = _checked(_text, 100, default=None)  # what the test process imported
    # a source tree first on PYTHONPATH, or None: the installed one
    tree: str | None = _checked(_text, 1000, default=None)
    # that tree's git commit, read by ci run itself
    commit: str | None = _checked(_matching, _HEX, "a hex commit id", default=None)
    overlay: bool = _checked(_flag, default=False)  # the runtime overlay on in this mode


@dataclass(frozen=True)
class FixId:
    """One independent fix of that series (``series.seriesdir.Fix``): its own id and patches."""

    id: str = _checked(_matching, _SHA256, "a sha256")
    patches: tuple[str, ...] = _checked(_list_of, 100, _text, 200)


@dataclass(frozen=True)
class SeriesId:
    """The patch series the evidence was made with (``series.seriesdir``): pr-body checks that
    it holds the fix it describes."""

    id: str = _checked(_matching, _SHA256, "a sha256")
    release: str = _checked(_text, 100)
    patches: tuple[str, ...] = _checked(_list_of, 100, _text, 200, default=())
    # absent from results made before the series had fixes of its own: one fix, the series
    fixes: tuple[FixId, ...] = _checked(_list_of, 100, _load, FixId, default=())


@dataclass(frozen=True)
class Case:
    """One test across the modes, judged."""

    file: str = _checked(_matching, _TEST_PATH, "a relative test-file path")
    test: str = _checked(_text, MAX_NAME_CHARS)
    kind: Kind = _checked(_one_of, Kind)
    modes: dict = _checked(_per_mode, TestResult)  # mode -> TestResult
    # its ``def`` in ``file``, for check-run annotations
    line: int | None = _checked(_integer_in, 1, MAX_LINE, default=None)

    @property
    def key(self) -> str:
        return f"{self.file}::{self.test}"


@dataclass(frozen=True)
class FileResult:
    """One test file across the modes."""

    path: str = _checked(_matching, _TEST_PATH, "a relative test-file path")
    suite: str | None = _checked(_matching, _SUITE, "a suite name", nullable=True)
    modes: dict = _checked(_per_mode, ProcessEnd)  # mode -> ProcessEnd
    flags: tuple[str, ...] = _checked(_list_of, 20, _text, 300, default=())


@dataclass(frozen=True)
class Results:
    """One A/B run, judged: every stage after the judge reads it and changes it by ``replace``."""

    backend: str = _checked(_one_of, BACKENDS)
    modes: tuple[str, ...] = _checked(_run_modes)
    sides: dict = _checked(_per_mode, Side)  # mode -> Side
    files: tuple[FileResult, ...] = _checked(_list_of, MAX_FILES, _load, FileResult)
    cases: tuple[Case, ...] = _checked(_list_of, MAX_CASES, _load, Case)
    # ``evidence.judge.verdict``, with one line per reason it is not ok
    verdict: str = _checked(_one_of, VERDICTS, default="ok")
    reasons: tuple[str, ...] = _checked(_list_of, 20, _text, 500, default=())
    # what was asked for, as typed; the machine and per-mode process records
    selection: dict = _checked(_object, default_factory=dict)
    environment: dict = _checked(_object, default_factory=dict)
    series: SeriesId | None = _checked(_load, SeriesId, default=None)
    pictures: dict = _checked(_pictures, default_factory=dict)  # case key -> pictures/NAME.png
    schema: int = _checked(_schema, default=SCHEMA, required=True)

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
        results = _load(data, where, cls)
        maps = [("sides", results.sides)]
        maps += [(f"files[{i}].modes", f.modes) for i, f in enumerate(results.files)]
        maps += [(f"cases[{i}].modes", c.modes) for i, c in enumerate(results.cases)]
        for at, per_mode in maps:
            extra = sorted(set(per_mode) - set(results.modes))
            if extra:
                raise EvidenceError(f"{where}.{at}: {extra[0]!r} is not one of the run's modes")
        if len({f.suite for f in results.files}) > MAX_SUITES:
            raise EvidenceError(f"{where}.files: more than {MAX_SUITES} suites")
        _once_each(where, "files", [f.path for f in results.files])
        _once_each(where, "cases", [c.key for c in results.cases])
        return results


def _once_each(where: str, at: str, keys) -> None:
    """A file or a case listed twice: which of two outcomes is the run's? Refused."""
    seen = set()
    for i, key in enumerate(keys):
        if key in seen:
            raise EvidenceError(f"{where}.{at}[{i}]: {key[:200]!r} is listed twice")
        seen.add(key)


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
    return Results.from_json(data, path)


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
            results.append(_load(data, where, TestResult))
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
