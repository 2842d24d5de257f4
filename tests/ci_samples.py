"""Synthetic ``python FILE -v`` runs (result channel and log) and results models for the ci
tests (no subprocesses)."""

import json

from ci import results
from ci.runner import FileRun

FILE = "test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py"
DASH = "-" * 70


_WORDS = {"pass": "ok", "fail": "FAIL", "error": "ERROR", "skip": "skipped"}


def evidence(case, outcome, **extra) -> dict:
    """One harness record, as the registered test attaches it to a test's result line."""
    return {"case": case, "device": "cuda", "budget_mib": 128, "outcome": outcome, **extra}


def file_run(mode, cases, returncode=None, duration_s=30.0) -> FileRun:
    """A finished ``python FILE -v --result-fd N``: ``cases`` are (name, cls, evidence records,
    outcome, detail); the channel gets one line each, the log unittest's verbose text."""
    lines, channel = [], []
    for name, cls, records, outcome, detail in cases:
        lines.append(f"{name} (__main__.{cls}.{name}) ... {_WORDS[outcome]}")
        record = {"test": f"{cls}.{name}", "outcome": outcome, "duration_s": 0.5}
        channel.append(json.dumps(dict(record, detail=detail, evidence=list(records))))
    failed = any(c[3] in ("fail", "error") for c in cases)
    output = "\n".join(lines) + f"\n{DASH}\nRan {len(cases)} tests\n"
    code = (1 if failed else 0) if returncode is None else returncode
    return FileRun(FILE, mode, code, duration_s, False, output, channel="\n".join(channel) + "\n")


def workspace_runs(grow_unmodified="oom", name="test_grow_64_to_96_mib_bf16_fits_128_mib_cap"):
    """A CUDA-like A/B: one grow case and one preservation case."""
    cls = "TestSparsePrefillWorkspaceCUDA"
    keep = "test_smaller_request_reuses_storage"
    failed = grow_unmodified == "oom"
    grow_base = evidence(
        "grow", grow_unmodified, detail="CUDA out of memory", peak_allocated_mib=64.0
    )
    traceback = "Traceback (most recent call last):\n  AssertionError: 'oom' != 'pass'"
    reuse = evidence("reuse", "pass", peak_allocated_mib=96.0)
    unmodified = [
        (name, cls, [grow_base], "fail" if failed else "pass", traceback if failed else None),
        (keep, cls, [reuse], "pass", None),
    ]
    change = [
        (name, cls, [evidence("grow", "pass", peak_allocated_mib=96.0)], "pass", None),
        (keep, cls, [reuse], "pass", None),
    ]
    return [file_run("unmodified", unmodified), file_run("change", change)]


def model(runs=None, patterns=None, suite="base-b-test-1-gpu-small"):
    runs = runs if runs is not None else workspace_runs()
    env = {
        "python": "3.12.3",
        "gpus": [{"name": "NVIDIA H200", "driver": "580.65", "memory": "143771 MiB"}],
        "git": {"commit": "0123456789abcdef", "dirty": False},
        "modes": {"change": {"torch": "2.11.0+cu130", "cuda": "13.0", "sglang": "0.5.23"}},
    }
    return results.build(
        runs,
        {FILE: suite},
        "cuda",
        ["unmodified", "change"],
        {},
        env,
        regression_patterns=[f"{FILE}::*.test_grow_*"] if patterns is None else patterns,
    )


def refused(fake, pr=7, slot="dsv4-workspace"):
    """What a refused results artifact leaves on the fake GitHub: the slot says failure and
    why, and nothing of the artifact is posted (no comment, no status)."""
    from ci import pr_body

    text = pr_body.get_slot(fake.bodies[pr], slot)
    assert text.startswith(":x:") and text.endswith("-- invalid artifact"), text
    assert not fake.comments and not fake.statuses
