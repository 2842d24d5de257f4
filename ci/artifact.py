"""Intake of the test job's artifact: untrusted input, checked before the bot renders it.

For validation only. The artifact was written by a job that ran PR code (for a fork, even the
workflow file is the fork's), so the job that holds a write token reads it like any upload
from a stranger: bounded sizes, the results.json schema, test-file paths that are plain
relative ``.py`` paths, bounded names and counts, integers a float can hold, only the run's
own modes. The kinds and file flags it claims are not read: ``results.rejudge`` judges the raw
outcomes again with this checkout's rules. Text inside (test names, logs) is escaped later by
``render``; every value quoted in an error message is ``repr``'d, so no line of the report's log
can start a workflow command. Nothing here is executed, imported or used as a path outside the
artifact folder.
"""

import json
import math
import os
import re
import zipfile
import zlib

from ci import results
from ci.collect import BACKENDS
from ci.runner import MODES

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
MAX_DIGITS = 15  # integers: a line number, a return code, a count; 10**400 is none of them
# What ``ci run`` records per file and mode; other keys are kept but never read.
_FILE_MODE = {
    "returncode": (int, type(None)),
    "duration_s": (int, float, type(None)),
    "timed_out": (bool,),
    "ran": (int,),
    "log": (str, type(None)),
}


class ArtifactError(ValueError):
    """The artifact is not what the test job writes; the message names the file and field."""


def load_results(folder: str) -> results.Results:
    """The artifact's results.json as a model, judged again here; ArtifactError otherwise."""
    path = os.path.join(folder, "results.json")
    _check_size(path, MAX_RESULTS_BYTES)
    data = _parse(path)
    _check_modes(data, path)
    try:
        model = results.Results.from_json(data, path)
    except results.ResultsError as exc:
        raise ArtifactError(str(exc)) from None
    _check_model(model, path)
    return results.rejudge(model)


def _parse(path: str):
    """JSON whose integers a float can hold (10**400 is no line number, return code or count).
    NaN and Infinity parse: evidence records may carry them, peaks and caps are checked below."""

    def integer(text: str) -> int:
        if len(text.lstrip("-")) > MAX_DIGITS:
            raise ArtifactError(f"{path}: an integer of {len(text)} digits")
        return int(text)

    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle, parse_int=integer)
    except json.JSONDecodeError as exc:  # its message is a position, never the input
        raise ArtifactError(f"{path}: not JSON: {exc}") from None
    except (UnicodeDecodeError, RecursionError) as exc:  # not UTF-8; nested past the parser
        raise ArtifactError(f"{path}: not readable JSON: {type(exc).__name__}") from None


def _check_modes(data, path: str) -> None:
    """Mode keys and per-file mode records, which the model keeps as plain dicts."""
    if not isinstance(data, dict):
        return  # the model's loader names what is wrong
    modes = data.get("modes")
    if not isinstance(modes, list) or not all(m in MODES for m in modes):
        shown = modes[:4] if isinstance(modes, list) else modes
        raise ArtifactError(f"{path}.modes: {_quote(shown)} is not a list of {MODES}")
    for name in ("files", "cases"):
        items = data.get(name)
        for i, item in enumerate(items if isinstance(items, list) else []):
            where = f"{path}.{name}[{i}].modes"
            per_mode = item.get("modes") if isinstance(item, dict) else None
            if not isinstance(per_mode, dict):
                raise ArtifactError(f"{where}: expected an object of modes")
            for mode, record in per_mode.items():
                if mode not in modes:
                    raise ArtifactError(f"{where}: {_quote(mode)} is not a mode of this run")
                if name == "files":
                    _check_file_mode(record, f"{where}.{mode}")


def _check_file_mode(record, where: str) -> None:
    if not isinstance(record, dict):
        raise ArtifactError(f"{where}: expected an object, got {type(record).__name__}")
    for key, kinds in _FILE_MODE.items():
        if key in record and type(record[key]) not in kinds:  # exact: True is no return code
            raise ArtifactError(f"{where}.{key}: {_quote(record[key])} is not a {key} value")


def _check_model(model: results.Results, path: str) -> None:
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


def extract_results(zip_path: str, folder: str) -> None:
    """results.json out of the artifact's zip into ``folder``: the one member read, and at most
    MAX_RESULTS_BYTES of it whatever the zip's header says."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            info = archive.getinfo("results.json")
            if info.file_size > MAX_RESULTS_BYTES:
                raise ArtifactError(
                    f"results.json: {info.file_size} bytes; at most {MAX_RESULTS_BYTES}"
                )
            with archive.open(info) as member:
                data = member.read(MAX_RESULTS_BYTES + 1)
    except KeyError:
        raise ArtifactError("the artifact has no results.json at its top") from None
    except (
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        OSError,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        raise ArtifactError(f"the artifact is not a readable zip ({type(exc).__name__})") from None
    if len(data) > MAX_RESULTS_BYTES:
        raise ArtifactError(f"results.json: more than {MAX_RESULTS_BYTES} bytes")
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(data)


def has_results(folder: str | None) -> bool:
    return bool(folder) and os.path.isfile(os.path.join(folder, "results.json"))


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


def _quote(value) -> str:
    """An artifact's value in a message: repr (no line break survives it), and short."""
    return repr(value[:80] if isinstance(value, (str, list)) else value)
