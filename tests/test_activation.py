"""The overlay in real sglang 0.5.23 processes, as an operator's server meets it: the first
import patched with nothing of the user's, the second activation path a no-op, unknown and
already-fixed shapes left alone, apply/remove, another plugin's hook, torch.compile,
the replacement log, and the record ``status --processes`` reads while the server runs.

Importing sglang is most of what a fresh interpreter costs, so the observations share one
process per environment (``overlay_runs``): the default one (which also serves as a running
server) and one activated by sglang's plugin loader alone.
"""

import json
import sys

import overlay_runs
import pytest
from conftest import WORKSPACE_MODULE, clean_env

from sglang_overlay import FUSED_KV_PATCH_ID, PATCH_ID, __version__

ROW_BYTES = 512 * 2  # one bf16 row of the workspace
BOUND_S = 120
STATUS_KEYS = {"patch", "target", "sglang_version", "state", "reason"}

default_process = overlay_runs.fixture("default_process")
plugin_loader_after_process = overlay_runs.fixture("plugin_loader_after_process")

START_MODULES = overlay_runs.observe(
    "default_process",
    "start_modules",
    """
    return sorted(m for m in sys.modules if m.startswith(("sglang", "torch", "wrapt")))
    """,
)

# The program's first statement that touches sglang: nothing of the user's imported the overlay.
FIRST_IMPORT = overlay_runs.observe(
    "default_process",
    "first_import",
    """
    import {WORKSPACE_MODULE} as m
    return getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None)
    """,
)

SECOND_ACTIVATION = overlay_runs.observe(
    "default_process",
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


def test_plain_python_c_that_never_imports_the_overlay_gets_the_fix(default_process):
    assert default_process.value(FIRST_IMPORT) == PATCH_ID


def test_interpreter_start_loads_only_the_hook_and_nothing_it_would_need_later(default_process):
    assert default_process.value(START_MODULES) == ["sglang_overlay", "sglang_overlay.activation"]


def test_second_activation_path_is_a_no_op(default_process):
    assert default_process.value(SECOND_ACTIVATION) == [True, "_reserve", "applied"]


PLUGIN_LOADER_AFTER = overlay_runs.observe(
    "plugin_loader_after_process",
    "plugin_loader_after",
    """
    import sglang_overlay.activation as hook
    sys.meta_path.remove(hook.HOOK)  # only sglang's own plugin loader can activate us now
    from sglang.srt.plugins import load_plugins
    load_plugins()
    import {WORKSPACE_MODULE} as m
    return [getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None),
            hook.installed()]
    """,
)


def test_sglang_plugin_loader_alone_patches_a_module_imported_after_it(
    plugin_loader_after_process,
):
    assert plugin_loader_after_process.value(PLUGIN_LOADER_AFTER) == [PATCH_ID, True]


# ------------------------------------------------------- shapes, switches and apply/remove

# Loads a real copy of the installed workspace module whose allocating method was edited
# (old -> new), under a name of its own, then runs the overlay on it twice. The class is
# sglang's, only its text differs.
LOAD_VARIANT = f"""
def load_variant(old, new, name):
    import importlib.util, os, tempfile
    import {WORKSPACE_MODULE} as real
    from sglang_overlay import overlay
    source = open(real.__file__).read()
    assert source.count(old) == 1, "edit anchor not found exactly once"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name + ".py")
        with open(path, "w") as file:
            file.write(source.replace(old, new))
        spec = importlib.util.spec_from_file_location(name, path)
        variant = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(variant)
        for _ in range(2):  # while its source file exists: the overlay reads it
            overlay.apply_to_module(variant, overlay.PATCH_IDS[0])
    method = vars(variant.SparsePrefillKVBuffer)["_reserve"]
    return {{"status": overlay.status()[0],
             "patched": getattr(method, "__sglang_overlay_patch__", None)}}
"""

ALLOCATION = (
    "            self._buffer = torch.empty(\n                (num_tokens, 1, WORKSPACE_DIM),"
)
UNKNOWN = (
    "        assert num_tokens > 0\n        current_capacity",
    "        assert num_tokens >= 1\n        current_capacity",
)
RELEASED = (
    ALLOCATION,
    "            self._buffer = None\n            self._head_source = None\n" + ALLOCATION,
)


def _variant(name, edit) -> str:
    return LOAD_VARIANT + f"return load_variant({edit[0]!r}, {edit[1]!r}, {name!r})\n"


VARIANT_UNKNOWN = overlay_runs.observe(
    "default_process", "variant_unknown", _variant("workspace_variant_unknown", UNKNOWN)
)
VARIANT_FIXED = overlay_runs.observe(
    "default_process", "variant_fixed", _variant("workspace_variant_fixed", RELEASED)
)


def test_unknown_shape_is_left_untouched_with_one_warning_naming_version_and_reason(
    default_process,
):
    out = default_process.value(VARIANT_UNKNOWN)
    assert out["patched"] is None
    assert out["status"]["state"] == "unsupported"
    assert "unknown source of SparsePrefillKVBuffer._reserve" in out["status"]["reason"]
    warnings = default_process.overlay_warnings(VARIANT_UNKNOWN)
    assert len(warnings) == 1
    assert "sglang 0.5.23" in warnings[0] and "untouched" in warnings[0]


def test_source_that_already_releases_first_is_reported_upstream_fixed(default_process):
    out = default_process.value(VARIANT_FIXED)
    assert out["patched"] is None
    assert out["status"]["state"] == "upstream-fixed"
    assert default_process.overlay_warnings(VARIANT_FIXED) == []


APPLY_REMOVE = overlay_runs.observe(
    "default_process",
    "apply_remove",
    """
    import hashlib, inspect
    import {WORKSPACE_MODULE} as m
    import sglang_overlay
    cls = m.SparsePrefillKVBuffer
    patched = vars(cls)["_reserve"]
    original = patched.__wrapped__
    sglang_overlay.apply(); sglang_overlay.apply()
    same_after_apply = vars(cls)["_reserve"] is patched
    removed = sglang_overlay.remove()[0]["state"]
    restored = vars(cls)["_reserve"] is original
    text = hashlib.sha256(inspect.getsource(vars(cls)["_reserve"]).encode()).hexdigest()
    reapplied = sglang_overlay.apply()[0]["state"]
    return [same_after_apply, removed, restored, reapplied,
            getattr(vars(cls)["_reserve"], "__sglang_overlay_patch__", None)]
    """,
)


def test_apply_twice_is_a_no_op_and_remove_restores_the_exact_original(default_process):
    assert default_process.value(APPLY_REMOVE) == [True, "pending", True, "applied", PATCH_ID]


# ------------------------------------------------------------------------- the replacement log

# 0.5.23 replaces the buffer on every dtype switch: a q8/bf16 mix at a steady size. An
# observation of the shared default process, made while its workspace high-water mark is zero.
ALTERNATING_DTYPES = overlay_runs.observe(
    "default_process",
    "replacement_log",
    """
    import collections, logging
    import torch
    import {WORKSPACE_MODULE} as m
    levels = collections.Counter()
    class Count(logging.Handler):
        def emit(self, record):
            levels[record.levelname] += 1
    logger = logging.getLogger("sglang_overlay")
    count = Count()
    logger.addHandler(count); logger.setLevel(logging.DEBUG)
    try:
        workspace = m.SparsePrefillKVBuffer(torch.device("cpu"))
        for i in range(1000):
            workspace.get(64, torch.bfloat16 if i % 2 == 0 else torch.float8_e4m3fn)
    finally:  # what the process observes next logs as it would without this
        logger.removeHandler(count); logger.setLevel(logging.NOTSET)
    return levels
    """,
)


def test_alternating_dtypes_on_the_real_class_log_two_lines_not_a_thousand(default_process):
    counts = default_process.value(ALTERNATING_DTYPES)
    assert counts == {"INFO": 1, "DEBUG": 999, "WARNING": 1}


# ------------------------------------------------------- a running server and its record

# A server stand-in: the real workspace module in a process that keeps running. It grows the
# workspace to ROWS rows, prints "ready", then does what each stdin line asks.
SERVER = """
import sys, torch
import {WORKSPACE_MODULE} as m
buffer = m.SparsePrefillKVBuffer(torch.device("cpu"))
buffer.get(ROWS)
print("ready", flush=True)
for line in sys.stdin:
    buffer.get(int(line))
    print("done", flush=True)
return "served"
"""
overlay_runs.observe("default_process", "serve", SERVER.replace("ROWS", "2048"))


def processes(runtime_dir, pid, patch=PATCH_ID):
    """``status --processes --json --pid PID``: its exit code and ``patch``'s row by pid."""
    argv = [sys.executable, "-m", "sglang_overlay", "status", "--processes", "--json"]
    proc = overlay_runs.POOL.run(
        [*argv, "--pid", str(pid)],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)),
        cwd="/",
        timeout=BOUND_S,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.returncode, {r["pid"]: r for r in json.loads(proc.stdout) if r["patch"] == patch}


@overlay_runs.drive("default_process")
def _records_scenario(server, runtime_dir):
    """A 2048-row server: its row; grown to 4096; its record's mode; the record deleted and
    three requests that reuse the buffer; one past the high-water mark; then stopped."""
    seen = {"pid": server.pid}
    overlay_runs.serve_until_ready(server)
    seen["code"], rows = processes(runtime_dir, server.pid)
    seen["row"] = rows.get(server.pid)
    seen["fused_kv_row"] = processes(runtime_dir, server.pid, patch=FUSED_KV_PATCH_ID)[1].get(
        server.pid
    )
    overlay_runs.ask(server, 4096)
    seen["row_after_growth"] = processes(runtime_dir, server.pid)[1].get(server.pid)
    record = runtime_dir / f"{server.pid}.json"
    seen["record_mode"] = oct(record.stat().st_mode & 0o777) if record.exists() else None
    record.unlink(missing_ok=True)
    for rows in (16, 4096, 1024):  # reuse: no write
        overlay_runs.ask(server, rows)
    seen["record_after_reuse"] = record.exists()
    overlay_runs.ask(server, 8192)  # a replacement past the high-water mark: written again
    seen["record_after_replacement"] = json.loads(record.read_text()) if record.exists() else None
    seen["files_after_replacement"] = sorted(p.name for p in runtime_dir.iterdir())
    overlay_runs.stop(server)
    seen["listed_after_exit"] = sorted(processes(runtime_dir, server.pid)[1])
    seen["files_after_exit"] = sorted(p.name for p in runtime_dir.iterdir())
    return seen


def test_a_running_process_reports_its_state_build_and_high_water_mark(default_process):
    seen = default_process.driven
    row = seen["row"]
    assert row is not None, "the running server is not listed"
    assert (row["state"], row["patch"], row["overlay_version"]) == (
        "applied",
        PATCH_ID,
        __version__,
    )
    assert row["high_water_bytes"] == 2048 * ROW_BYTES and row["workspace_imported"] is True
    # the fused-KV patch has a row of its own: applied once some sglang import in that process
    # loaded its module (pending before), never grown there, so no high-water mark of the DSV4's
    fused = seen["fused_kv_row"]
    assert (fused["state"], fused["workspace_imported"]) in {("applied", True), ("pending", False)}
    assert fused["high_water_bytes"] == 0
    assert seen["row_after_growth"]["high_water_bytes"] == 4096 * ROW_BYTES
    assert seen["code"] == 0
    assert seen["pid"] not in seen["listed_after_exit"]
    assert seen["files_after_exit"] == []  # the dead process's record was pruned


def test_the_record_is_rewritten_on_a_replacement_never_on_reuse(default_process):
    seen = default_process.driven
    assert seen["record_mode"] == "0o600"
    assert seen["record_after_reuse"] is False
    assert seen["record_after_replacement"] is not None, "no record after the replacement"
    assert seen["record_after_replacement"]["patches"][0]["high_water_bytes"] == 8192 * ROW_BYTES
    # no temporary left
    assert seen["files_after_replacement"] == [f"{seen['pid']}.json"]


# prometheus_client picks its mode when first imported; sglang sets PROMETHEUS_MULTIPROC_DIR
# before it imports it. Importing it earlier would break that.
PROMETHEUS_NOT_FIRST = overlay_runs.observe(
    "default_process",
    "prometheus_not_first",
    """
    import torch
    import {WORKSPACE_MODULE} as m
    m.SparsePrefillKVBuffer(torch.device("cpu")).get(512)
    import sglang_overlay
    return ["prometheus_client" in sys.modules, sglang_overlay.status()[0]["state"]]
    """,
)


def test_the_overlay_never_imports_prometheus_client_first(default_process):
    assert default_process.value(PROMETHEUS_NOT_FIRST) == [False, "applied"]


# ----------------------------------------------------- another vendor's hook (HookRegistry)

HOOKED = """
import torch
import {WORKSPACE_MODULE} as m
import sglang_overlay
from sglang_overlay import release_first
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
target = "{WORKSPACE_MODULE}.SparsePrefillKVBuffer._reserve"
def around(original, *args, **kwargs):
    return original(*args, **kwargs)
def replace(self, num_tokens, dtype):
    self._buffer = torch.empty((num_tokens, 1, 512), dtype=dtype)
    return self._buffer
HookRegistry.register(target, {"AROUND": around, "REPLACE": replace}[HOOK], HookType[HOOK])
HookRegistry.apply_hooks()
hooked = vars(m.SparsePrefillKVBuffer)["_reserve"]
from sglang_overlay import observe
record, problem = observe.read_record(__import__("os").getpid(), __import__("os").getuid())
steps = [record and record["patches"][0]["state"], problem]  # what status --processes reads
steps.append(sglang_overlay.status()[0])
steps.append(sglang_overlay.apply()[0])
steps.append(vars(m.SparsePrefillKVBuffer)["_reserve"] is hooked)
before = release_first.REPLACEMENTS.high_water_bytes
# Past the process's high-water mark (1 KiB a bf16 row): if release-first runs, the mark moves.
m.SparsePrefillKVBuffer(torch.device("cpu")).get(before // 1024 + 4096)
steps.append(release_first.REPLACEMENTS.high_water_bytes > before)  # did release-first run?
steps.append(sglang_overlay.remove()[0])
steps.append(vars(m.SparsePrefillKVBuffer)["_reserve"] is hooked)
return steps
"""
# Each kind of hook in a process of its own: a hook stays on the class once applied.
HOOKS = {
    "AROUND": overlay_runs.observe("default_process", "hook_AROUND", 'HOOK = "AROUND"\n' + HOOKED),
    "REPLACE": overlay_runs.observe(
        "plugin_loader_after_process", "hook_REPLACE", 'HOOK = "REPLACE"\n' + HOOKED
    ),
}


@pytest.mark.parametrize(
    "hook, state, runs", [("AROUND", "wrapped", True), ("REPLACE", "replaced", False)]
)
def test_another_hook_over_the_method_is_reported_by_status_apply_and_remove(
    hook, state, runs, default_process, plugin_loader_after_process
):
    process = {"AROUND": default_process, "REPLACE": plugin_loader_after_process}[hook]
    recorded, problem, seen, applied, unchanged, ran, removed, still = process.value(HOOKS[hook])
    assert (recorded, problem) == (state, None)  # the record follows the hook at once
    assert (seen["state"], applied["state"], removed["state"]) == (state, state, state)
    assert "hook_registry.py" in seen["reason"] and "remove() cannot" in removed["reason"]
    assert (unchanged, ran, still) == (True, runs, True)


# ---------------------------------------------------------------------------- torch.compile

# dynamo traces get() -> _reserve -> the replacement: no logging, lock or clock call may be in
# what it traces. The compiled call must still replace and reuse as eager does.
TORCH_COMPILE = overlay_runs.observe(
    "default_process",
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


def test_the_patched_method_compiles_with_fullgraph(default_process):
    assert default_process.value(TORCH_COMPILE) == [
        [[16, 1, 512], [32, 1, 512], [8, 1, 512], [8, 1, 512]],
        [8, 1, 512],
        "torch.float8_e4m3fn",
    ]
