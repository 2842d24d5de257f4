"""``python -m tools.releases watch``: the command line of the release watch (``watch``).

Exit 0 when every release checked is ok (or there is none), 1 when one is not or the tracking
issue could not be written, 2 for bad usage or input. Two jobs run it in two environments (the
checking one has no github3, the posting one only github3): the posting path imports github3
when it posts.
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ci.evidence.inert import inert
from tools.releases.watch import (
    REPO,
    ROWS_FILE,
    TITLE,
    WatchError,
    check,
    fetch_project_page,
    index_versions,
    issue_body,
    known_releases,
    load_rows,
    newer_releases,
    upsert_issue,
    verdict,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SWITCH = {"action": "store_true"}
WATCH_FLAGS = (
    ("--index-url", "PEP 691 simple index (default: pip's)"),
    ("--versions", "check these releases, skip discovery", {"nargs": "+"}),
    (
        "--installed",
        "check the sglang installed in this venv (must be the one release in --versions)",
        SWITCH,
    ),
    ("--out", f"write {ROWS_FILE} and each release's A/B here"),
    ("--rows", f"post the rows of an earlier run ({ROWS_FILE}); no checks"),
    ("--repo", "OWNER/NAME of the tracking issue (required with --post)"),
    ("--api-url", "GitHub Enterprise base URL (client adds /api/v3)"),
    ("--bot-login", "our login (default: GET /user, else the Actions bot)"),
    ("--post", "update the tracking issue", SWITCH),
    ("--json", "print the rows as JSON", SWITCH),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.releases",
        description="New sglang releases, judged as docs/operators.md's compatibility table is.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    watch = verbs.add_parser(
        "watch",
        help="check sglang releases newer than the project knows; keep one tracking issue",
        description="Finds final sglang releases on the index newer than the newest the "
        "project knows (or checks those given with --versions) and, for each, reports the "
        "overlay's state with the method's sha256, whether 0001 applies and the CPU A/B, as "
        "the compatibility table of docs/operators.md. Exit 0 when every release checked is ok (or there is "
        "none), 1 when one is not, 2 for bad usage or input.",
    )
    for name, help_text, *more in WATCH_FLAGS:
        watch.add_argument(name, help=help_text, **(more[0] if more else {}))
    watch.set_defaults(func=cmd_watch)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def cmd_watch(args) -> int:
    try:
        _check_usage(args)
        rows, newest, requested = _rows(args)
    except WatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    body = issue_body(rows, newest, args.index_url or "the package index", requested)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        record = {"newest_known": newest, "requested": requested, "rows": rows}
        (Path(args.out) / ROWS_FILE).write_text(json.dumps(record, indent=2) + "\n")
    sys.stdout.write(inert(json.dumps(rows, indent=2) + "\n" if args.json else body))
    if args.post and not _post(args, body):
        return EXIT_FAILED
    return EXIT_FAILED if any(verdict(row) is False for row in rows) else EXIT_OK


def _check_usage(args) -> None:
    if args.post and not args.repo:
        raise WatchError("--post needs --repo OWNER/NAME")
    if args.repo and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", args.repo):
        raise WatchError(f"--repo {args.repo!r}: expected OWNER/NAME")
    if args.rows and (args.versions or args.installed):
        raise WatchError("--rows posts an earlier run's rows; it takes no --versions/--installed")
    if args.installed and len(args.versions or []) != 1:
        raise WatchError("--installed checks one release: give it as --versions V")
    if args.post and not os.environ.get("GITHUB_TOKEN"):
        raise WatchError("--post needs a token in GITHUB_TOKEN")


def _rows(args) -> tuple:
    """(rows, newest known release, requested) from --rows, --versions or discovery."""
    if args.rows:
        return load_rows(Path(args.rows))
    from pip._internal.models.index import PyPI

    known = known_releases()
    # pip's index: PIP_INDEX_URL when set, else the one pip itself defaults to.
    index = args.index_url or os.environ.get("PIP_INDEX_URL") or PyPI.simple_url
    versions = args.versions or newer_releases(index_versions(fetch_project_page(index)), known)
    out = Path(args.out or (REPO / "out" / "watch"))
    rows = [check(v, out, installed=args.installed) for v in versions]
    return rows, known[-1], bool(args.versions)


def _post(args, body) -> bool:
    import github3.exceptions

    from ci.reporter.publish import GaveUp, Publisher, RetryPolicy, connect

    token = os.environ["GITHUB_TOKEN"]
    owner, name = args.repo.split("/")
    gh, policy = connect(token, args.api_url), RetryPolicy()
    try:
        # Our issue is the one by our login: --bot-login, else the token's user, as for comments.
        author = Publisher(gh, owner, name, None, policy).identity(args.bot_login)
        outcome, number = upsert_issue(gh, owner, name, TITLE, body, author, policy)
    except (GaveUp, github3.exceptions.GitHubException, RuntimeError) as exc:
        print(f"error: tracking issue: {inert(str(exc).replace(token, '***'))}", file=sys.stderr)
        return False
    print(f"tracking issue #{number}: {outcome}", file=sys.stderr)
    return True


if __name__ == "__main__":
    sys.exit(main())
