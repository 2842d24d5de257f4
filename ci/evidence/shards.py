"""Several shards of one A/B (``ci run --shard I/N``, one per job of a matrix) as one run, so a
pull request gets one verdict: one slot, one comment, one check run, one status per suite.

``merge`` is pure: it takes shards already loaded and checked (``ci.evidence.model.load``) and
either merges them or raises ``EvidenceError`` naming the shard at fault: one that is not a
shard, a missing or duplicated index, a different count, or shards of different commits,
releases, series, backends or modes. Nothing is dropped silently. ``load`` is the one loader of
results every reader uses (the report, pr-body, the release watch): read, checked, merged where
they are shards, and judged again.
"""

import json
import re
from dataclasses import replace

from ci.evidence import judge, model
from ci.evidence.model import EvidenceError, Results

_SHARD = re.compile(r"(\d{1,4})/(\d{1,4})")


def shard_of(results: Results, name: str) -> tuple[int, int]:
    """(I, N) that ``results`` records, or EvidenceError: it was made without ``--shard``."""
    text = results.selection.get("shard")
    found = _SHARD.fullmatch(text) if isinstance(text, str) else None
    if found is None or not 0 <= int(found[1]) < int(found[2]):
        raise EvidenceError(f"{name}: not a shard (selection.shard is {text!r:.40}, not I/N)")
    return int(found[1]), int(found[2])


def _identity(results: Results) -> dict:
    """What every shard of one run shares: the backend, the modes, how sglang's CI settings
    were (retries included), the series, the commits, and per side the commit and overlay."""
    git = results.selection.get("git") or {}
    ci = results.environment.get("upstream_ci", "not recorded")
    retry = "outside sglang's CI" if ci is None else ci
    return {
        "backend": results.backend,
        "modes": results.modes,
        "retry mode": json.dumps(retry, sort_keys=True, default=repr),
        "series": results.series.id if results.series else None,
        "git": (git.get("base"), git.get("head")) if isinstance(git, dict) else git,
        **{f"{m} side": (s.commit, s.overlay) for m, s in sorted(results.sides.items())},
    }


def load(paths, names=None) -> Results:
    """One judged run from ``paths`` (results.json files or the folders holding them), each
    read and checked whole (``model.load``): a single one that records no shard as it is, else
    every shard of one run merged; then judged again with this checkout's listed regressions,
    never with the kinds, flags and verdict a file claims. ``names``: what an error calls each
    path (an artifact's name). EvidenceError otherwise."""
    paths = (paths,) if isinstance(paths, str) else tuple(paths)
    named = []
    for name, path in zip(names or map(repr, paths), paths, strict=True):
        try:
            named.append((name, model.load(path)))
        except EvidenceError as exc:
            raise EvidenceError(f"{name}: {exc}" if names else str(exc)) from None
    one = len(named) == 1 and not named[0][1].selection.get("shard")
    merged = named[0][1] if one else merge(named)
    return judge.rejudge(merged, judge.load_patterns(judge.REGRESSIONS))


def merge(named) -> Results:
    """One ``Results`` of ``named``: (name, Results) pairs, one per shard, in any order."""
    if not named:
        raise EvidenceError("no shards to merge")
    shards = {}
    size = None
    for name, results in named:
        index, count = shard_of(results, name)
        if size is not None and count != size:
            raise EvidenceError(f"{name}: shard {index}/{count}, while the first is of {size}")
        size = count
        if index in shards:
            raise EvidenceError(f"shard {index}/{size} given twice: {shards[index][0]} and {name}")
        shards[index] = (name, results)
    missing = [f"{i}/{size}" for i in range(size) if i not in shards]
    if missing:
        raise EvidenceError(f"shard {', '.join(missing)} missing (given: {len(shards)} of {size})")
    ordered = [shards[i] for i in range(size)]
    first_name, first = ordered[0]
    expected = _identity(first)
    for name, results in ordered[1:]:
        for key, value in _identity(results).items():
            if value != expected[key]:
                raise EvidenceError(
                    f"{name}: {key} {value!s:.120} differs from {first_name}'s "
                    f"{expected[key]!s:.120}: shards of different runs"
                )
        _same_releases(first_name, first, name, results)
    owner = {}
    for name, results in ordered:
        for file in results.files:
            if file.path in owner:
                raise EvidenceError(f"{file.path} ran in {owner[file.path]} and in {name}")
            owner[file.path] = name
    # The merged run is held to one run's bounds (files, cases, suites), checked again whole.
    return Results.from_json(_merged(ordered).to_json(), "the merged shards")


def _same_releases(first_name: str, first: Results, name: str, results: Results) -> None:
    for mode, side in results.sides.items():
        theirs = first.sides[mode].sglang
        if side.sglang and theirs and side.sglang != theirs:
            raise EvidenceError(
                f"{name}: {mode} ran sglang {side.sglang!r:.40}, {first_name} "
                f"{theirs!r:.40}: shards of different releases"
            )


def _merged(ordered) -> Results:
    everything = [results for _, results in ordered]
    first = everything[0]
    sides = {
        mode: next((r.sides[mode] for r in everything if r.sides[mode].sglang), side)
        for mode, side in first.sides.items()
    }
    files = sorted((f for r in everything for f in r.files), key=lambda f: f.path)
    order = {f.path: i for i, f in enumerate(files)}
    cases = sorted((c for r in everything for c in r.cases), key=lambda c: order.get(c.file, -1))
    records = {
        mode: next(
            (_records(r)[mode] for r in everything if _recorded(r, mode)),
            _records(first).get(mode),
        )
        for mode in first.modes
    }
    shard_names = [f"{i}/{len(ordered)}" for i in range(len(ordered))]
    selection = {
        **first.selection,
        "shard": None,
        "shards": shard_names,
        "files": [f.path for f in files],
    }
    machines = {
        s: {"gpus": r.environment.get("gpus")} for s, r in zip(shard_names, everything, strict=True)
    }
    environment = {**first.environment, "modes": records, "shards": machines}
    pictures = {k: v for r in everything for k, v in r.pictures.items()}
    return replace(
        first,
        sides=sides,
        files=tuple(files),
        cases=tuple(cases),
        selection=selection,
        environment=environment,
        pictures=pictures,
    )


def _records(results: Results) -> dict:
    """Each mode's process record; a shard is PR code's output, so any other shape is none."""
    records = results.environment.get("modes")
    return records if isinstance(records, dict) else {}


def _recorded(results: Results, mode: str) -> bool:
    record = _records(results).get(mode)
    return isinstance(record, dict) and "error" not in record
