"""Intake of several test jobs' results (one per shard of a matrix) for one report: each
results.json is untrusted input, loaded and checked on its own (``evidence.model.load``), the
shards merged (``evidence.shards.merge``: a missing, duplicated or foreign shard is named and
refused) and the merged run judged again with this checkout's rules, as ``artifact`` does for
one. Every failure is an ``artifact.ArtifactError``: the report says "invalid artifact".
"""

from evidence import judge, shards
from evidence import model as evidence
from report import artifact


def load_results(paths) -> evidence.Results:
    """One judged ``Results`` from ``paths`` (results.json files or the folders holding them):
    a single path as ``artifact.load_results`` reads it, unless it records a shard; several
    must be every shard of one run."""
    paths = (paths,) if isinstance(paths, str) else tuple(paths)
    named = []
    for path in paths:
        try:
            named.append((repr(path), evidence.load(path)))
        except evidence.EvidenceError as exc:
            raise artifact.ArtifactError(str(exc)) from None
    if len(named) == 1 and not named[0][1].selection.get("shard"):
        return judge.rejudge(named[0][1], judge.load_patterns(judge.REGRESSIONS))
    try:
        merged = shards.merge(named)
    except evidence.EvidenceError as exc:
        raise artifact.ArtifactError(str(exc)) from None
    return judge.rejudge(merged, judge.load_patterns(judge.REGRESSIONS))
