"""Replacement memory under a cap, unmodified vs change, each probe a fresh capped child.

The child caps its own allocator (CPU: ``RLIMIT_AS`` = its address space + the budget, one
thread; CUDA: ``set_per_process_memory_fraction``), makes the requests on sglang's real class
and hands back one result (``launch``): pass or OOM, and the CUDA peak. ``peaks``:
a replacement's peak over the new size (CPU: the smallest budget that passes, searched);
``largest_fit``: the largest replacement under a cap C with X held. By hand, from the root:
``python -m tools.benchmark.capped --steps 65536:bfloat16,98304:bfloat16 --device cpu --budget-mib 128``
"""

import argparse
import importlib
import inspect
import math
import sys
from concurrent.futures import ThreadPoolExecutor

from sglang_overlay import WORKSPACE_MODULE
from sglang_overlay.shapes import workspace_class
from tools.benchmark import launch, search, summary
from tools.benchmark.launch import MODES, BenchmarkError

MIB = 1 << 20
BF16, FP8 = "bfloat16", "float8_e4m3fn"
DTYPE_BYTES = {BF16: 2, "float16": 2, "float32": 4, FP8: 1}
ROWS_PER_MIB_BF16 = 1024  # rows are (num_tokens, 1, 512): 1 KiB per token in bf16
# Each a sequence of (rows, dtype) requests, the last the replacement. The regression test's
# three (all that ``--quick`` runs), then the sweep's, then the sweep's that need a GPU.
TRANSITIONS = {
    "grow_bf16_64_to_96_mib": ((65536, BF16), (98304, BF16)),
    "replace_fp8_48_with_bf16_96_mib": ((98304, FP8), (98304, BF16)),
    "shrink_by_dtype_bf16_96_to_fp8_48_mib": ((98304, BF16), (98304, FP8)),
}
SWEEP = {
    "grow_bf16_16_to_96_mib": ((16384, BF16), (98304, BF16)),
    "replace_bf16_32_with_fp8_64_mib": ((32768, BF16), (131072, FP8)),
}
SWEEP_CUDA_ONLY = {
    "grow_bf16_96_to_128_mib": ((98304, BF16), (131072, BF16)),
    "grow_bf16_512_to_768_mib": ((524288, BF16), (786432, BF16)),
    "replace_fp8_256_with_bf16_512_mib": ((524288, FP8), (524288, BF16)),
}
FILL_FRACTIONS = (0.25, 0.50, 0.75)
# Allocation granularity: CUDA's caching allocator rounds large blocks to 2 MiB; CPU's mmap
# works in 4 KiB pages, below the searches' 1 MiB resolution.
GRANULARITY_MIB = {"cuda": 2.0, "cpu": 4 / 1024}


def parse_steps(text: str) -> list:
    """``"65536:bfloat16,98304:float8_e4m3fn"`` -> ``[(65536, "bfloat16"), ...]``."""
    steps = []
    for item in text.split(","):
        rows, _, dtype = item.strip().partition(":")
        if not rows.isdigit() or int(rows) <= 0 or dtype not in DTYPE_BYTES:
            raise BenchmarkError(
                f"bad step {item!r}: use ROWS:DTYPE with DTYPE in {list(DTYPE_BYTES)}"
            )
        steps.append((int(rows), dtype))
    return steps


def format_steps(steps) -> str:
    return ",".join(f"{rows}:{dtype}" for rows, dtype in steps)


def step_mib(step) -> float:
    rows, dtype = step
    return rows * 512 * DTYPE_BYTES[dtype] / MIB


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
    with open("/proc/self/status") as status:
        vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    limit = vm_kib * 1024 + budget_mib * MIB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_steps(steps, device: str, budget_mib: int) -> dict:
    """The requests in this process, under the cap: the child's whole job."""
    import torch

    cls = workspace_class(importlib.import_module(WORKSPACE_MODULE))
    if cls is None:
        raise LookupError(f"{WORKSPACE_MODULE} has no workspace class")
    takes_dtype = "dtype" in inspect.signature(cls.get).parameters
    if not takes_dtype and any(dtype != BF16 for _, dtype in steps):
        return {"outcome": "skip", "detail": f"{cls.__name__}.get has no dtype parameter"}
    cap_allocator(torch, device, budget_mib)
    result = {"class": cls.__name__, "budget_mib": budget_mib, "outcome": "pass"}
    workspace = cls(torch.device(device))
    try:
        for rows, dtype in steps:
            request = (rows, getattr(torch, dtype)) if takes_dtype else (rows,)
            workspace.get(*request)  # the view is dropped: a held one keeps its storage alive
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        text = str(exc)
        oom = isinstance(exc, (MemoryError, torch.OutOfMemoryError))
        if not (oom or "can't allocate memory" in text or "out of memory" in text):
            raise
        result.update(outcome="oom", detail=f"{type(exc).__name__}: {text.splitlines()[0]}")
    if device == "cuda":
        result["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MIB
    return result


def launch_steps(steps, device: str, budget_mib: int, mode: str, timeout_s=300) -> dict:
    """Run ``steps`` in a fresh capped child under ``mode``, one thread and one malloc arena;
    its result with the wall time seen from here."""
    env = launch.side_env(mode)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="1")
    command = [sys.executable, "-m", "tools.benchmark.capped", "--steps", format_steps(steps)]
    command += ["--device", device, "--budget-mib", str(budget_mib)]
    ran = launch.run(command, env, timeout_s)  # an OOM is a result; a crash is an error
    return {**ran.result, "wall_s": ran.wall_s, "mode": mode}


def _passes(result: dict) -> bool:
    if result["outcome"] not in ("pass", "oom"):
        raise BenchmarkError(f"unexpected outcome {result['outcome']}: {result}")
    return result["outcome"] == "pass"


def _alternating(keys, repeats: int, work, jobs: int) -> dict:
    """``work(key, mode, repeat)`` for each, queued A B A B with the pair's order flipping
    every repeat, ``jobs`` at a time: ``{(key, mode): [result of each repeat]}``."""
    results = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [
            (key, mode, pool.submit(work, key, mode, r))
            for r in range(repeats)
            for key in keys
            for mode in (MODES if r % 2 == 0 else MODES[::-1])
        ]
        for key, mode, future in futures:
            results.setdefault((key, mode), []).append(future.result())
    return results


def peaks(device: str, repeats: int, jobs: int, quick: bool = False) -> dict:
    cases = dict(TRANSITIONS)
    if not quick:
        cases |= SWEEP | (SWEEP_CUDA_ONLY if device == "cuda" else {})

    def work(name, mode, repeat):
        steps = cases[name]
        old, new = step_mib(steps[-2]), step_mib(steps[-1])
        if device == "cuda":
            result = launch_steps(steps, device, math.ceil(old + new) + 256, mode)
            if not _passes(result):
                raise BenchmarkError(f"{name} {mode} OOM under a generous cap: {result}")
            return {"peak_mib": result["peak_allocated_mib"], "probes": 1}
        found = search.smallest_passing(
            lambda b: _passes(launch_steps(steps, device, b, mode)),
            math.ceil(old + new if mode == "unmodified" else max(old, new)),
            floor=math.floor(max(old, new) / 2),
            ceiling=math.ceil(old + new) + 64,
        )
        if found.value is None:
            raise BenchmarkError(f"{name} {mode}: no budget up to old + new + 64 MiB passes")
        return {"peak_mib": found.value, "probes": len(found.probes)}

    raw = _alternating(list(cases), repeats, work, jobs)
    out = {}
    for name, steps in cases.items():
        old, new = step_mib(steps[-2]), step_mib(steps[-1])
        out[name] = row = {
            "steps": format_steps(steps),
            "old_mib": old,
            "new_mib": new,
            # What the replacement cannot go below: the new buffer, or the old one it replaces
            # when that is larger (it is held before the request arrives).
            "limit_ratio": max(old, new) / new,
            "probes": sum(v["probes"] for mode in MODES for v in raw[name, mode]),
        }
        for mode in MODES:
            values = [v["peak_mib"] for v in raw[name, mode]]
            row[mode] = {"peak_mib": summary(values), "ratio": summary(v / new for v in values)}
    method = (
        "torch.cuda.max_memory_allocated, one child per repeat"
        if device == "cuda"
        else "smallest RLIMIT_AS budget above the child's address space that passes "
        "(1 MiB resolution, galloping search from the expected value, then bisection)"
    )
    return {"device": device, "repeats": repeats, "method": method, "transitions": out}


def largest_fit(device: str, caps_mib, repeats: int, jobs: int) -> dict:
    granularity = GRANULARITY_MIB[device]
    keys = [(cap, int(cap * f)) for cap in caps_mib for f in FILL_FRACTIONS]

    def work(key, mode, repeat):
        cap, held = key

        def fits(size_mib):
            steps = [(held * ROWS_PER_MIB_BF16, BF16), (size_mib * ROWS_PER_MIB_BF16, BF16)]
            return _passes(launch_steps(steps, device, cap, mode))

        # CPU's cap is relative to the address space at capping time, which can shrink a
        # little afterwards, so the search may find the cap itself: it is allowed to.
        slack = math.ceil(granularity) if device == "cuda" else 0
        guess = (cap if mode == "change" else cap - held) - slack
        found = search.largest_passing(fits, guess, floor=held, ceiling=cap + 4)
        return {"largest_mib": found.value, "probes": len(found.probes)}

    raw = _alternating(keys, repeats, work, jobs)
    rows = []
    for cap, held in keys:
        row = {"cap_mib": cap, "held_mib": held}
        for mode in MODES:
            values = [v["largest_mib"] for v in raw[(cap, held), mode]]
            # A value equal to what is held means no larger replacement fits at all.
            row[mode] = summary(values) if None not in values else None
        row["probes"] = sum(v["probes"] for mode in MODES for v in raw[(cap, held), mode])
        rows.append(row)
    return {
        "device": device,
        "repeats": repeats,
        "granularity_mib": granularity,
        "resolution_mib": 1,
        "method": "bisection over the replacement size (whole MiB, bf16) under the cap, "
        "workspace first filled to X",
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="one capped workspace scenario")
    parser.add_argument("--steps", required=True, help="ROWS:DTYPE,... requested in order")
    parser.add_argument("--device", required=True, choices=["cpu", "cuda"])
    parser.add_argument("--budget-mib", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        steps = parse_steps(args.steps)
    except BenchmarkError as exc:
        parser.error(str(exc))
    launch.hand_back(run_steps(steps, args.device, args.budget_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
