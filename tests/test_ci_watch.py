"""The release watch: discovery, the per-release check, rows, the table, the tracking issue."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import release_check
import yaml
from ci_fake_github import FakeGitHub
from conftest import clean_env

from ci.reporter.publish import ACTIONS_BOT, Publisher, connect
from tools.releases import watch
from tools.releases.__main__ import main, upsert_issue

REPO = Path(__file__).resolve().parents[1]
TOKEN = "ghs_watchTOKEN"
BOT = "ci-bot"


@pytest.fixture
def index(httpserver):
    """A PEP 503 simple index on loopback: serve(names) lists each file, yanked those given."""

    def serve(*names, yanked=()):
        yank = {n: " data-yanked=''" if n in yanked else "" for n in names}
        links = "".join(f'<a href="../../f/{n}#sha256=00"{yank[n]}>{n}</a>' for n in names)
        httpserver.expect_request("/simple/sglang/").respond_with_data(
            f"<html><body>{links}</body></html>", content_type="text/html"
        )
        return httpserver.url_for("/simple")

    return serve


@pytest.fixture
def github():
    server = FakeGitHub(token=TOKEN, bot=BOT).start()
    server.add_pr(1, watch.MARKER + "\na PR that quotes the marker is not the tracking issue")
    yield server
    server.stop()


def wheels(*versions):
    return [f"sglang-{v}-py3-none-any.whl" for v in versions]


def test_discovery_keeps_final_unyanked_releases_newer_than_every_release_the_project_knows(index):
    newest = watch.newest_known()  # the series matrix's and the overlay shapes'
    assert newest == "0.5.23"
    names = [
        *wheels("0.5.22", "0.5.23", "0.5.24", "0.5.25", "0.6.0rc1", "0.5.9"),
        "sglang-0.5.26.dev3.tar.gz",
    ]
    found = watch.index_versions(index(*names, yanked=wheels("0.5.25")))
    assert watch.newer_releases(found, newest) == ["0.5.24"]


def test_an_index_without_the_project_is_one_line_and_exit_2(httpserver, capsys):
    httpserver.expect_request("/nope/sglang/").respond_with_data("", status=404)
    assert main(["watch", "--index-url", httpserver.url_for("/nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: pip index versions sglang") and len(err.splitlines()) == 1


def test_no_new_release_posts_one_issue_saying_so(index, github, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    argv = ["watch", "--index-url", index(*wheels("0.5.22", "0.5.23")), "--out", str(tmp_path)]
    post = ["--repo", "sgl/sglang", "--api-url", github.url, "--bot-login", BOT, "--post"]
    assert main(argv + post) == 0
    assert "tracking issue #2: created" in capsys.readouterr().err
    body = github.bodies[2]
    assert body.startswith(watch.MARKER) and "None: 0.5.23 is the newest release there" in body
    assert json.loads((tmp_path / watch.ROWS_FILE).read_text())["rows"] == []


# ---------------------------------------------------------------------------- tracking issue


def upsert(github, body, author=BOT):
    publisher = Publisher(connect(TOKEN, github.url), "sgl", "sglang", None, lambda _: None)
    return upsert_issue(publisher, body, author)


def test_tracking_issue_is_created_once_then_edited_in_place_even_after_a_server_error(github):
    github.fail_next("POST", r"/issues$", 502)
    first = watch.MARKER + "\nfirst"
    assert upsert(github, first) == ("created", 2)
    assert upsert(github, first) == ("unchanged", 2)
    assert upsert(github, watch.MARKER + "\nsecond") == ("edited", 2)
    assert github.bodies[2] == watch.MARKER + "\nsecond" and list(github.issue_meta) == [2]
    assert github.issue_meta[2]["title"] == watch.TITLE
    assert github.bodies[1].startswith(watch.MARKER)  # the PR quoting the marker: untouched


def test_without_a_bot_login_the_issue_is_the_tokens_users_and_a_marker_alone_adopts_nothing(
    monkeypatch, capsys, tmp_path
):
    server = FakeGitHub(token=TOKEN, bot=ACTIONS_BOT).start()
    try:
        server.add_pr(1, watch.MARKER + "\na PR that quotes the marker")
        server.add_issue(watch.TITLE, watch.MARKER + "\nmallory's copy", login="mallory")
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        rows = _rows_file(tmp_path, [])
        argv = ["watch", "--rows", str(rows), "--repo", "sgl/sglang", "--api-url", server.url]
        assert main(argv + ["--post"]) == 0 and main(argv + ["--post"]) == 0
        assert "tracking issue #3: unchanged" in capsys.readouterr().err
        assert server.bodies[2] == watch.MARKER + "\nmallory's copy"
        assert server.issue_meta[2]["state"] == "open"
        assert server.issue_meta[3]["login"] == ACTIONS_BOT
        assert server.bodies[1].startswith(watch.MARKER + "\na PR")
    finally:
        server.stop()


def test_the_tracking_issue_is_found_behind_hundreds_of_newer_issues_without_listing_them(github):
    ours = github.add_issue(watch.TITLE, watch.MARKER + "\nold table")
    for i in range(300):
        github.add_issue(f"issue {i}", "someone's bug", login=f"user{i % 7}")
    assert upsert(github, watch.MARKER + "\nnew table") == ("edited", ours)
    assert github.count("POST", r"/issues$") == 0
    listed = [path for method, path in github.requests if method == "GET" and "/issues?" in path]
    assert listed and all(f"creator={BOT}" in path for path in listed)
    assert len(listed) == 1  # one page: the bot's issues only


@pytest.mark.parametrize(
    "existing, body, outcome, states",
    [
        # racing duplicates are closed, keeping the oldest
        ([("old", "open"), ("racing copy", "open")], "new", "edited", ["open", "closed"]),
        # a closed issue stays closed until its table changes
        ([("same", "closed")], "same", "unchanged", ["closed"]),
        ([("same", "closed")], "new release", "edited", ["open"]),
    ],
)
def test_the_oldest_of_our_issues_is_kept_and_reopened_only_for_a_new_table(
    github, existing, body, outcome, states
):
    numbers = [github.add_issue(watch.TITLE, f"{watch.MARKER}\n{text}", state=state)
               for text, state in existing]  # fmt: skip
    assert upsert(github, f"{watch.MARKER}\n{body}") == (outcome, numbers[0])
    assert [github.issue_meta[n]["state"] for n in numbers] == states
    assert github.bodies[numbers[0]].endswith(body) and github.count("POST", r"/issues$") == 0


# ----------------------------------------------------------------------------- rows and table


def test_release_text_stays_in_its_cell_and_reaches_the_log_as_no_workflow_command(
    capsys, tmp_path
):
    reason = f"a | b\nc @sgl-project/maintainers {watch.MARKER} ##[add-mask]y\n::error::w"
    row = {"version": "0.5.24", "state": "unsupported", "reason": reason, "sha256": None}
    assert main(["watch", "--rows", str(_rows_file(tmp_path, [row]))]) == 1
    out = capsys.readouterr()
    assert "##[" not in out.out + out.err and "\n::" not in "\n" + out.out + out.err
    table = watch.render([row]).splitlines()
    assert len(table) == 3 and table[2].count(" | ") == len(watch.HEADER.split(" | ")) - 1
    assert "a \\| b c" in table[2] and table[2].endswith("| FAILED |")
    assert "@sgl-project" not in table[2] and watch.MARKER not in table[2]


def _status_record(patch, state, reason):
    return {"patch": patch, "target": "t", "sglang_version": "0.5.24", "state": state,
            "reason": reason}  # fmt: skip


@pytest.mark.parametrize(
    "state, second, shown",
    [
        ("applied", "sentinel: shape (0.5.17-0.5.23), sha256 61428e17cdd3", "61428e17cdd3"),
        ("unsupported", "sentinel: unknown source (sha256 0123456789ab)", "0123456789ab"),
        ("failed", "failed to import sglang.x: ImportError", None),
    ],
)  # fmt: skip
def test_a_patch_of_two_methods_shows_each_methods_sha256_in_its_column(state, second, shown):
    # patch 0011's two methods: applied, its second changed, its module not importing
    reason = "acquire: shape (0.5.17-0.5.23), sha256 c9be682c090c; " + second
    (row,) = watch.patch_rows([_status_record("0011-x", state, reason)], {"0011": "clean"})
    want = "c9be682c090c/" + shown if shown else "c9be682c090c"
    assert (row["state"], row["sha256"], row["series"]) == (
        "does not import" if state == "failed" else state, want, "clean")  # fmt: skip


def test_a_release_that_breaks_one_patchs_shape_shows_in_that_patchs_column_and_fails():
    # a release where every patch but 0007 matches, and its series matrix
    dsa = "0007-dsa-q8kv8-release-first"
    records = [_status_record(p, "applied", "shape (0.5.23), sha256 0123456789ab")
               for p in watch.PATCH_IDS if p != dsa]  # fmt: skip
    records.append(_status_record(dsa, "unsupported", "unknown source (sha256 ba9876543210)"))
    fixes = {"0001": "clean", "0007": "fails (dsa_backend.py hunk #1)"}
    row = {"version": "0.5.24", "state": "applied", "reason": "kv-buffer-reserve, sha256 x",
           "sha256": "0123456789ab", "counts": {"regression": 4}, "change_ok": True,
           "patches": watch.patch_rows(records, fixes)}  # fmt: skip
    watch.load_object(row, "row 0", watch.Row)  # as another job's row would be read
    header = watch.HEADER.strip("| ").split(" | ")
    (line,) = watch.render([row]).splitlines()[2:]
    cells = dict(zip(header, line.strip("| ").split(" | "), strict=True))
    assert cells["0007"] == "unsupported ba9876543210; fix fails (dsa\\_backend.py hunk #\u20601)"
    assert cells["0001"] == "applied 0123456789ab; fix clean"
    assert cells["0005"].startswith("applied 0123456789ab; fix no such fix")
    assert watch.verdict(row) is False and cells["verdict"] == "FAILED"
    row["patches"][-1]["state"] = "upstream-fixed"
    assert watch.verdict(row) is True  # the same release with that patch upstream-fixed


def _rows_file(tmp_path, rows, newest="0.5.23"):
    path = tmp_path / "watch.json"
    path.write_text(json.dumps({"newest_known": newest, "requested": False, "rows": rows}))
    return path


A = {"version": "0.5.24", "state": "a", "reason": "r"}
ONE_PATCH = {"patch": "0001", "state": "applied", "sha256": None, "series": "clean"}


@pytest.mark.parametrize(
    "record, problem",
    [
        ({"rows": []}, "newest_known"),
        ({"newest_known": "0.5.23", "rows": "nope"}, "expected"),
        ({**A, "state": "applied"}, "no change_ok"),
        ({"version": "0.5.24"}, "missing field 'state'"),
        ({**A, "version": "x; rm"}, "version: 'x; rm' does not match"),
        ({**A, "counts": [1]}, "counts: expected an object"),
        ({**A, "counts": {"x": "1"}}, "counts"),
        ({**A, "series": "clean"}, "series: expected an object"),
        ({**A, "series": {"x": 1}}, "series"),
        ({**A, "sha256": 5}, "sha256: expected text"),
        ({**A, "reason": "r" * 5000}, "at most"),
        ({**A, "\n::error::x": 1}, "unknown field"),
        ({**A, "##[add-mask]x": 1}, "unknown field"),
        ({**A, "state": ["applied"]}, "state: expected text"),
        ({**A, "patches": [{"patch": "0001", "state": "applied"}]}, "patches"),
        ({**A, "patches": [{**ONE_PATCH, "state": 1}]}, "patches[0].state"),
        ({**A, "patches": [ONE_PATCH] * 33}, "at most 32"),
        ("0.5.24", "expected an object"),
        (b"[" * 100000, "recursion"),  # JSON nested past Python's stack
        ("fifo", "not a plain file"),  # a pipe nobody writes would block the read
    ],
)
def test_rows_of_the_wrong_shape_are_exit_2_with_one_line_and_post_nothing(
    github, monkeypatch, capsys, tmp_path, record, problem
):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    path = tmp_path / "watch.json"
    if record == "fifo":
        os.mkfifo(path)
    elif isinstance(record, bytes):
        path.write_bytes(record)
    else:
        rows = record if "rows" in record else {"newest_known": "0.5.23", "rows": [record]}
        path.write_text(json.dumps(rows))
    argv = ["watch", "--rows", str(path), "--repo", "sgl/sglang"]
    assert main(argv + ["--api-url", github.url, "--post"]) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "##[" not in err and "\n::" not in err  # "##[" anywhere, "::" at a line's start
    assert github.requests == []


def test_a_stdout_that_cannot_take_the_body_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    with open("/dev/full", "w", buffering=1) as full:  # a full disk
        monkeypatch.setattr(sys, "stdout", full)
        assert main(["watch", "--rows", str(_rows_file(tmp_path, []))]) == 2
    said = "error: cannot write the issue body: No space left on device\n"
    assert capsys.readouterr().err == said


def test_forty_rows_of_4000_character_texts_fit_githubs_limit_and_say_truncated(
    github, monkeypatch, capsys, tmp_path
):
    long = [{"patch": p, "state": "unsupported", "sha256": None, "series": "y" * 3990}
            for p in watch.PATCH_IDS]  # fmt: skip
    rows = [{"version": f"0.6.{n}", "state": "unsupported", "reason": f"{n} " + "x" * 3990,
             "patches": long} for n in range(40)]  # fmt: skip
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    argv = ["watch", "--rows", str(_rows_file(tmp_path, rows)), "--repo", "sgl/sglang"]
    assert main(argv + ["--api-url", github.url, "--bot-login", BOT, "--post"]) == 1
    body = github.bodies[2]
    assert len(body) <= watch.MAX_BODY and "| 0.6.0 | unsupported: 0 xxx" in body
    shown = body.count("| 0.6.")
    assert 1 < shown < 40 and f"{40 - shown} more rows (truncated): see watch.json" in body
    rows_shown = [line for line in body.splitlines() if line.startswith("| 0.6.")]
    cells = [c for line in rows_shown for c in line.split(" | ")]
    assert max(map(len, cells)) <= watch.MAX_CELL + 20  # the escapes' backslashes
    assert body.count("y\u2026") == shown * len(watch.PATCH_IDS)


# --------------------------------------------------------- the whole check, on installed 0.5.23


# The release watch on the sglang this venv has: overlay state, series matrix, CPU A/B (``release_check``).
checked_0_5_23 = release_check.checked_0_5_23


def test_watch_reports_state_sha256_series_and_ab_verdict_for_a_release(checked_0_5_23):
    proc, out = checked_0_5_23
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((out / watch.ROWS_FILE).read_text())["rows"]
    assert (row["state"], row["sha256"]) == ("applied", "08fa9779e685")
    assert row["series"]["status"] == "clean"
    assert row["counts"]["regression"] >= 4 and row["counts"]["broken"] == 0
    assert row["change_ok"] and watch.verdict(row) is True
    patches = {p["patch"][:4]: (p["state"], p["sha256"], p["series"]) for p in row["patches"]}
    assert patches["0007"] == ("applied", "eb7abba41a0a", "clean")
    assert patches["0009"] == ("applied", "891f31d3a954", "clean")
    assert patches["0011"] == ("applied", "c9be682c090c/61428e17cdd3", "clean")
    assert "| 0.5.23 | applied: kv-buffer-reserve (0.5.23), sha256 08fa9779e685 |" in proc.stdout
    assert (out / "0.5.23" / "results.json").is_file()


def test_report_job_posts_the_check_jobs_rows_and_reruns_edit_nothing(
    checked_0_5_23, github, monkeypatch, capsys
):
    _, out = checked_0_5_23
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    argv = ["watch", "--rows", str(out / watch.ROWS_FILE), "--repo", "sgl/sglang"]
    argv += ["--api-url", github.url, "--bot-login", BOT, "--post"]
    assert main(argv) == 0 and main(argv) == 0
    assert list(github.issue_meta) == [2] and github.count("PATCH", r"/issues/2$") == 0
    body = github.bodies[2]
    assert watch.HEADER in body and "checked on request" in body
    assert "| 08fa9779e685 | clean | applied 08fa9779e685; fix clean |" in body


# ---------------------------------------------------------------------------------- workflow


def test_workflow_is_scheduled_pinned_least_privilege_and_keeps_the_token_from_the_release():
    path = REPO / "ci/workflows/release-watch.yml"
    flow = yaml.safe_load(path.read_text())
    assert "schedule" in flow[True] and flow["permissions"] == {}
    for line in path.read_text().splitlines():
        if "uses:" in line:
            assert len(line.split("@", 1)[1].split()[0]) == 40, line  # a commit SHA
    check, report = flow["jobs"]["check"], flow["jobs"]["report"]
    assert check["permissions"] == {"contents": "read"}
    assert report["permissions"] == {"contents": "read", "issues": "write"}
    assert all("timeout-minutes" in job for job in flow["jobs"].values())
    assert "GITHUB_TOKEN" not in json.dumps(check) and "github.token" not in json.dumps(check)
    assert report["needs"] == "check" and "--rows" in report["steps"][-1]["run"]
    assert "make" not in json.dumps(report)  # the token job never installs or runs a release
    # the check job installs every file by its hash and writes no cache
    assert check["env"]["PIP_NO_CACHE_DIR"] == "1"
    runs = "\n".join(step.get("run", "") for step in check["steps"])
    installs = [line for line in runs.replace("\\\n", " ").splitlines() if "pip install" in line]
    assert installs and "make install" not in runs
    for line in installs:
        assert "--no-cache-dir" in line and "--no-deps" in line
        hashed = "--require-hashes" in line and line.split()[-1] == "requirements/watch.lock"
        project = line.split()[-1] == "." and "--no-build-isolation" in line  # this checkout
        assert hashed or project, line
    for step in check["steps"]:
        assert not str(step.get("uses", "")).startswith("actions/cache")
        assert "://" not in json.dumps(step.get("env", {}))  # an index only from a variable


def _pins(path: Path) -> dict:
    lines = (line.split("#")[0].strip().rstrip("\\").strip() for line in path.open())
    pairs = (line.split()[0].split("==") for line in lines if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def test_the_watch_lock_pins_what_make_install_pins_each_with_a_hash():
    lock = REPO / "requirements/watch.lock"
    pinned = _pins(lock)
    for source in ("torch.txt", "cpu-closure.txt"):
        for name, version in _pins(REPO / "requirements" / source).items():
            assert pinned.get(name, "").split("+")[0] == version, (source, name)
    text = lock.read_text()
    entries = [e for e in text.split("\n") if "==" in e and not e.startswith("#")]
    assert len(entries) == len(pinned) == text.count("--hash=sha256:")


def test_the_watch_check_starts_where_no_github3_is_installed():
    blocked = "import runpy, sys; sys.modules['github3'] = None; "
    blocked += "runpy.run_module('tools.releases', run_name='__main__')"
    argv = [sys.executable, "-c", blocked, "watch", "--help"]
    proc = subprocess.run(argv, cwd=REPO, env=clean_env(), capture_output=True, timeout=120)
    assert proc.returncode == 0 and b"github3" not in proc.stderr, proc.stderr.decode()
