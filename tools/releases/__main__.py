"""``python -m tools.releases watch``: check each final sglang release on the package index newer
than the project knows (or those given with --versions): the overlay's state per patch with
each method's sha256, whether each fix applies, the CPU A/B; --post keeps one tracking issue.
Exit 0 when every release checked is ok (or there is none), 1 when one is not or the issue could
not be written, 2 for bad usage or input (one line)."""

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ci.reporter.escape import inert
from tools.releases import watch
from tools.series import SeriesError, usage


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.releases")
    verbs = parser.add_subparsers(dest="verb", required=True)
    cmd = verbs.add_parser("watch", help="check new sglang releases", description=__doc__)
    cmd.add_argument("--index-url", help="the package index to ask (default: pip's)")
    cmd.add_argument("--versions", nargs="+", help="check these releases, skip discovery")
    cmd.add_argument("--installed", action="store_true", help="this venv's sglang (one --versions)")
    out_help = f"{watch.ROWS_FILE} and each release's A/B go here (default: out/watch)"
    cmd.add_argument("--out", type=Path, default=watch.REPO_ROOT / "out" / "watch", help=out_help)
    cmd.add_argument("--rows", help=f"post an earlier run's {watch.ROWS_FILE}; no checks")
    cmd.add_argument("--repo", help="OWNER/NAME of the tracking issue (required with --post)")
    cmd.add_argument("--api-url", help="GitHub Enterprise base URL (client adds /api/v3)")
    cmd.add_argument("--bot-login", help="our login (default: GET /user, else the Actions bot)")
    cmd.add_argument("--post", action="store_true", help="update the tracking issue")
    args = parser.parse_args(argv)
    try:
        _check_usage(args)
        rows, newest, requested = _rows(args)
    except SeriesError as exc:
        print(f"error: {inert(exc)}", file=sys.stderr)
        return 2
    body = watch.issue_body(rows, newest, requested)
    try:
        sys.stdout.write(inert(body))
        sys.stdout.flush()
    except OSError as exc:  # stdout cannot take it (a full disk): one line, not a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left to flush
        print(f"error: cannot write the issue body: {exc.strerror}", file=sys.stderr)
        return 2
    posted = not args.post or _post(args, body)
    return 0 if posted and all(watch.verdict(r) is not False for r in rows) else 1


def _check_usage(args) -> None:
    if args.post and not args.repo:
        raise usage("--post needs --repo OWNER/NAME")
    if args.repo and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", args.repo):
        raise usage(f"--repo {args.repo!r}: expected OWNER/NAME")
    if args.rows and (args.versions or args.installed):
        raise usage("--rows posts an earlier run's rows; it takes no --versions/--installed")
    if args.installed and len(args.versions or []) != 1:
        raise usage("--installed checks one release: give it as --versions V")
    if args.post and not os.environ.get("GITHUB_TOKEN"):
        raise usage("--post needs a token in GITHUB_TOKEN")


def _rows(args) -> tuple:
    """(rows, newest known, requested) from --rows, or checked and written to --out."""
    if args.rows:
        return watch.load_rows(Path(args.rows))
    newest = watch.newest_known()
    found = args.versions or watch.newer_releases(watch.index_versions(args.index_url), newest)
    rows = [watch.check(v, args.out, installed=args.installed) for v in found]
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"newest_known": newest, "requested": bool(args.versions), "rows": rows}
    (args.out / watch.ROWS_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return rows, newest, bool(args.versions)


def _post(args, body) -> bool:
    import github3.exceptions

    from ci.reporter.publish import Publisher, connect

    token = os.environ["GITHUB_TOKEN"]
    owner, name = args.repo.split("/")
    github = Publisher(connect(token, args.api_url), owner, name, None)
    try:
        outcome, number = upsert_issue(github, body, github.identity(args.bot_login))
    except (github3.exceptions.GitHubException, RuntimeError) as exc:  # PublishFailed too
        print(f"error: tracking issue: {inert(str(exc).replace(token, '***'))}", file=sys.stderr)
        return False
    print(f"tracking issue #{number}: {outcome}", file=sys.stderr)
    return True


def upsert_issue(github, body, author) -> tuple:
    """(outcome, number): edit ``author``'s issue starting with watch.MARKER through ``github`` (a
    Publisher), or open one; a closed one reopens only on new text; duplicates close."""
    from ci.reporter.publish import upsert_sticky

    title = watch.TITLE

    def edit(issue, **fields):
        return github.request("PATCH", f"issue #{issue['number']}", "issues", issue["number"],
                              json=fields)  # fmt: skip

    def once():
        wanted = {"creator": author, "state": "all", "sort": "created", "direction": "asc"}
        found = github.pages(f"issues opened by {author}", "issues", params=wanted)
        issues = sorted((i for i in found if "pull_request" not in i), key=lambda i: i["number"])
        outcome, issue = upsert_sticky(
            issues, watch.MARKER, author,
            create=lambda: github.request("POST", "open the tracking issue", "issues",
                                          json={"title": title, "body": body}),
            unchanged=lambda keep: keep.get("body") == body and keep.get("title") == title,
            edit=lambda keep: edit(keep, title=title, body=body, state="open"),
            retire=lambda extra: extra.get("state") == "closed" or edit(extra, state="closed"),
        )  # fmt: skip
        return outcome, issue["number"]

    # The whole find-then-write repeats on a retry, so a retried create cannot duplicate.
    return github.retried("tracking issue", once)


if __name__ == "__main__":
    sys.exit(main())
