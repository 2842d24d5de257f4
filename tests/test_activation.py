"""The overlay in one shared real sglang 0.5.23 process (``overlay_runs``)."""

from functools import partial

import overlay_runs
import pytest

from sglang_overlay import PATCH_ID

default_process = overlay_runs.fixture("default_process")
observe = partial(overlay_runs.observe, "default_process")

START_MODULES = observe(
    "start_modules",
    """
    return sorted(m for m in sys.modules if m.startswith(("sglang", "torch", "wrapt")))
    """,
)

# The program's first statement that touches sglang: nothing of the user's imported the overlay.
FIRST_IMPORT = observe(
    "first_import",
    """
    import {WORKSPACE_MODULE} as m
    return getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None)
    """,
)

SECOND_ACTIVATION = observe(
    "second_activation",
    """
    import {WORKSPACE_MODULE} as m
    from sglang.srt.plugins import load_plugins
    first = vars(m.SparsePrefillKVBuffer)["_reserve"]
    load_plugins()
    import sglang_overlay
    sglang_overlay.apply()
    return [vars(m.SparsePrefillKVBuffer)["_reserve"] is first,
            first.__wrapped__.__name__, sglang_overlay.status()[0]["state"]]
    """,
)


# no logging, lock or clock call in what dynamo traces; compiled replaces and reuses as eager
TORCH_COMPILE = observe(
    "torch_compile",
    """
    import torch
    import {WORKSPACE_MODULE} as m
    import sglang_overlay
    assert sglang_overlay.status()[0]["state"] == "applied"
    buffer = m.SparsePrefillKVBuffer(torch.device("cpu"))
    compiled = torch.compile(lambda n, dtype: buffer.get(n, dtype), fullgraph=True, backend="eager")
    shapes = [tuple(compiled(n, dtype).shape) for n, dtype in
              ((16, torch.bfloat16), (32, torch.bfloat16), (8, torch.bfloat16), (8, torch.float8_e4m3fn))]
    return [shapes, tuple(buffer._buffer.shape), str(buffer._buffer.dtype)]
    """,
)


FP8 = "torch.float8_e4m3fn"


@pytest.mark.parametrize(
    "observation, expected",
    [
        (FIRST_IMPORT, PATCH_ID),  # plain `python -c`: nothing of the user's imports the overlay
        (START_MODULES, ["sglang_overlay", "sglang_overlay.activation"]),
        (SECOND_ACTIVATION, [True, "_reserve", "applied"]),  # sglang's plugin loader: a no-op
        (TORCH_COMPILE, [[[16, 1, 512], [32, 1, 512], [8, 1, 512], [8, 1, 512]], [8, 1, 512], FP8]),
    ],
)
def test_first_import_is_patched_by_the_start_up_hook_alone_and_compiles(
    default_process, observation, expected
):
    assert default_process.value(observation) == expected


HOOKED = """
import os, torch
import {WORKSPACE_MODULE} as m
import sglang_overlay
from sglang_overlay import observe, release_first
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
def around(original, *args, **kwargs):
    return original(*args, **kwargs)
HookRegistry.register("{WORKSPACE_MODULE}.SparsePrefillKVBuffer._reserve", around, HookType.AROUND)
HookRegistry.apply_hooks()
hooked = vars(m.SparsePrefillKVBuffer)["_reserve"]
record, problem = observe.read_record(os.getpid(), os.getuid())
steps = [record and record["patches"][0]["state"], problem]  # what status --processes reads
steps += [sglang_overlay.status()[0], sglang_overlay.apply()[0]]
steps.append(vars(m.SparsePrefillKVBuffer)["_reserve"] is hooked)
before = release_first.LOGS[sglang_overlay.PATCH_ID].high_water_bytes
# Past the process's high-water mark (1 KiB a bf16 row): if release-first runs, the mark moves.
m.SparsePrefillKVBuffer(torch.device("cpu")).get(before // 1024 + 4096)
steps.append(release_first.LOGS[sglang_overlay.PATCH_ID].high_water_bytes > before)
steps.append(sglang_overlay.remove()[0])
steps.append(vars(m.SparsePrefillKVBuffer)["_reserve"] is hooked)
return steps
"""
HOOK_AROUND = observe("hook_AROUND", HOOKED)


def test_another_hook_over_the_method_is_reported_by_status_apply_and_remove(default_process):
    recorded, problem, seen, applied, unchanged, ran, removed, still = default_process.value(
        HOOK_AROUND
    )
    assert (recorded, problem) == ("wrapped", None)  # the record follows the hook at once
    assert (seen["state"], applied["state"], removed["state"]) == ("wrapped",) * 3
    assert "hook_registry.py" in seen["reason"] and "remove() cannot" in removed["reason"]
    assert (unchanged, ran, still) == (True, True, True)
