"""One capped replacement scenario in a fresh process: the child, and its launcher.

The child imports sglang's real workspace class, caps its own allocator (CPU: ``RLIMIT_AS`` =
its address space + the budget, one thread; CUDA: a CUDA context, then
``set_per_process_memory_fraction``), makes a sequence of requests and reports one result:
pass or OOM, the peak where the device measures one (CUDA), phase timings, and on request a
CUDA memory snapshot. ``launch`` starts it as a fresh interpreter with the overlay on
(``change``) or off (``unmodified``). For the benchmarks' fit limits only: the proofs measure
peaks without a cap (``test/registered``: the CUDA allocator's statistics; ``proofs/cpu``:
torch's profiler).

Run by hand, from the repository root: ``python -m benchmark.capped --steps
65536:bfloat16,98304:bfloat16 --device cpu --budget-mib 128``
"""

import argparse
import importlib
import inspect
import json
import subprocess
import sys
import time
from pathlib import Path
from types import MappingProxyType

from abtest import modes

REPO = Path(__file__).resolve().parent.parent
WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
WORKSPACE_CLASSES = ("SparsePrefillKVBuffer", "SparsePrefillWorkspace")  # 0.5.23, 0.5.15-0.5.22
RESULT_PREFIX = "DSV4_CAPPED_RESULT "
MIB = 1 << 20
ROWS_PER_MIB_BF16 = 1024  # rows are (num_tokens, 1, 512): 1 KiB per token in bf16
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}
# The seed's three transitions, each a sequence of (rows, dtype) requests, the last the
# replacement: 64 -> 96 MiB bf16, 48 MiB fp8 -> 96 MiB bf16, 96 MiB bf16 -> 48 MiB fp8.
TRANSITIONS = MappingProxyType(
    {
        "grow_bf16_64_to_96_mib": ((65536, "bfloat16"), (98304, "bfloat16")),
        "replace_fp8_48_with_bf16_96_mib": ((98304, "float8_e4m3fn"), (98304, "bfloat16")),
        "shrink_by_dtype_bf16_96_to_fp8_48_mib": ((98304, "bfloat16"), (98304, "float8_e4m3fn")),
    }
)


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
    return rows * 512 * DTYPE_BYTES[dtype] / MIB


# --------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------


def workspace_class(module):
    for name in WORKSPACE_CLASSES:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            return cls
    raise LookupError(f"{WORKSPACE_MODULE} has none of {WORKSPACE_CLASSES}")


def _address_space_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def cap_allocator(torch, device: str, budget_mib: int) -> None:
    if device == "cuda":
        torch.cuda.init()
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(budget_mib * MIB / total, 0)
        torch.cuda.reset_peak_memory_stats()
        return
    import resource

    torch.set_num_threads(1)
    torch.empty(1).add_(1)  # let torch map whatever it maps on first use before the cap
    limit = _address_space_bytes() + budget_mib * MIB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "can't allocate memory" in text
        or "out of memory" in text
    )


def run_steps(steps, device: str, budget_mib: int, snapshot=None) -> dict:
    """The requests in this process, under the cap: the child's whole job."""
    started = time.perf_counter()
    import torch

    cls = workspace_class(importlib.import_module(WORKSPACE_MODULE))
    imported = time.perf_counter()
    takes_dtype = "dtype" in inspect.signature(cls.get).parameters
    if not takes_dtype and any(dtype != "bfloat16" for _, dtype in steps):
        return {"outcome": "skip", "detail": f"{cls.__name__}.get has no dtype parameter"}
    cap_allocator(torch, device, budget_mib)
    cuda_ready = time.perf_counter()
    if snapshot:
        # Python stacks only: symbolising C++ frames at dump time would cost seconds.
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
    result = {"class": cls.__name__, "budget_mib": budget_mib, "outcome": "pass"}
    workspace = cls(torch.device(device))
    try:
        for rows, dtype in steps:
            if takes_dtype:
                view = workspace.get(rows, getattr(torch, dtype))
            else:
                view = workspace.get(rows)
            del view
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        result.update(outcome="oom", detail=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    body_done = time.perf_counter()
    if device == "cuda":
        result["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MIB
    if snapshot:
        torch.cuda.memory._dump_snapshot(snapshot)
        result["snapshot"] = snapshot
    result["timings_s"] = {
        "import": imported - started,
        "cuda_init": cuda_ready - imported,
        "body": body_done - cuda_ready,
    }
    return result


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


class ChildFailed(RuntimeError):
    """The child ended without a result line (a crash, not an OOM: an OOM is a result)."""


def child_env(mode: str) -> dict:
    """The mode's environment (overlay on or off), isolated: one thread, one malloc arena."""
    setup = modes.ModeSetup(mode, overlay=mode == "change")
    env = modes.environment(setup)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="1")
    return env


def parse_result(stdout: str):
    """The result line a child printed, as a dict, or None."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    return None


def launch(steps, device: str, budget_mib: int, mode: str, snapshot=None, timeout_s=300) -> dict:
    """Run ``steps`` in a fresh capped child under ``mode``; adds the wall time seen from here."""
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
        command, env=child_env(mode), capture_output=True, text=True, timeout=timeout_s, cwd=REPO
    )
    wall = time.perf_counter() - started
    result = parse_result(proc.stdout)
    if result is not None:
        return {**result, "wall_s": wall, "mode": mode}
    raise ChildFailed(
        f"{mode} {format_steps(steps)} on {device} under {budget_mib} MiB exited "
        f"{proc.returncode} without a result\n{proc.stderr[-3000:]}"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="one capped workspace scenario")
    parser.add_argument("--steps", required=True, help="ROWS:DTYPE,... requested in order")
    parser.add_argument("--device", required=True, choices=["cpu", "cuda"])
    parser.add_argument("--budget-mib", type=int, required=True)
    parser.add_argument("--snapshot", help="CUDA: dump a memory snapshot (pickle) here")
    args = parser.parse_args(argv)
    result = run_steps(parse_steps(args.steps), args.device, args.budget_mib, args.snapshot)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
