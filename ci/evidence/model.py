"""The evidence model: one test in one process, up to a whole A/B run, as every stage reads it.

A results folder is untrusted input in the fork path, so loading it is the one place that checks
every shape and bound (each field through the check its metadata names); it raises
``EvidenceError`` naming the field, and never runs, judges or renders anything.
"""

import enum
import json
import os
import re
from dataclasses import asdict, dataclass

from ci.evidence import bounds
from ci.evidence.bounds import EvidenceError

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
# Each is matched whole (fullmatch): a trailing newline is not part of a name.
_SUITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_TEST_PATH = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_./-]{1,300}\.py")
_PICTURE = re.compile(r"pictures/[A-Za-z0-9_.-]{1,130}\.png")
_LOG = re.compile(r"logs/[A-Za-z0-9_.-]+")
_HEX = re.compile(r"[0-9a-f]{7,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


# ---- checks: (value, where, *args) -> the value as the model holds it ----


def _schema(value, where) -> int:
    if value != SCHEMA:
        raise EvidenceError(f"{where}: {value!r:.40} is not the supported {SCHEMA}")
    return SCHEMA


def _per_mode(value, where, cls) -> dict:
    """mode -> ``cls``; ``Results`` then checks the modes are the run's."""
    if not isinstance(value, dict):
        raise EvidenceError(f"{where}: expected an object of modes")
    for mode in value:
        if mode not in MODES:
            raise EvidenceError(f"{where}: {str(mode)[:40]!r} is not one of the run's modes")
    return {mode: bounds.load_object(item, f"{where}.{mode}", cls) for mode, item in value.items()}


def _run_modes(value, where) -> tuple:
    modes = bounds.list_of(value, where, len(MODES), bounds.one_of, MODES)
    if not modes or len(set(modes)) != len(modes):
        raise EvidenceError(f"{where}: expected some of {MODES}")
    return modes


def _object(value, where) -> dict:
    if not isinstance(value, dict) or bounds.nesting(value) > MAX_NESTING:
        raise EvidenceError(f"{where}: expected an object nested at most {MAX_NESTING}")
    return value


def _pictures(value, where) -> dict:
    value = value or {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_CASES
        or not all(
            isinstance(k, str) and isinstance(v, str) and _PICTURE.fullmatch(v)
            for k, v in value.items()
        )
    ):
        raise EvidenceError(f"{where}: expected case -> pictures/NAME.png")
    return value


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
    # passed where the runner could not count the calls of its method: a retry may hide a failure
    UNPROVEN = "unproven"


@dataclass(frozen=True)
class TestResult:
    """One test as it ended in one process; also one line of the runner's result channel."""

    __test__ = False  # not a pytest test class

    # "Class.test_name", "test_function[param]", or "Class.setUpClass"
    test: str = bounds.checked(bounds.text, MAX_NAME_CHARS)
    outcome: Outcome = bounds.checked(bounds.one_of, Outcome)
    duration_s: float | None = bounds.checked(bounds.number, MAX_S, default=None)
    # CUDA memory allocated at the test's peak (the runner's)
    peak_mib: float | None = bounds.checked(bounds.number, MAX_MIB, default=None)
    # the skip reason, or the end of the failure's traceback (a retried pass: the first's)
    detail: str = bounds.checked(bounds.text, MAX_TEXT_CHARS, default="")
    # each call of the test method in order, where the runner saw them; () where it did not
    attempts: tuple[Outcome, ...] = bounds.checked(
        bounds.list_of,
        MAX_ATTEMPTS,
        bounds.one_of,
        (Outcome.PASS, Outcome.FAIL, Outcome.ERROR),
        default=(),
    )
    # passed, yet the runner saw no call of its method (a run outside its hooks): not proven
    unobserved: bool = bounds.checked(bounds.flag, default=False)

    @property
    def passed_on_retry(self) -> bool:
        """Passed in the end, its last attempt after one that failed: no pass at all to
        upstream (an expected failure's attempts end in the failure it expects)."""
        attempts = self.attempts
        return (
            self.outcome == Outcome.PASS
            and bool(attempts)
            and attempts[-1] == Outcome.PASS
            and any(a != Outcome.PASS for a in attempts)
        )

    @property
    def unproven(self) -> bool:
        """A pass whose attempts the runner could not count."""
        return self.outcome == Outcome.PASS and self.unobserved


@dataclass(frozen=True)
class ProcessEnd:
    """How one file's process ended in one mode."""

    # None when it was killed at its timeout
    returncode: int | None = bounds.checked(bounds.integer_in, -(2**31), 2**31 - 1, nullable=True)
    duration_s: float = bounds.checked(bounds.number, MAX_S)
    timed_out: bool = bounds.checked(bounds.flag, default=False)
    tests: int = bounds.checked(bounds.integer_in, 0, MAX_CASES, default=0)  # results it reported
    log: str | None = bounds.checked(bounds.matching, _LOG, "logs/NAME", default=None)


@dataclass(frozen=True)
class Side:
    """What one mode ran: the sglang it imported and whether this change was applied."""

    # "sglang 0.5.23", "sglang 0.5.23 + this change", "sglang 0.5.23 @ 1a2b3c4d5e6f"
    label: str = bounds.checked(bounds.text, 200)
    # what the test process imported
    sglang: str | None = bounds.checked(bounds.text, 100, default=None)
    # a source tree first on PYTHONPATH, or None: the installed one
    tree: str | None = bounds.checked(bounds.text, 1000, default=None)
    # that tree's git commit, read by ci run itself
    commit: str | None = bounds.checked(bounds.matching, _HEX, "a hex commit id", default=None)
    overlay: bool = bounds.checked(bounds.flag, default=False)  # the runtime overlay on in it


@dataclass(frozen=True)
class FixId:
    """One independent fix of that series (``tools.series.seriesdir.Fix``): its own id and patches."""

    id: str = bounds.checked(bounds.matching, _SHA256, "a sha256")
    patches: tuple[str, ...] = bounds.checked(bounds.list_of, 100, bounds.text, 200)


@dataclass(frozen=True)
class SeriesId:
    """The patch series the evidence was made with (``tools.series.seriesdir``): pr-body checks that
    it holds the fix it describes."""

    id: str = bounds.checked(bounds.matching, _SHA256, "a sha256")
    release: str = bounds.checked(bounds.text, 100)
    patches: tuple[str, ...] = bounds.checked(bounds.list_of, 100, bounds.text, 200, default=())
    # absent from results made before the series had fixes of its own: one fix, the series
    fixes: tuple[FixId, ...] = bounds.checked(
        bounds.list_of, 100, bounds.load_object, FixId, default=()
    )


@dataclass(frozen=True)
class Case:
    """One test across the modes, judged."""

    file: str = bounds.checked(bounds.matching, _TEST_PATH, "a relative test-file path")
    test: str = bounds.checked(bounds.text, MAX_NAME_CHARS)
    kind: Kind = bounds.checked(bounds.one_of, Kind)
    modes: dict = bounds.checked(_per_mode, TestResult)  # mode -> TestResult
    # its ``def`` in ``file``, for check-run annotations
    line: int | None = bounds.checked(bounds.integer_in, 1, MAX_LINE, default=None)

    @property
    def key(self) -> str:
        return f"{self.file}::{self.test}"


@dataclass(frozen=True)
class FileResult:
    """One test file across the modes."""

    path: str = bounds.checked(bounds.matching, _TEST_PATH, "a relative test-file path")
    suite: str | None = bounds.checked(bounds.matching, _SUITE, "a suite name", nullable=True)
    modes: dict = bounds.checked(_per_mode, ProcessEnd)  # mode -> ProcessEnd
    flags: tuple[str, ...] = bounds.checked(bounds.list_of, 20, bounds.text, 300, default=())


@dataclass(frozen=True)
class Results:
    """One A/B run, judged: every stage after the judge reads it and changes it by ``replace``."""

    backend: str = bounds.checked(bounds.one_of, BACKENDS)
    modes: tuple[str, ...] = bounds.checked(_run_modes)
    sides: dict = bounds.checked(_per_mode, Side)  # mode -> Side
    files: tuple[FileResult, ...] = bounds.checked(
        bounds.list_of, MAX_FILES, bounds.load_object, FileResult
    )
    cases: tuple[Case, ...] = bounds.checked(bounds.list_of, MAX_CASES, bounds.load_object, Case)
    # ``ci.evidence.judge.verdict``, with one line per reason it is not ok
    verdict: str = bounds.checked(bounds.one_of, VERDICTS, default="ok")
    reasons: tuple[str, ...] = bounds.checked(bounds.list_of, 20, bounds.text, 500, default=())
    # what was asked for, as typed; the machine and per-mode process records
    selection: dict = bounds.checked(_object, default_factory=dict)
    environment: dict = bounds.checked(_object, default_factory=dict)
    series: SeriesId | None = bounds.checked(bounds.load_object, SeriesId, default=None)
    pictures: dict = bounds.checked(_pictures, default_factory=dict)  # case -> pictures/NAME.png
    schema: int = bounds.checked(_schema, default=SCHEMA, required=True)

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
        results = bounds.load_object(data, where, cls)
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


def check_test_path(path: str, where: str) -> str:
    """``path`` as the model takes a test file's: relative, ASCII letters, digits and ``_ . / -``
    only, ending ``.py``; EvidenceError otherwise (``ci run`` refuses what a report would)."""
    return bounds.matching(path, where, _TEST_PATH, "a test-file path the evidence model takes")


def checked(results: "Results") -> "Results":
    """``results`` as ``load`` would read them back from ``dumps``; EvidenceError where a
    report would refuse them (``ci run`` checks its own before it calls a run ok)."""
    return Results.from_json(json.loads(dumps(results)), "results.json")


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


def dumps(results: Results) -> bytes:
    """results.json's bytes (the same for the same results: keys sorted, ASCII only)."""
    text = json.dumps(results.to_json(), indent=2, sort_keys=True, ensure_ascii=True)
    return (text + "\n").encode("ascii")


def save(results: Results, folder: str) -> None:
    """results.json written into ``folder``."""
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(dumps(results))


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
            if bounds.nesting(data) > MAX_NESTING:
                raise EvidenceError(f"{where}: nested deeper than {MAX_NESTING} levels")
            results.append(bounds.load_object(data, where, TestResult))
        except ValueError as exc:  # JSONDecodeError and EvidenceError both are
            errors.append(f"{where}: {exc}"[:300])
        except RecursionError:
            errors.append(f"{where}: nested deeper than the JSON parser allows")
    return tuple(results), tuple(errors)
