"""Intake of several test jobs' results (one per shard of a matrix) for one report: each
results.json is untrusted input, loaded and checked on its own, the shards merged (a missing,
duplicated or foreign shard is named and refused) and the merged run judged again with this
checkout's rules, by the one loader (``ci.evidence.shards.load``). Results that record the commit they tested (``selection.git.head``, from ``ci run
--git-head``) must name the head the report is for. Every failure is an
``artifact.ArtifactError``: the report says "invalid artifact".
"""

from ci.evidence import model as evidence
from ci.evidence import shards
from ci.reporter import artifact


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
        raise artifact.ArtifactError(str(exc)) from None


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
