"""The address-keyed design's hazard, measured: does a release-first replacement get the old
address back?

Each transition runs on the real ``SparsePrefillKVBuffer`` in a fresh process, holding-first
(unmodified) and release-first (the overlay); tools/benchmark/README.md says why and what is recorded.
"""

import argparse
import importlib
import json
import os
import platform
import sys
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from sglang_overlay import PATCH_ID, WORKSPACE_MODULE
from tools.benchmark.capped import BF16, FP8, MIB, RESULT_PREFIX, run_child

ORDERS = ("holding-first", "release-first")


class Transition(NamedTuple):
    name: str
    steps: tuple  # (rows, dtype name) before and after the replacement
    freed_block_mib: int = 0  # a block allocated and freed first


TRANSITIONS = (
    Transition("bf16 96 MiB -> fp8 48 MiB", ((98304, BF16), (98304, FP8))),
    Transition("fp8 48 MiB -> bf16 96 MiB", ((98304, FP8), (98304, BF16))),
    Transition("grow bf16 64 -> 96 MiB", ((65536, BF16), (98304, BF16))),
    Transition(
        "grow bf16 64 -> 96 MiB after a freed 256 MiB block", ((65536, BF16), (98304, BF16)), 256
    ),
    Transition("grow bf16 43 -> 256 rows", ((43, BF16), (256, BF16))),
    Transition("grow bf16 11 -> 512 rows", ((11, BF16), (512, BF16))),
    Transition("fp8 -> bf16 at 300 rows", ((300, FP8), (300, BF16))),
    Transition("grow bf16 2,048 -> 4,096 rows", ((2048, BF16), (4096, BF16))),
)
BY_NAME = {t.name: t for t in TRANSITIONS}


class AddressKeyedGather:
    """Validity keyed on (source, allocation address), as that design's gather cache is."""

    def filled(self, source_id, rows) -> None:
        self.key = (source_id, rows.data_ptr())

    def still_valid(self, source_id, workspace, rows) -> bool:
        return self.key == (source_id, rows.data_ptr())


class GenerationKeyedGather:
    """Validity keyed on (source, the workspace's replacement generation)."""

    def filled(self, source_id, workspace) -> None:
        self.key = (source_id, workspace.generation)

    def still_valid(self, source_id, workspace, rows) -> bool:
        return self.key == (source_id, workspace.generation)


def run_transition(transition: Transition, order: str, device: str) -> dict:
    """The child's job: one transition in one order, in this fresh process."""
    import torch

    module = importlib.import_module(WORKSPACE_MODULE)
    import sglang_overlay  # the child runs in the repository root: always importable
    from sglang_overlay import overlay as patches

    if order == "release-first":
        # This patch alone: apply() imports every patched module, 4 CPU-s more per child.
        patches.apply_to_module(module, PATCH_ID)
    overlay = next(r["state"] for r in sglang_overlay.status() if r["patch"] == PATCH_ID)
    cls = getattr(module, "SparsePrefillKVBuffer", None)
    if cls is None or not hasattr(cls, "_reserve"):
        raise SystemExit("this sglang has no SparsePrefillKVBuffer._reserve (sglang 0.5.23 has)")
    if order == "release-first" and overlay != "applied":
        raise SystemExit(f"release-first needs the overlay applied, it is {overlay!r}")
    if order == "holding-first" and overlay == "applied":
        raise SystemExit("holding-first needs unmodified sglang: set SGLANG_OVERLAY_DISABLE=1")

    class GenerationCounted(cls):
        """Bumps a counter on every replacement; the weak reference tells a replacement from a
        reuse without keeping the old buffer alive, so the class's own order is measured."""

        generation = 0

        def _reserve(self, num_tokens, dtype):
            before = None if self._buffer is None else weakref.ref(self._buffer)
            rows = super()._reserve(num_tokens, dtype)
            if before is None or before() is not self._buffer:
                self.generation += 1
            return rows

    dev = torch.device(device)
    if transition.freed_block_mib:  # allocated and freed at once, as a busy allocator would
        torch.empty(transition.freed_block_mib * MIB, dtype=torch.uint8, device=dev)
    workspace = GenerationCounted(dev)
    by_address, by_generation = AddressKeyedGather(), GenerationKeyedGather()
    source_id = 7  # one unchanged source identity throughout, as in upstream's own test

    (rows0, dtype0), (rows1, dtype1) = transition.steps
    rows = workspace.get(rows0, getattr(torch, dtype0))
    rows.zero_()  # stands for the dequantisation of the source into the workspace
    by_address.filled(source_id, rows)
    by_generation.filled(source_id, workspace)
    old_ptr, generation = rows.data_ptr(), workspace.generation
    del rows
    rows = workspace.get(rows1, getattr(torch, dtype1))
    replaced = workspace.generation != generation
    return {
        "transition": transition.name,
        "order": order,
        "device": device,
        "torch": torch.__version__,
        "overlay": overlay,
        "replaced": replaced,
        "same_address": rows.data_ptr() == old_ptr,
        "address_key_stale": replaced and by_address.still_valid(source_id, workspace, rows),
        "generation_key_stale": replaced and by_generation.still_valid(source_id, workspace, rows),
    }


def launch(transition: Transition, order: str, device: str, timeout_s: float = 300) -> dict:
    args = [
        "tools.benchmark.hazard",
        "--child",
        transition.name,
        "--order",
        order,
        "--device",
        device,
    ]
    mode = "unmodified" if order == "holding-first" else "change"
    return run_child(args, mode, f"{transition.name} ({order})", timeout_s, isolated=False)


def summarize(rows: list) -> dict:
    """Per order: transitions that replaced, how many got the old address back, stale hits."""
    summary = {}
    for order in ORDERS:
        mine = [r for r in rows if r["order"] == order and r["replaced"]]
        summary[order] = {"replacements": len(mine)}
        for key in ("same_address", "address_key_stale", "generation_key_stale"):
            summary[order][key] = sum(r[key] for r in mine)
    return summary


def render(report: dict) -> str:
    """Markdown: the per-transition table and the totals, from a report as written by main."""
    lines = [
        f"Replacement transitions on the real `SparsePrefillKVBuffer` ({report['where']}), "
        "each in a fresh process:",
        "",
        "| transition | holding-first: same `data_ptr` | release-first: same `data_ptr` |",
        "| --- | --- | --- |",
    ]
    by_key = {(r["transition"], r["order"]): r for r in report["rows"]}
    for name in dict.fromkeys(r["transition"] for r in report["rows"]):
        cells = []
        for order in ORDERS:
            row = by_key.get((name, order))
            if row is None:
                cells.append("-")
            elif not row["replaced"]:
                cells.append("not replaced")
            else:
                cells.append("**yes**" if row["same_address"] else "no")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "| order | old address back | stale hits, keyed on address | "
        "stale hits, keyed on generation |",
        "| --- | --- | --- | --- |",
    ]
    for order, s in report["summary"].items():
        n = s["replacements"]
        lines.append(
            f"| {order} | {s['same_address']} of {n} | {s['address_key_stale']} of {n} | "
            f"{s['generation_key_stale']} of {n} |"
        )
    return "\n".join(lines) + "\n"


def report(device: str, jobs: int) -> dict:
    """Every transition in both orders, each in a fresh process; what ``render`` reads."""
    import torch

    pairs = [(t, order) for t in TRANSITIONS for order in ORDERS]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        rows = list(pool.map(lambda pair: launch(pair[0], pair[1], device), pairs))
    if device == "cuda":
        where = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    else:
        libc = " ".join(platform.libc_ver()) or "unknown libc"
        where = f"CPU {platform.machine()}, {libc}, torch {torch.__version__}"
    return {
        "where": where,
        "command": "python -m tools.benchmark.hazard --device " + device,
        "rows": rows,
        "summary": summarize(rows),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.benchmark.hazard", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    parser.add_argument("--jobs", type=int, help="fresh processes at once (default: CPUs, max 8)")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--child", metavar="TRANSITION", help=argparse.SUPPRESS)
    parser.add_argument("--order", choices=ORDERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child not in BY_NAME or not args.order or not args.device:
            parser.error("--child needs a known transition, --order and --device")
        result = run_transition(BY_NAME[args.child], args.order, args.device)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    measured = report(device, args.jobs or min(8, os.cpu_count() or 1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(measured, indent=2) + "\n")
    sys.stdout.write(render(measured))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
