"""The ``hot`` part: calls per second of the workspace's reuse path (``get``, ``get_with_head``),
sglang's method against the overlay's, alternated in one process, bound as the engine calls it."""

import importlib
import timeit

from tools.benchmark import summary

REUSE_ROWS = 4096  # requests that fit the buffer: the hot path


def measure(device: str = "cpu", rounds: int = 21, number: int = 20000) -> dict:
    import torch

    import sglang_overlay
    from sglang_overlay import WORKSPACE_MODULE, shapes

    records = sglang_overlay.apply()
    if records[0]["state"] != "applied":
        raise RuntimeError(f"overlay not applied here: {records[0]}")
    cls = shapes.workspace_class(importlib.import_module(WORKSPACE_MODULE))
    method = "_reserve" if "_reserve" in vars(cls) else "get"
    variants = {"overlay": vars(cls)[method]}
    variants["original"] = variants["overlay"].__wrapped__
    workspace = cls(torch.device(device))
    workspace.get(2 * REUSE_ROWS)  # allocate once; every timed call reuses

    calls = {"get": lambda: workspace.get(REUSE_ROWS)}
    if hasattr(cls, "get_with_head"):
        key = ("cache", 1, "indices", 2)
        calls["get_with_head"] = lambda: workspace.get_with_head(REUSE_ROWS, key)
    results = {}
    try:
        for name, call in calls.items():
            rates = {"original": [], "overlay": []}
            for r in range(rounds):
                for label in ("overlay", "original") if r % 2 else ("original", "overlay"):
                    setattr(cls, method, variants[label])
                    rates[label].append(number / timeit.timeit(call, number=number))
            ratios = [o / a for o, a in zip(rates["overlay"], rates["original"], strict=True)]
            results[name] = {"ratio_overlay_over_original": summary(ratios), "goal": ">= 0.98"}
            results[name] |= {f"{k}_calls_per_s": summary(v) for k, v in rates.items()}
    finally:
        setattr(cls, method, variants["overlay"])
    found = {"device": device, "class": cls.__name__, "rounds": rounds, "calls_per_round": number}
    return found | {"results": results}
