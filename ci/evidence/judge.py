"""Judging, pure: what each test's outcomes prove (``kind_of``), and whether the run is ok,
failed or void (the bug did not show unmodified); ``rejudge`` does it again from stored ones."""

import fnmatch
import json
import os
from dataclasses import dataclass, replace

from ci.evidence.model import (
    FILE_CASE,
    MODES,
    SCHEMA,
    Case,
    FileResult,
    Kind,
    Outcome,
    ProcessEnd,
    Results,
    TestResult,
    load_object,
)

# This checkout's listed regressions: ci run and the report both judge with them.
REGRESSIONS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "regressions.txt")
FLAG_NOT_REPRODUCED = "does not reproduce the bug"
FAILED = (Outcome.FAIL, Outcome.ERROR)


@dataclass(frozen=True)
class FileRun:
    """One file's process in one mode as it ended (``ci.runner.launch``)."""

    path: str
    mode: str
    end: ProcessEnd  # its ``tests`` counted by the judge
    output: str  # for the log, never parsed
    channel: str = ""  # its result channel: one JSON line per test
    environment: str | None = None  # what its process wrote about itself, raw


def load_patterns(path: str) -> tuple[str, ...]:
    """The listed regressions: one fnmatch pattern a line over ``FILE::Class.test``."""
    with open(path, encoding="utf-8") as handle:
        lines = (line.strip() for line in handle)
        return tuple(line for line in lines if line and not line.startswith("#"))


def listed(patterns, file: str, test: str) -> bool:
    return any(fnmatch.fnmatchcase(f"{file}::{test}", p) for p in patterns)


# (with the change, unmodified, listed in regressions.txt) -> kind, first matching row wins; a
# side is one of SIDE_RESULTS (``side_result``), "*" any, "|" between alternatives.
TRUTH_TABLE = (
    ("fail|missing", "*", "*", Kind.BROKEN),
    ("skip", "*", "*", Kind.SKIPPED),
    ("retry", "*", "*", Kind.FLAKY),  # upstream's retry would hide this failure of the change
    ("unseen", "*", "*", Kind.UNPROVEN),
    ("pass", "skip|missing", "yes", Kind.NOT_REPRODUCED),  # listed: a skip there is no proof
    ("absent", "absent|skip|missing", "*", Kind.SKIPPED),
    ("pass", "absent|skip|missing", "*", Kind.NO_BASELINE),
    ("*", "retry", "*", Kind.MASKED_BY_RETRY),  # upstream's CI would pass the bug
    ("*", "unseen", "*", Kind.UNPROVEN),
    ("*", "fail", "*", Kind.REGRESSION),
    ("*", "pass", "yes", Kind.NOT_REPRODUCED),
    ("*", "pass", "no", Kind.PRESERVATION),
)
SIDE_RESULTS = ("absent", "skip", "missing", "fail", "retry", "unseen", "pass")


def side_result(result: TestResult | None) -> str:
    """One side's result as the truth table reads it."""
    if result is None:
        return "absent"
    if result.outcome in FAILED:
        return "fail"
    if result.outcome != Outcome.PASS:
        return str(result.outcome)  # skip, missing
    return "retry" if result.passed_on_retry else "unseen" if result.unproven else "pass"


def kind_of(outcomes: dict, expected_regression: bool) -> Kind:
    """What one case proves: the first row of ``TRUTH_TABLE`` that matches."""
    row = (side_result(outcomes.get("change")), side_result(outcomes.get("unmodified")))
    row += ("yes" if expected_regression else "no",)
    for *pattern, kind in TRUTH_TABLE:
        if all(w == "*" or have in w.split("|") for w, have in zip(pattern, row, strict=True)):
            return kind
    raise AssertionError(row)


def build(runs, backend: str, sides: dict, suites: dict, patterns=(), **fields) -> Results:
    """The judged run from every (file, mode) run; ``fields`` are the rest of ``Results``. A
    process that failed outside any test fails every test it never reported; when it reported
    some, or no mode reported any, it is also a case of its own (``FILE_CASE``)."""
    modes, by_file, files, cases = tuple(sides), {}, [], []
    for run in runs:
        by_file.setdefault(run.path, {})[run.mode] = _mode_results(run)
    for path, per_mode in by_file.items():
        ran = {m: per_mode[m] for m in modes if m in per_mode}
        tests = list(dict.fromkeys(t for results, _, _ in ran.values() for t in results))
        whole = any(failure and (results or not tests) for results, failure, _ in ran.values())
        file_cases = []
        for test in tests + ([FILE_CASE] if whole else []):
            outcome = {m: _outcome(test, *ran.get(m, ({}, None, None))[:2]) for m in modes}
            expected = listed(patterns, path, test)
            file_cases.append(Case(path, test, kind_of(outcome, expected), outcome))
        ends = {mode: end for mode, (_, _, end) in per_mode.items()}
        files.append(FileResult(path, suites.get(path), ends, file_flags(ends, file_cases)))
        cases += file_cases
    return with_verdict(Results(backend, modes, sides, files, cases, **fields, schema=SCHEMA))


def _outcome(test: str, results: dict, failure) -> TestResult:
    if test in results:
        return results[test]
    if failure is not None:
        return replace(failure, test=test)
    return TestResult(test, Outcome.PASS if test == FILE_CASE else Outcome.MISSING)


def file_flags(ends: dict, cases) -> tuple[str, ...]:
    flags = [f"timed out ({mode})" for mode, end in ends.items() if end.timed_out]
    ran = [c.modes["unmodified"].outcome for c in cases if "unmodified" in c.modes]
    ran = [o for o in ran if o in (Outcome.PASS, *FAILED)]
    if ran and all(o == Outcome.PASS for o in ran):
        flags.append(FLAG_NOT_REPRODUCED)
    return tuple(flags)


# kind -> the reason it fails the run ({n} cases, the sides' labels, their names).
FAILS_THE_RUN = {
    Kind.BROKEN: "{n} fail with {change}: {names}",
    Kind.FLAKY: "{n} flaky with {change}: failed first and passed on a retry ({names})",
    Kind.MASKED_BY_RETRY: "{n} masked by retry on {unmodified}: upstream's CI would pass them "
    "on the unmodified code, failing first and passing on the retry ({names})",
    Kind.UNPROVEN: "{n} not proven: passed, but the runner could not count the calls of their "
    "method, so a retry may hide a failure ({names})",
}
# what the unmodified side did of a listed regression (or of every case) -> why the run is void
VOIDS_THE_RUN = {
    "passed": "the bug did not reproduce: {n} listed regressions pass on {unmodified} ({names}); "
    "is the change already in it?",
    "no verdict": "the bug did not reproduce: {n} listed regressions skip or give no result on "
    "{unmodified} ({names}); ci/regressions.txt says they fail there",
    "nothing ran": "the unmodified side ({unmodified}) gave no verdict: no test ran there",
}
_NO_VERDICT = (None, Outcome.SKIP, Outcome.MISSING)


def with_verdict(results: Results, problems=()) -> Results:
    """``results`` with its verdict and one line per reason; ``problems`` fail it first."""
    cases, labels = results.cases, {m: results.label(m) for m in MODES}

    def said(table: dict, groups: dict) -> list:
        groups = {k: g for k, g in groups.items() if g}
        return [table[k].format(n=len(g), names=_names(g), **labels) for k, g in groups.items()]

    failed = [*problems, *([] if cases else ["no test reported a result"])]
    failed += said(FAILS_THE_RUN, {k: [c for c in cases if c.kind == k] for k in FAILS_THE_RUN})
    late = [f.path for f in results.files if getattr(f.modes.get("change"), "timed_out", False)]
    failed += [f"timed out with {labels['change']}: {', '.join(late)}"] if late else []
    groups: dict = {"passed": [], "no verdict": [], "nothing ran": []}
    if "unmodified" in results.modes and cases:
        base = {c.key: getattr(c.modes.get("unmodified"), "outcome", None) for c in cases}
        for c in cases:
            if c.kind == Kind.NOT_REPRODUCED:
                groups["no verdict" if base[c.key] in _NO_VERDICT else "passed"].append(c)
        if all(o in _NO_VERDICT for o in base.values()):
            groups["nothing ran"] = cases
    void = said(VOIDS_THE_RUN, groups)
    if failed:
        return replace(results, verdict="failed", reasons=(*failed, *void))
    return replace(results, verdict="void" if void else "ok", reasons=tuple(void))


def rejudge(results: Results, patterns) -> Results:
    """The kinds, flags and verdict again from the stored outcomes and ``patterns`` alone; a
    side missing, or a listed regression of a file that ran absent from the cases, fails it."""
    cases = []
    for c in results.cases:  # a mode a results file leaves out counts as missing there
        outcomes = {m: c.modes.get(m, TestResult(c.test, Outcome.MISSING)) for m in results.modes}
        cases.append(replace(c, kind=kind_of(outcomes, listed(patterns, c.file, c.test))))
    files = [replace(f, flags=file_flags(f.modes, [c for c in cases if c.file == f.path]))
             for f in results.files]  # fmt: skip
    problems = [f"no {mode} side: an A/B needs both" for mode in MODES if mode not in results.modes]
    for pattern in patterns:
        ran = any(fnmatch.fnmatchcase(f.path, pattern.split("::", 1)[0]) for f in results.files)
        if ran and not any(listed([pattern], c.file, c.test) for c in cases):
            problems.append(f"the listed regression {pattern} is not among the cases")
    return with_verdict(replace(results, cases=cases, files=files), problems[:5])


def tail(text: str, limit: int = 1500) -> str:
    """The end of ``text``, marked where it was cut."""
    text = (text or "").strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _names(cases, shown: int = 3) -> str:
    names = [c.test for c in cases[:shown]]
    return ", ".join(names) + (f" and {len(cases) - shown} more" if len(cases) > shown else "")


def read_channel(text: str) -> tuple[tuple[TestResult, ...], tuple[str, ...]]:
    """The results on a test process's channel, and one error per line that is not one."""
    results, errors = [], []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"result line {number}"
        try:
            if line.strip():
                results.append(load_object(json.loads(line), where, TestResult))
        except ValueError as exc:  # JSONDecodeError and EvidenceError both are
            errors.append(f"{where}: {exc}"[:300])
        except RecursionError:
            errors.append(f"{where}: nested deeper than the JSON parser allows")
    return tuple(results), tuple(errors)


def _mode_results(run: FileRun) -> tuple[dict, TestResult | None, ProcessEnd]:
    """test -> result of one file in one mode, the process's own failure if any, its end."""
    tests, errors = read_channel(run.channel)
    end = replace(run.end, tests=len(tests))
    results = {}
    for t in tests:
        seen = results.get(t.test)
        if seen is not None:
            # One id twice: the file is broken, and a failure is never overwritten by a pass.
            errors = (*errors, f"{t.test[:200]!r} reported more than once: a broken file")
            if seen.outcome in FAILED:
                continue
        results[t.test] = replace(t, detail=tail(t.detail))
    explained = any(t.outcome in FAILED for t in results.values())
    if end.timed_out or errors or not results or (end.returncode != 0 and not explained):
        why = "timed out" if end.timed_out else f"exited {end.returncode}"
        detail = [f"{run.path} {why} after {len(results)} test results", *errors]
        detail = tail("\n".join(detail) + "\n" + run.output[-3000:])
        return results, TestResult(FILE_CASE, Outcome.ERROR, end.duration_s, detail=detail), end
    return results, None, end
