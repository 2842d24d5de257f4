"""The publisher against a strict fake GitHub, through the real github3.py client."""

import threading

import github3
import pytest
from ci_fake_github import FakeGitHub
from ci_samples import model, posted

from ci.__main__ import main
from ci.evidence.model import save
from ci.reporter import pr_states, render
from ci.reporter.publish import Publisher, PublishFailed, RetryPolicy, connect

TOKEN = "ghs_s3cr3tTOKENvalue"
AUTHOR = "## Motivation\r\nAuthor's words, with a | pipe and <!-- their own comment -->.\r\n"
LABEL = "Latest PR Test (DSV4 workspace)"


@pytest.fixture
def fake():
    server = FakeGitHub(token=TOKEN).start()
    server.add_pr(7, AUTHOR)
    yield server
    server.stop()


def publisher(fake, number=7, sleeps=None, **kwargs):
    sleeps = [] if sleeps is None else sleeps
    policy = RetryPolicy(sleep=sleeps.append, base_s=0.01)
    return Publisher(
        connect(TOKEN, fake.url), "sgl", "sglang", number, policy, log=lambda _: None, **kwargs
    )


def publish_all(fake, slot="dsv4", text=":white_check_mark: [Run #1](https://ci/1)"):
    pub = publisher(fake)
    m = model()
    pub.update_slot(slot, LABEL, [text, ":white_check_mark:"])
    pub.upsert_comment(render.comment_marker(slot), render.comment(m, slot), author="ci-bot")
    for suite, (state, description) in render.status_descriptions(m).items():
        pub.set_status("abc1234", f"{slot}/{suite}", state, description, "https://ci/1")
    return pub


def test_first_run_adds_the_block_one_sticky_comment_and_a_status_per_suite(fake):
    publish_all(fake)
    body = fake.bodies[7]
    assert body.startswith(AUTHOR)  # the author's bytes, CRLF and all, untouched
    assert pr_states.get_slot(body, "dsv4") == ":white_check_mark: [Run #1](https://ci/1)"
    assert len(fake.comments) == 1
    assert [s["context"] for s in fake.statuses] == ["dsv4/base-b-test-1-gpu-small"]
    assert fake.statuses[0]["state"] == "success"


def test_rerun_edits_in_place_one_comment_one_slot(fake):
    publish_all(fake, text=":x: [Run #1](https://ci/1)")
    publish_all(fake, text=":white_check_mark: [Run #2](https://ci/2)")
    publish_all(fake, text=":white_check_mark: [Run #2](https://ci/2)")
    body = fake.bodies[7]
    assert body.count("<!-- slot:dsv4:start -->") == 1 and body.count("pr-states:start") == 1
    assert pr_states.get_slot(body, "dsv4").endswith("[Run #2](https://ci/2)")
    assert len(fake.comments) == 1
    assert fake.count("POST", r"/comments$") == 1


def test_duplicate_sticky_comments_from_a_race_are_folded_back_into_one(fake):
    marker = render.comment_marker("dsv4")
    fake.add_comment(7, marker + "\nold one")
    fake.add_comment(7, marker + "\nold two")
    fake.add_comment(7, marker + "\nsomeone else's copy", login="mallory")
    publisher(fake).upsert_comment(marker, marker + "\nnew", author="ci-bot")
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
        pub.policy.sleep = lambda _: both_wrote.wait(10)
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


def test_an_author_edit_landing_between_read_and_write_is_kept(fake):
    def author_edits(server):
        server.bodies[7] = AUTHOR + "Edited while CI ran.\r\n"

    fake.after("GET", r"/issues/7$", author_edits)  # right after our first read
    publisher(fake, settle_s=0).update_slot("dsv4", LABEL, [":x:"])
    assert fake.bodies[7].startswith(AUTHOR + "Edited while CI ran.\r\n")
    assert pr_states.get_slot(fake.bodies[7], "dsv4") == ":x:"


def test_a_stale_writer_saving_over_our_write_gets_our_slot_reapplied(fake):
    other = pr_states.set_slot(AUTHOR, "pr-test", "Latest PR Test (Base)", ":x: base")
    fake.after("PATCH", r"/issues/7$", lambda server: server.bodies.__setitem__(7, other))
    publisher(fake, settle_s=0).update_slot("dsv4", LABEL, [":white_check_mark:"])
    assert pr_states.get_slot(fake.bodies[7], "pr-test") == ":x: base"
    assert pr_states.get_slot(fake.bodies[7], "dsv4") == ":white_check_mark:"


def test_502_then_success_is_retried_with_backoff(fake):
    fake.fail_next("PATCH", r"/issues/7$", 502, {"message": "Bad Gateway"})
    sleeps = []
    publisher(fake, sleeps=sleeps, settle_s=0).update_slot("dsv4", LABEL, [":x:"])
    assert pr_states.get_slot(fake.bodies[7], "dsv4") == ":x:"
    assert len([s for s in sleeps if s > 0]) == 1


def test_403_secondary_rate_limit_waits_exactly_retry_after(fake):
    fake.fail_next(
        "POST",
        r"/statuses/",
        403,
        {"message": "You have exceeded a secondary rate limit."},
        {"Retry-After": "42"},
    )
    sleeps = []
    publisher(fake, sleeps=sleeps).set_status("abc1234", "ctx", "success", "ok")
    assert sleeps == [42.0]
    assert len(fake.statuses) == 1


def test_429_without_retry_after_backs_off_and_a_persistent_5xx_gives_up(fake):
    fake.fail_next("GET", r"/issues/7$", 429, {"message": "slow down"})
    for _ in range(5):
        fake.fail_next("GET", r"/repos/sgl/sglang$", 503)
    sleeps = []
    pub = publisher(fake, sleeps=sleeps, settle_s=0)
    pub.update_slot("dsv4", LABEL, [":x:"])
    with pytest.raises(PublishFailed):
        pub.set_status("abc1234", "ctx", "success", "ok")
    assert len([s for s in sleeps if s > 0]) == 1 + 4


def test_plain_403_and_404_are_not_retried(fake):
    sleeps = []
    with pytest.raises(github3.exceptions.NotFoundError):
        publisher(fake, number=99, sleeps=sleeps).update_slot("dsv4", LABEL, [":x:"])
    fake.fail_next("GET", r"/issues/7$", 403, {"message": "Resource not accessible by integration"})
    with pytest.raises(github3.exceptions.ForbiddenError):
        publisher(fake, sleeps=sleeps).update_slot("dsv4", LABEL, [":x:"])
    assert sleeps == []


def test_the_fake_enforces_auth_state_enum_description_and_body_limits(fake):
    bad = github3.GitHubEnterprise(fake.url, token="wrong")
    with pytest.raises(github3.exceptions.AuthenticationFailed):
        bad.issue("sgl", "sglang", 7)
    repo = connect(TOKEN, fake.url).repository("sgl", "sglang")
    with pytest.raises(github3.exceptions.UnprocessableEntity):
        repo.create_status("abc1234", "done", description="x")
    with pytest.raises(github3.exceptions.UnprocessableEntity):
        repo.create_status("abc1234", "success", description="x" * 141)
    issue = connect(TOKEN, fake.url).issue("sgl", "sglang", 7)
    with pytest.raises(github3.exceptions.UnprocessableEntity):
        issue.edit(body="x" * (pr_states.BODY_LIMIT + 1))


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
    args = [
        "report",
        "--results",
        str(tmp_path),
        "--repo",
        "sgl/sglang",
        "--api-url",
        fake.url,
        "--sha",
        "abc1234" + "0" * 33,
        "--run-id",
        "5",
        "--run-url",
        "https://ci/5",
        "--post",
    ]
    assert main([*args, "--pr", "7"]) == 0
    assert main([*args, "--pr", "99"]) == 1  # unknown PR: reported, not a crash
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert "404" in out.err
    assert (
        pr_states.get_slot(fake.bodies[7], "dsv4-workspace")
        == ":white_check_mark: [Run #5](https://ci/5)"
    )
    assert len(fake.comments) == 1 and len(fake.statuses) == 1


def test_cli_missing_label_state_sets_only_the_slot(fake, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr("time.sleep", lambda _: None)
    code = main(
        [
            "report",
            "--state",
            "missing-label",
            "--repo",
            "sgl/sglang",
            "--pr",
            "7",
            "--api-url",
            fake.url,
            "--sha",
            "abc1234" + "0" * 33,
            "--post",
        ]
    )
    assert code == 0
    assert pr_states.get_slot(fake.bodies[7], "dsv4-workspace") == pr_states.MISSING_LABEL
    assert not fake.comments and not fake.statuses


def test_cli_post_without_a_token_is_a_usage_error(monkeypatch, tmp_path, capsys):
    save(model(), str(tmp_path))
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main(["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1", "--post"]) == 2
