"""``sglang-overlay status --processes`` as a health check runs it (as root, on a shared machine):
it believes only a record nobody else could have written, deletes nothing through a link, never
hangs, crashes or hides a process on a bad record, finds every sglang command line, and follows
the process's program and settings. Each test looks only at the processes it started
(``--pid``), each in a runtime directory of its own.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import overlay_runs
import pytest
import standin
from conftest import clean_env, runs_program, until

from sglang_overlay import FUSED_KV_PATCH_ID, PATCH_ID
from sglang_overlay.command_lines import runs_sglang

BOUND_S = 120
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can plant another user's file")


@pytest.fixture
def runtime_dir(tmp_path):
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    return overlay_runs.standin_root(tmp_path_factory)


@pytest.fixture
def sglang_sleeper():
    """A live process with one of the names sglang gives its processes, and no record."""
    sleep = shutil.which("sleep")
    sleeper = subprocess.Popen(["sglang::scheduler_TP0", "300"], executable=sleep)
    # Popen may return while the child is still inside execve (vfork resumes the parent before
    # the new program's executable and stack are in place): a record forged from that moment
    # would name the parent's program. Wait until /proc shows the one the pid runs for good.
    assert until(lambda: runs_program(sleeper.pid, sleep)), "the sleeper never ran sleep"
    yield sleeper.pid
    sleeper.send_signal(signal.SIGKILL)
    sleeper.wait(timeout=BOUND_S)


def status(runtime_dir, *pids, timeout=BOUND_S, patch=PATCH_ID):
    """``status --processes --json`` about ``pids`` only: (exit code, ``patch``'s rows by pid,
    stderr)."""
    options = [word for pid in pids for word in ("--pid", str(pid))]
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--processes", "--json", *options],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    return proc.returncode, {r["pid"]: r for r in rows if r["patch"] == patch}, proc.stderr


def claim_applied(pid: int) -> dict:
    """A record of ``pid`` claiming ``applied``, right in every field a reader can check: its
    start time and its program, read from /proc as the overlay writes them."""
    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    exe = os.stat(f"/proc/{pid}/exe")
    return {
        "patches": [
            {"patch": PATCH_ID, "state": "applied", "reason": "forged", "sglang_version": "0.5.23"}
        ],
        "high_water_bytes": 0,
        "workspace_imported": True,
        "overlay_version": "0.3.0",
        "pid": pid,
        "start_time": fields[19],
        "program": {"exe_dev": exe.st_dev, "exe_ino": exe.st_ino, "stack_start": int(fields[25])},
    }


# ------------------------------------------------------------------------- command lines


@pytest.mark.parametrize(
    "argv",
    [
        "python -W ignore -m sglang.launch_server",
        "python3 -S -W ignore -m sglang.launch_server --port 1",
        "python -X importtime -m sglang.launch_server",
        "python -Xfrozen_modules=off -I -u -O -OO -m sglang.launch_server",
        "python -SW ignore -m sglang.launch_server",
        "python -SWignore -msglang.launch_server",
        "python3.12 -Im sglang",
        "python --check-hash-based-pycs never -m sglang.bench_serving",
        "/venv/bin/python /venv/bin/sglang serve --model-path m",
        "sglang serve --model-path m",
        "sglang::scheduler_TP0",
    ],
)
def test_every_sglang_command_line_is_found_whatever_options_precede_it(argv):
    assert runs_sglang(argv.split())


@pytest.mark.parametrize(
    "argv",
    [
        "python -W ignore script.py",
        "python -X importtime -c import sglang",
        "python -m sglang_overlay status",
        "/venv/bin/python /venv/bin/sglang-overlay status",
        "python -W",
        "python -",
        "bash sglang",
    ],
)
def test_other_command_lines_are_not_sglang(argv):
    assert not runs_sglang(argv.split())


FAKE_SERVER = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def test_an_unpatched_server_behind_interpreter_options_is_listed(tmp_path, runtime_dir):
    # -S: no site, so no start-up hook and no record: the server runs unmodified sglang.
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "launch_server.py").write_text(FAKE_SERVER)
    argv = [sys.executable, "-S", "-W", "ignore", "-m", "sglang.launch_server"]
    with serving(argv, PYTHONPATH=str(tmp_path)) as server:
        code, rows, _ = status(runtime_dir, server.pid)
    assert rows[server.pid]["state"] == "unpatched" and code == 1


def test_a_process_that_never_imported_the_workspace_module_passes(tmp_path, runtime_dir):
    # A client (python -m sglang.bench_serving): the overlay loaded, sglang imported, the
    # workspace module never.
    root = standin.write(tmp_path / "standin")
    (root / "sglang" / "bench_serving.py").write_text(FAKE_SERVER)
    argv = [sys.executable, "-m", "sglang.bench_serving"]
    environment = {"PYTHONPATH": str(root), "SGLANG_OVERLAY_RUNTIME_DIR": str(runtime_dir)}
    with serving(argv, **environment) as client:
        code, rows, _ = status(runtime_dir, client.pid)
    row = rows[client.pid]
    assert (row["state"], row["workspace_imported"], code) == ("pending", False, 0)


class serving:
    """A process started with ``argv`` that has said ``ready``; stopped (stdin closed, then
    killed) on the way out."""

    def __init__(self, argv, **variables):
        self.proc = subprocess.Popen(
            argv,
            env=clean_env(**variables),
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid

    def __enter__(self):
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.__exit__()
            raise AssertionError(f"not ready: {line!r} {self.proc.stderr.read()[-3000:]}")
        return self

    def __exit__(self, *_):
        self.proc.kill()
        self.proc.communicate(timeout=BOUND_S)


# ----------------------------------------------------------------------- the record's truth

PATCHED_THEN = """
import os, sys, torch
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
m.SparsePrefillKVBuffer(torch.device("cpu")).get(64)
print("ready", flush=True)
"""
THEN_EXEC = (
    PATCHED_THEN
    + """
sys.stdin.readline()
os.execv(sys.argv[1], ["sglang::scheduler_TP0", "300"])
"""
)


def test_a_process_that_execs_another_program_is_judged_by_what_it_runs_now(known, runtime_dir):
    argv = [sys.executable, "-c", overlay_runs.standin_prelude(known) + THEN_EXEC]
    sleep = shutil.which("sleep")
    with serving(argv + [sleep], SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)) as server:
        code, rows, _ = status(runtime_dir, server.pid)
        assert (rows[server.pid]["state"], code) == ("applied", 0)
        server.proc.stdin.write("exec\n")
        server.proc.stdin.flush()
        exe = os.path.realpath(sleep)
        assert until(lambda: os.path.realpath(f"/proc/{server.pid}/exe") == exe)
        code, rows, _ = status(runtime_dir, server.pid)  # same pid, same start time
    assert (rows[server.pid]["state"], code) == ("unpatched", 1)


def test_a_live_process_started_with_a_junk_setting_is_misconfigured(known, runtime_dir):
    argv = [sys.executable, "-c", overlay_runs.standin_prelude(known) + PATCHED_THEN + "input()"]
    variables = {"SGLANG_OVERLAY_RUNTIME_DIR": str(runtime_dir), "SGLANG_OVERLAY_DISABLE": "none"}
    with serving(argv, **variables) as server:
        code, rows, _ = status(runtime_dir, server.pid)
    row = rows[server.pid]
    assert (row["state"], row["patch_state"], code) == ("misconfigured", "disabled", 1)
    assert "SGLANG_OVERLAY_DISABLE='none' not recognised" in row["reason"]


# A draft worker stand-in: the fused-KV helper grown to 64 tokens, then to 65 (doubling).
FUSED_KV_SERVER = """
import sys, torch
import sglang.kernels.ops.speculative.fused_kv_materialize as f
helper = f.FusedKVMaterializeHelper.__new__(f.FusedKVMaterializeHelper)
helper.n_layers, helper.num_kv_heads, helper.head_dim, helper.layer_out_dim = 2, 4, 8, 64
helper.device, helper._workspace_capacity, helper._workspace_dtype = None, 0, None
helper._proj_workspace = helper._k_workspace = helper._v_workspace = None
helper._ensure_workspace(64, torch.bfloat16)
helper._ensure_workspace(65, torch.bfloat16)
print("ready", flush=True)
input()
"""


def test_a_process_that_grew_the_fused_kv_workspaces_reports_its_own_row(known, runtime_dir):
    argv = [sys.executable, "-c", overlay_runs.standin_prelude(known) + FUSED_KV_SERVER]
    with serving(argv, SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)) as server:
        code, rows, _ = status(runtime_dir, server.pid, patch=FUSED_KV_PATCH_ID)
        dsv4 = status(runtime_dir, server.pid)[1][server.pid]
    row = rows[server.pid]
    assert (row["state"], row["workspace_imported"], code) == ("applied", True, 0)
    # capacity 128 after doubling: projection 128 x 2 x 64 + K and V 2 x 128 x 4 x 8, bf16
    assert row["high_water_bytes"] == (128 * 2 * 64 + 2 * (2 * 128 * 4 * 8)) * 2
    assert row["target"].endswith("FusedKVMaterializeHelper._ensure_workspace")
    # the DSV4 module was never imported there: its row is its own
    assert (dsv4["state"], dsv4["workspace_imported"], dsv4["high_water_bytes"]) == (
        "pending",
        False,
        0,
    )


# ------------------------------------------------------------- records that are not believed


def plant(path, record, mode=0o600):
    path.write_text(json.dumps(record))
    path.chmod(mode)


def test_a_record_in_a_directory_others_may_write_is_not_believed(runtime_dir, sglang_sleeper):
    runtime_dir.chmod(0o777)
    plant(runtime_dir / f"{sglang_sleeper}.json", claim_applied(sglang_sleeper))
    code, rows, _ = status(runtime_dir, sglang_sleeper)
    row = rows[sglang_sleeper]
    assert (row["state"], code) == ("invalid-record", 1)
    assert "writable by others" in row["reason"]


@as_root
def test_a_record_another_user_wrote_is_not_believed(runtime_dir, sglang_sleeper):
    record = runtime_dir / f"{sglang_sleeper}.json"
    plant(record, claim_applied(sglang_sleeper))
    os.chown(record, NOBODY, NOBODY)
    code, rows, _ = status(runtime_dir, sglang_sleeper)
    assert (rows[sglang_sleeper]["state"], code) == ("invalid-record", 1)
    assert f"belongs to uid {NOBODY}" in rows[sglang_sleeper]["reason"]


@as_root
def test_a_runtime_directory_of_another_user_is_not_believed(runtime_dir, sglang_sleeper):
    plant(runtime_dir / f"{sglang_sleeper}.json", claim_applied(sglang_sleeper))
    os.chown(runtime_dir, NOBODY, NOBODY)
    code, rows, _ = status(runtime_dir, sglang_sleeper)
    assert (rows[sglang_sleeper]["state"], code) == ("invalid-record", 1)


def test_a_record_that_is_a_link_or_too_large_is_not_believed(tmp_path, sglang_sleeper):
    for kind in ("link", "link-to-dev-zero", "large"):
        runtime_dir = tmp_path / kind
        runtime_dir.mkdir(mode=0o700)
        record = runtime_dir / f"{sglang_sleeper}.json"
        if kind == "link":
            plant(tmp_path / "elsewhere.json", claim_applied(sglang_sleeper))
            record.symlink_to(tmp_path / "elsewhere.json")
        elif kind == "link-to-dev-zero":  # read through, it never ends
            record.symlink_to("/dev/zero")
        else:  # valid JSON, padded past the cap
            record.write_text(json.dumps(claim_applied(sglang_sleeper)) + " " * (1 << 20))
        code, rows, _ = status(runtime_dir, sglang_sleeper)
        assert (rows[sglang_sleeper]["state"], code) == ("invalid-record", 1), kind


def test_a_fifo_record_is_reported_at_once(runtime_dir, sglang_sleeper):
    os.mkfifo(runtime_dir / f"{sglang_sleeper}.json", 0o600)
    # A bound, never a measurement: a reader that blocks on the FIFO waits forever.
    code, rows, _ = status(runtime_dir, sglang_sleeper, timeout=60)
    assert (rows[sglang_sleeper]["state"], code) == ("invalid-record", 1)
    assert "not a regular file" in rows[sglang_sleeper]["reason"]


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.pop("patches"),
        lambda r: r.update(patches=[]),
        lambda r: r.update(patches=[{"patch": PATCH_ID}]),
        lambda r: r.update(patches="applied"),
        lambda r: r.update(high_water_bytes="lots"),
        lambda r: r.pop("program"),
    ],
    ids=[
        "no-patches",
        "empty-patches",
        "patch-without-state",
        "patches-string",
        "high-water",
        "no-program",
    ],
)
def test_a_malformed_record_never_hides_the_process(runtime_dir, sglang_sleeper, change):
    record = claim_applied(sglang_sleeper)
    change(record)
    plant(runtime_dir / f"{sglang_sleeper}.json", record)
    code, rows, _ = status(runtime_dir, sglang_sleeper)
    assert (rows[sglang_sleeper]["state"], code) == ("invalid-record", 1)


def report(runtime_dir, pid, *flags) -> "tuple[int, str]":
    """``status --processes --pid PID`` with ``flags``: (exit code, stdout); never a traceback."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_overlay",
            "status",
            "--processes",
            "--pid",
            str(pid),
            *flags,
        ],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, proc.stdout


def with_fused_kv_entry(owner: int, **fields) -> dict:
    """``claim_applied`` with the fused-KV patch's entry as 0.2.0 writes it, ``fields`` changed."""
    record = claim_applied(owner)
    fused = {"patch": FUSED_KV_PATCH_ID, "state": "applied", "reason": "forged"}
    fused.update(sglang_version="0.5.23", high_water_bytes=1 << 20, workspace_imported=True)
    record["patches"].append({**fused, **fields})
    return record


@pytest.mark.parametrize(
    "fields",
    [
        {"high_water_bytes": "lots"},
        {"high_water_bytes": None},
        {"high_water_bytes": -1},
        {"workspace_imported": "no"},
        {"sglang_version": None},
    ],
    ids=["high-water-string", "high-water-null", "high-water-negative", "imported", "version"],
)
def test_a_malformed_patch_entry_never_hides_the_process_nor_breaks_the_report(
    runtime_dir, sglang_sleeper, fields
):
    record = runtime_dir / f"{sglang_sleeper}.json"
    plant(record, with_fused_kv_entry(sglang_sleeper))
    assert report(runtime_dir, sglang_sleeper)[0] == 0  # well-formed, it is believed
    plant(record, with_fused_kv_entry(sglang_sleeper, **fields))
    code, rows, _ = status(runtime_dir, sglang_sleeper)  # (one row: the record says nothing)
    assert (rows[sglang_sleeper]["state"], code) == ("invalid-record", 1)
    code, text = report(runtime_dir, sglang_sleeper)
    assert code == 1 and "invalid-record" in text


def test_a_patch_entry_never_speaks_for_another_process(runtime_dir, sglang_sleeper):
    forged = with_fused_kv_entry(sglang_sleeper, pid=1, command="sglang::scheduler_TP1")
    plant(runtime_dir / f"{sglang_sleeper}.json", forged)
    rows = json.loads(report(runtime_dir, sglang_sleeper, "--json")[1])
    assert [(r["pid"], r["command"]) for r in rows] == [
        (sglang_sleeper, "sglang::scheduler_TP0 300")
    ] * 2


# ----------------------------------------------------------------------------------- pruning


def test_pruning_never_deletes_through_a_linked_runtime_directory(tmp_path):
    target = tmp_path / "someone-elses"
    target.mkdir(mode=0o700)
    victim = target / "12345.json"
    victim.write_text(json.dumps({"start_time": "1", "patches": []}))  # a "dead" process's
    link = tmp_path / "records"
    link.symlink_to(target)
    if os.geteuid() == 0:  # as in the attack: another user's link
        os.lchown(link, NOBODY, NOBODY)
    status(link, os.getpid())  # (about no process: status skips itself; pruning is the point)
    assert victim.exists()


def test_pruning_deletes_a_dead_process_record_of_this_user_only(runtime_dir):
    dead = runtime_dir / "12345.json"
    dead.write_text(json.dumps({"start_time": "1", "patches": []}))
    kept = runtime_dir / "notes.txt"
    kept.write_text("not a record")
    status(runtime_dir, os.getpid())
    assert (dead.exists(), kept.exists()) == (False, True)


# ------------------------------------------------- issue 34: squatted folders, terminal injection


@as_root
def test_a_squatted_record_directory_is_named_not_shown_as_unpatched(runtime_dir, sglang_sleeper):
    """Break 7: another user made the predictable folder first; the process could write no
    record there, and its row says so with why (not a plain ``unpatched``)."""
    os.chown(runtime_dir, NOBODY, NOBODY)
    code, rows, _ = status(runtime_dir, sglang_sleeper)
    row = rows[sglang_sleeper]
    assert (row["state"], code) == ("invalid-record", 1)
    assert (
        f"{runtime_dir}: records refused there: the directory belongs to uid {NOBODY}"
        in (row["reason"])
    )


def test_a_group_writable_record_directory_is_named_not_shown_as_unpatched(
    runtime_dir, sglang_sleeper
):
    runtime_dir.chmod(0o770)
    code, rows, _ = status(runtime_dir, sglang_sleeper)
    row = rows[sglang_sleeper]
    assert (row["state"], code) == ("invalid-record", 1)
    assert "records refused there: the directory is writable by others" in row["reason"]


HOSTILE = "ok\x1b[1A\x1b[2K\r\x1b]0;title\x07\x9b2J\u202eapplied\u2066\x7f\x00"
DEFUSED = r"ok\x1b[1A\x1b[2K\r\x1b]0;title\x07\x9b2J\u202eapplied\u2066\x7f\x00"


def test_status_prints_record_text_and_argv_inert_for_a_terminal(runtime_dir):
    """Break 8: ESC (CSI, OSC), CR, cursor moves, C1, DEL, NUL and bidi overrides in a record's
    reason and in argv come out as visible escapes, never as the bytes a terminal obeys."""
    sleep = shutil.which("sleep")
    sleeper = subprocess.Popen(["sglang::scheduler_TP0" + HOSTILE[:-1], "300"], executable=sleep)
    try:
        assert until(lambda: runs_program(sleeper.pid, sleep)), "the sleeper never ran sleep"
        record = claim_applied(sleeper.pid)
        record["patches"][0]["reason"] = HOSTILE
        record["overlay_version"] = HOSTILE
        plant(runtime_dir / f"{sleeper.pid}.json", record)
        code, text = report(runtime_dir, sleeper.pid)
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait(timeout=BOUND_S)
    assert code == 0, text
    assert not any(ch in text for ch in "\x1b\r\x07\x9b\u202e\u2066\x7f\x00"), repr(text)
    assert f"    {DEFUSED}" in text.splitlines()
    assert f"overlay {DEFUSED}" in text and "sglang::scheduler_TP0ok\\x1b[1A" in text
