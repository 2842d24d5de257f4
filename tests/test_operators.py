"""What an operator of a running sglang server sees: each live process's record
(``sglang-overlay status --processes``), the Prometheus gauges, another vendor's hook over the
method (sglang's real ``HookRegistry``), ``torch.compile`` through the patched method, and the
CLI's answer to bad usage. Real sglang 0.5.23 class, real prometheus_client, real processes.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import WORKSPACE_MODULE, clean_env, run_json

from sglang_overlay import PATCH_ID, __version__

ROW_BYTES = 512 * 2  # one bf16 row of the workspace
BOUND_S = 120


@pytest.fixture
def runtime_dir(tmp_path):
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    return path


# A server stand-in: the real workspace module in a process that keeps running. It grows the
# workspace to ROWS rows, prints "ready", then does what each stdin line asks.
SERVER = f"""
import sys, torch
import {WORKSPACE_MODULE} as m
buffer = m.SparsePrefillKVBuffer(torch.device("cpu"))
buffer.get(int(sys.argv[1]))
print("ready", flush=True)
for line in sys.stdin:
    buffer.get(int(line))
    print("done", flush=True)
"""


def start_server(rows, runtime_dir, **env):
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(rows)],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir), **env),
        cwd="/",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def ask(proc, rows):
    proc.stdin.write(f"{rows}\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"


def processes(runtime_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--processes", "--json"],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.returncode, {row["pid"]: row for row in json.loads(proc.stdout)}


def stop(proc):
    proc.stdin.close()
    proc.wait(timeout=BOUND_S)


def test_a_running_process_reports_its_state_build_and_high_water_mark(runtime_dir):
    server = start_server(2048, runtime_dir)
    try:
        code, rows = processes(runtime_dir)
        row = rows[server.pid]
        assert (row["state"], row["patch"], row["overlay_version"]) == (
            "applied",
            PATCH_ID,
            __version__,
        )
        assert row["high_water_bytes"] == 2048 * ROW_BYTES and row["workspace_imported"] is True
        ask(server, 4096)
        assert processes(runtime_dir)[1][server.pid]["high_water_bytes"] == 4096 * ROW_BYTES
        assert code == 0
    finally:
        stop(server)
    assert server.pid not in processes(runtime_dir)[1]
    assert list(runtime_dir.iterdir()) == []  # the dead process's record was pruned


def test_the_record_is_rewritten_on_a_replacement_never_on_reuse(runtime_dir):
    server = start_server(4096, runtime_dir)
    try:
        record = runtime_dir / f"{server.pid}.json"
        assert oct(record.stat().st_mode & 0o777) == "0o600"
        record.unlink()
        for rows in (16, 4096, 1024):  # reuse: no write
            ask(server, rows)
        assert not record.exists()
        ask(server, 8192)  # a replacement past the high-water mark: written again
        assert json.loads(record.read_text())["high_water_bytes"] == 8192 * ROW_BYTES
        assert [p.name for p in runtime_dir.iterdir()] == [record.name]  # no temporary left
    finally:
        stop(server)


def test_a_disabled_process_is_listed_as_such_and_passes(runtime_dir):
    server = start_server(64, runtime_dir, SGLANG_OVERLAY_DISABLE="1")
    try:
        code, rows = processes(runtime_dir)
        assert rows[server.pid]["state"] == "disabled" and code == 0
        assert rows[server.pid]["high_water_bytes"] == 0
    finally:
        stop(server)


def test_a_live_sglang_process_without_a_record_is_unpatched_even_if_its_pid_had_one(runtime_dir):
    # sglang renames its processes (sglang::scheduler_TP0); this one started "before the
    # install": no record. A record left by an earlier process with the same pid has another
    # start time and must not be taken for this one's.
    sleeper = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 300"])
    try:
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            cmdline = open(f"/proc/{sleeper.pid}/cmdline", "rb").read()
            if cmdline.startswith(b"sglang::"):
                break
            time.sleep(0.01)
        forged = {"patches": [{"patch": PATCH_ID, "state": "applied", "reason": "x"}]}
        (runtime_dir / f"{sleeper.pid}.json").write_text(
            json.dumps({**forged, "pid": sleeper.pid, "start_time": "1"})
        )
        code, rows = processes(runtime_dir)
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

REPLACE_AND_EXIT = f"""
import sys, torch
import {WORKSPACE_MODULE} as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(int(sys.argv[1]))
print(__import__("os").getpid())
"""


def test_gauges_per_process_in_prometheus_multiprocess_mode(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    pids = {}
    for rows in (1024, 3072):
        proc = subprocess.run(
            [sys.executable, "-c", REPLACE_AND_EXIT, str(rows)],
            env=clean_env(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)),
            cwd="/",
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        pids[int(proc.stdout.split()[-1])] = rows
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    samples = gauge_samples(generate_latest(registry).decode())
    for pid, rows in pids.items():
        labels = {"patch": PATCH_ID, "pid": str(pid), "overlay_version": __version__}
        assert (
            samples[
                ("sglang_overlay_patch_state", frozenset({**labels, "state": "applied"}.items()))
            ]
            == 1
        )
        assert (
            samples[
                ("sglang_overlay_patch_state", frozenset({**labels, "state": "pending"}.items()))
            ]
            == 0
        )
        del labels["overlay_version"]
        assert (
            samples[("sglang_overlay_workspace_high_water_bytes", frozenset(labels.items()))]
            == rows * ROW_BYTES
        )


def gauge_samples(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_gauges_in_one_process_mode_where_the_host_loaded_prometheus_client():
    out = run_json(f"""
import json, torch, prometheus_client
import {WORKSPACE_MODULE} as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(512)
text = prometheus_client.generate_latest().decode()
print(json.dumps([l for l in text.splitlines() if l.startswith("sglang_overlay") and not l.endswith(" 0.0")]))
""")
    assert out == [
        f'sglang_overlay_patch_state{{overlay_version="{__version__}",patch="{PATCH_ID}",state="applied"}} 1.0',
        f'sglang_overlay_workspace_high_water_bytes{{patch="{PATCH_ID}"}} {float(512 * ROW_BYTES)}',
    ]


def test_the_overlay_never_imports_prometheus_client_first():
    # prometheus_client picks its mode when first imported; sglang sets
    # PROMETHEUS_MULTIPROC_DIR before it imports it. Importing it earlier would break that.
    out = run_json(f"""
import json, sys, torch
import {WORKSPACE_MODULE} as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(512)
import sglang_overlay
print(json.dumps(["prometheus_client" in sys.modules, sglang_overlay.status()[0]["state"]]))
""")
    assert out == [False, "applied"]


def test_without_prometheus_client_the_overlay_still_applies(tmp_path):
    out = run_json(
        f"""
import json, sys, torch
sys.modules["prometheus_client"] = None  # not importable
import {WORKSPACE_MODULE} as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(512)
import sglang_overlay
print(json.dumps(sglang_overlay.status()[0]["state"]))
""",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
    )
    assert out == "applied"


# ----------------------------------------------------- another vendor's hook (HookRegistry)

HOOKED = f"""
import json, torch
import {WORKSPACE_MODULE} as m
import sglang_overlay
from sglang_overlay import release_first
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
target = "{WORKSPACE_MODULE}.SparsePrefillKVBuffer._reserve"
ours = vars(m.SparsePrefillKVBuffer)["_reserve"]
def around(original, *args, **kwargs):
    return original(*args, **kwargs)
def replace(self, num_tokens, dtype):
    self._buffer = torch.empty((num_tokens, 1, 512), dtype=dtype)
    return self._buffer
HookRegistry.register(target, {{"AROUND": around, "REPLACE": replace}}[HOOK], HookType[HOOK])
HookRegistry.apply_hooks()
hooked = vars(m.SparsePrefillKVBuffer)["_reserve"]
steps = [sglang_overlay.status()[0]]
steps.append(sglang_overlay.apply()[0])
steps.append(vars(m.SparsePrefillKVBuffer)["_reserve"] is hooked)
before = release_first.REPLACEMENTS.high_water_bytes
m.SparsePrefillKVBuffer(torch.device("cpu")).get(4096)
steps.append(release_first.REPLACEMENTS.high_water_bytes > before)  # did release-first run?
steps.append(sglang_overlay.remove()[0])
steps.append(vars(m.SparsePrefillKVBuffer)["_reserve"] is hooked)
print(json.dumps(steps))
"""


@pytest.mark.parametrize(
    "hook, state, runs", [("AROUND", "wrapped", True), ("REPLACE", "replaced", False)]
)
def test_another_hook_over_the_method_is_reported_by_status_apply_and_remove(hook, state, runs):
    seen, applied, unchanged, ran, removed, still = run_json(f"HOOK = {hook!r}\n" + HOOKED)
    assert (seen["state"], applied["state"], removed["state"]) == (state, state, state)
    assert "hook_registry.py" in seen["reason"] and "remove() cannot" in removed["reason"]
    assert (unchanged, ran, still) == (True, runs, True)


# ---------------------------------------------------------------------------- torch.compile


def test_the_patched_method_compiles_with_fullgraph():
    # dynamo traces get() -> _reserve -> the replacement: no logging, lock or clock call may
    # be in what it traces. The compiled call must still replace and reuse as eager does.
    out = run_json(f"""
import json, torch
import {WORKSPACE_MODULE} as m
import sglang_overlay
assert sglang_overlay.status()[0]["state"] == "applied"
buffer = m.SparsePrefillKVBuffer(torch.device("cpu"))
compiled = torch.compile(lambda n, dtype: buffer.get(n, dtype), fullgraph=True, backend="eager")
shapes = [tuple(compiled(n, dtype).shape) for n, dtype in
          ((16, torch.bfloat16), (32, torch.bfloat16), (8, torch.bfloat16), (8, torch.float8_e4m3fn))]
print(json.dumps([shapes, tuple(buffer._buffer.shape), str(buffer._buffer.dtype)]))
""")
    assert out == [
        [[16, 1, 512], [32, 1, 512], [8, 1, 512], [8, 1, 512]],
        [8, 1, 512],
        "torch.float8_e4m3fn",
    ]


# ----------------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    "argv", [[], ["frobnicate"], ["status", "--bogus"], ["status", "--json", "extra"]]
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
