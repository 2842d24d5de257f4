"""The shards of one A/B (``ci run --shard I/N``) as one run, and ``load``, the one loader of
results. ``merge`` drops nothing silently: shards that are not one run's raise EvidenceError
naming the shard at fault."""

import json
import re
from dataclasses import replace

from ci.evidence import judge, model
from ci.evidence.model import EvidenceError, Results

_SHARD = re.compile(r"(\d{1,4})/(\d{1,4})")


def load(paths, names=None) -> Results:
    """One run from ``paths`` (results.json or their folders; ``names`` for errors), shards
    merged, judged again with this checkout's regressions, never the kinds a file claims."""
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


def _identity(results: Results) -> dict:
    """What every shard of one run shares."""
    git = results.selection.get("git") or {}
    ci = results.environment.get("upstream_ci", "not recorded")
    ci = "outside sglang's CI" if ci is None else ci
    return {
        "backend": results.backend,
        "modes": results.modes,
        "retry mode": json.dumps(ci, sort_keys=True, default=repr),
        "series": results.series and results.series.id,
        "git": (git.get("base"), git.get("head")) if isinstance(git, dict) else git,
        "sides": {m: (s.commit, s.overlay) for m, s in sorted(results.sides.items())},
    }


def merge(named) -> Results:
    """One ``Results`` of ``named``: (name, Results) pairs, one per shard, in any order."""
    shards, size = {}, None
    for name, results in named:
        text = results.selection.get("shard")
        found = _SHARD.fullmatch(text) if isinstance(text, str) else None
        if found is None or not 0 <= int(found[1]) < int(found[2]):
            raise EvidenceError(f"{name}: not a shard (selection.shard is {text!r:.40}, not I/N)")
        index, count = int(found[1]), int(found[2])
        if size not in (None, count):
            raise EvidenceError(f"{name}: shard {index}/{count}, while the first is of {size}")
        if index in shards:
            raise EvidenceError(f"shard {index}/{count} given twice: {shards[index][0]} and {name}")
        shards[index], size = (name, results), count
    missing = [f"{i}/{size}" for i in range(size) if i not in shards]
    if missing:
        raise EvidenceError(f"shard {', '.join(missing)} missing (given: {len(shards)} of {size})")
    ordered = [shards[i] for i in range(size)]
    (first_name, first), owner = ordered[0], {}
    expected = _identity(first)
    for name, results in ordered:
        for key, value in _identity(results).items():
            if value != expected[key]:
                theirs = f"{first_name}'s {expected[key]!s:.120}: shards of different runs"
                raise EvidenceError(f"{name}: {key} {value!s:.120} differs from {theirs}")
        for mode, side in results.sides.items():
            theirs = first.sides[mode].sglang
            if side.sglang and theirs and side.sglang != theirs:
                theirs = f"{first_name} {theirs!r:.40}: shards of different releases"
                raise EvidenceError(f"{name}: {mode} ran sglang {side.sglang!r:.40}, {theirs}")
        for file in results.files:
            if file.path in owner:
                raise EvidenceError(f"{file.path} ran in {owner[file.path]} and in {name}")
            owner[file.path] = name
    # The merged run is held to one run's bounds (files, cases, suites), checked again whole.
    return Results.from_json(_merged([r for _, r in ordered]).to_json(), "the merged shards")


def _merged(everything) -> Results:
    first = everything[0]
    sides = {
        mode: next((r.sides[mode] for r in everything if r.sides[mode].sglang), side)
        for mode, side in first.sides.items()
    }
    files = sorted((f for r in everything for f in r.files), key=lambda f: f.path)
    order = {f.path: i for i, f in enumerate(files)}
    cases = sorted((c for r in everything for c in r.cases), key=lambda c: order.get(c.file, -1))
    # Each mode's process record from the first shard with one (any other shape is none).
    records = [r.environment.get("modes") for r in everything]
    records = [r if isinstance(r, dict) else {} for r in records]
    modes = {}
    for m in first.modes:
        good = [r[m] for r in records if isinstance(r.get(m), dict) and "error" not in r[m]]
        modes[m] = good[0] if good else records[0].get(m)
    names = [f"{i}/{len(everything)}" for i in range(len(everything))]
    selection = {**first.selection, "shard": None, "shards": names, "files": list(order)}
    gpus = [r.environment.get("gpus") for r in everything]
    machines = {n: {"gpus": g} for n, g in zip(names, gpus, strict=True)}
    environment = {**first.environment, "modes": modes, "shards": machines}
    pictures = {k: v for r in everything for k, v in r.pictures.items()}
    return replace(first, sides=sides, files=tuple(files), cases=tuple(cases), selection=selection,
                   environment=environment, pictures=pictures)  # fmt: skip
