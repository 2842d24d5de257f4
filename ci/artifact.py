"""Intake of the test job's artifact: untrusted input, checked before the bot renders it.

For validation only. The artifact was written by a job that ran PR code (for a fork, even the
workflow file is the fork's), so the job that holds a write token reads it like any upload
from a stranger: bounded sizes, the results.json schema, test-file paths that are plain
relative ``.py`` paths, bounded names and counts, and a gate record whose commit must be the
one GitHub says the run was for. Text inside (test names, logs) is escaped later by ``render``;
nothing here is executed, imported or used as a path outside the artifact folder.
"""

import json
import math
import os
import re

from ci import results
from ci.collect import BACKENDS

MAX_RESULTS_BYTES = 32 * 1024 * 1024
MAX_GATE_BYTES = 4096
MAX_FILES = 1000
MAX_CASES = 10000
MAX_NAME_CHARS = 500
# One commit status per suite: a results.json naming thousands would make the bot spend the
# repository's API rate limit on statuses. Upstream's suites are a few dozen names like
# ``base-b-test-1-gpu-small``.
MAX_SUITES = 50
_SUITE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_LINE = 10**6  # a test's def line, for its annotation; GitHub refuses absurd ones
MAX_MIB = 10**7  # a measured peak or cap beyond 10 TiB is not a measurement
_TEST_PATH = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_./-]{1,300}\.py$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
GATE_STATES = ("run", "missing-label", "stale-label")


class ArtifactError(ValueError):
    """The artifact is not what the test job writes; the message names the file and field."""


def load_results(folder: str) -> results.Results:
    path = os.path.join(folder, "results.json")
    _check_size(path, MAX_RESULTS_BYTES)
    try:
        model = results.load(path)
    except results.ResultsError as exc:
        raise ArtifactError(str(exc)) from None
    except (UnicodeDecodeError, RecursionError) as exc:  # not UTF-8; nested past the parser
        raise ArtifactError(f"{path}: not readable JSON: {type(exc).__name__}") from None
    if model.backend not in BACKENDS:
        raise ArtifactError(f"{path}.backend: {model.backend!r} is not one of {BACKENDS}")
    if len(model.files) > MAX_FILES or len(model.cases) > MAX_CASES:
        raise ArtifactError(
            f"{path}: {len(model.files)} files, {len(model.cases)} cases; at most "
            f"{MAX_FILES} and {MAX_CASES}"
        )
    for i, file in enumerate(model.files):
        _check_test_path(file.path, f"{path}.files[{i}].path")
        if file.suite is not None and not _SUITE.match(file.suite):
            raise ArtifactError(f"{path}.files[{i}].suite: {file.suite[:80]!r} is not a suite name")
    suites = {file.suite for file in model.files}
    if len(suites) > MAX_SUITES:
        raise ArtifactError(f"{path}: {len(suites)} suites; at most {MAX_SUITES}")
    for i, case in enumerate(model.cases):
        where = f"{path}.cases[{i}]"
        _check_test_path(case.file, f"{where}.file")
        if len(case.case_id) > MAX_NAME_CHARS:
            raise ArtifactError(f"{where}.case_id: {len(case.case_id)} > {MAX_NAME_CHARS} chars")
        if case.line is not None and case.line > MAX_LINE:
            raise ArtifactError(f"{where}.line: {case.line} > {MAX_LINE}")
        for mode, outcome in case.modes.items():
            for field in ("peak_mib", "budget_mib"):
                value = getattr(outcome, field)
                if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_MIB):
                    raise ArtifactError(f"{where}.modes.{mode}.{field}: {value!r} is not in MiB")
    return model


def has_results(folder: str | None) -> bool:
    return bool(folder) and os.path.isfile(os.path.join(folder, "results.json"))


def load_gate(path: str) -> dict:
    """The gate job's record: which PR and head commit the run was for, and its decision."""
    _check_size(path, MAX_GATE_BYTES)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not JSON: {exc}") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ArtifactError(f"{path}: not readable JSON: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: expected a JSON object")
    for key in ("run", "fork"):
        if not isinstance(data.get(key), bool):
            raise ArtifactError(f"{path}.{key}: expected true or false")
    if data.get("state") not in GATE_STATES:
        raise ArtifactError(f"{path}.state: {data.get('state')!r} is not one of {GATE_STATES}")
    pr = data.get("pr")
    if not isinstance(pr, int) or isinstance(pr, bool) or not 0 < pr < 10**9:
        raise ArtifactError(f"{path}.pr: expected a pull request number, got {pr!r}")
    if not isinstance(data.get("head_sha"), str) or not _SHA.match(data["head_sha"]):
        raise ArtifactError(f"{path}.head_sha: expected a 40-hex commit")
    return {key: data[key] for key in ("run", "fork", "state", "pr", "head_sha")}


def _check_size(path: str, limit: int) -> None:
    try:
        size = os.lstat(path).st_size
    except FileNotFoundError:
        raise ArtifactError(f"{path}: not found in the artifact") from None
    if os.path.islink(path) or not os.path.isfile(path):
        raise ArtifactError(f"{path}: not a plain file")
    if size > limit:
        raise ArtifactError(f"{path}: {size} bytes; at most {limit}")


def _check_test_path(value: str, where: str) -> None:
    if not _TEST_PATH.match(value):
        raise ArtifactError(f"{where}: {value[:80]!r} is not a relative test-file path")
