"""The process a registered file runs in under ``ci run`` (ci/file_process.py), the environment
record it writes, and file selection that never imports sglang in the CI process.

The file runs exactly as ``python FILE ARGS`` would; the record is what that process ran with,
checked before it is stored (it is PR code's output). The NVML answer for the device name is
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


def run_through_file_process(tmp_path, *args):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    read_end, write_end = os.pipe()
    proc = subprocess.run(
        [
            sys.executable,
            runner.FILE_PROCESS,
            "--environment-fd",
            str(write_end),
            str(program),
            *args,
        ],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        pass_fds=(write_end,),
        timeout=120,
    )
    os.close(write_end)
    with os.fdopen(read_end) as record:
        text = record.read()
    ran = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("RAN ")]
    return proc, ran, program, text


def test_the_file_runs_as_python_file_would_with_its_exit_code(tmp_path):
    proc, ran, program, text = run_through_file_process(tmp_path, "-v", "3")
    assert proc.returncode == 3, proc.stderr
    assert ran == [{"name": "__main__", "argv": [str(program), "-v", "3"], "path0": str(tmp_path)}]
    record = json.loads(text)
    assert record["torch"]  # the process imported torch to defer CUDA; the record says which
    assert record["cuda_available"] is False


def test_a_failing_file_still_gets_its_record_and_fails(tmp_path):
    proc, ran, _, text = run_through_file_process(tmp_path, "--raise", "0")
    assert proc.returncode == 1 and "RuntimeError: the file failed" in proc.stderr
    assert len(ran) == 1 and "torch" in json.loads(text)


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
