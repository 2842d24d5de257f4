"""A fix cut twice: patches/BASE's ``cut:`` lines name, per fix, a second cut of it for
bases of another shape: its own series in a folder under patches/ (``patches/`` there with
its ``series``, ``BASE`` and patches, beside the project's copies of the tests it adds;
patches/README.md, "A fix per base shape"). The base decides which cut applies: where the
file a ``cut:`` line names contains its marker, that fix's patches are the cut's.
"""

from dataclasses import replace
from pathlib import Path

from tools.series import SeriesError, base, seriesdir


def load(series, cut: seriesdir.Cut) -> seriesdir.SeriesDir:
    """The cut's series; it must hold one fix, numbered as the fix it stands in for."""
    series.fix(cut.fix)  # the fix it stands in for exists
    alt = seriesdir.load(series.root / cut.folder)
    numbers = [fix.number for fix in alt.fixes]
    if numbers != [cut.fix]:
        raise SeriesError(
            f"patches/BASE: the cut in {cut.folder} must hold one fix, {cut.fix}; "
            f"it holds {', '.join(numbers)}"
        )
    return alt


def has_shape(tree, cut: seriesdir.Cut, strip: str = "") -> bool:
    """Whether the base in ``tree`` has the cut's shape (``strip``: the prefix the tree
    lacks, ``python/sglang/`` for an installed package)."""
    target = Path(tree) / cut.path.removeprefix(strip)
    return target.is_file() and cut.marker.encode() in target.read_bytes()


def for_tree(series, tree, strip: str = "") -> tuple:
    """(the series as it applies to the base in ``tree``, [(Cut, its series)] taken): each
    fix whose cut has the base's shape is replaced by the cut's patches, in its place."""
    taken = []
    for cut in series.base.cuts:
        alt = load(series, cut)
        if not has_shape(tree, cut, strip):
            continue
        old = series.fix(cut.fix).names
        rows = []
        for row in zip(series.names, series.patches, series.paths(), strict=True):
            if row[0] == old[0]:  # the cut's patches take the fix's place
                rows += zip(alt.names, alt.patches, alt.paths(), strict=True)
            elif row[0] not in old:
                rows.append(row)
        names, patches, paths = (tuple(column) for column in zip(*rows, strict=True))
        homes = tuple(path.parent for path in paths)
        series = replace(series, names=names, patches=patches, homes=homes)
        taken.append((cut, alt))
    return series, taken


def notes(taken, repo=None) -> list:
    """One report line per cut taken; with ``repo``, whether the files the cut pins still
    hash to its ``BASE`` there (a drifted file is named, not refused: it may still apply)."""
    lines = []
    for cut, alt in taken:
        where = alt.base.upstream_name()
        line = (
            f"fix {cut.fix} is the cut in patches/{cut.folder} ({', '.join(alt.names)}, cut "
            f"against {where}): the base's {cut.path} contains {cut.marker!r}"
        )
        if repo is not None:
            actual = base.pins(repo, [path for path, _ in alt.base.files])
            drift = [path for path, digest in alt.base.files if actual[path] != digest]
            line += "; its files differ from that cut's BASE: " + ", ".join(drift) if drift else ""
        lines.append(line)
    return lines


def only(series, fix) -> seriesdir.SeriesDir:
    """The series of ``fix``'s patches alone (one pull request's branch)."""
    homes = tuple(
        p.parent for n, p in zip(series.names, series.paths(), strict=True) if n in fix.names
    )
    return replace(series, names=fix.names, patches=fix.patches, homes=homes)


def project_copy(series, path: str) -> Path:
    """The project's copy of ``path``, a file the series adds: beside the folder of the patch
    that adds it (patches/ in the project; a cut's patches/ in its folder)."""
    for patch, where in zip(series.patches, series.paths(), strict=True):
        if any(added and name == path for name, added in patch.files):
            return where.parent.parent / path
    return series.root.parent / path
