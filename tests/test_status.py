"""``sglang-overlay status --processes`` and the gauges, run in this process against sleepers."""

import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import standin
from conftest import clean_env, runs_program, until

from sglang_overlay import PATCH_IDS, OverlayError, __version__, cli, observe
from sglang_overlay.observe import runs_sglang

NOBODY = 65534
ROW_BYTES = 512 * 2  # one bf16 row of the DSV4 workspace


@pytest.fixture
def runtime_dir(tmp_path, monkeypatch):
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("SGLANG_OVERLAY_RUNTIME_DIR", str(path))
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    return path


def start_sleeper(name="sglang::scheduler_TP0"):
    """A live process under a name sglang gives its processes, with no record of its own."""
    sleep = shutil.which("sleep")
    proc = subprocess.Popen([name, "300"], executable=sleep)
    assert until(lambda: runs_program(proc.pid, sleep)), "the sleeper never ran sleep"
    return proc


@pytest.fixture
def sleeper():
    proc = start_sleeper()
    yield proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def plant(folder, pid, states, **fields) -> dict:
    """A record of ``pid`` as the overlay writes it, one state per patch."""
    record = {
        "patches": [
            {"patch": p, "target": "t", "sglang_version": "0.5.23", "state": s, "reason": f"why {s}",
             "high_water_bytes": 0, "workspace_imported": s != "pending"}
            for p, s in zip(PATCH_IDS, states, strict=True)
        ],
        "misconfigured": [], "overlay_version": "0.2.0", "pid": pid,
        "start_time": observe.start_time(pid), **fields,
    }  # fmt: skip
    (folder / f"{pid}.json").write_text(json.dumps(record))
    return record


def status(capsys, *args) -> "tuple[int, str]":
    code = cli.main(["status", "--processes", *args])
    return code, capsys.readouterr().out


def rows_of(capsys, pid) -> "tuple[int, dict]":
    code, out = status(capsys, "--json", "--pid", str(pid))
    return code, {r["patch"]: r for r in json.loads(out)}


@pytest.mark.parametrize(
    "argv, sglang",
    [
        ("python3 -S -W ignore -m sglang.launch_server --port 1", True),
        ("python -Xfrozen_modules=off -I -u -O -OO -m sglang.launch_server", True),
        ("python -SWignore -msglang.launch_server", True),
        ("python --check-hash-based-pycs never -m sglang.bench_serving", True),
        ("/venv/bin/python /venv/bin/sglang serve --model-path m", True),
        ("sglang::scheduler_TP0", True),
        ("python -X importtime -c import sglang", False),
        ("/venv/bin/python /venv/bin/sglang-overlay status", False),
        ("python -W", False),
        ("bash sglang", False),
    ],
)
def test_sglang_command_lines_are_found_whatever_interpreter_options_precede_them(argv, sglang):
    assert runs_sglang(argv.split()) is sglang


SERVER = """
import sys, torch
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
buffer = m.SparsePrefillKVBuffer(torch.device("cpu"))
for line in sys.stdin:
    buffer.get(int(line))
    print("done", flush=True)
"""


def serve(known, **env) -> subprocess.Popen:
    """A stand-in server: each stdin line a request of that many rows, answered once served."""
    code = f"import sys; sys.path[:0] = [{str(known)!r}]\n" + SERVER
    return subprocess.Popen(
        [sys.executable, "-c", code], env=clean_env(**env), cwd="/", stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def ask(server, rows):
    server.stdin.write(f"{rows}\n")
    server.stdin.flush()
    assert server.stdout.readline() == "done\n"


@pytest.mark.parametrize("disable", ["", "1"], ids=["default", "every patch disabled"])
def test_a_running_server_shows_its_state_and_high_water_mark_until_it_exits(
    runtime_dir, known, capsys, disable
):
    server = serve(known, SGLANG_OVERLAY_DISABLE=disable)
    try:
        ask(server, 2048)
        code, rows = rows_of(capsys, server.pid)
        mode = (runtime_dir / f"{server.pid}.json").stat().st_mode & 0o777
        ask(server, 4096)  # a replacement past the high-water mark: the record follows
        grown = rows_of(capsys, server.pid)[1]
        code_text, text = status(capsys, "--pid", str(server.pid))
        server.stdin.close()
        server.wait(timeout=60)
    finally:
        server.kill()
        server.wait(timeout=60)
    assert (code, code_text, mode) == (0, 0, 0o600)
    dsv4, fused = rows[PATCH_IDS[0]], rows[PATCH_IDS[1]]
    if disable:
        assert text.splitlines()[1].split()[:7] == [str(server.pid), *["disabled"] * 6]
    else:
        assert (dsv4["state"], dsv4["overlay_version"]) == ("applied", __version__)
        assert (dsv4["high_water_bytes"], dsv4["workspace_imported"]) == (2048 * ROW_BYTES, True)
        assert grown[PATCH_IDS[0]]["high_water_bytes"] == 4096 * ROW_BYTES
        # the fused-KV patch has a row of its own: its module never imported, never grown
        assert (fused["state"], fused["high_water_bytes"]) == ("pending", 0)
    assert rows_of(capsys, server.pid) == (1, {}) and list(runtime_dir.iterdir()) == []


BARE = [{"patch": p, "state": "failed", "reason": "r"} for p in PATCH_IDS]


@pytest.mark.parametrize(
    "states, fields, state, code",
    [
        (["applied"] * 6, {}, "applied", 0),
        (["applied"] + ["pending"] * 5, {}, "applied", 0),  # a client: modules never imported
        (["unsupported"] * 6, {}, "unsupported", 1),
        (["applied"] * 6, {"misconfigured": ["STRICT='x' not recognised"]}, "misconfigured", 1),
        (["applied"] * 6, {"start_time": "1"}, "unpatched", 1),  # an earlier process's pid
        (["applied"] * 6, {"misconfigured": [1]}, "misconfigured", 1),
        (["failed"] * 6, {"patches": BARE}, "failed", 1),  # no field but patch, state, reason
    ],
)
def test_the_verdict_follows_each_patchs_recorded_state(
    runtime_dir, sleeper, capsys, states, fields, state, code
):
    plant(runtime_dir, sleeper, states, **fields)
    got, rows = rows_of(capsys, sleeper)
    assert (rows[PATCH_IDS[0]]["state"], got) == (state, code)
    assert state != "unpatched" or "restart it" in rows[PATCH_IDS[0]]["reason"]
    assert {(r["pid"], r["command"]) for r in rows.values()} == {
        (sleeper, "sglang::scheduler_TP0 300")
    }


FOLDER_PROBLEMS = {
    "read-only": (lambda p: p.chmod(0o500), "is not writable by its owner"),
    "a file": (lambda p: p.rmdir() or p.write_text(""), "is not a directory"),
    "group-writable": (lambda p: p.chmod(0o770), "may be written by others"),
    "another owner": (lambda p: os.chown(p, NOBODY, NOBODY), f"belongs to uid {NOBODY}"),
}


@pytest.mark.parametrize("problem", FOLDER_PROBLEMS)
def test_a_runtime_folder_that_cannot_hold_records_is_named_instead_of_restart_it(
    runtime_dir, sleeper, capsys, problem
):
    if problem == "another owner" and os.geteuid() != 0:
        pytest.skip("only root can give the folder to another user")
    spoil, says = FOLDER_PROBLEMS[problem]
    spoil(runtime_dir)
    with pytest.raises(OverlayError, match=says):  # the writer refuses it too
        observe.write_record({"patches": []})
    code, rows = rows_of(capsys, sleeper)
    row = rows[PATCH_IDS[0]]
    assert (row["state"], code) == ("invalid-record", 1)
    assert str(runtime_dir) in row["reason"] and says in row["reason"]
    assert "restart" not in row["reason"]


def test_a_record_that_is_a_fifo_is_named_unreadable_without_waiting(runtime_dir, sleeper, capsys):
    fifo = runtime_dir / f"{sleeper}.json"
    os.mkfifo(fifo)

    done = threading.Event()

    def writer():  # ends, every 3 s, the wait of a reader that waits
        while not done.wait(3):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=writer, daemon=True).start()
    started = time.monotonic()
    try:
        code, rows = rows_of(capsys, sleeper)
    finally:
        done.set()
    assert time.monotonic() - started < 2
    assert rows[PATCH_IDS[0]]["state"] == "invalid-record" and code == 1
    assert "not a regular file" in rows[PATCH_IDS[0]]["reason"]


HOSTILE = "ok\x1b[1A\x1b[2K\r\x1b]0;title\x07\x9b2J\u202eapplied\u2066\x7f"
DEFUSED = r"ok\x1b[1A\x1b[2K\r\x1b]0;title\x07\x9b2J\u202eapplied\u2066\x7f"


def test_one_row_per_process_a_column_per_patch_reasons_where_it_fails_all_printed_inert(
    runtime_dir, capsys
):
    proc = start_sleeper("sglang::" + HOSTILE)  # argv and record text a terminal must not run
    states = ["applied", "disabled", "pending", "failed", "upstream-fixed", "not-present"]
    try:
        record = plant(runtime_dir, proc.pid, states)
        record["patches"][3]["reason"] = HOSTILE
        (runtime_dir / f"{proc.pid}.json").write_text(json.dumps(record))
        code, out = status(capsys, "--pid", str(proc.pid))
    finally:
        proc.kill()
        proc.wait(timeout=60)
    header, row, *reasons = out.splitlines()
    assert header.split() == ["PID", *(p.split("-")[0] for p in PATCH_IDS), "COMMAND"]
    assert row.split() == [str(proc.pid), *states, f"sglang::{DEFUSED}", "300"]
    assert [r.strip() for r in reasons] == [DEFUSED] and code == 1
    assert not any(ch in out for ch in "\x1b\r\x07\x9b\u202e\u2066\x7f"), repr(out)


def test_text_stdout_cannot_encode_is_printed_as_escapes(monkeypatch):
    # a reason quoting the user's setting, on an ASCII terminal: the report, not a traceback
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding="ascii"))
    cli.say("not recognised: SGLANG_OVERLAY_DISABLE='\u00fcberall'")
    sys.stdout.flush()
    assert out.getvalue() == b"not recognised: SGLANG_OVERLAY_DISABLE='\\xfcberall'\n"


@pytest.mark.parametrize(
    "argv",
    ["", "frobnicate", "status --bogus", "status --json extra", "status --pid 1",
     "status --processes --pid one", "status --processes --pid 0"],
)  # fmt: skip
def test_bad_usage_is_one_line_and_exit_two(argv, capsys):
    assert cli.main(argv.split()) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("sglang-overlay: ")


@pytest.mark.parametrize("args, verdict", [([], 0), (["--json"], 1)], ids=["text", "json"])
def test_a_reader_that_stops_early_gets_the_verdict_and_no_traceback(
    args, verdict, sleeper, runtime_dir
):
    # `status --processes | head -1` under pipefail: the exit code is the verdict's.
    pid = plant(runtime_dir, os.getpid(), ["applied"] * 6)["pid"] if verdict == 0 else sleeper
    proc = subprocess.Popen(  # a patched process (this one's record); one without a record
        [sys.executable, "-m", "sglang_overlay", "status", "--processes", *args, "--pid", str(pid)],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)), cwd="/",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()  # the reader is gone before the first line
    assert (proc.wait(timeout=60), proc.stderr.read()) == (verdict, b"")


def test_a_stdout_that_cannot_take_the_report_is_one_line_and_exit_two(runtime_dir):
    pid = plant(runtime_dir, os.getpid(), ["applied"] * 6)["pid"]
    with open("/dev/full", "w") as full:  # a full disk
        proc = subprocess.run(
            [sys.executable, "-m", "sglang_overlay", "status", "--processes", "--pid", str(pid)],
            env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)), stdout=full,
            stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    said = "sglang-overlay: cannot write the report: No space left on device\n"
    assert (proc.returncode, proc.stderr) == (2, said)


# -------------------------------------------------------------------- gauges and the log


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    return standin.write(tmp_path_factory.mktemp("standin"))


def standin_python(known, code, *args, **env) -> subprocess.CompletedProcess:
    prelude = f"import sys; sys.path[:0] = [{str(known)!r}]\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code, *args],
        env=clean_env(**env), cwd="/", capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_gauges_per_process_leave_with_it_even_killed_and_status_sweeps_them_adding_none(
    runtime_dir, tmp_path, known, capsys, monkeypatch
):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector
    from prometheus_client.parser import text_string_to_metric_families as families

    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "gauge_liveall_4194000.db").write_bytes(b"")  # above any pid handed out here
    (runtime_dir / "4194000.json").write_text(json.dumps({"start_time": "1", "patches": []}))
    (runtime_dir / "notes.txt").write_text("not a record")
    started = {rows: serve(known, PROMETHEUS_MULTIPROC_DIR=str(folder)) for rows in (1024, 3072)}
    try:
        for rows, server in started.items():  # two processes side by side
            ask(server, rows)
        assert sorted(folder.glob("*_4194000.db")) == []  # swept by the first to set gauges
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(folder))
        live = {(s.name, frozenset(s.labels.items())): s.value
                for f in families(generate_latest(registry).decode()) for s in f.samples}  # fmt: skip
        started[1024].communicate("", timeout=60)  # a clean exit: marked dead at exit
        started[3072].kill()  # no exit handler runs
        started[3072].wait(timeout=60)
    finally:
        for server in started.values():
            server.kill()
    for rows, server in started.items():
        labels = {"patch": PATCH_IDS[0], "pid": str(server.pid)}
        state = {**labels, "overlay_version": __version__}
        assert live[(observe.STATE_GAUGE, frozenset({**state, "state": "applied"}.items()))] == 1
        assert live[(observe.STATE_GAUGE, frozenset({**state, "state": "pending"}.items()))] == 0
        assert live[(observe.HIGH_WATER_GAUGE, frozenset(labels.items()))] == rows * ROW_BYTES
    alive = folder / f"gauge_liveall_{os.getpid()}.db"
    alive.write_bytes(b"")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    status(capsys, "--pid", str(os.getpid()))  # dead processes' records and gauges, nothing else
    assert [p.name for p in folder.iterdir()] == [alive.name]
    assert [p.name for p in runtime_dir.iterdir()] == ["notes.txt"]
    # `status` adds no series: a gauge file created and removed again still sets the mtime
    os.utime(folder, ns=(0, 0))
    monkeypatch.setenv("PYTHONPATH", str(known))
    assert cli.main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["state"] == "applied"
    assert [p.name for p in folder.iterdir()] == [alive.name] and folder.stat().st_mtime_ns == 0


GROW = """
import json, os, torch
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
for rows in (512, 1024, 2048):  # three replacements, each published
    m.SparsePrefillKVBuffer(torch.device("cpu")).get(rows)
import sglang_overlay
client, lines = sys.modules.get("prometheus_client"), None
if client and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:  # one-process mode: its lines
    text = client.generate_latest().decode()
    lines = [l for l in text.splitlines() if l.startswith("sglang_overlay") and not l.endswith(" 0.0")]
print(json.dumps([sglang_overlay.status()[0]["state"], client is not None, lines]))
"""
VERSION = f'overlay_version="{__version__}"'
ONE_PROCESS_MODE = [
    *(f'sglang_overlay_patch_state{{{VERSION},patch="{p}",state="{s}"}} 1.0'
      for p, s in zip(PATCH_IDS, ["applied"] + ["pending"] * 5, strict=True)),
    f'sglang_overlay_workspace_high_water_bytes{{patch="{PATCH_IDS[0]}"}} 2.097152e+06',  # 2048 rows
]  # fmt: skip


@pytest.mark.parametrize(
    "first, folder, prometheus, lines, said",
    [
        ("", None, False, None, None),  # never imported first: it fixes sglang's metrics' mode
        ("import prometheus_client", None, True, ONE_PROCESS_MODE, None),  # the host loaded it
        ("", "gone", True, None, "gauges were not updated (FileNotFoundError"),
        ('sys.modules["prometheus_client"] = None', "missing-package", False, None, None),
    ],
)
def test_gauges_never_cost_the_patch_and_a_failure_is_said_once(
    known, tmp_path, first, folder, prometheus, lines, said
):
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / folder)} if folder else {}
    proc = standin_python(known, first + GROW, **env)
    assert json.loads(proc.stdout.splitlines()[-1]) == ["applied", prometheus, lines], proc.stderr
    told = [line for line in proc.stderr.splitlines() if line.startswith("sglang-overlay:")]
    assert told == [] if said is None else (len(told) == 1 and said in told[0]), told


@pytest.mark.parametrize("per_minute, warnings", [(1000, 3), (50, 0)])
def test_thrashing_warns_at_most_once_a_minute_and_never_below_the_threshold(
    caplog, per_minute, warnings
):
    now = [1000.0]
    log = observe.ReplacementLog("DSV4 sparse-prefill workspace", clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="sglang_overlay"):
        for _ in range(3):  # three minutes, the replacements in the first 50 s of each
            for _ in range(per_minute):
                log.replaced("a", "b", 1)
                now[0] += 50 / per_minute
            now[0] += 10
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == warnings
    assert all(
        "101 DSV4 sparse-prefill workspace replacements in the last minute" in w for w in said[:1]
    )
