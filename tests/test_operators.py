"""What an operator of a running sglang server sees: each live process's record
(``sglang-overlay status --processes``), the Prometheus gauges, another vendor's hook over the
method (sglang's real ``HookRegistry``), ``torch.compile`` through the patched method, and the
CLI's answer to bad usage. Real sglang 0.5.23 class, real prometheus_client, real processes.

The real class's processes are shared per environment (``overlay_runs``): the default process
(which also serves as a server stand-in with its records, driven through one scenario), the
same disabled, and one activated by sglang's plugin loader alone. What is only the overlay's
bookkeeping (the gauges, prometheus_client missing) runs against the stand-in sglang.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import overlay_runs
import pytest
from conftest import clean_env, run_json, run_python, runs_program, until

from sglang_overlay import FUSED_KV_PATCH_ID, PATCH_ID, __version__

ROW_BYTES = 512 * 2  # one bf16 row of the workspace
BOUND_S = 120

default_process = overlay_runs.fixture("default_process")
plugin_loader_after_process = overlay_runs.fixture("plugin_loader_after_process")
disabled_process = overlay_runs.fixture("disabled_process")


@pytest.fixture
def runtime_dir(tmp_path):
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    return overlay_runs.standin_root(tmp_path_factory)


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
overlay_runs.observe("disabled_process", "serve", SERVER.replace("ROWS", "64"))


def processes(runtime_dir, *pids, patch=PATCH_ID):
    """``status --processes`` about the processes the test started (``--pid``), never about
    other processes of the machine: its exit code and ``patch``'s rows by pid."""
    pid_options = [word for pid in pids for word in ("--pid", str(pid))]
    proc = overlay_runs.POOL.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--processes", "--json", *pid_options],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)),
        cwd="/",
        timeout=BOUND_S,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    rows = json.loads(proc.stdout)
    return proc.returncode, {r["pid"]: r for r in rows if r["patch"] == patch}


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


@overlay_runs.drive("disabled_process")
def _disabled_scenario(server, runtime_dir):
    overlay_runs.serve_until_ready(server)
    code, rows = processes(runtime_dir, server.pid)
    return {"code": code, "row": rows.get(server.pid)}


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


def test_a_disabled_process_is_listed_as_such_and_passes(disabled_process):
    seen = disabled_process.driven
    assert seen["row"]["state"] == "disabled" and seen["code"] == 0
    assert seen["row"]["high_water_bytes"] == 0


def test_a_live_sglang_process_without_a_record_is_unpatched_even_if_its_pid_had_one(
    runtime_dir,
):
    # sglang renames its processes (sglang::scheduler_TP0); this one started "before the
    # install": no record. A record left by an earlier process with the same pid has another
    # start time and must not be taken for this one's.
    sleep = shutil.which("sleep")
    sleeper = subprocess.Popen(["sglang::scheduler_TP0", "300"], executable=sleep)
    try:
        # Read once the program runs, under the name given as its argv[0].
        assert until(lambda: runs_program(sleeper.pid, sleep))
        forged = {"patches": [{"patch": PATCH_ID, "state": "applied", "reason": "x"}]}
        (runtime_dir / f"{sleeper.pid}.json").write_text(
            json.dumps({**forged, "pid": sleeper.pid, "start_time": "1"})
        )
        code, rows = processes(runtime_dir, sleeper.pid)
        row = rows[sleeper.pid]
        assert (
            row["state"] == "unpatched"
            and "started before the overlay was installed" in row["reason"]
        )
        assert row["command"] == "sglang::scheduler_TP0 300" and code == 1
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait(timeout=BOUND_S)


# ------------------------------------------------------------------------- Prometheus gauges

# Replaces once, says its pid, and lives until its stdin closes.
REPLACE_AND_WAIT = """
import os, sys, torch
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(int(sys.argv[1]))
print(os.getpid(), flush=True)
sys.stdin.read()
"""


def multiprocess_samples(metrics_dir) -> dict:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return gauge_samples(generate_latest(registry).decode())


def test_gauges_per_process_in_prometheus_multiprocess_mode_end_with_the_process(tmp_path, known):
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    started = {
        rows: subprocess.Popen(
            [sys.executable, "-c", overlay_runs.standin_prelude(known) + REPLACE_AND_WAIT]
            + [str(rows)],
            env=clean_env(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)),
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rows in (1024, 3072)  # two processes side by side
    }
    pids = {}
    try:
        for rows, proc in started.items():
            line = proc.stdout.readline()
            assert line.strip().isdigit(), proc.stderr.read()[-2000:] if proc.poll() else line
            pids[int(line)] = rows
        live = multiprocess_samples(metrics_dir)
        for proc in started.values():  # a clean exit
            out, err = proc.communicate("", timeout=BOUND_S)
            assert proc.returncode == 0, err[-2000:]
    finally:
        for proc in started.values():
            proc.kill()  # only one still running after a failure: nothing left behind
            proc.communicate()
    for pid, rows in pids.items():
        labels = {"patch": PATCH_ID, "pid": str(pid), "overlay_version": __version__}
        state = "sglang_overlay_patch_state"
        assert live[(state, frozenset({**labels, "state": "applied"}.items()))] == 1
        assert live[(state, frozenset({**labels, "state": "pending"}.items()))] == 0
        del labels["overlay_version"]
        high_water = ("sglang_overlay_workspace_high_water_bytes", frozenset(labels.items()))
        assert live[high_water] == rows * ROW_BYTES
    # Gone with their processes: no series of theirs is exported any more.
    after = multiprocess_samples(metrics_dir)
    assert not [key for key in after if dict(key[1]).get("pid") in {str(p) for p in pids}]


def test_status_adds_no_series_to_the_multiprocess_directory(tmp_path, known):
    # The CLI's fresh process imports the stand-in (first on PYTHONPATH), as it would sglang: the
    # patch applies there and its gauges would be written (5 targets of the real sglang cost the
    # probe about 10 CPU-s; whether the probe writes series does not depend on them).
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    # A gauge file the probe wrote would be gone after it (marked dead at exit), but creating
    # or removing one sets the folder's modification time: set in the past here, it must stay.
    os.utime(metrics_dir, ns=(0, 0))
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--json"],
        env=clean_env(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), PYTHONPATH=str(known)),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert json.loads(proc.stdout)[0]["state"] == "applied", proc.stderr[-2000:]
    assert sorted(p.name for p in metrics_dir.iterdir()) == []
    assert metrics_dir.stat().st_mtime_ns == 0, "the probe wrote into the folder while it ran"


def gauge_samples(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_gauges_in_one_process_mode_where_the_host_loaded_prometheus_client(known):
    out = run_json(
        overlay_runs.standin_prelude(known)
        + """
import json, torch, prometheus_client
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(512)
text = prometheus_client.generate_latest().decode()
print(json.dumps([l for l in text.splitlines() if l.startswith("sglang_overlay") and not l.endswith(" 0.0")]))
"""
    )
    assert out == [
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="{PATCH_ID}",state="applied"}} 1.0',
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="{FUSED_KV_PATCH_ID}",state="pending"}} 1.0',
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="0005-dflash-draft-probs-release-first",state="pending"}} 1.0',
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="0007-dsa-q8kv8-release-first",state="pending"}} 1.0',
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="0009-dsv4-q8kv8-qpad-release-first",state="pending"}} 1.0',
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="0011-dsa-q8kv8-born-q-release-first",state="pending"}} 1.0',
        f'sglang_overlay_workspace_high_water_bytes{{patch="{PATCH_ID}"}} {float(512 * ROW_BYTES)}',
    ]


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


def test_without_prometheus_client_the_overlay_still_applies(tmp_path, known):
    out = run_json(
        overlay_runs.standin_prelude(known)
        + """
import json, sys, torch
sys.modules["prometheus_client"] = None  # not importable
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(512)
import sglang_overlay
print(json.dumps(sglang_overlay.status()[0]["state"]))
""",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
    )
    assert out == "applied"


def test_gauges_that_cannot_be_written_are_said_once_and_the_patch_stays(tmp_path, known):
    # PROMETHEUS_MULTIPROC_DIR names a folder that is gone: prometheus_client cannot open the
    # gauges' files. The process keeps its patch, and says so once, not never and not per call.
    proc = run_python(
        overlay_runs.standin_prelude(known)
        + """
import json, torch
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
for rows in (512, 1024, 2048):  # three replacements, each published
    m.SparsePrefillKVBuffer(torch.device("cpu")).get(rows)
import sglang_overlay
print(json.dumps(sglang_overlay.status()[0]["state"]))
""",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "gone"),
    )
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == '"applied"', proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("sglang-overlay:")]
    assert len(said) == 1 and "gauges were not updated (FileNotFoundError" in said[0], said


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


# ----------------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["status", "--bogus"],
        ["status", "--json", "extra"],
        ["status", "--pid", "1"],
        ["status", "--processes", "--pid", "one"],
    ],
)
def test_bad_usage_is_one_line_and_exit_two(argv):
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", *argv],
        env=clean_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("sglang-overlay: ")
    assert "Traceback" not in proc.stderr and os.linesep in proc.stderr
