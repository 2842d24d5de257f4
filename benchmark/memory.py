"""Replacement memory, unmodified vs change, each probe a fresh capped child (``capped``).

``peaks``: peak during a replacement divided by the new buffer's size. CUDA reads
``torch.cuda.max_memory_allocated`` from one child per repeat; CPU has no allocation counter
that the cap obeys, so the figure there is the smallest ``RLIMIT_AS`` budget that passes,
found by search. ``largest_fit``: under a cap C with the workspace already holding X, the
largest bf16 replacement that succeeds. Tasks of both modes are queued alternately (A B A B)
and run ``jobs`` at a time, so the two modes share the machine's state side by side.
"""

import math
from concurrent.futures import ThreadPoolExecutor

from benchmark import capped, search
from benchmark.stats import summary
from evidence.model import MODES

MIB_ROWS = capped.ROWS_PER_MIB_BF16

# The seed's three transitions (``capped.TRANSITIONS``); the sweep adds more
# (old, new, dtype) pairs. Each is a list of (rows, dtype) requests, the last the replacement.
SWEEP = {
    "grow_bf16_16_to_96_mib": [(16 * MIB_ROWS, "bfloat16"), (96 * MIB_ROWS, "bfloat16")],
    "replace_bf16_32_with_fp8_64_mib": [
        (32 * MIB_ROWS, "bfloat16"),
        (128 * MIB_ROWS, "float8_e4m3fn"),
    ],
}
SWEEP_CUDA_ONLY = {
    "grow_bf16_96_to_128_mib": [(96 * MIB_ROWS, "bfloat16"), (128 * MIB_ROWS, "bfloat16")],
    "grow_bf16_512_to_768_mib": [(512 * MIB_ROWS, "bfloat16"), (768 * MIB_ROWS, "bfloat16")],
    "replace_fp8_256_with_bf16_512_mib": [
        (512 * MIB_ROWS, "float8_e4m3fn"),
        (512 * MIB_ROWS, "bfloat16"),
    ],
}
FILL_FRACTIONS = (0.25, 0.50, 0.75)
# Allocation granularity: CUDA's caching allocator rounds large blocks to 2 MiB; CPU's mmap
# works in 4 KiB pages, below this search's 1 MiB resolution.
GRANULARITY_MIB = {"cuda": 2.0, "cpu": 4 / 1024}
SNAPSHOT_TRANSITION = "grow_bf16_64_to_96_mib"


def transitions(device: str, quick: bool) -> dict:
    cases = dict(capped.TRANSITIONS)
    if not quick:
        cases.update(SWEEP)
        if device == "cuda":
            cases.update(SWEEP_CUDA_ONLY)
    return cases


def _interleaved(keys, repeats: int):
    """(key, mode, repeat) in the order A B A B, the pair's order flipping every repeat."""
    order = []
    for r in range(repeats):
        for key in keys:
            modes = MODES if r % 2 == 0 else MODES[::-1]
            order.extend((key, mode, r) for mode in modes)
    return order


def _run_all(tasks, work, jobs: int) -> dict:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {task: pool.submit(work, *task) for task in tasks}
        return {task: future.result() for task, future in futures.items()}


def _passes(result: dict) -> bool:
    if result["outcome"] not in ("pass", "oom"):
        raise capped.ChildFailed(f"unexpected outcome {result['outcome']}: {result}")
    return result["outcome"] == "pass"


# ------------------------------------------------------------------------------------ peaks


def peaks(device: str, repeats: int, jobs: int, quick: bool = False, snapshot_dir=None) -> dict:
    cases = transitions(device, quick)

    def work(name, mode, repeat):
        steps = cases[name]
        old, new = capped.step_mib(steps[-2]), capped.step_mib(steps[-1])
        if device == "cuda":
            snapshot = None
            if snapshot_dir and repeat == 0 and name == SNAPSHOT_TRANSITION:
                snapshot = str(snapshot_dir / f"snapshot-{mode}.pickle")
            result = capped.launch(steps, device, math.ceil(old + new) + 256, mode, snapshot)
            if not _passes(result):
                raise capped.ChildFailed(f"{name} {mode} OOM under a generous cap: {result}")
            return {
                "peak_mib": result["peak_allocated_mib"],
                "probes": 1,
                "snapshot": result.get("snapshot"),
            }
        guess = math.ceil(old + new if mode == "unmodified" else max(old, new))
        found = search.smallest_passing(
            lambda b: _passes(capped.launch(steps, device, b, mode)),
            guess,
            floor=math.floor(max(old, new) / 2),
            ceiling=math.ceil(old + new) + 64,
        )
        if found.value is None:
            raise capped.ChildFailed(f"{name} {mode}: no budget up to old + new + 64 MiB passes")
        return {"peak_mib": found.value, "probes": len(found.probes), "at_bound": found.at_bound}

    raw = _run_all(_interleaved(list(cases), repeats), work, jobs)
    out = {}
    for name, steps in cases.items():
        old, new = capped.step_mib(steps[-2]), capped.step_mib(steps[-1])
        row = {
            "steps": capped.format_steps(steps),
            "old_mib": old,
            "new_mib": new,
            # What the replacement cannot go below: the new buffer, or the old one it replaces
            # when that is larger (it is held before the request arrives).
            "limit_ratio": max(old, new) / new,
            "probes": sum(v["probes"] for (n, _, _), v in raw.items() if n == name),
        }
        for mode in MODES:
            values = [v["peak_mib"] for (n, m, _), v in raw.items() if (n, m) == (name, mode)]
            row[mode] = {"peak_mib": summary(values), "ratio": summary(v / new for v in values)}
            snaps = [v.get("snapshot") for (n, m, _), v in raw.items() if (n, m) == (name, mode)]
            if any(snaps):
                row[mode]["snapshot"] = next(s for s in snaps if s)
        out[name] = row
    method = (
        "torch.cuda.max_memory_allocated, one child per repeat"
        if device == "cuda"
        else "smallest RLIMIT_AS budget above the child's address space that passes "
        "(1 MiB resolution, galloping search from the expected value, then bisection)"
    )
    return {"device": device, "repeats": repeats, "method": method, "transitions": out}


# ------------------------------------------------------------------------------ largest fit


def fit_limit(cap_mib, granularity_mib) -> float:
    """The largest replacement a cap can hold: the largest multiple of the allocator's
    granularity within it. The one place this is computed; the tables read it from here."""
    return math.floor(cap_mib / granularity_mib) * granularity_mib


def largest_fit(device: str, caps_mib, repeats: int, jobs: int) -> dict:
    granularity = GRANULARITY_MIB[device]
    slack = math.ceil(granularity)  # CUDA: 2 MiB
    keys = [(cap, int(cap * f)) for cap in caps_mib for f in FILL_FRACTIONS]

    def work(key, mode, repeat):
        cap, held = key

        def fits(size_mib):
            steps = [(held * MIB_ROWS, "bfloat16"), (size_mib * MIB_ROWS, "bfloat16")]
            return _passes(capped.launch(steps, device, cap, mode))

        # CPU's cap is relative to the address space at capping time, which can shrink a
        # little afterwards, so the search may find the cap itself: it is allowed to.
        guess = (cap if mode == "change" else cap - held) - (slack if device == "cuda" else 0)
        found = search.largest_passing(fits, guess, floor=held, ceiling=cap + 4)
        return {"largest_mib": found.value, "probes": len(found.probes)}

    raw = _run_all(_interleaved(keys, repeats), work, jobs)
    rows = []
    for cap, held in keys:
        row = {
            "cap_mib": cap,
            "held_mib": held,
            "limit_mib": fit_limit(cap, granularity),
        }
        for mode in MODES:
            values = [
                v["largest_mib"] for (k, m, _), v in raw.items() if (k, m) == ((cap, held), mode)
            ]
            # A value equal to what is held means no larger replacement fits at all.
            row[mode] = summary(values) if None not in values else None
        row["probes"] = sum(v["probes"] for (k, _, _), v in raw.items() if k == (cap, held))
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
