"""Intake of the test job's artifact: untrusted input, checked before the bot renders it.

For validation only. The artifact was written by a job that ran PR code (for a fork, even the
workflow file is the fork's), so the job that holds a write token reads it like any upload
from a stranger: bounded sizes, the results.json schema, test-file paths that are plain
relative ``.py`` paths, bounded names and counts, and a gate record whose commit must be the
one GitHub says the run was for. Text inside (test names, logs) is escaped later by ``render``;
nothing here is executed, imported or used as a path outside the artifact folder.
"""

import json
import os
import re

from evidence import model as evidence

MAX_GATE_BYTES = 4096
_SHA = re.compile(r"^[0-9a-f]{40}$")
GATE_STATES = ("run", "missing-label", "stale-label")


class ArtifactError(ValueError):
    """The artifact is not what the test job writes; the message names the file and field."""


def load_results(folder: str) -> evidence.Results:
    """results.json from the artifact, every shape and bound checked (``evidence.model``)."""
    try:
        return evidence.load(os.path.join(folder, "results.json"))
    except evidence.EvidenceError as exc:
        raise ArtifactError(str(exc)) from None


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
