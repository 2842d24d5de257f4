"""Intake of the test job's artifact: untrusted input, checked before the bot renders it.

The artifact was written by a job that ran PR code, so it is read like any upload from a
stranger: results.json is extracted alone and bounded, loaded through the evidence model (which
checks every shape and bound once) and judged again: the kinds, flags and verdict it claims are
not read, ``evidence.judge.rejudge`` recomputes them from the raw outcomes with this checkout's
rules and regression list. Every artifact value quoted in an error message is ``repr``'d, so no
line of the report's log can start a workflow command. Nothing here is executed, imported or
used as a path outside the artifact folder.
"""

import os
import zipfile
import zlib

from evidence import judge
from evidence import model as evidence

# What zipfile raises for a damaged, truncated, encrypted or exotic archive.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


class ArtifactError(ValueError):
    """The artifact is not what the test job writes; the message names the file and field."""


def load_results(path: str) -> evidence.Results:
    """results.json (a file, or the folder holding it), judged again here; ArtifactError
    otherwise."""
    try:
        model = evidence.load(path)
    except evidence.EvidenceError as exc:
        raise ArtifactError(str(exc)) from None
    return judge.rejudge(model, judge.load_patterns(judge.REGRESSIONS))


def extract_results(zip_path: str, folder: str) -> None:
    """results.json out of the artifact's zip into ``folder``: the one member read, and at most
    MAX_RESULTS_BYTES of it whatever the zip's header says."""
    limit = evidence.MAX_RESULTS_BYTES
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


def has_results(path: str | None) -> bool:
    """Whether ``path`` names results as ``load_results`` takes them: the file or its folder."""
    return bool(path) and (
        os.path.isfile(path) or os.path.isfile(os.path.join(path, "results.json"))
    )
