"""Synthetic test processes and judged runs; ``ci report`` against the fake GitHub."""

import json
from dataclasses import replace

from ci_fake_github import FakeGitHub

from ci.__main__ import main
from ci.evidence import judge
from ci.evidence.judge import FileRun
from ci.evidence.model import MODES, ProcessEnd, Side, save
from ci.reporter.publish import Publisher, connect

FILE = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
CLS = "TestSparsePrefillKVBufferReplacement"
GROW = "test_grow_64_to_96_mib_bf16_peaks_at_96_mib"
REUSE = "test_smaller_request_reuses_storage"
TRACEBACK = (
    "Traceback (most recent call last):\n  File ..., in test_grow\n"
    "AssertionError: 160.0 not less than or equal to 128 : the replacement peaked at 160.0 MiB"
)


# A registered test file that imports no sglang unless ``imports`` does.
REGISTERED = """import unittest
{imports}

def register_cpu_ci(**kwargs):  # read by AST
    pass


register_cpu_ci(est_time={est}, suite="{suite}")
{more}

class {cls}(unittest.TestCase):
    def test_{name}(self):
        {body}


if __name__ == "__main__":
    unittest.main()
"""


def registered(name="passes", est=1, suite="base-a-test-cpu", cls="TestTiny", body="pass",
               imports="", more=""):  # fmt: skip
    """The text of a registered file of one test; ``more``: lines after its registration."""
    return REGISTERED.format(**locals())


def channel_line(test, outcome, detail="", peak_mib=None) -> str:
    record = {"test": f"{CLS}.{test}", "outcome": outcome, "duration_s": 0.5, "detail": detail}
    return json.dumps(record if peak_mib is None else {**record, "peak_mib": peak_mib})


def file_run(mode, tests, returncode=None, duration_s=30.0, path=FILE) -> FileRun:
    """A finished test process: ``tests`` are (name, outcome, detail, peak MiB), one line each."""
    failed = any(t[1] in ("fail", "error") for t in tests)
    code = int(failed) if returncode is None else returncode
    channel = "".join(channel_line(*test) + "\n" for test in tests)
    return FileRun(path, mode, ProcessEnd(code, duration_s), f"Ran {len(tests)} tests\n", channel)


# The file's other listed regressions (ci/regressions.txt): a green run must hold them.
OTHER_LISTED = (
    "test_replace_48_mib_fp8_with_96_mib_bf16_peaks_at_96_mib",
    "test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib",
)


def workspace_runs(grow_unmodified="fail", grow=GROW, others=()):
    """A CUDA-like A/B: a grow test, a preservation test, then ``others`` fixed by the change."""
    failed = grow_unmodified == "fail"
    unmodified = [
        (grow, grow_unmodified, TRACEBACK if failed else "", 160.0 if failed else 96.0),
        (REUSE, "pass", "", 96.0),
        *((name, "fail", TRACEBACK, 144.0) for name in others),
    ]
    change = [(grow, "pass", "", 96.0), (REUSE, "pass", "", 96.0)]
    change += [(name, "pass", "", 96.0) for name in others]
    return [file_run("unmodified", unmodified), file_run("change", change)]


def shard(index, version="0.5.23", path=FILE, head="fix", modes=MODES):
    """Shard ``index`` ("I/N", or None) of a run of ``head``: one case, passing on both sides;
    a side of ``modes`` only."""
    runs = [file_run(m, [(GROW, "pass")], path=path) for m in MODES]
    selection = {"shard": index, "git": {"base": "main", "head": head}}
    only = {m: side for m, side in sides(version).items() if m in modes}
    return replace(model(runs, selection=selection), sides=only)


def sides(version="0.5.23"):
    return {
        "unmodified": Side(f"sglang {version}", version),
        "change": Side(f"sglang {version} + this change", version, overlay=True),
    }


ENVIRONMENT = {
    "gpus": [{"name": "NVIDIA H200", "driver": "580.65", "memory": "143771 MiB"}],
    "git": {"commit": "0123456789abcdef", "dirty": False},
    "modes": {
        "change": {"python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "sglang": "0.5.23"}
    },
}


def model(runs=None, patterns=None, suite="base-b-test-1-gpu-small", **fields):
    runs = runs if runs is not None else workspace_runs()
    patterns = [f"{FILE}::*.test_grow_*"] if patterns is None else patterns
    fields.setdefault("environment", ENVIRONMENT)
    return judge.build(runs, "cuda", sides(), {FILE: suite}, patterns, **fields)


def posted(**fields):
    """The sample with every listed regression of its file: what the report calls green."""
    return model(workspace_runs(others=OTHER_LISTED), **fields)


def refused(fake, pr=7, slot="dsv4-workspace"):
    """A refused artifact's trace: the slot says failure and why; no comment, no status."""
    from ci.reporter import pr_states

    text = pr_states.get_slot(fake.bodies[pr], slot)
    assert text.startswith(":x:") and text.endswith("-- invalid artifact"), text
    assert not fake.comments and not fake.statuses


TOKEN = "ghs_actionsINSTALLATIONtoken"  # an installation token, as the Actions GITHUB_TOKEN is
HEAD = "c0ffee" + "0" * 34
SLOT = "dsv4-workspace"
PR = ["--repo", "sgl/sglang", "--pr", "7"]


def pull_request(head, action="labeled", sender="maint", fork="someone/sglang", labels=("run-ci",),
                 base=None) -> dict:  # fmt: skip
    """A pull_request event of PR 7 at ``head`` from ``fork`` (None: a branch of sgl/sglang)."""
    pr = {"number": 7, "head": {"sha": head, "repo": {"full_name": fork or "sgl/sglang"}},
          "base": {"sha": base, "repo": {"full_name": "sgl/sglang"}},
          "labels": [{"name": name} for name in labels]}  # fmt: skip
    label = {"label": {"name": "run-ci"}} if action == "labeled" else {}
    repository = {"full_name": "sgl/sglang"}
    return {"action": action, **label, "sender": {"login": sender}, "repository": repository,
            "pull_request": pr}  # fmt: skip


def fork_pr(fake, head=HEAD, fork="someone/sglang", branch="fix", approved=True):
    """PR 7 from ``fork`` at ``head``, labelled run-ci; maint approved ``head`` if ``approved``."""
    fake.add_pr(7, "Author's text.\n", head_sha=head, fork=fork)
    fake.pr_meta[7].update(branch=branch, labels=["run-ci"])
    fake.permissions["maint"] = "write"
    if approved:
        fake.add_review(7, "maint", head)


def workflow_run(path, /, **run) -> str:
    """``path`` holding the workflow_run event of fork run 4242 at HEAD (``run``: other fields)."""
    repository = run.pop("repository", {"full_name": "sgl/sglang", "default_branch": "main"})
    run = {"id": 4242, "html_url": "https://github.example/runs/4242", "event": "pull_request",
           "head_sha": HEAD, "conclusion": "success", "head_branch": "fix",
           "head_repository": {"full_name": "someone/sglang"}, "triggering_actor": {"login": "maint"},
           "created_at": "2026-01-01T00:05:00Z", "pull_requests": []} | run  # fmt: skip
    payload = {"action": "completed", "workflow_run": run, "repository": repository}
    path.write_text(json.dumps(payload))
    return str(path)


def pr_fake():
    """A fixture's body: the fake GitHub with PR 7 at HEAD, written to as the Actions bot."""
    with FakeGitHub(token=TOKEN, bot="github-actions[bot]") as server:
        server.add_pr(7, "Author's text.\n", head_sha=HEAD)
        yield server


def publisher(fake, number=7, sleeps=None, **kwargs):
    """A publisher to ``fake``'s PR ``number`` with its token; its waits are kept in ``sleeps``."""
    sleep = ([] if sleeps is None else sleeps).append
    return Publisher(connect(fake.token, fake.url), "sgl", "sglang", number, sleep, **kwargs)


def cli(capsys, *argv):
    """``python -m ci *argv`` in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    said = capsys.readouterr()
    return code, said.out, said.err


def report(fake, monkeypatch, *args):
    """``ci report *args`` in this process against ``fake``, with TOKEN and without pauses."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr("ci.reporter.publish.time.sleep", lambda _: None)
    monkeypatch.setattr("ci.reporter.publish.Publisher.settle_s", 0)
    return main(["report", "--api-url", fake.url, *args])


def results_folder(folder, m=None):
    """``folder``, made, holding the results.json of ``m`` (default: ``posted()``)."""
    folder.mkdir()
    save(m or posted(), str(folder))
    return folder
