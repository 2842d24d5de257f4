"""Trust, part four (issue 34): a failed run never posts green, results are bound to the run
that wrote them, shards merge only within one mode, and the bot's other breaks. Each test here
reproduced its break before the fix (the commit that added it says so)."""

import os
import re
import subprocess
import sys
from dataclasses import replace

import ci_samples
import pytest
from ci_fake_github import FakeGitHub
from ci_samples import posted
from conftest import REPO, clean_env, until
from test_ci_trust import ACTIONS_TOKEN, HEAD, _fork_pr, _fork_report, _report, _results_dir

from ci.evidence import shards as evidence_shards
from ci.evidence.model import EvidenceError, save
from ci.reporter import pr_states

SLOT = "dsv4-workspace"
REPORT = ["--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD, "--require-head", "--post"]


@pytest.fixture
def fake():
    server = FakeGitHub(token=ACTIONS_TOKEN, bot="github-actions[bot]").start()
    server.add_pr(7, "Author's text.\n", head_sha=HEAD)
    yield server
    server.stop()


@pytest.fixture
def bare():
    server = FakeGitHub(token=ACTIONS_TOKEN, bot="github-actions[bot]").start()
    yield server
    server.stop()


def _nothing_green(server):
    slot = pr_states.get_slot(server.bodies[7], SLOT)
    assert not slot.startswith(":white_check_mark:"), slot
    assert all(s["state"] != "success" for s in server.statuses), server.statuses
    assert all(r["conclusion"] != "success" for r in server.check_runs.values())
    return slot


# --- 1: what GitHub says of the job outranks what its files say --------------------------------


@pytest.mark.parametrize(
    "conclusion, emoji", [("failure", ":x:"), ("cancelled", ":no_entry_sign:")]
)
def test_a_fork_run_that_did_not_succeed_never_posts_green_from_a_green_artifact(
    bare, tmp_path, monkeypatch, conclusion, emoji
):
    _fork_pr(bare)  # a green results artifact
    assert _fork_report(bare, monkeypatch, tmp_path, conclusion=conclusion) == 0
    slot = _nothing_green(bare)
    assert slot.startswith(emoji) and f"result is {conclusion}" in slot, slot
    (run,) = bare.check_runs.values()
    assert run["conclusion"] == conclusion


def _green_shard(folder, shard):
    runs = [ci_samples.file_run(m, [(ci_samples.GROW, "pass")], path=f"test/{shard[0]}/test_x.py")
            for m in ("unmodified", "change")]  # fmt: skip
    results = replace(
        ci_samples.model(runs, selection={"shard": shard}), sides=ci_samples.sides("0.5.23")
    )
    folder.mkdir()
    save(results, str(folder))
    return str(folder)


@pytest.mark.parametrize("result", ["failure", "cancelled"])
def test_a_failed_test_job_whose_shards_or_folder_say_green_is_never_green(
    fake, tmp_path, monkeypatch, result
):
    shards = [_green_shard(tmp_path / "s0", "0/2"), _green_shard(tmp_path / "s1", "1/2")]
    assert _report(fake, monkeypatch, "--results", *shards, "--test-result", result, *REPORT) == 0
    _nothing_green(fake)
    one = _results_dir(tmp_path)
    assert _report(fake, monkeypatch, "--results", str(one), "--test-result", result, *REPORT) == 0
    _nothing_green(fake)


def test_a_successful_test_job_with_the_printed_digest_still_posts_green(
    fake, tmp_path, monkeypatch
):
    folder = tmp_path / "r"
    folder.mkdir()
    digest = save(posted(), str(folder))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    args = ["--results", str(folder), "--test-result", "success", "--results-digest", digest]
    assert _report(fake, monkeypatch, *args, *REPORT) == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":white_check_mark:")


@pytest.mark.parametrize("printed", ["sha256:" + "0" * 64, ""])
def test_results_that_are_not_what_ci_run_printed_the_digest_of_are_refused(
    fake, tmp_path, monkeypatch, printed
):
    folder = _results_dir(tmp_path)
    args = ["--results", str(folder), "--test-result", "success", "--results-digest", printed]
    assert _report(fake, monkeypatch, *args, *REPORT) == 2
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":x:")


# These files' subject is the runner, not sglang: registered as sglang's registry reader reads it
# (a module-level call by its name) without importing sglang, which costs each side's process
# about 5 CPU-s (tests/fixtures/slow/test_sleeps.py does the same).
REGISTERED = """
def register_cpu_ci(**kwargs):  # read by AST: sglang's own would import sglang (seconds)
    pass


register_cpu_ci(est_time=5, suite="base-a-test-cpu")
"""

GRANDCHILD = (
    """
import os, shutil, sys, time, unittest
"""
    + REGISTERED
    + """


class T(unittest.TestCase):
    def test_fails(self):
        if os.environ.get("SGLANG_OVERLAY_DISABLE") != "1" and os.fork() == 0:
            os.setsid()  # out of the file's process group: the runner's kill misses it
            if os.fork() == 0:
                # A daemon's manners: it lets go of the file's pipes (ci run would read them
                # for another 10 s, launch.DRAIN_S, a path test_ci_attacks covers).
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, 1024)
                for _ in range(1200):  # the test says when `ci run` has exited
                    if os.path.exists(os.environ["EXITED"]):
                        break
                    time.sleep(0.25)
                shutil.copy(os.environ["GREEN"], os.path.join(os.environ["REWRITE_OUT"], "results.json"))
            os._exit(0)
        self.fail("the change breaks this")


if __name__ == "__main__":
    unittest.main()
"""
)


def test_results_a_leftover_process_rewrote_after_ci_run_exited_are_refused(
    fake, tmp_path, monkeypatch
):
    root, out = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    (root / "test_rewrite.py").write_text(GRANDCHILD)
    (tmp_path / "none.txt").write_text("")
    green = tmp_path / "green"
    green.mkdir()
    save(posted(), str(green))
    exited = tmp_path / "ci-run-exited"
    env = clean_env(REWRITE_OUT=str(out), GREEN=str(green / "results.json"), EXITED=str(exited))
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", "--root",
            str(root), "--tests", "test_rewrite.py", "--regressions", str(tmp_path / "none.txt")]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    exited.touch()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("results-digest: sha256:"), proc.stdout
    printed = last.split(": ", 1)[1]
    green_bytes = (green / "results.json").read_bytes()
    assert until(lambda: (out / "results.json").read_bytes() == green_bytes, within_s=120.0)
    # The job failed (`ci run` exited 1): the rewritten green results post no green.
    args = ["--results", str(out), "--test-result", "failure", "--results-digest", printed]
    assert _report(fake, monkeypatch, *args, *REPORT) == 2
    _nothing_green(fake)
    # And were the job's result success, the digest alone refuses them.
    args = ["--results", str(out), "--test-result", "success", "--results-digest", printed]
    assert _report(fake, monkeypatch, *args, *REPORT) == 2
    _nothing_green(fake)


# --- 3: shards of one run share the retry mode -----------------------------------------------


def test_a_ci_mode_shard_and_an_outside_ci_shard_do_not_merge():
    def shard(index, upstream_ci):
        runs = [ci_samples.file_run(m, [(ci_samples.GROW, "pass")], path=f"test/{index}/test_x.py")
                for m in ("unmodified", "change")]  # fmt: skip
        results = ci_samples.model(runs, selection={"shard": f"{index}/2"})
        environment = {**results.environment, "upstream_ci": upstream_ci}
        return replace(results, sides=ci_samples.sides("0.5.23"), environment=environment)

    named = [("a", shard(0, {"SGLANG_IS_IN_CI": "true"})), ("b", shard(1, None))]
    with pytest.raises(EvidenceError) as refused:
        evidence_shards.merge(named)
    said = str(refused.value)
    assert said.startswith("b: retry mode \"outside sglang's CI\" differs from a's"), said
    assert '{"SGLANG_IS_IN_CI": "true"}' in said and said.endswith("shards of different runs")


# --- 12: the dirty-tree message, the preload record ------------------------------------------


def test_the_dirty_tree_message_names_the_whole_path(tmp_path):
    from ci.runner import git_sides

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "abc.py").write_text("x = 1\n")
    git("add", "abc.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (tmp_path / "abc.py").write_text("x = 2\n")  # " M abc.py": modified, not staged
    with pytest.raises(git_sides.RequestError) as refused:
        git_sides.read_change(str(tmp_path), "HEAD", "HEAD")
    assert "uncommitted changes (abc.py...)" in str(refused.value), refused.value


KILLS_ITS_PARENT = """
import os, signal, unittest


class T(unittest.TestCase):
    def test_x(self):
        pass


if __name__ == "__main__":
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
        parent = handle.read()
    # only ever the preloading parent, never the test run that started it all (RUNNER)
    if b"preload.py" in parent and os.getppid() != RUNNER:
        os.kill(os.getppid(), signal.SIGKILL)
    unittest.main()
"""


def test_the_preload_record_stops_saying_forked_once_its_parent_died(tmp_path):
    from ci.runner import launch, modes

    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(f"RUNNER = {os.getpid()}\n" + KILLS_ITS_PARENT)
    env = modes.environment(modes.ModeSetup("change", overlay=True), base=clean_env())
    preloads = {}
    runs = launch.run_all(["test_a.py", "test_b.py"], {"change": env}, str(tmp_path), 60, 1,
                          lambda _: None, ("json",), preloads)  # fmt: skip
    assert len(runs) == 2
    record = preloads["change"]
    assert record["forked"] is False and "preloading parent failed" in record["error"], record


# --- 11: stderr gets the defusing stdout gets ------------------------------------------------

PASSES = (
    """
import unittest
"""
    + REGISTERED
    + """


class T(unittest.TestCase):
    def test_x(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""
)


def test_a_file_name_never_starts_a_workflow_command_on_stderr_or_stdout(tmp_path):
    forged = "\n::error title=forged::the bot says so"
    root = tmp_path / "root"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / f"test_x{forged}.py").write_text(PASSES)
    (root / "tests" / "test_ok.py").write_text(PASSES)
    (tmp_path / "none.txt").write_text("")

    def ci_run(*tests):
        argv = [sys.executable, "-m", "ci", "run", "--out", str(tmp_path / "out"), "--backend",
                "cpu", "--root", str(root), "--tests", *tests,
                "--regressions", str(tmp_path / "none.txt")]  # fmt: skip
        proc = subprocess.run(
            argv, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600
        )
        for line in (proc.stdout + proc.stderr).splitlines():
            assert not line.strip().startswith("::"), line
            assert "##[" not in line, line
        return proc

    # Such a file name is refused before it runs (issue 34, break 10): named, in one line.
    refused = ci_run(f"tests/test_x{forged}.py")
    assert refused.returncode == 2 and "a test file name the report refuses" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # A folder link's name reaches the progress lines: defused there too.
    os.rename(root / "tests" / f"test_x{forged}.py", tmp_path / "away.py")
    os.symlink(".", root / "tests" / f"loop{forged}")
    ran = ci_run("tests")
    assert "exit 0" in ran.stderr and "a link to a folder: not followed" in ran.stderr, ran.stderr


# --- 12: a listed regression that skips or goes missing on base proves nothing ----------------


def _without_grow_on_base():
    unmodified, change = ci_samples.workspace_runs()
    lines = [line for line in unmodified.channel.splitlines() if ci_samples.GROW not in line]
    return [replace(unmodified, channel="\n".join(lines) + "\n", returncode=0), change]


@pytest.mark.parametrize("base", ["skip", "missing"])
def test_a_listed_regression_that_skips_or_is_missing_on_base_is_not_green(base):
    runs = ci_samples.workspace_runs("skip") if base == "skip" else _without_grow_on_base()
    m = ci_samples.model(runs)
    (grow,) = [c for c in m.cases if c.test.endswith(ci_samples.GROW)]
    assert grow.kind == "not-reproduced" and m.verdict == "void", (grow.kind, m.verdict)
    assert any("skip or give no result" in r for r in m.reasons), m.reasons


# --- 4: one id reported twice is a broken file, and its failure stands -------------------------


def test_a_file_that_reports_one_id_twice_is_broken_and_its_failure_is_not_overwritten():
    unmodified, change = ci_samples.workspace_runs()
    fail = ci_samples.channel_line(ci_samples.REUSE, "fail", ci_samples.TRACEBACK)
    again = ci_samples.channel_line(ci_samples.REUSE, "pass")
    change = replace(change, channel=change.channel + fail + "\n" + again + "\n", returncode=0)
    m = ci_samples.model([unmodified, change])
    (reuse,) = [c for c in m.cases if c.test.endswith(ci_samples.REUSE)]
    assert reuse.modes["change"].outcome == "fail" and reuse.kind == "broken", reuse
    assert m.verdict == "failed"
    (whole,) = [c for c in m.cases if c.test == "(whole file)"]
    assert "reported more than once: a broken file" in whole.modes["change"].detail
