"""Synthetic ``python FILE -v`` outputs and results models for the ci tests (no subprocesses)."""

import json

from ci import results
from ci.runner import FileRun

FILE = "test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py"
SEP = "=" * 70
DASH = "-" * 70


def evidence(case, outcome, **extra) -> str:
    record = {"case": case, "device": "cuda", "budget_mib": 128, "outcome": outcome, **extra}
    return "DSV4_WORKSPACE_CASE " + json.dumps(record)


def unittest_output(cases, failures=(), py310=False) -> str:
    """``cases``: (name, cls, printed text, outcome word). Failures get a traceback section."""
    lines = []
    for name, cls, printed, word in cases:
        dotted = f"__main__.{cls}" if py310 else f"__main__.{cls}.{name}"
        lines.append(
            f"{name} ({dotted}) ... {printed}\n{word}"
            if printed
            else f"{name} ({dotted}) ... {word}"
        )
    out = "\n".join(lines) + "\n"
    for name, cls in failures:
        out += f"\n{SEP}\nFAIL: {name} (__main__.{cls}.{name})\n{DASH}\nTraceback (most recent call last):\n  AssertionError: 'oom' != 'pass'\n"
    out += f"\n{DASH}\nRan {len(cases)} tests in 1.000s\n\n"
    out += f"FAILED (failures={len(failures)})\n" if failures else "OK\n"
    return out


def workspace_runs(grow_unmodified="oom", name="test_grow_64_to_96_mib_bf16_fits_128_mib_cap"):
    """A CUDA-like A/B: one grow case and one preservation case."""
    cls = "TestSparsePrefillWorkspaceCUDA"
    keep = "test_smaller_request_reuses_storage"
    base_word = "FAIL" if grow_unmodified == "oom" else "ok"
    unmodified = unittest_output(
        [
            (
                name,
                cls,
                evidence(
                    "grow", grow_unmodified, detail="CUDA out of memory", peak_allocated_mib=64.0
                ),
                base_word,
            ),
            (keep, cls, evidence("reuse", "pass", peak_allocated_mib=96.0), "ok"),
        ],
        failures=[(name, cls)] if base_word == "FAIL" else (),
    )
    change = unittest_output(
        [
            (name, cls, evidence("grow", "pass", peak_allocated_mib=96.0), "ok"),
            (keep, cls, evidence("reuse", "pass", peak_allocated_mib=96.0), "ok"),
        ]
    )
    return [
        FileRun(FILE, "unmodified", 0 if base_word == "ok" else 1, 30.0, False, unmodified),
        FileRun(FILE, "change", 0, 30.0, False, change),
    ]


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
