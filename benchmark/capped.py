"""One capped replacement scenario in a fresh process: the benchmark's child, and its launcher.

The child borrows the registered regression test's own machinery through ``ci.harness``
(its allocator cap, its workspace lookup, its ``run_case`` with OOM handling, its result line)
and only adds what the benchmark needs: arbitrary request sequences
(``--steps 65536:bfloat16,...``, passed to ``run_case`` as steps), phase timings (import, CUDA
init, case body) and, on CUDA, a PyTorch memory snapshot. The parent side launches it under one
of ``ci``'s two modes (unmodified / change) and returns the child's JSON result. Not for
asserting anything: the registered test is the proof.

Run by hand, from the repository root: ``python -m benchmark.capped --steps
65536:bfloat16,98304:bfloat16 --device cpu --budget-mib 128``
"""

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

from ci import harness

REPO = Path(__file__).resolve().parent.parent
STEPS_CASE = "benchmark_steps"
ROWS_PER_MIB_BF16 = 1024  # rows are (num_tokens, 1, 512): 1 KiB per token in bf16
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}


def parse_steps(text: str) -> list:
    """``"65536:bfloat16,98304:float8_e4m3fn"`` -> ``[(65536, "bfloat16"), ...]``."""
    steps = []
    for item in text.split(","):
        rows, _, dtype = item.strip().partition(":")
        if not rows.isdigit() or int(rows) <= 0 or dtype not in DTYPE_BYTES:
            raise ValueError(f"bad step {item!r}: use ROWS:DTYPE with DTYPE in {list(DTYPE_BYTES)}")
        steps.append((int(rows), dtype))
    return steps


def format_steps(steps) -> str:
    return ",".join(f"{rows}:{dtype}" for rows, dtype in steps)


def step_mib(step) -> float:
    rows, dtype = step
    return rows * 512 * DTYPE_BYTES[dtype] / (1 << 20)


# --------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------


def _child(args) -> dict:
    started = time.perf_counter()
    registered = harness.registered()
    import torch

    importlib.import_module(registered.WORKSPACE_MODULE)
    imported = time.perf_counter()
    if args.device == "cuda":
        torch.cuda.init()
    cuda_ready = time.perf_counter()

    steps = parse_steps(args.steps)
    snapshot_error = None
    if args.snapshot:
        try:
            # Python stacks only: symbolising C++ frames at dump time would cost seconds.
            torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
        except Exception as exc:  # a picture is not worth losing the figure
            snapshot_error = f"{type(exc).__name__}: {exc}"
    result = registered.run_case(STEPS_CASE, args.device, args.budget_mib, steps=steps)
    body_done = time.perf_counter()
    if args.snapshot and snapshot_error is None:
        try:
            torch.cuda.memory._dump_snapshot(args.snapshot)
            torch.cuda.memory._record_memory_history(enabled=None)
            result["snapshot"] = args.snapshot
        except Exception as exc:
            snapshot_error = f"{type(exc).__name__}: {exc}"
    if snapshot_error:
        result["snapshot_error"] = snapshot_error

    result["timings_s"] = {
        "import": imported - started,
        "cuda_init": cuda_ready - imported,
        "body": body_done - cuda_ready,
    }
    result["overlay"] = _overlay_state()
    return result


def _overlay_state() -> str:
    try:
        import sglang_overlay
    except ImportError:
        return "not-installed"
    return ",".join(sorted({record["state"] for record in sglang_overlay.status()}))


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


class ChildFailed(RuntimeError):
    """The child ended without a result line (a crash, not an OOM: an OOM is a result)."""


def launch(steps, device: str, budget_mib: int, mode: str, snapshot=None, timeout_s=300) -> dict:
    """Run ``steps`` in a fresh capped child under ``mode``; adds the wall time seen from here."""
    from ci.runner import mode_env

    env = harness.isolated_env(mode_env(mode))  # the registered launcher's isolation
    command = [
        sys.executable,
        "-m",
        "benchmark.capped",
        "--steps",
        format_steps(steps),
        "--device",
        device,
        "--budget-mib",
        str(budget_mib),
    ]
    if snapshot:
        command += ["--snapshot", str(snapshot)]
    started = time.perf_counter()
    proc = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=REPO
    )
    wall = time.perf_counter() - started
    result = harness.parse_result(proc.stdout)
    if result is not None:
        return {**result, "wall_s": wall, "mode": mode}
    raise ChildFailed(
        f"{mode} {format_steps(steps)} on {device} under {budget_mib} MiB exited "
        f"{proc.returncode} without a result\n{proc.stderr[-3000:]}"
    )


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="one capped workspace scenario (benchmark child)")
    parser.add_argument("--steps", required=True, help="ROWS:DTYPE,... requested in order")
    parser.add_argument("--device", required=True, choices=["cpu", "cuda"])
    parser.add_argument("--budget-mib", type=int, required=True)
    parser.add_argument("--snapshot", help="CUDA: dump a memory snapshot (pickle) here")
    args = parser.parse_args(argv)
    result = _child(args)
    print(harness.RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
