"""The process a registered file runs in under ``ci run`` (ci/file_process.py), the environment
record it writes, and file selection that never imports sglang in the CI process.

The file runs exactly as ``python FILE ARGS`` would, checked against ``python FILE`` itself
(``__file__``, ``sys.path[0]`` through a symlink, torch imported only by the file, ``__main__``
for its threads and atexit handlers, a forked child ending through SystemExit); the record is
what that process ran with, checked before it is stored (it is PR code's output), and never
changes the file's exit code. The NVML answer for the device name is
tested against a stand-in for ``torch.cuda`` (no GPU here: CUDA and NVML are the boundary).
"""

import json
import os
import subprocess
import sys
import types
from dataclasses import replace

from ci_samples import file_run
from conftest import REPO, clean_env

from ci import environment, file_process, runner

PROGRAM = """
import json, sys
print("RAN " + json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0]}))
if "--raise" in sys.argv:
    raise RuntimeError("the file failed")
sys.exit(int(sys.argv[-1]))
"""


def run_file_process(cwd, path, *args, **env):
    """``ci/file_process.py`` on ``path`` in ``cwd``: the finished process and its record."""
    read_end, write_end = os.pipe()
    proc = subprocess.run(
        [sys.executable, runner.FILE_PROCESS, "--environment-fd", str(write_end), path, *args],
        env=clean_env(**env),
        cwd=cwd,
        capture_output=True,
        text=True,
        pass_fds=(write_end,),
        timeout=120,
    )
    os.close(write_end)
    with os.fdopen(read_end) as record:
        return proc, record.read()


def run_through_file_process(tmp_path, *args):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    proc, text = run_file_process(tmp_path, str(program), *args)
    ran = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("RAN ")]
    return proc, ran, program, text


def test_the_file_runs_as_python_file_would_with_its_exit_code(tmp_path):
    proc, ran, program, text = run_through_file_process(tmp_path, "-v", "3")
    assert proc.returncode == 3, proc.stderr
    assert ran == [{"name": "__main__", "argv": [str(program), "-v", "3"], "path0": str(tmp_path)}]
    assert json.loads(text)["torch_error"] == "torch was not imported"  # nor did the file


def test_a_failing_file_still_gets_its_record_and_fails(tmp_path):
    proc, ran, _, text = run_through_file_process(tmp_path, "--raise", "0")
    assert proc.returncode == 1 and "RuntimeError: the file failed" in proc.stderr
    assert len(ran) == 1 and json.loads(text)["sglang"]


def test_bad_usage_is_exit_code_2():
    proc = subprocess.run(
        [sys.executable, runner.FILE_PROCESS, "prog.py"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "usage" in proc.stderr


class StandInCuda:
    """``torch.cuda`` as far as the device-name answer uses it."""

    def __init__(self):
        self.initialised = False
        self.real_calls = []

    def is_initialized(self):
        return self.initialised

    def get_device_name(self, device=None):
        self.real_calls.append(device)
        self.initialised = True  # the real call creates a context
        return "CUDA says H200"


def stand_in_torch():
    return types.SimpleNamespace(cuda=StandInCuda())


def test_without_a_context_the_device_name_comes_from_nvml(monkeypatch):
    torch = stand_in_torch()
    monkeypatch.setattr(file_process, "nvml_device_name", lambda t, d=None: "NVML says H200")
    monkeypatch.delenv(file_process.NVML_CHECK_ENV, raising=False)
    file_process.defer_cuda_init(torch)
    file_process.defer_cuda_init(torch)  # twice is once
    assert os.environ[file_process.NVML_CHECK_ENV] == "1"
    assert torch.cuda.get_device_name() == "NVML says H200"
    assert torch.cuda.real_calls == [] and not torch.cuda.is_initialized()
    torch.cuda.initialised = True  # once the process has a context, CUDA answers
    assert torch.cuda.get_device_name(0) == "CUDA says H200"
    assert torch.cuda.real_calls == [0]


def test_where_nvml_cannot_answer_the_real_call_runs(monkeypatch):
    torch = stand_in_torch()
    monkeypatch.setattr(file_process, "nvml_device_name", lambda t, d=None: None)
    file_process.defer_cuda_init(torch)
    assert torch.cuda.get_device_name() == "CUDA says H200"
    assert torch.cuda.real_calls == [None]


def test_nvml_gives_no_name_on_a_machine_without_it():
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(_get_nvml_device_index=lambda d: d))
    assert file_process.nvml_device_name(torch) is None  # no libnvidia-ml.so.1 here


def test_a_record_keeps_known_keys_and_plain_values_only():
    hostile = {
        "torch": "2.13.0" + "x" * 10_000,
        "cuda_available": "yes",
        "gpu": {"nested": ["<script>"]},
        "overlay": [{"patch": "0001", "state": "applied", "extra": "dropped"}, "junk"] * 20,
        "injected": "@everyone",
    }
    record = environment.process_record(json.dumps(hostile))
    assert set(record) == {"torch", "cuda_available", "gpu", "overlay"}
    assert len(record["torch"]) == environment.FIELD_CHARS
    assert record["cuda_available"] is False  # only a JSON true is true
    assert record["gpu"] == str({"nested": ["<script>"]})
    assert len(record["overlay"]) == 5  # the first ten items, dicts only
    assert record["overlay"][0] == {
        "patch": "0001",
        "state": "applied",
        "target": None,
        "sglang_version": None,
        "reason": None,
    }
    for junk in ("", "not json", "[1, 2]", "null", '"text"', "{" * 100_000):
        assert environment.process_record(junk) is None


def test_each_mode_is_described_by_its_own_test_process():
    change = replace(file_run("change", []), environment=json.dumps({"sglang": "0.5.23"}))
    silent = replace(file_run("unmodified", []), environment="")
    records = environment.records_by_mode([silent, change], ["unmodified", "change"])
    assert records["change"] == {"sglang": "0.5.23"}
    assert "error" in records["unmodified"]
    machine = {"python": "3.12"}
    described = environment.describe(machine, [change], ["change"])
    assert described == {"python": "3.12", "modes": {"change": {"sglang": "0.5.23"}}}


def test_selecting_files_imports_neither_sglang_nor_torch():
    program = (
        "import sys\n"
        "from ci import collect\n"
        "chosen = [s.path for s in collect.select('.', 'cpu')]\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('sglang', 'torch'))\n"
        "print(chosen, loaded)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, env=clean_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "['test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py'] []"
    )


# --- what ``python FILE`` gives, compared with the real thing -------------------------------


def both_ways(tmp_path, source, path, *args, **env):
    """``python PATH ARGS`` and the file process on PATH (relative to ``tmp_path``): each
    one's (exit code, stdout, stderr), and the file process's record."""
    file = tmp_path / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(source)
    plain = subprocess.run(
        [sys.executable, path, *args],
        env=clean_env(**env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    through, text = run_file_process(tmp_path, path, *args, **env)
    return plain, through, text


IDENTITY = """
import json, sys
print(json.dumps({
    "file": __file__, "argv": sys.argv, "path0": sys.path[0], "name": __name__,
    "spec": repr(__spec__), "cached": __cached__, "loader": type(__loader__).__name__,
    "builtins": getattr(__builtins__, "__name__", None),
    "torch_already_imported": "torch" in sys.modules,
}))
"""


def test_a_relative_path_through_a_symlink_gives_the_file_what_python_file_gives(tmp_path):
    # Python 3.9+: __file__ absolute, argv[0] as typed, sys.path[0] the real directory.
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to("real")
    plain, through, _ = both_ways(tmp_path, IDENTITY, "linked/prog.py", "-v")
    assert plain.returncode == through.returncode == 0, through.stderr
    assert json.loads(through.stdout) == json.loads(plain.stdout)


def test_torch_is_imported_by_the_file_not_before_it(tmp_path):
    # Settings a file makes before ``import torch`` (OMP_NUM_THREADS, TORCH_LOGS) must be
    # there when torch starts; the NVML answer is in place as soon as torch has run.
    source = IDENTITY + (
        "import torch\n"
        "print(json.dumps(getattr(torch.cuda.get_device_name, '_answers_from_nvml', False)))\n"
    )
    plain, through, text = both_ways(tmp_path, source, "prog.py")
    assert through.returncode == 0, through.stderr
    assert json.loads(through.stdout.splitlines()[0])["torch_already_imported"] is False
    assert json.loads(through.stdout.splitlines()[1]) is True  # the file's torch answers NVML
    assert json.loads(plain.stdout.splitlines()[1]) is False
    record = json.loads(text)
    assert record["torch"] and record["cuda_available"] is False


def test_a_file_that_never_imports_torch_or_sglang_gets_neither_at_exit(tmp_path):
    plain, through, text = both_ways(tmp_path, "import sys\n", "prog.py")
    assert through.returncode == 0, through.stderr
    record = json.loads(text)
    assert record["torch_error"] == "torch was not imported"
    assert record["sglang"]  # from the package's metadata, without importing it
    assert "sglang_error" in record


LATE = """
import atexit, pickle, sys, threading, time

class Point:
    def __init__(self, x):
        self.x = x

def later(where):
    main = vars(sys.modules["__main__"])
    print(where, pickle.loads(pickle.dumps(Point(3))).x, "__file__" in main, flush=True)

atexit.register(later, "atexit")
threading.Thread(target=lambda: (time.sleep(0.2), later("thread"))).start()
print("body done", flush=True)
"""


def test_the_file_stays_main_after_its_body_ends_for_its_threads_and_atexit(tmp_path):
    plain, through, _ = both_ways(tmp_path, LATE, "prog.py")
    # python FILE drops __file__ once a body that did not call sys.exit has ended
    assert plain.stdout == "body done\nthread 3 False\natexit 3 False\n"
    assert (through.returncode, through.stdout) == (0, plain.stdout), through.stderr


FORKS = """
import os, sys
pid = os.fork()
if pid == 0:
    sys.exit(0)  # the child ends as a script does, through SystemExit
os.waitpid(pid, 0)
sys.exit(4)
"""


def test_a_forked_child_that_exits_through_systemexit_leaves_the_record_to_its_parent(tmp_path):
    plain, through, text = both_ways(tmp_path, FORKS, "prog.py")
    assert plain.returncode == through.returncode == 4, through.stderr
    assert environment.process_record(text) is not None  # one record, not two run together


BREAKS_THE_RECORD = """
import sys
import sglang_overlay

def status():
    raise RuntimeError("no status today")

sglang_overlay.status = status
sys.exit(3)
"""


def test_a_part_of_the_record_that_fails_says_why_and_the_rest_is_kept(tmp_path):
    _, through, text = both_ways(tmp_path, BREAKS_THE_RECORD, "prog.py")
    assert through.returncode == 3, through.stderr
    record = json.loads(text)
    assert record["overlay_error"] == "RuntimeError: no status today"
    assert record["sglang"] and record["torch_error"]


RAISES_PAST_EXCEPTION = """
import sys

class Torch:
    @property
    def __version__(self):
        raise KeyboardInterrupt  # not an Exception: it passes every `except Exception`

sys.modules["torch"] = Torch()
sys.exit(5)
"""


def test_a_record_that_cannot_be_made_never_changes_the_files_exit_code(tmp_path):
    _, through, text = both_ways(tmp_path, RAISES_PAST_EXCEPTION, "prog.py")
    assert through.returncode == 5, through.stderr
    assert "no environment record" in through.stderr
