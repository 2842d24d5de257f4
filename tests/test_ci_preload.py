"""``ci run --preload MODULES``: each side imports the modules once and forks a child per test
file (ci/runner/preload.py), and each file still runs in its own process and session with its own
result channel: one that crashes, exits through ``os._exit``, forks or hangs leaves the others
as they were, and the outcomes are those of fresh interpreters. A side whose preload fails runs
every file fresh, and says so. The files are tests/fixtures/forked (a module that writes a line
per import, so the imports are counted, not timed).
"""

import json
import subprocess
import sys

import pytest
from conftest import REPO, alive, clean_env, until

from ci.runner import fork_safety

FIXTURES = REPO / "tests/fixtures/forked"


# A bound for the hanging file; the others end in well under a second, so 6 s holds while both
# cores are busy (the earlier 10 s, waited out twice in turn, was most of this module's time).
HANG_TIMEOUT_S = "6"


def ci_run(tmp_path, name, preload) -> tuple:
    """Start one ``ci run`` over the fixtures; ``finish`` waits for it."""
    marks, out = tmp_path / f"{name}-marks", tmp_path / name
    marks.mkdir()
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu"]
    argv += ["--tests", "tests/fixtures/forked", "--preload", preload]
    proc = subprocess.Popen(
        [*argv, "--timeout", HANG_TIMEOUT_S, "--jobs", "4"],
        cwd=REPO,
        env=clean_env(MARKS=str(marks), PYTHONPATH=str(FIXTURES)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out, marks


def finish(started) -> tuple:
    proc, out, marks = started
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    data = json.loads((out / "results.json").read_text())
    return done, data, marks


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preload")
    # Both at once: each mostly waits out its hanging file.
    started = {
        "forked": ci_run(tmp, "forked", "preload_mark"),
        "fresh": ci_run(tmp, "fresh", "no_such_module_here,preload_mark"),
    }
    return {name: finish(run) for name, run in started.items()}


def lines(path):
    return path.read_text().split() if path.exists() else []


def outcomes(data):
    return {
        (case["file"].rpartition("/")[2], case["test"], mode): result["outcome"]
        for case in data["cases"]
        for mode, result in case["modes"].items()
    }


SETS_ENVIRONMENT = "tests/fixtures/forked/test_sets_environment.py"


def test_each_side_imports_the_preloaded_module_once_and_forks_a_process_per_file(runs):
    proc, data, marks = runs["forked"]
    fresh = {
        SETS_ENVIRONMENT: "it changes the environment as it is imported (line 4), after the "
        "preloaded modules read it"
    }
    assert data["environment"]["preload"] == {
        mode: {"modules": ["preload_mark"], "forked": True, "error": None, "fresh": fresh}
        for mode in ("unmodified", "change")
    }, proc.stderr
    imports, files = lines(marks / "imports"), lines(marks / "files")
    # Once per side in its preloading parent, and once in each side's fresh interpreter of the
    # file that sets the environment; never in the forked files.
    assert len(imports) == 4 and len(files) == 4
    assert not set(imports) & set(files) and len(set(files)) == 4


def test_a_file_that_crashes_exits_forks_or_hangs_leaves_the_others_as_they_were(runs):
    _, data, marks = runs["forked"]
    ends = {f["path"].rpartition("/")[2]: f["modes"]["change"] for f in data["files"]}
    assert ends["test_crashes.py"]["returncode"] == -11
    assert ends["test_exits_at_once.py"]["returncode"] == 5
    assert ends["test_forks_and_hangs.py"]["timed_out"] is True
    left, hung = (int(pid) for pid in lines(marks / "left"))
    assert until(lambda: not alive(left) and not alive(hung)), "a forked file's child survived"
    found = outcomes(data)
    for mode in ("unmodified", "change"):
        assert (
            found[("test_sets_environment.py", "TestSetsEnvironment.test_sees_its_setting", mode)]
            == "pass"
        )
    for name in ("test_uses_the_module_1.py", "test_uses_the_module_2.py"):
        for mode in ("unmodified", "change"):
            test = "TestUsesTheModule.test_runs_as_main_in_its_own_process"
            assert found[(name, test, mode)] == "pass"
    assert found[("test_crashes.py", "TestCrashes.test_passes_first", "change")] == "pass"


def test_a_side_whose_preload_fails_runs_each_file_fresh_with_the_same_outcomes(runs):
    _, forked, _ = runs["forked"]
    proc, fresh, marks = runs["fresh"]
    record = fresh["environment"]["preload"]["change"]
    assert record["forked"] is False and "No module named 'no_such_module_here'" in record["error"]
    assert len(lines(marks / "imports")) == 6 and len(lines(marks / "files")) == 4
    assert outcomes(fresh) == outcomes(forked)
    assert [f["modes"]["change"]["returncode"] for f in fresh["files"]] == [
        f["modes"]["change"]["returncode"] for f in forked["files"]
    ]


def test_preload_names_must_be_module_names(tmp_path):
    argv = [sys.executable, "-m", "ci", "run", "--out", str(tmp_path), "--preload", "os;rm"]
    proc = subprocess.run(argv, cwd=REPO, env=clean_env(), capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --preload 'os;rm': a comma list of module names"


@pytest.mark.parametrize(
    "source, reason",
    [
        ("import os\n# sglang-overlay: fresh-interpreter\n", "it asks for one (line 2)"),
        (
            "import os\nos.environ['A'] = '1'\n",
            "changes the environment as it is imported (line 2)",
        ),
        ("import os\nif True:\n    os.environ.setdefault('A', '1')\n", "(line 3)"),
        ("from os import environ\nenviron.update(A='1')\n", "(line 2)"),
        ("import os\nos.putenv('A', '1')\n", "(line 2)"),
        ("import os\ndef f():\n    os.environ['A'] = '1'\n", None),
        ("import os\nclass T:\n    os.environ['A'] = '1'\n", None),
        ("import os\nprint(os.environ.get('A'))\n", None),
    ],
)
def test_a_file_that_asks_or_sets_the_environment_at_import_runs_fresh(tmp_path, source, reason):
    path = tmp_path / "test_x.py"
    path.write_text(source)
    found = fork_safety.fresh_reason(str(path))
    assert found == reason if reason is None else reason in found


# --- what a side preloads when not told ------------------------------------------------------

DEFAULT_FIXTURES = REPO / "tests/fixtures/default_preload"  # a stand-in torch, two files using it


def test_without_preload_each_side_preloads_the_torch_its_files_import_and_none_turns_it_off(
    tmp_path,
):
    started = {}
    for name, more in (("default", []), ("none", ["--preload", "none"])):
        marks, out = tmp_path / f"{name}-marks", tmp_path / name
        marks.mkdir()
        argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu"]
        proc = subprocess.Popen(
            [*argv, "--tests", "tests/fixtures/default_preload", *more],
            cwd=REPO,
            env=clean_env(MARKS=str(marks), PYTHONPATH=str(DEFAULT_FIXTURES)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started[name] = (proc, out, marks)
    ran = {name: finish(run) for name, run in started.items()}
    for name, (proc, data, _) in ran.items():
        assert proc.returncode == 0 and data["verdict"] == "ok", (name, proc.stderr)
    (_, data, marks), (_, fresh, fresh_marks) = ran["default"], ran["none"]
    assert data["environment"]["preload"] == {
        mode: {"modules": ["torch"], "forked": True, "error": None}
        for mode in ("unmodified", "change")
    }
    # Once per side in its preloading parent; never in the forked files.
    imports, files = lines(marks / "imports"), lines(marks / "files")
    assert len(imports) == 2 and len(files) == 4 and not set(imports) & set(files)
    assert "preload" not in fresh["environment"]
    assert sorted(lines(fresh_marks / "imports")) == sorted(lines(fresh_marks / "files"))
    assert len(lines(fresh_marks / "files")) == 4


def _file(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def test_the_default_preload_is_what_the_forkable_files_import_of_torch_and_sglang(tmp_path):
    module = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
    paths = [
        _file(tmp_path, "test_a.py", f"import os\nimport torch.nn\nfrom {module} import X\n"),
        _file(tmp_path, "test_b.py", "import sglang\ntry:\n    import torch\nexcept ImportError:\n    pass\n"),
        _file(tmp_path, "test_c.py", "import os\nos.environ['A'] = '1'\nimport sglang.lang\n"),
        _file(tmp_path, "test_d.py", "from . import helper\nimport numpy\ndef f():\n    import sglang.x\n"),
    ]  # fmt: skip
    assert fork_safety.default_preload(paths, "cpu") == ("torch", "torch.nn", "sglang", module)
    # On CUDA torch only (importing sglang initialises CUDA on some machines); sglang imports it.
    assert fork_safety.default_preload(paths, "cuda") == ("torch", "torch.nn")
    assert fork_safety.default_preload(paths[1:2], "cuda") == ("torch",)
    # The fresh file and one importing neither: nothing to preload.
    assert fork_safety.default_preload(paths[2:], "cpu") == ()
