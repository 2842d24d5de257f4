"""``ci run``: a frozen ``RunRequest`` -> select, run each file in both modes, judge, and write
the logs and JUnit; the command line adds the pictures, then writes results.json and report.md
(rendering is the reporter's). Bad arguments raise ``RequestError`` (exit 2), a registration
sglang's reader rejects ``RegistrationError`` (exit 1).
"""

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, replace

from ci.evidence import bounds, judge, junit
from ci.evidence.model import MODES, EvidenceError, Results, SeriesId, check_test_path
from ci.runner import (
    RequestError,
    collect,
    environment,
    file_process,
    fork_safety,
    git_sides,
    launch,
    modes,
)  # fmt: skip

# What a results folder holds: a reused --out is cleared of these, and only of these.
OUTPUTS = ("results.json", "report.md", "junit-unmodified.xml", "junit-change.xml")
OUTPUT_DIRS = ("logs", "pictures", git_sides.SIDES_DIR)


LINK_NOT_FOLLOWED = "a link to a folder: not followed (its tests are not run through it)"


class RegistrationError(ValueError):
    """A registration that sglang's own reader rejects; the message names its file."""


class NothingToRun(Exception):
    """Both sides from git, tests from the diff, and the head changes no registered test file
    this run selects: nothing to prove (``ci run`` exits 0 and writes no results)."""


@dataclass(frozen=True)
class RunRequest:
    out: str
    root: str = "."
    backend: str | None = None  # None: cuda when nvidia-smi exists, else cpu
    modes: str = "unmodified,change"  # a comma list, as typed
    tests: tuple[str, ...] = ()  # folders or files under root; default test/registered
    suite: str | None = None
    stage: str | None = None
    shard: str | None = None
    nightly: bool = False
    unmodified_src: str | None = None
    change_src: str | None = None
    regressions: str | None = None  # the listed regressions; default ci/regressions.txt
    git_base: str | None = None  # both sides from git: commits of the checkout at root
    git_head: str | None = None
    # A comma list of modules each side imports once, then forks; "" or "none": every file in a
    # fresh interpreter; None: what the files import of torch and sglang (fork_safety)
    preload: str | None = None
    timeout: float = 1800
    jobs: int = 2
    outside_upstream_ci: bool = False  # True: without sglang CI's settings (modes.UPSTREAM_CI_ENV)
    series: str | None = None  # a JSON file `python -m tools.series describe` wrote


def resolve_backend(backend: str | None) -> str:
    """The backend asked for, else cuda where nvidia-smi exists, else cpu."""
    return backend or ("cuda" if shutil.which("nvidia-smi") else "cpu")


def execute(request: RunRequest, log) -> Results:
    """Run the A/B that ``request`` describes and write its folder; ``log(line)`` hears about
    progress. With ``git_base``/``git_head`` both sides are written out of the
    checkout at ``root`` under ``out``/sides/ and removed when the run ends."""
    root = os.path.abspath(request.root)
    change = _change(request, root)
    if change is None:
        return _execute(request, root, log)
    out = _prepare_out(request.out)
    try:
        base, head = git_sides.make_sides(root, change, out)
        tests = request.tests or change.tests
        if not tests:
            raise NothingToRun(
                f"{request.git_head} adds or modifies no registered test file under "
                f"{collect.REGISTERED_ROOT} since the merge base {change.merge_base[:12]}"
            )
        sided = replace(request, root=head, tests=tests, unmodified_src=base, change_src=head)
        # The machine record names the bot's own commit: the sides name the two compared.
        bot = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return _execute(sided, head, log, change, checkout=bot, diff=not request.tests)
    finally:
        git_sides.remove(out)


def _change(request: RunRequest, root: str) -> git_sides.Change | None:
    if not (request.git_base or request.git_head):
        return None
    if not (request.git_base and request.git_head):
        raise RequestError("--git-base and --git-head go together")
    if request.unmodified_src or request.change_src:
        raise RequestError(
            "--git-base/--git-head make both sides: no --unmodified-src/--change-src"
        )
    return git_sides.read_change(root, request.git_base, request.git_head)


def _execute(request: RunRequest, root: str, log, change=None, checkout=None, diff=False):
    backend = resolve_backend(request.backend)
    wanted = tuple(m.strip() for m in request.modes.split(",") if m.strip())
    if not wanted or any(m not in MODES for m in wanted) or len(set(wanted)) != len(wanted):
        raise RequestError(f"--modes {request.modes!r}: use a comma list of {', '.join(MODES)}")
    if request.jobs < 1:
        raise RequestError(f"--jobs {request.jobs}: at least 1")
    if not request.timeout > 0:
        raise RequestError(f"--timeout {request.timeout}: more than 0 seconds")
    preload = tuple(m.strip() for m in (request.preload or "").split(",") if m.strip())
    if preload == ("none",):
        preload = ()
    if not all(re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", m) for m in preload):
        raise RequestError(f"--preload {request.preload!r}: a comma list of module names")
    setups = modes.setups(wanted, request.unmodified_src, request.change_src)
    patterns = _patterns(request.regressions)
    series = _series(request.series)
    machine = {"gpus": environment.nvidia_smi(), "git": environment.git_commit(checkout or root)}
    trees = [s.tree for s in setups.values() if s.tree]
    if change is not None:
        trees.reverse()  # the head's registry reader: the head's tests may use what it adds
    selected = _select(request, root, backend, trees, diff)
    out = _prepare_out(request.out) if change is None else os.path.abspath(request.out)
    jobs = request.jobs
    links = [
        {"file": link, "why": LINK_NOT_FOLLOWED} for link in collect.scan(root, request.tests)[1]
    ]
    for link in links:
        log(f"ci run: {link['file']}: {link['why']}")
    log(f"ci run: {len(selected)} files x {len(wanted)} modes on {backend}, {jobs} at a time")
    upstream_ci = not request.outside_upstream_ci
    envs = {mode: modes.environment(s, upstream_ci=upstream_ci) for mode, s in setups.items()}
    for env in envs.values():
        env[file_process.BACKEND_ENV] = backend
    paths = [s.path for s in selected]
    if request.preload is None:
        preload = fork_safety.default_preload([os.path.join(root, p) for p in paths], backend)
    preloads = {}
    runs = launch.run_all(paths, envs, root, request.timeout, jobs, log, preload, preloads)

    records = environment.records_by_mode(runs, wanted)
    commits = {"unmodified": change.base, "change": change.head} if change else {}
    sides = {
        mode: modes.side(
            setup,
            records[mode],
            commits.get(mode) or environment.git_commit(setup.tree)["commit"],
        )
        for mode, setup in setups.items()
    }
    logs = _logs_folder(out)  # a test may have removed or replaced it while it ran
    runs = [replace(run, log=_write_log(run, logs)) for run in runs]
    selection = {
        "tests": list(request.tests) or [collect.REGISTERED_ROOT],
        "suite": request.suite,
        "stage": request.stage,
        "shard": collect.shard_text(request.shard),
        "files": paths,
        "regressions": list(patterns),
        "not_run": collect.not_here(root, backend, request.tests, trees) + links,
    }
    if change is not None:
        selection["git"] = asdict(change)  # tuples: results.json writes them as lists
    suites = {s.path: s.suite for s in selected}
    machine.update({"preload": preloads} if preloads else {})
    ci_env = dict(modes.UPSTREAM_CI_ENV) if upstream_ci else None
    fields = {
        "environment": {**machine, "upstream_ci": ci_env, "modes": records},
        "series": series,
    }
    results = judge.build(runs, backend, sides, suites, patterns, selection=selection, **fields)
    lines = {path: collect.test_lines(root, path) for path in {c.file for c in results.cases}}
    cases = [replace(c, line=collect.line_of(lines[c.file], c.test)) for c in results.cases]
    results = replace(results, cases=cases)
    elsewhere = [why for m, s in setups.items() if (why := modes.imported_elsewhere(s, records[m]))]
    if elsewhere:
        results = replace(results, verdict="failed", reasons=(*elsewhere, *results.reasons))
    if not selected:
        # One shard of a matrix: its report merges with the others' (ci.evidence.shards).
        why = f"shard {request.shard}: every selected file falls in another shard"
        results = replace(results, verdict="ok", reasons=(why,))
    junit.write(results, out)
    return results


def _logs_folder(out: str) -> str:
    """``out``/logs made afresh: what a test left there (or put in its place, a link too) is
    not a log of this run; ``out`` itself is made again where a test removed it."""
    logs = os.path.join(out, "logs")
    try:
        if os.path.islink(logs) or os.path.isfile(logs):
            os.remove(logs)
        elif os.path.isdir(logs):
            shutil.rmtree(logs)
        os.makedirs(logs)
    except OSError as exc:
        raise RequestError(f"--out {out}: {exc.strerror} (changed while the tests ran)") from None
    return logs


def _write_log(run: judge.FileRun, logs: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run.path) + f".{run.mode}.log"
    with open(os.path.join(logs, name), "w", encoding="utf-8", errors="replace") as handle:
        handle.write(run.output)
    return f"logs/{name}"


def _patterns(path: str | None) -> tuple[str, ...]:
    if path is not None and not os.path.isfile(path):
        raise RequestError(f"--regressions {path}: not a file")
    return judge.load_patterns(path or judge.REGRESSIONS)


def _prepare_out(out: str) -> str:
    """The results folder, emptied of an earlier run's files; refused when it holds anything
    that is not a run's, so nothing of someone else's is lost."""
    out = os.path.abspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise RequestError(f"--out {out}: not a folder")
    if os.path.isdir(out):
        foreign = sorted(set(os.listdir(out)) - set(OUTPUTS) - set(OUTPUT_DIRS))
        if foreign:
            raise RequestError(
                f"--out {out}: holds {foreign[0]!r}, which no ci run writes; use an empty folder"
            )
        for name in OUTPUTS:
            if os.path.isfile(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
        for name in OUTPUT_DIRS:
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    try:
        os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    except OSError as exc:
        raise RequestError(f"--out {out}: {exc.strerror}") from None
    return out


def _select(request: RunRequest, root: str, backend: str, trees, diff: bool = False) -> list:
    shard = collect.parse_shard(request.shard)
    filters = (request.suite, request.stage, shard, request.nightly, request.tests, trees)
    try:
        selected = collect.select(root, backend, *filters)
    except RequestError:
        raise
    except ImportError as exc:  # collect uses sglang's own registry reader
        raise RequestError(f"cannot load sglang's ci_register ({exc})") from None
    except ValueError as exc:  # a registration collect_tests rejects names its file
        raise RegistrationError(str(exc)) from None
    for chosen in selected:
        try:
            check_test_path(chosen.path, "--tests")
        except EvidenceError:
            raise RequestError(
                f"{chosen.path!r:.300}: a test file name the report refuses (ASCII letters, "
                "digits and _ . / - only, ending .py): rename it; nothing ran"
            ) from None
    if selected:
        return selected
    unsharded = (request.suite, request.stage, None, *filters[3:])
    if shard and collect.select(root, backend, *unsharded):
        return selected  # every selected file falls in another shard
    if diff:
        raise NothingToRun(
            f"none of the registered test files {request.git_head} adds or modifies is a "
            f"{backend} test the filters select"
        )
    raise RequestError(f"no registered {backend} test files match the filters under {root}")


def _series(path: str | None) -> SeriesId | None:
    """The patch series the run is made with, as ``python -m tools.series describe`` wrote it
    (the caller's to supply: the runner reads no tool of this project)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise RequestError(f"--series {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise RequestError(f"--series {path}: not JSON ({exc})") from None
    try:
        return bounds.load_object(data, "--series", SeriesId)
    except ValueError as exc:
        raise RequestError(f"--series {path}: {exc}") from None


def summary_lines(results: Results) -> list[str]:
    """What ``ci run`` prints: one line per case, file warnings, the verdict and why."""
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
