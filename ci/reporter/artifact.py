"""Intake of the test jobs' results: untrusted input, checked before the bot renders it.

The results were written by jobs that ran PR code, so they are read like any upload from a
stranger: each artifact's results.json is extracted alone and bounded here, then loaded through
the evidence model's one loader (``ci.evidence.shards.load``: every shape and bound checked once,
the shards of one run merged, a missing, duplicated or foreign shard named and refused) and
judged again: the kinds, flags and verdict they claim are not read, they are recomputed from the
raw outcomes with this checkout's rules and regression list. Results that record the commit they
tested (``selection.git.head``, from ``ci run --git-head``) must name the head the report is for.
Every failure is an ``ArtifactError`` (the report says "invalid artifact"); every artifact value
quoted in one is ``repr``'d, so no line of the report's log can start a workflow command.
Nothing here is executed, imported or used as a path outside the artifact folder.
"""

import os
import struct
import zipfile
import zlib

from ci.evidence import model as evidence
from ci.evidence import shards

# What zipfile raises for a damaged, truncated, encrypted or exotic archive.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)
# The test job's zip holds results.json, report.md, two JUnit files, a log per file and side
# and a picture per regression case: far fewer members than this. zipfile reads the whole
# central directory when it opens an archive (millions of entries: half a minute, gigabytes),
# so its end record is read first and the archive refused on its size alone.
MAX_MEMBERS = 25_000
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 300  # a lying count cannot hide a bigger directory
_END = struct.Struct("<4s4H2LH")  # the end of central directory record
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


class ArtifactError(ValueError):
    """The artifact is not what the test job writes; the message names the file and field."""


def names(artifact: str, shards: int | None) -> tuple:
    """The artifacts a run's results come in: ``artifact``, or NAME-0 .. NAME-(N-1) for N
    shards (N from the reporting workflow's own file, never from the artifacts)."""
    if shards is None:
        return (artifact,)
    return tuple(f"{artifact}-{index}" for index in range(shards))


def given_twice(run_id: int, listed: dict) -> str | None:
    """The first name with more than one live artifact (``listed``: name -> those of that
    name, in ``names`` order), said as the report says it; None when there is none."""
    for name, found in listed.items():
        if len(found) > 1:
            return f"{name}: {len(found)} artifacts of that name in run {run_id}"
    return None


def missing(run_id: int, listed: dict) -> str | None:
    """The names without an artifact, said as the report says it; None when there is none."""
    absent = [name for name, found in listed.items() if not found]
    if not absent:
        return None
    return f"{', '.join(absent)} missing from run {run_id} (given: {len(listed) - len(absent)} of {len(listed)})"


def fetch(github, found: dict, folder: str, limit: int) -> None:
    """The run's artifact ``found`` (its listing: id, size_in_bytes) as ``folder``/
    results.json: refused on its listed size before the download, the download cut off at
    ``limit`` bytes whatever the listing said (``github.download`` raises TooLarge), then
    ``extract_results``; the zip itself is not kept."""
    size = found.get("size_in_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= limit:
        raise ArtifactError(f"{size!r} bytes; at most {limit}")
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
        entries, size = central_directory(zip_path)
    except (OSError, struct.error):
        raise ArtifactError("the artifact is not a readable zip (no end record)") from None
    if entries > MAX_MEMBERS or size > MAX_DIRECTORY_BYTES:
        raise ArtifactError(
            f"the artifact's zip lists {entries} members in {size} bytes; at most {MAX_MEMBERS} "
            f"in {MAX_DIRECTORY_BYTES}"
        )
    try:
        with zipfile.ZipFile(zip_path) as archive:
            info = archive.getinfo("results.json")
            if info.file_size > limit:
                raise ArtifactError(f"results.json: {info.file_size} bytes; at most {limit}")
            with archive.open(info) as member:
                data = member.read(limit + 1)
    except KeyError:
        raise ArtifactError("the artifact has no results.json at its top") from None
    except _UNREADABLE as exc:
        raise ArtifactError(f"the artifact is not a readable zip ({type(exc).__name__})") from None
    if len(data) > limit:
        raise ArtifactError(f"results.json: more than {limit} bytes")
    with open(os.path.join(folder, "results.json"), "wb") as handle:
        handle.write(data)


def central_directory(zip_path: str) -> tuple[int, int]:
    """(members, bytes) of a zip's central directory, from its end record (zip64's where the
    classic one says so), without reading the directory itself; OSError when there is none."""
    with open(zip_path, "rb") as handle:
        total = handle.seek(0, os.SEEK_END)
        tail_at = max(0, total - (_END.size + 0xFFFF + _END64_LOCATOR.size))
        handle.seek(tail_at)
        tail = handle.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < _END.size:
            raise OSError("no end of central directory record")
        _, _, _, _, entries, size, offset, _ = _END.unpack_from(tail, at)
        if entries != 0xFFFF and 0xFFFFFFFF not in (size, offset):
            return entries, size
        if at < _END64_LOCATOR.size:
            raise OSError("no zip64 end record locator")
        signature, _, where, _ = _END64_LOCATOR.unpack_from(tail, at - _END64_LOCATOR.size)
        if signature != b"PK\x06\x07" or where > total - _END64.size:
            raise OSError("no zip64 end record")
        handle.seek(where)
        record = _END64.unpack(handle.read(_END64.size))
    if record[0] != b"PK\x06\x06":
        raise OSError("no zip64 end record")
    return record[7], record[8]


def check_digests(paths, digests) -> None:
    """Each of ``paths``' results.json is byte for byte what `ci run` wrote and printed the
    digest of (``digests``, trusted: passed on by the workflow as a job output); ArtifactError
    otherwise: results changed after `ci run` exited, or a folder `ci run` did not write."""
    if len(digests) != len(paths):
        raise ArtifactError(f"{len(digests)} results digests for {len(paths)} results")
    for path, expected in zip(paths, digests, strict=True):
        file = path if os.path.isfile(path) else os.path.join(path, "results.json")
        try:
            found = evidence.digest_of_file(file)
        except OSError as exc:
            raise ArtifactError(f"{os.path.basename(file)!r}: {exc.strerror}") from None
        if found != expected:
            raise ArtifactError(
                f"results.json has digest {found[:19]}..., `ci run` printed {expected[:19]!r}: "
                "written after `ci run` exited, or not by it"
            )


def has_results(path: str | None) -> bool:
    """Whether ``path`` names results as ``load_results`` takes them: the file or its folder."""
    return bool(path) and (
        os.path.isfile(path) or os.path.isfile(os.path.join(path, "results.json"))
    )


def load_results(paths, head: str | None = None, artifacts=None) -> evidence.Results:
    """One judged ``Results`` from ``paths`` (results.json files or the folders holding them),
    as ``ci.evidence.shards.load`` reads them: a single path as it is, unless it records a
    shard; several must be every shard of one run. ``head``: the commit the report is for (a
    trusted source's: the gate's, or a workflow_run event's). ``artifacts``: the fork path's
    artifact names, one per path in shard order: each must hold its own shard and record the
    head it tested."""
    paths = (paths,) if isinstance(paths, str) else tuple(paths)

    def check(name, results, index):
        _tested(name, results, head, required=artifacts is not None)
        if artifacts is not None:
            _holds(name, results, index, len(paths))

    try:
        return shards.load(paths, artifacts, check)
    except evidence.EvidenceError as exc:
        raise ArtifactError(str(exc)) from None


def _tested(name: str, results: evidence.Results, head: str | None, required: bool) -> None:
    """The head ``results`` say they tested is ``head``, where they say (or must say) one."""
    if head is None:
        return
    git = results.selection.get("git")
    if git is None and not required:
        return  # not a run of two commits: the overlay off and on, or two trees
    tested = git.get("head") if isinstance(git, dict) else None
    if tested != head:
        said = f"tested {tested!r:.50}" if tested is not None else "records no git head"
        raise ArtifactError(f"{name}: {said}, not {head}: results of another commit")


def _holds(name: str, results: evidence.Results, index: int, count: int) -> None:
    try:
        held = shards.shard_of(results, name)
    except evidence.EvidenceError as exc:
        raise ArtifactError(str(exc)) from None
    if held != (index, count):
        raise ArtifactError(
            f"{name}: holds shard {held[0]}/{held[1]}, not {index}/{count}: a shard given twice "
            f"or out of place"
        )
