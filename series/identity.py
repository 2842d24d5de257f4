"""The series' identity: one hash of what the series changes, to tie evidence to it.

A results folder from ``python -m ci run`` records this id (``environment.series``), and
``pr-body`` refuses results whose id differs from the series it describes. The id covers the
base release and every patch's diff, in series order, and nothing else: rewording a message,
the cover letter, a date or a patch's file name keeps it; changing any line the series adds
or removes, the order, or the base release changes it. A git commit would not do here: the
evidence is usually produced in a throwaway checkout (a CI runner, a device machine) whose
commit is unknown or dirty. Pure: bytes in, hex out.
"""

import hashlib

ID_SCHEME = "sglang-series-id/1"
_DIFF_START = b"\ndiff --git "
_SIGNATURE = b"\n-- \n"


def diff_section(data: bytes) -> bytes:
    """The diff part of one ``git format-patch`` file: from its first ``diff --git`` line to
    the end, without a format-patch signature. Empty for a file with no diff."""
    start = data.find(_DIFF_START)
    if start < 0:
        return b""
    diff = data[start + 1 :]
    end = diff.rfind(_SIGNATURE)
    return diff[: end + 1] if end >= 0 else diff


def series_id(release: str, patch_bytes) -> str:
    """sha256 of the scheme, the base release and each patch's diff section, in order."""
    digest = hashlib.sha256(f"{ID_SCHEME}\nrelease: sglang=={release}\n".encode())
    for data in patch_bytes:
        section = diff_section(data)
        digest.update(b"patch %d\n" % len(section))
        digest.update(section)
    return digest.hexdigest()


def of_series(series) -> str:
    """The id of a loaded ``seriesdir.SeriesDir``."""
    return series_id(series.base.version, (path.read_bytes() for path in series.paths()))


def describe(patches_dir) -> dict:
    """What a results folder records: the id, the base release and the patch names."""
    from series import seriesdir

    series = seriesdir.load(patches_dir)
    return {
        "id": of_series(series),
        "scheme": ID_SCHEME,
        "release": series.base.version,
        "patches": list(series.names),
    }
