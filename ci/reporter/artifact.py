"""Intake of the test jobs' results: untrusted input, checked before the bot renders it.

The results were written by jobs that ran PR code, so they are read like any upload from a
stranger: each artifact's results.json is extracted alone through ``zipfile`` with its size
capped, then loaded through the evidence model's one loader (``ci.evidence.shards.load``: every
shape and bound checked, the shards of one run merged) and judged again: the kinds, flags and
verdict they claim are not read, they are recomputed from the raw outcomes with this checkout's
rules and regression list. Every failure is an ``EvidenceError`` (the report says "invalid
artifact"). Nothing here is executed, imported or used as a path outside the artifact folder.
"""

import os
import zipfile
import zlib

from ci.evidence import model as evidence
from ci.evidence.model import EvidenceError

# What zipfile raises for a damaged, truncated, encrypted or exotic archive.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


def names(artifact: str, count: int | None) -> tuple:
    """The artifacts a run's results come in: ``artifact``, or NAME-0 .. NAME-(N-1) for N
    shards (N from the reporting workflow's own file, never from the artifacts)."""
    return (artifact,) if count is None else tuple(f"{artifact}-{i}" for i in range(count))


def listing_problem(run_id: int, listed: dict) -> tuple[str | None, str | None]:
    """(a name given twice, the names missing), each said as the report says it, or None;
    ``listed``: name -> the run's live artifacts of that name."""
    twice = [f"{name}: {len(found)} artifacts of that name in run {run_id}"
             for name, found in listed.items() if len(found) > 1]  # fmt: skip
    absent = [name for name, found in listed.items() if not found]
    given = f"(given: {len(listed) - len(absent)} of {len(listed)})"
    missing = f"{', '.join(absent)} missing from run {run_id} {given}" if absent else None
    return (twice[0] if twice else None), missing


def fetch(github, found: dict, folder: str, limit: int) -> None:
    """The run's artifact ``found`` (its listing: id, size_in_bytes) as ``folder``/
    results.json: refused on its listed size before the download, the download cut off at
    ``limit`` bytes whatever the listing said, then ``extract_results``."""
    size = found.get("size_in_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= limit:
        raise EvidenceError(f"{size!r} bytes; at most {limit}")
    os.makedirs(folder, exist_ok=True)
    zipped = os.path.join(folder, "artifact.zip")
    try:
        github.download(found["id"], zipped, limit)
        extract_results(zipped, folder)
    finally:
        if os.path.exists(zipped):
            os.remove(zipped)


def extract_results(zip_path: str, folder: str) -> None:
    """results.json out of the artifact's zip into ``folder``: the one member read, and at most
    MAX_RESULTS_BYTES of it whatever the zip's header says."""
    limit = evidence.MAX_RESULTS_BYTES
    try:
        with zipfile.ZipFile(zip_path) as archive:
            info = archive.getinfo("results.json")
            if info.file_size > limit:
                raise EvidenceError(f"results.json: {info.file_size} bytes; at most {limit}")
            with archive.open(info) as member:
                data = member.read(limit + 1)
    except KeyError:
        raise EvidenceError("the artifact has no results.json at its top") from None
    except _UNREADABLE as exc:
        raise EvidenceError(f"the artifact is not a readable zip ({type(exc).__name__})") from None
    if len(data) > limit:
        raise EvidenceError(f"results.json: more than {limit} bytes")
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(data)


def has_results(path: str | None) -> bool:
    """Whether ``path`` names results: the file or its folder."""
    return bool(path) and (
        os.path.isfile(path) or os.path.isfile(os.path.join(path, "results.json"))
    )
