"""Turn the output of ``python FILE -v`` (unittest, verbosity 2) into per-case records.

For reading a finished log, not for running anything. Besides unittest's own lines it picks up
the ``DSV4_WORKSPACE_CASE {json}`` evidence lines the registered workspace test prints, and it
attributes each one to the unittest case that was running when it was printed. Durations come
from the arrival times of output chunks, because unittest -v prints no per-test timings before
Python 3.12 and flushes the description before each test starts.
"""

import bisect
import json
import re
from dataclasses import dataclass, field

EVIDENCE_PREFIX = "DSV4_WORKSPACE_CASE "
EXCERPT_CHARS = 1500

# "name (module.Class.name) ... " (3.11+) or "name (module.Class) ... " (3.10), optionally with a
# docstring line between the id and the dots.
_DESCRIPTION = re.compile(r"^(?P<name>\S+) \((?P<id>[^)\s]+)\)(?:\n[^\n]*?)? \.\.\. ", re.M)
_OUTCOME = re.compile(
    r"^(?P<word>ok|FAIL|ERROR|expected failure|unexpected success|skipped(?: (?P<why>.*))?)$",
    re.M,
)
_SECTION_END = re.compile(r"^(?:={70}|-{70})$", re.M)
_DETAIL = re.compile(
    r"^={70}\n(?P<kind>FAIL|ERROR|UNEXPECTED SUCCESS): (?P<name>\S+) "
    r"\((?P<id>[^)\s]+)\)\n-{70}\n",
    re.M,
)
_OUTCOMES = {
    "ok": "pass",
    "FAIL": "fail",
    "ERROR": "error",
    "expected failure": "pass",
    "unexpected success": "fail",
    "skipped": "skip",
}


@dataclass
class CaseLog:
    """One unittest case as seen in one run."""

    case_id: str  # "Class.test_name", stable across modes and Python versions
    outcome: str  # pass | fail | error | skip
    duration_s: float | None = None
    skip_reason: str | None = None
    evidence: list[dict] = field(default_factory=list)
    excerpt: str = ""


@dataclass
class FileLog:
    cases: list[CaseLog]
    ran: int | None  # the "Ran N tests" count, None when the run never got there
    summary: str | None  # "OK", "FAILED (failures=4)", ...


def case_id(name: str, dotted_id: str) -> str:
    """``Class.name`` from unittest's ``module.Class.name`` (3.11) or ``module.Class`` (3.10)."""
    parts = dotted_id.split(".")
    if parts[-1] == name and len(parts) >= 2:
        parts = parts[:-1]
    return f"{parts[-1]}.{name}"


def parse(text: str, chunk_times: list[tuple[int, float]] | None = None) -> FileLog:
    """Parse one file's merged stdout+stderr.

    ``chunk_times`` is ``[(char_offset, seconds), ...]`` in offset order: when the chunk starting
    at that offset arrived. Without it durations are None.
    """
    starts = list(_DESCRIPTION.finditer(text))
    tail_start = _first_section_after(text, starts[-1].end() if starts else 0)
    details = _failure_details(text[tail_start:])
    cases = []
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else tail_start
        segment = text[match.end() : end]
        outcome, why, outcome_at = _outcome(segment)
        name, cid = match["name"], case_id(match["name"], match["id"])
        log = CaseLog(case_id=cid, outcome=outcome, skip_reason=why)
        log.evidence = _evidence(segment)
        if chunk_times and outcome_at is not None:
            begin = _time_at(chunk_times, match.end() - 1)
            log.duration_s = round(_time_at(chunk_times, match.end() + outcome_at) - begin, 3)
        body = details.get(cid) or details.get(name) or ""
        log.excerpt = _excerpt(segment.strip() + ("\n" + body if body else ""))
        cases.append(log)
    ran = re.search(r"^Ran (\d+) tests? in ", text, re.M)
    summary = re.search(r"^(OK(?: \(.*\))?|FAILED \(.*\))$", text, re.M)
    return FileLog(cases, int(ran[1]) if ran else None, summary[1] if summary else None)


def tail(text: str, limit: int = EXCERPT_CHARS) -> str:
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _excerpt(text: str) -> str:
    return tail(text.strip())


def _outcome(segment: str) -> tuple[str, str | None, int | None]:
    # The test's own output can come before the word, so the last outcome line wins.
    found = list(_OUTCOME.finditer(segment))
    if not found:
        return "error", None, None  # the process died inside this case
    last = found[-1]
    word = last["word"].split(" ")[0] if last["word"].startswith("skipped") else last["word"]
    why = last["why"].strip("'\"") if last["why"] else None
    return _OUTCOMES[word], why, last.start()


def _evidence(segment: str) -> list[dict]:
    records = []
    for line in segment.splitlines():
        at = line.find(EVIDENCE_PREFIX)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(EVIDENCE_PREFIX) :])
        except json.JSONDecodeError:
            continue  # a truncated line is not evidence
        if isinstance(record, dict):
            records.append(record)
    return records


def _first_section_after(text: str, offset: int) -> int:
    match = _SECTION_END.search(text, offset)
    return match.start() if match else len(text)


def _failure_details(tail_text: str) -> dict[str, str]:
    """Traceback text of each FAIL/ERROR section, keyed by case id (and by bare name)."""
    found = list(_DETAIL.finditer(tail_text))
    details = {}
    for index, match in enumerate(found):
        end = found[index + 1].start() if index + 1 < len(found) else len(tail_text)
        body = tail_text[match.end() : end]
        body = re.split(r"^-{70}\nRan ", body, maxsplit=1, flags=re.M)[0].strip()
        details[case_id(match["name"], match["id"])] = body
        details.setdefault(match["name"], body)
    return details


def _time_at(chunk_times: list[tuple[int, float]], offset: int) -> float:
    offsets = [o for o, _ in chunk_times]
    index = max(bisect.bisect_right(offsets, offset) - 1, 0)
    return chunk_times[index][1]
