"""The publisher against a strict fake GitHub, through the real github3.py client."""

import threading

import github3
import pytest
from ci_fake_github import FakeGitHub
from ci_samples import model, posted, publisher

from ci.__main__ import main
from ci.evidence.model import save
from ci.reporter import pr_states, render
from ci.reporter.publish import PublishFailed

TOKEN = "ghs_s3cr3tTOKENvalue"
AUTHOR = "## Motivation\r\nAuthor's words, with a | pipe and <!-- their own comment -->.\r\n"
LABEL = "Latest PR Test (DSV4 workspace)"


@pytest.fixture
def fake():
    with FakeGitHub(token=TOKEN) as server:
        server.add_pr(7, AUTHOR)
        yield server


def publish_all(fake, slot="dsv4", text=":white_check_mark: [Run #1](https://ci/1)"):
    pub = publisher(fake)
    m = model()
    pub.update_slot(slot, LABEL, [text, ":white_check_mark:"])
    pub.upsert_comment(render.comment(m, slot), author="ci-bot")
    for status in render.statuses(m, slot, "https://ci/1"):
        pub.set_status("abc1234", status)
    return pub


def test_the_first_run_adds_the_block_one_comment_and_a_status_per_suite_reruns_edit_them(fake):
    publish_all(fake, text=":x: [Run #1](https://ci/1)")
    body = fake.bodies[7]
    assert body.startswith(AUTHOR)  # the author's bytes, CRLF and all, untouched
    assert pr_states.get_slot(body, "dsv4") == ":x: [Run #1](https://ci/1)"
    assert [s["context"] for s in fake.statuses] == ["dsv4/base-b-test-1-gpu-small"]
    assert fake.statuses[0]["state"] == "success"
    for _ in range(2):
        publish_all(fake, text=":white_check_mark: [Run #2](https://ci/2)")
    body = fake.bodies[7]
    assert body.count("<!-- slot:dsv4:start -->") == 1 and body.count("pr-states:start") == 1
    assert pr_states.get_slot(body, "dsv4").endswith("[Run #2](https://ci/2)")
    assert len(fake.comments) == 1 and fake.count("POST", r"/comments$") == 1


def test_duplicate_sticky_comments_from_a_race_are_folded_back_into_one(fake):
    marker = render.comment_marker("dsv4")
    fake.add_comment(7, marker + "\nold one")
    fake.add_comment(7, marker + "\nold two")
    fake.add_comment(7, marker + "\nsomeone else's copy", login="mallory")
    publisher(fake).upsert_comment(marker + "\nnew", author="ci-bot")
    bodies = sorted(c["body"] for c in fake.comments.values())
    assert bodies == [marker + "\nnew", marker + "\nsomeone else's copy"]


def test_two_slot_writers_at_once_both_land(fake):
    both_read = threading.Barrier(2, timeout=10)
    for _ in range(2):  # hold both first reads until both writers have read the same body
        fake.after("GET", r"/issues/7$", lambda _: both_read.wait())
    both_wrote = threading.Event()
    fake.after("PATCH", r"/issues/7$", lambda _: None)
    fake.after("PATCH", r"/issues/7$", lambda _: both_wrote.set())
    errors = []

    def write(slot):
        # The settle pause ends once both writers have written: the race is forced, not timed.
        pub = publisher(fake, settle_s=0)
        pub.sleep = lambda _: both_wrote.wait(10)
        try:
            pub.update_slot(slot, f"Latest ({slot})", [f":white_check_mark: {slot}"])
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in ("cuda", "cpu")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    body = fake.bodies[7]
    assert body.startswith(AUTHOR)
    assert pr_states.get_slot(body, "cuda") == ":white_check_mark: cuda"
    assert pr_states.get_slot(body, "cpu") == ":white_check_mark: cpu"
    assert body.count("pr-states:start") == 1


OTHER = pr_states.set_slot(AUTHOR, "pr-test", "Latest PR Test (Base)", ":x: base")


@pytest.mark.parametrize(
    "method, edit, kept",
    [
        ("GET", lambda fake: fake.bodies.update({7: AUTHOR + "Edit.\r\n"}), AUTHOR + "Edit."),
        ("PATCH", lambda fake: fake.bodies.update({7: OTHER}), OTHER.split("<!-- pr-states:end")[0]),
    ],
    ids=["author-edit-between-read-and-write", "stale-writer-saves-over-ours"],
)  # fmt: skip
def test_a_body_written_by_someone_else_around_our_write_is_kept_with_our_slot(
    fake, method, edit, kept
):
    fake.after(method, r"/issues/7$", edit)  # right after our first read, or our write
    publisher(fake, settle_s=0).update_slot("dsv4", LABEL, [":x:"])
    assert fake.bodies[7].startswith(kept) and pr_states.get_slot(fake.bodies[7], "dsv4") == ":x:"


@pytest.mark.parametrize(
    "method, path, status, headers, faults, sleeps",
    [
        ("PATCH", r"/issues/7$", 502, {}, 1, "backoff"),
        ("POST", r"/statuses/", 403, {"Retry-After": "42"}, 1, [42.0]),
        ("POST", r"/statuses/", 429, {}, 1, "backoff"),
        ("POST", r"/statuses/", 503, {}, 5, "gives up"),
        ("POST", r"/statuses/", 403, {}, 1, "not retried"),
        ("POST", r"/statuses/", 404, {}, 1, "not retried"),
    ],
)
def test_retries_wait_as_github_asks_and_give_up_after_five(
    fake, method, path, status, headers, faults, sleeps
):
    message = "You have exceeded a secondary rate limit." if headers else "fault"
    for _ in range(faults):
        fake.fail_next(method, path, status, {"message": message}, headers)
    waited = []
    pub = publisher(fake, sleeps=waited, settle_s=0)
    send = lambda: pub.set_status("abc1234", {"context": "c", "state": "success"})  # noqa: E731
    if method == "PATCH":
        send = lambda: pub.update_slot("dsv4", LABEL, [":x:"])  # noqa: E731
    if sleeps == "gives up":
        with pytest.raises(PublishFailed):
            send()
        assert len(waited) == 4
    elif sleeps == "not retried":
        with pytest.raises(github3.exceptions.GitHubError):
            send()
        assert waited == []
    else:
        send()
        assert waited == sleeps if isinstance(sleeps, list) else len([s for s in waited if s]) == 1


def test_a_body_near_the_limit_shrinks_our_slot_and_never_the_authors_text(fake):
    short = ":x:"
    long = ":x: [Run #1](https://ci/" + "r" * 400 + ")"
    fake.bodies[7] = "a" * (pr_states.BODY_LIMIT - 300)
    assert publisher(fake, settle_s=0).update_slot("dsv4", LABEL, [long, short]) == "updated"
    assert pr_states.get_slot(fake.bodies[7], "dsv4") == short
    fake.bodies[7] = full = "a" * (pr_states.BODY_LIMIT - 10)
    assert publisher(fake).update_slot("dsv4", LABEL, [long, short]) == "too-long"
    assert fake.bodies[7] == full


def test_cli_post_publishes_everything_and_never_prints_the_token(
    fake, tmp_path, capsys, monkeypatch
):
    save(posted(), str(tmp_path))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr("time.sleep", lambda _: None)
    args = ["report", "--results", str(tmp_path), "--repo", "sgl/sglang", "--api-url", fake.url]
    args += ["--sha", "abc1234" + "0" * 33, "--run-id", "5", "--run-url", "https://ci/5", "--post"]
    assert main([*args, "--pr", "7"]) == 0
    assert main([*args, "--pr", "99"]) == 1  # unknown PR: reported, not a crash
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err and "404" in out.err
    slot = pr_states.get_slot(fake.bodies[7], "dsv4-workspace")
    assert slot == ":white_check_mark: [Run #5](https://ci/5)"
    assert len(fake.comments) == 1 and len(fake.statuses) == 1
    args = ["report", "--state", "missing-label", "--repo", "sgl/sglang", "--pr", "7", "--post"]
    assert main([*args, "--api-url", fake.url]) == 0
    assert pr_states.get_slot(fake.bodies[7], "dsv4-workspace") == pr_states.MISSING_LABEL
    assert len(fake.comments) == 1 and len(fake.statuses) == 1  # the slot alone changed
