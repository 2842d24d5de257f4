"""Intake of several test jobs' results (one per shard of a matrix) for one report: each
results.json is untrusted input, loaded and checked on its own (``ci.evidence.model.load``), the
shards merged (``ci.evidence.shards.merge``: a missing, duplicated or foreign shard is named and
refused) and the merged run judged again with this checkout's rules, as ``artifact`` does for
one. Results that record the commit they tested (``selection.git.head``, from ``ci run
--git-head``) must name the head the report is for. Every failure is an
``artifact.ArtifactError``: the report says "invalid artifact".
"""

from ci.evidence import judge, shards
from ci.evidence import model as evidence
from ci.reporter import artifact


def load_results(paths, head: str | None = None, artifacts=None) -> evidence.Results:
    """One judged ``Results`` from ``paths`` (results.json files or the folders holding them):
    a single path as ``artifact.load_results`` reads it, unless it records a shard; several
    must be every shard of one run. ``head``: the commit the report is for (a trusted source's:
    the gate's, or a workflow_run event's). ``artifacts``: the fork path's artifact names, one
    per path in shard order: each must hold its own shard and record the head it tested."""
    paths = (paths,) if isinstance(paths, str) else tuple(paths)
    names = tuple(artifacts) if artifacts is not None else tuple(map(repr, paths))
    named = []
    for index, (name, path) in enumerate(zip(names, paths, strict=True)):
        try:
            results = evidence.load(path)
        except evidence.EvidenceError as exc:
            raise artifact.ArtifactError(f"{name}: {exc}" if artifacts else str(exc)) from None
        _tested(name, results, head, required=artifacts is not None)
        if artifacts is not None:
            _holds(name, results, index, len(paths))
        named.append((name, results))
    if len(named) == 1 and not named[0][1].selection.get("shard") and artifacts is None:
        return judge.rejudge(named[0][1], judge.load_patterns(judge.REGRESSIONS))
    try:
        merged = shards.merge(named)
    except evidence.EvidenceError as exc:
        raise artifact.ArtifactError(str(exc)) from None
    return judge.rejudge(merged, judge.load_patterns(judge.REGRESSIONS))


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
        raise artifact.ArtifactError(f"{name}: {said}, not {head}: results of another commit")


def _holds(name: str, results: evidence.Results, index: int, count: int) -> None:
    try:
        held = shards.shard_of(results, name)
    except evidence.EvidenceError as exc:
        raise artifact.ArtifactError(str(exc)) from None
    if held != (index, count):
        raise artifact.ArtifactError(
            f"{name}: holds shard {held[0]}/{held[1]}, not {index}/{count}: a shard given twice "
            f"or out of place"
        )
