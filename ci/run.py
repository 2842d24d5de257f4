"""``ci run``'s orchestration: select the registered files, run them in both modes, judge them
and write the results folder (results.json, JUnit, logs, pictures, the full report).

For wiring the pipeline modules together only: ``collect`` selects, ``runner`` launches,
``results`` judges, ``junit``, ``pictures`` and ``render`` write. Arguments arrive as a frozen
``RunRequest``; bad ones raise ``RequestError`` (the command line's exit code 2), a registration
that sglang's reader rejects raises ``RegistrationError`` (exit code 1).
"""

import os
import re
import shutil
import threading
from dataclasses import dataclass, replace

FULL_REPORT = "report.md"  # the untruncated report, in the results folder (the artifact)


class RequestError(ValueError):
    """Arguments that cannot describe a run; the message names the argument."""


class RegistrationError(ValueError):
    """A registration that sglang's own reader rejects; the message names its file."""


@dataclass(frozen=True)
class RunRequest:
    out: str
    root: str = "."
    backend: str | None = None  # None: cuda when nvidia-smi exists, else cpu
    modes: str = "unmodified,change"  # a comma list, as typed
    suite: str | None = None
    stage: str | None = None
    shard: str | None = None
    nightly: bool = False
    sglang_src: str | None = None
    timeout: float = 1800
    jobs: int = 2


def execute(request: RunRequest, log):
    """Run the A/B that ``request`` describes and write its folder; returns the results model.
    ``log(line)`` hears about progress."""
    from ci import collect, environment, junit, pictures, results, runner

    root = os.path.abspath(request.root)
    backend = request.backend or ("cuda" if shutil.which("nvidia-smi") else "cpu")
    modes = [m.strip() for m in request.modes.split(",") if m.strip()]
    if not modes or any(m not in runner.MODES for m in modes):
        raise RequestError(
            f"--modes {request.modes!r}: use a comma list of {', '.join(runner.MODES)}"
        )
    src = request.sglang_src
    if src and not os.path.isdir(os.path.join(src, "python", "sglang")):
        raise RequestError(f"--sglang-src {src}: no python/sglang inside")
    machine = {}
    # git, nvidia-smi and the series' hash take a moment: beside the tests, not before them.
    describing = threading.Thread(
        target=lambda: machine.update(environment.describe_machine(root)), daemon=True
    )
    describing.start()
    selected = _select(request, root, backend)

    out = os.path.abspath(request.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    log(
        f"ci run: {len(selected)} files x {len(modes)} modes on {backend}, {request.jobs} at a time"
    )
    runs = runner.run_all(
        [s.path for s in selected], modes, root, request.timeout, request.jobs, src, log
    )
    describing.join()
    env_record = environment.describe(machine, runs, modes)

    log_paths = {}
    for run in runs:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run.path) + f".{run.mode}.log"
        with open(os.path.join(out, "logs", name), "w") as handle:
            handle.write(run.output)
        log_paths[(run.path, run.mode)] = f"logs/{name}"

    selection = {
        "suite": request.suite,
        "stage": request.stage,
        "shard": request.shard,
        "sglang_src": src,
        "files": [s.path for s in selected],
    }
    suites = {s.path: s.suite for s in selected}
    model = results.build(runs, suites, backend, modes, selection, env_record, log_paths)
    model = replace(
        model,
        cases=[
            replace(case, line=collect.test_lines(root, case.file).get(case.case_id, 1))
            for case in model.cases
        ],
    )
    model = replace(model, pictures=pictures.draw_all(model, out))
    results.save(model, out)
    junit.write(model, out)
    write_full_report(model, out)
    return model


def _select(request: RunRequest, root: str, backend: str) -> list:
    from ci import collect

    try:
        shard = collect.parse_shard(request.shard)
        selected = collect.select(
            root, backend, request.suite, request.stage, shard, request.nightly
        )
    except collect.SelectionError as exc:
        raise RequestError(str(exc)) from None
    except ImportError as exc:  # collect uses sglang's own registry reader
        raise RequestError(
            f"cannot import sglang's ci_register ({exc}); is sglang installed?"
        ) from None
    except ValueError as exc:  # a registration collect_tests rejects names its file
        raise RegistrationError(str(exc)) from None
    if not selected:
        raise RequestError(f"no registered {backend} files match the filters under {root}")
    return selected


def write_full_report(model, out: str) -> None:
    """report.md: the whole report, never shortened, for the artifact."""
    from ci import render
    from ci.report import DEFAULT_SLOT

    text = render.comment(model, DEFAULT_SLOT, limit=10**9)
    with open(os.path.join(out, FULL_REPORT), "w") as handle:
        handle.write(text)


def summary(model) -> dict:
    """What ``ci run --json`` prints."""
    return {
        "change_ok": model.change_ok(),
        "counts": model.counts(),
        "flags": {f.path: f.flags for f in model.files if f.flags},
    }


def summary_lines(model) -> list[str]:
    """What ``ci run`` prints: one line per case, file warnings, the verdict."""
    lines = []
    for case in model.cases:
        outcomes = " ".join(f"{m}={case.modes[m].outcome}" for m in model.modes)
        lines.append(f"{case.kind:<15} {outcomes:<36} {case.file}::{case.case_id}")
    for file in model.files:
        lines += [f"WARNING {file.path}: {flag}" for flag in file.flags]
    counts = ", ".join(f"{n} {k}" for k, n in model.counts().items() if n)
    lines.append(f"ci run: {'ok' if model.change_ok() else 'FAILED'}: {counts}")
    return lines
