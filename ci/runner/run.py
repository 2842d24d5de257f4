"""``ci run``: its parsed command line -> select, run each file on both sides, judge, and write
the results folder (results.json, JUnit, logs/, summary.txt). Rendering is the reporter's."""

import json
import os
import re
import shutil
from dataclasses import replace

from ci.errors import EXIT_FAILED, EXIT_OK, CiError
from ci.evidence import judge, junit
from ci.evidence import model as evidence
from ci.evidence.model import MODES, Results, SeriesId
from ci.runner import collect, launch, sides

# What a results folder holds (``ci report``'s dry run writes report.md and pictures/ beside
# results.json): a reused --out is cleared of these, and only of these.
OUTPUTS = ("results.json", "summary.txt", "junit-unmodified.xml", "junit-change.xml", "report.md")
OUTPUT_DIRS = ("logs", "pictures", sides.SIDES_DIR)
BOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class RegistrationError(CiError):
    """A registration that sglang's own reader rejects; the message names its file."""

    code, prefix = EXIT_FAILED, "error: registration: "


class NothingToRun(CiError):
    """The head changes no registered test file this run selects: nothing to prove, no results."""

    code, prefix = EXIT_OK, "ci run: nothing to run: "


def execute(request, log) -> tuple[Results, str | None]:
    """Run the A/B ``request`` (``ci run``'s arguments) describes and write its folder;
    ``log(line)`` hears progress. The results, and why ``ci report`` would refuse them (or None).
    With ``git_base``/``git_head`` both sides are written under ``out``/sides/ for the run."""
    root = os.path.abspath(request.root)
    if not (request.git_base or request.git_head):
        return _execute(request, root, log)
    if not (request.git_base and request.git_head):
        raise CiError("--git-base and --git-head go together")
    if request.unmodified_src or request.change_src:
        raise CiError("--git-base/--git-head make both sides: no --*-src")
    change = sides.read_change(root, request.git_base, request.git_head)
    out = _prepare_out(request.out)
    try:
        base, head = sides.make_sides(root, change, out)
        tests = request.tests or sorted(change.added + change.modified)
        if not tests:
            raise NothingToRun(
                f"{request.git_head} adds or modifies no registered test file under "
                f"{collect.REGISTERED_ROOT} since the merge base {change.merge_base[:12]}"
            )
        request.tests, request.unmodified_src, request.change_src = tests, base, head
        return _execute(request, head, log, out, change)
    finally:
        shutil.rmtree(os.path.join(out, sides.SIDES_DIR), ignore_errors=True)


def _execute(request, root: str, log, out=None, change=None) -> tuple[Results, str | None]:
    backend = request.backend or ("cuda" if shutil.which("nvidia-smi") else "cpu")
    if request.jobs < 1:
        raise CiError(f"--jobs {request.jobs}: at least 1")
    if not request.timeout > 0:
        raise CiError(f"--timeout {request.timeout}: more than 0 seconds")
    preload = tuple(m.strip() for m in (request.preload or "").split(",") if m.strip())
    preload = () if preload == ("none",) else preload
    if not all(re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", m) for m in preload):
        raise CiError(f"--preload {request.preload!r}: a comma list of module names")
    setups = sides.setups(request)
    if request.regressions is not None and not os.path.isfile(request.regressions):
        raise CiError(f"--regressions {request.regressions}: not a file")
    try:
        patterns = judge.load_patterns(request.regressions or judge.REGRESSIONS)
    except UnicodeDecodeError:
        raise CiError(f"--regressions {request.regressions}: not UTF-8 text") from None
    series = _series(request.series)
    shard = collect.parse_shard(request.shard)
    tree = collect.Tree(root, request.tests)
    readers = [s.tree for s in setups.values() if s.tree]
    if change is not None:
        readers.reverse()  # the head's registry reader: the head's tests may use what it adds
    selected, elsewhere = _select(request, tree, backend, shard, readers)
    out = out or _prepare_out(request.out)
    for link in tree.links:
        log(f"ci run: {link['file']}: {link['why']}")
    log(f"ci run: {len(selected)} files x 2 sides on {backend}, {request.jobs} at a time")
    upstream_ci = not request.outside_upstream_ci
    environments = {m: sides.environment(s, upstream_ci=upstream_ci) for m, s in setups.items()}
    paths = list(selected)
    fresh = {p: why for p in paths if (why := tree.fresh_reason(p))}
    if request.preload is None:
        preload = tree.default_preload([p for p in paths if p not in fresh], backend)
    runs, preloads = launch.run_all(
        paths, environments, root, request.timeout, request.jobs, log, os.path.join(out, "logs"),
        preload, fresh,
    )  # fmt: skip
    records = {
        m: sides.record_of(next((r.environment for r in runs if r.mode == m and r.environment), ""))
        for m in MODES
    }
    commits = {"unmodified": change.base, "change": change.head} if change else {}
    by_mode = {m: sides.side(s, records[m], setups, commits.get(m)) for m, s in setups.items()}
    selection = {
        "tests": list(request.tests or [collect.REGISTERED_ROOT]),
        "suite": request.suite,
        "stage": request.stage,
        "shard": "{}/{}".format(*shard) if shard else None,
        "files": paths,
        "regressions": list(patterns),
        "not_run": elsewhere + tree.links,
        **({"git": change._asdict()} if change else {}),  # tuples: written as lists
    }
    environment = {
        "gpus": sides.nvidia_smi(),
        "git": sides.git_commit(BOT if change else root),
        **({"preload": preloads} if preloads else {}),
        "upstream_ci": dict(sides.UPSTREAM_CI_ENV) if upstream_ci else None,
        "sides": {m: {"tree": s.tree, "env": s.env} for m, s in setups.items()},
        "modes": records,
    }
    results = judge.build(
        runs, backend, by_mode, selected, patterns, selection=selection, environment=environment,
        series=series,
    )  # fmt: skip
    cases = [replace(c, line=tree.def_line(c.file, c.test)) for c in results.cases]
    results = replace(results, cases=cases)
    wrong = [why for m, s in setups.items() if (why := sides.imported_elsewhere(s, records[m]))]
    if wrong:
        results = replace(results, verdict="failed", reasons=(*wrong, *results.reasons))
    if not selected:  # one shard of a matrix: its report merges with the others'
        why = f"shard {request.shard}: every selected file falls in another shard"
        results = replace(results, verdict="ok", reasons=(why,))
    evidence.save(results, out)  # written even if refused: nothing of the run is lost
    try:
        evidence.load(out)  # read back as a report reads it, its size cap too
        refused = None
    except evidence.EvidenceError as exc:
        refused = str(exc)
    junit.write(results, out)
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(summary_lines(results)) + "\n")
    return results, refused


def _prepare_out(out: str) -> str:
    """The results folder, emptied of an earlier run's files; refused when it holds anything
    no run writes, so nothing of someone else's is lost."""
    out = os.path.abspath(out)
    try:
        names = os.listdir(out) if os.path.exists(out) else []
        foreign = sorted(set(names) - set(OUTPUTS) - set(OUTPUT_DIRS))
        if foreign:
            raise CiError(
                f"--out {out}: holds {foreign[0]!r}, which no ci run writes; use an empty folder"
            )
        for path in (os.path.join(out, name) for name in names):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        os.makedirs(os.path.join(out, "logs"))
    except OSError as exc:
        raise CiError(f"--out {out}: {exc.strerror}") from None
    return out


def _select(request, tree, backend: str, shard, readers):
    filters = dict(suite=request.suite, stage=request.stage, nightly=request.nightly, trees=readers)
    try:
        selected, elsewhere = tree.select(backend, shard=shard, **filters)
        if selected or (shard and tree.select(backend, **filters)[0]):
            return selected, elsewhere  # an empty shard: every file falls in another one
    except ImportError as exc:  # collect uses sglang's own registry reader
        raise CiError(f"cannot load sglang's ci_register ({exc})") from None
    except ValueError as exc:  # a registration collect_tests rejects names its file
        raise RegistrationError(str(exc)) from None
    if request.git_head:  # both sides from git
        raise NothingToRun(
            f"none of the registered test files {request.git_head} adds or modifies is a "
            f"{backend} test the filters select"
        )
    raise CiError(f"no registered {backend} test files match the filters under {tree.root}")


def _series(path: str | None) -> SeriesId | None:
    """The patch series the run is made with, as ``python -m tools.series describe`` wrote it."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return evidence.load_object(json.load(handle), "--series", SeriesId)
    except OSError as exc:
        raise CiError(f"--series {path}: {exc.strerror}") from None
    except ValueError as exc:  # not JSON, or not what describe writes
        why = f"not JSON ({exc})" if isinstance(exc, json.JSONDecodeError) else exc
        raise CiError(f"--series {path}: {why}") from None


def summary_lines(results: Results) -> list[str]:
    """What ``ci run`` prints: one line per case (its id as pytest takes it), file warnings,
    the verdict and why."""
    lines = [f"{mode:<10} = {results.label(mode)}" for mode in results.modes]
    for case in results.cases:
        outcomes = " ".join(f"{m}={case.modes[m].outcome}" for m in results.modes)
        lines.append(f"{case.kind:<15} {outcomes:<36} {case.key}")
    for file in results.files:
        lines += [f"WARNING {file.path}: {flag}" for flag in file.flags]
    counts = ", ".join(f"{n} {k}" for k, n in results.counts().items() if n)
    lines.append(f"ci run: {results.verdict}: {counts or 'no cases'}")
    lines += [f"ci run: {reason}" for reason in results.reasons]
    return lines
