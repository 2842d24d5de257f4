"""Judging, pure and without I/O: what each test's outcomes in the two modes prove (``kind_of``,
the truth table), and whether the run is ok, failed (something fails with the change) or void
(the bug did not show on the unmodified side); ``rejudge`` does it again from stored outcomes.
"""

import fnmatch
import json
import os
from dataclasses import dataclass, replace

from ci.evidence.model import (
    FILE_CASE,
    MODES,
    Case,
    FileResult,
    Kind,
    Outcome,
    ProcessEnd,
    Results,
    TestResult,
    read_channel,
)

# The listed regressions of this checkout: ci run judges with them, and so does the report,
# which never takes the kinds an artifact claims.
REGRESSIONS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "regressions.txt"
)
EXCERPT_CHARS = 1500
FLAG_NOT_REPRODUCED = "does not reproduce the bug"
FAILED = (Outcome.FAIL, Outcome.ERROR)


@dataclass(frozen=True)
class FileRun:
    """One file's process in one mode as it ended (``ci.runner.launch``): what the judge reads."""

    path: str
    mode: str
    returncode: int | None
    duration_s: float
    timed_out: bool
    output: str  # for the log, never parsed
    channel: str = ""  # what the file wrote on its result channel: one JSON line per test
    # what its process wrote about itself (file_process), raw; None: made without one (samples)
    environment: str | None = None
    log: str | None = None  # logs/NAME, once written


def load_patterns(path: str) -> tuple[str, ...]:
    """The listed regressions: one fnmatch pattern a line over ``FILE::Class.test``."""
    if not os.path.exists(path):
        return ()
    with open(path, encoding="utf-8") as handle:
        lines = (line.strip() for line in handle)
        return tuple(line for line in lines if line and not line.startswith("#"))


def listed(patterns, file: str, test: str) -> bool:
    return any(fnmatch.fnmatchcase(f"{file}::{test}", p) for p in patterns)


def kind_of(outcomes: dict, expected_regression: bool) -> Kind:
    """What one case proves from its outcome per mode."""
    change, base = outcomes.get("change"), outcomes.get("unmodified")
    if change is not None:
        if change.outcome in (*FAILED, Outcome.MISSING):
            return Kind.BROKEN
        if change.outcome == Outcome.SKIP:
            return Kind.SKIPPED
        if change.passed_on_retry:
            return Kind.FLAKY
        if change.unproven:
            return Kind.UNPROVEN
    if base is not None and base.outcome in (Outcome.SKIP, Outcome.MISSING) and expected_regression:
        # ci/regressions.txt says it must fail unmodified: a skip or no result there is no proof
        return Kind.NOT_REPRODUCED if change is not None else Kind.SKIPPED
    if base is None or base.outcome in (Outcome.SKIP, Outcome.MISSING):
        return Kind.NO_BASELINE if change is not None else Kind.SKIPPED
    if base.passed_on_retry:
        return Kind.MASKED_BY_RETRY
    if base.unproven:
        return Kind.UNPROVEN
    if base.outcome in FAILED:
        return Kind.REGRESSION
    return Kind.NOT_REPRODUCED if expected_regression else Kind.PRESERVATION


def _base_outcome(case):
    base = case.modes.get("unmodified")
    return None if base is None else base.outcome


def judge(runs, suites: dict, modes, patterns=()) -> tuple[list, list]:
    """Files and cases from every (file, mode) run; ``suites``: path -> suite.

    A process that failed outside any test (an import error, a crash, a timeout, an exit no
    test explains, a bad channel line) fails every test it never reported; when it reported
    some, or no mode reported any test, it is also a case of its own (``FILE_CASE``)."""
    by_file: dict = {}
    for run in runs:
        by_file.setdefault(run.path, {})[run.mode] = _mode_results(run)
    files, cases = [], []
    for path, per_mode in by_file.items():
        ran = {m: per_mode[m][:2] for m in modes if m in per_mode}
        tests = list(dict.fromkeys(t for m in modes for t in ran.get(m, ({}, None))[0]))
        whole = any(failure and (results or not tests) for results, failure in ran.values())
        file_cases = []
        for test in tests + ([FILE_CASE] if whole else []):
            outcome = {m: _outcome(test, *ran.get(m, ({}, None))) for m in modes}
            expected = listed(patterns, path, test)
            file_cases.append(Case(path, test, kind_of(outcome, expected), outcome))
        ends = {mode: end for mode, (_, _, end) in per_mode.items()}
        files.append(FileResult(path, suites.get(path), ends, file_flags(ends, file_cases)))
        cases += file_cases
    return files, cases


def _outcome(test: str, results: dict, failure) -> TestResult:
    if test in results:
        return results[test]
    if failure is not None:
        return replace(failure, test=test) if test != FILE_CASE else failure
    return TestResult(test, Outcome.PASS if test == FILE_CASE else Outcome.MISSING)


def file_flags(ends: dict, cases) -> tuple[str, ...]:
    flags = [f"timed out ({mode})" for mode, end in ends.items() if end.timed_out]
    ran = [c.modes["unmodified"].outcome for c in cases if "unmodified" in c.modes]
    ran = [o for o in ran if o in (Outcome.PASS, *FAILED)]
    if ran and all(o == Outcome.PASS for o in ran):
        flags.append(FLAG_NOT_REPRODUCED)
    return tuple(flags)


def with_verdict(results: Results, problems=()) -> Results:
    """``results`` with its verdict ("ok", "failed" or "void") and one line per reason;
    ``problems`` (``record_problems``) fail it first."""
    modes, cases = results.modes, results.cases
    failed, void = list(problems), []
    if not cases:
        failed.append("no test reported a result")
    # Only the change side breaks a case or times a file out against the run.
    broken = [c for c in cases if c.kind == Kind.BROKEN]
    if broken:
        failed.append(f"{len(broken)} fail with {results.label('change')}: {_names(broken)}")
    flaky = [c for c in cases if c.kind == Kind.FLAKY]
    if flaky:
        failed.append(
            f"{len(flaky)} flaky with {results.label('change')}: failed first and passed on "
            f"a retry ({_names(flaky)})"
        )
    masked = [c for c in cases if c.kind == Kind.MASKED_BY_RETRY]
    if masked:
        failed.append(
            f"{len(masked)} masked by retry on {results.label('unmodified')}: upstream's CI "
            f"would pass them on the unmodified code, failing first and passing on the retry "
            f"({_names(masked)})"
        )
    unseen = [c for c in cases if c.kind == Kind.UNPROVEN]
    if unseen:
        failed.append(
            f"{len(unseen)} not proven: passed, but the runner could not count the calls of "
            f"their method, so a retry may hide a failure ({_names(unseen)})"
        )
    late = [f.path for f in results.files if getattr(f.modes.get("change"), "timed_out", False)]
    if late:
        failed.append(f"timed out with {results.label('change')}: {', '.join(late)}")
    if "unmodified" in modes and cases:
        base = results.label("unmodified")
        missed = [c for c in cases if c.kind == Kind.NOT_REPRODUCED]
        passed = [c for c in missed if _base_outcome(c) not in (Outcome.SKIP, Outcome.MISSING)]
        unproven = [c for c in missed if c not in passed]
        if passed:
            void.append(
                f"the bug did not reproduce: {len(passed)} listed regressions pass on {base} "
                f"({_names(passed)}); is the change already in it?"
            )
        if unproven:
            void.append(
                f"the bug did not reproduce: {len(unproven)} listed regressions skip or give no "
                f"result on {base} ({_names(unproven)}); ci/regressions.txt says they fail there"
            )
        ran = [c.modes.get("unmodified") for c in cases]
        verdicts = [r for r in ran if r is not None and r.outcome in (Outcome.PASS, *FAILED)]
        if not verdicts:
            void.append(f"the unmodified side ({base}) gave no verdict: no test ran there")
    if failed:
        return replace(results, verdict="failed", reasons=(*failed, *void))
    return replace(results, verdict="void" if void else "ok", reasons=tuple(void))


def build(runs, backend: str, sides: dict, suites: dict, patterns=(), **fields) -> Results:
    """The judged run: files and cases from ``runs``, the modes ``sides`` names, the verdict;
    ``fields`` are the rest of ``Results`` (selection, environment, series)."""
    files, cases = judge(runs, suites, tuple(sides), patterns)
    return with_verdict(Results(backend, tuple(sides), sides, files, cases, **fields))


def rejudge(results: Results, patterns) -> Results:
    """The kinds, flags and verdict again, from the stored outcomes and ``patterns`` alone."""

    def outcomes(case):  # a mode a results file leaves out counts as missing there
        return {m: case.modes.get(m, TestResult(case.test, Outcome.MISSING)) for m in results.modes}

    cases = tuple(
        replace(c, kind=kind_of(outcomes(c), listed(patterns, c.file, c.test)))
        for c in results.cases
    )
    files = tuple(
        replace(f, flags=file_flags(f.modes, [c for c in cases if c.file == f.path]))
        for f in results.files
    )
    problems = record_problems(results, patterns)
    return with_verdict(replace(results, cases=cases, files=files), problems)


MAX_PROBLEMS = 5  # lines of them in the verdict's reasons; the rest are counted


def record_problems(results: Results, patterns) -> list[str]:
    """Where a stored record is not one ``judge`` makes (the report's check of an artifact): both
    sides present; a process record for every case's file; each file's process on each side, as
    it ended, explained by its cases (an exit other than 0, a time-out or no test reported means
    some case of the file fails there; a clean process reports at least as many tests as its
    cases claim); every listed regression of a file that ran present as a case. One line each,
    a few at most."""
    problems = [f"no {mode} side: an A/B needs both" for mode in MODES if mode not in results.modes]
    by_file: dict = {}
    for case in results.cases:
        by_file.setdefault(case.file, []).append(case)
    for file in results.files:
        cases = by_file.get(file.path, [])
        for mode in results.modes:
            problem = _process_problem(file, cases, mode, results.label(mode))
            if problem:
                problems.append(problem)
    ran = {f.path for f in results.files}
    problems += [
        f"{path}: cases without a record of its process" for path in by_file if path not in ran
    ]
    keys = [c.key for c in results.cases]
    for pattern in patterns:
        path = pattern.split("::", 1)[0]
        listed_file = any(fnmatch.fnmatchcase(p, path) for p in ran)
        if listed_file and not any(fnmatch.fnmatchcase(key, pattern) for key in keys):
            problems.append(f"the listed regression {pattern} is not among the cases")
    if len(problems) > MAX_PROBLEMS:
        more = len(problems) - MAX_PROBLEMS + 1
        problems = [*problems[: MAX_PROBLEMS - 1], f"and {more} more mismatches in the record"]
    return problems


def _process_problem(file: FileResult, cases, mode: str, label: str) -> str | None:
    end = file.modes.get(mode)
    if end is None:
        return f"{file.path}: no record of its process on {label}"
    outcomes = {c.test: c.modes[mode].outcome for c in cases if mode in c.modes}
    failing = [test for test, outcome in outcomes.items() if outcome in FAILED]
    if end.timed_out or end.returncode != 0 or end.tests == 0:
        why = (
            "timed out" if end.timed_out
            else f"exited {end.returncode}" if end.returncode != 0
            else "reported no test"
        )  # fmt: skip
        if not failing:
            return f"{file.path} {why} on {label}, yet no case of it fails there"
        return None
    claimed = [t for t, o in outcomes.items() if t != FILE_CASE and o != Outcome.MISSING]
    if FILE_CASE not in failing and len(claimed) > end.tests:
        return (
            f"{file.path}: {len(claimed)} cases claim a result on {label}; it reported {end.tests}"
        )
    return None


def tail(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _names(cases, shown: int = 3) -> str:
    names = [c.test for c in cases[:shown]]
    return ", ".join(names) + (f" and {len(cases) - shown} more" if len(cases) > shown else "")


def _unwritten(run: FileRun, reported: int) -> tuple[str, ...]:
    """Why a file's channel holds results the runner did not write, if it does: more lines than
    its process's record says the runner sent (the file wrote on the channel itself), or results
    from a process that exited 0 without the record (``os._exit``: nothing vouches for them).
    One that crashed or was killed is broken anyway, and keeps the results it sent."""
    if run.environment is None or not reported:
        return ()
    try:
        written = json.loads(run.environment).get("results")  # at most 1 MiB: launch's bound
    except (ValueError, RecursionError, AttributeError):
        written = None
    if not isinstance(written, int) or isinstance(written, bool) or written < 0:
        if run.returncode != 0:  # crashed or killed: broken anyway, its results kept as sent
            return ()
        return (
            f"{reported} results, and its process ended without the runner's record of how "
            "many it wrote: results nothing vouches for (a broken file)",
        )
    if reported > written:
        return (
            f"{reported} results on its channel; the runner wrote {written}: more results than "
            "tests it ran (a broken file)",
        )
    return ()


def _mode_results(run: FileRun) -> tuple[dict, TestResult | None, ProcessEnd]:
    """test -> result for one file in one mode (its channel parsed), the process's own failure,
    if any, and how it ended."""
    tests, errors = read_channel(run.channel)
    unvouched = _unwritten(run, len(tests))
    errors = (*errors, *unvouched)
    end = ProcessEnd(run.returncode, run.duration_s, run.timed_out, len(tests), run.log)
    results = {}
    for t in tests:
        seen = results.get(t.test)
        if seen is not None:
            # One id twice (two classes of one name, a replayed line): the file is broken, and
            # a failed report of the id is never overwritten by a later pass.
            errors = (*errors, f"{t.test[:200]!r} reported more than once: a broken file")
            if seen.outcome in FAILED:
                continue
        results[t.test] = replace(t, detail=tail(t.detail))
    if unvouched:  # which of them the file wrote itself cannot be told: none is a pass
        results = {
            test: r
            if r.outcome in FAILED
            else replace(r, outcome=Outcome.ERROR, detail=unvouched[0])
            for test, r in results.items()
        }
    explained = any(t.outcome in FAILED for t in results.values())
    if end.timed_out or errors or not results or (end.returncode != 0 and not explained):
        why = "timed out" if end.timed_out else f"exited {end.returncode}"
        detail = [f"{run.path} {why} after {len(results)} test results", *errors]
        detail = tail("\n".join(detail) + "\n" + run.output[-3000:])
        failure = TestResult(FILE_CASE, Outcome.ERROR, end.duration_s, detail=detail)
        return results, failure, end
    return results, None, end
