"""``python -m tools.series VERB``: the command line of the series tools (patches/README.md). It
parses arguments, prints, and holds the exit rule; each verb lives in its own module.
"""

import argparse
import json
import sys

from ci.errors import CiError
from tools.series import (
    BAD_USAGE,
    OK,
    SeriesError,
    ab,
    audit_tree,
    base,
    check,
    hooks,
    matrix,
    pr_description,
    refresh,
    seriesdir,
)


def _version(text: str) -> str:
    try:
        return seriesdir.check_version(text)
    except SeriesError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.series",
        description="Keep the upstream patch series in patches/ healthy.",
        epilog="Exit codes: 0 ok, 1 check failed or target refused (nothing changed), "
        "2 bad usage or a missing prerequisite (git, a release that is not on the index).",
    )
    parser.add_argument(
        "--patches",
        default=str(seriesdir.PATCHES_DIR),
        help="the series directory (default: %(default)s)",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    release = {"type": _version, "help": "sglang release (default: patches/BASE)"}

    p = verbs.add_parser("materialize", help="a git repo of a release in upstream layout")
    p.add_argument("--version", **release)
    p.add_argument("dir", help="new directory for the repository")

    p = verbs.add_parser(
        "check",
        help="git am the series, and each fix alone, onto a fresh base; the tests it adds are "
        "the project's; upstream's pinned hooks pass on what it touches",
    )
    p.add_argument("--version", **release)

    p = verbs.add_parser("apply", help="commit the series into an upstream sglang checkout")
    p.add_argument(
        "--to",
        required=True,
        metavar="PATH",
        help="an upstream sglang git checkout (a clean work tree)",
    )
    p.add_argument(
        "--fix",
        metavar="NNNN",
        help="only the fix starting at this patch number (a pull request's branch)",
    )

    p = verbs.add_parser("refresh", help="rewrite patches/ from the commits on top of base")
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="DIR",
        help="a repository made by materialize, with the edited commits",
    )

    p = verbs.add_parser("matrix", help="how each patch applies to each release")
    p.add_argument(
        "--versions",
        nargs="+",
        type=_version,
        metavar="V",
        help="releases to try (default: every release with the workspace)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    verbs.add_parser(
        "describe",
        help="the series' id, release, patches and fixes as JSON, for 'python -m ci run --series'",
    )

    p = verbs.add_parser(
        "pr-body", help="the upstream PR description of one fix from a ci run folder"
    )
    p.add_argument(
        "--results", required=True, metavar="DIR", help="a folder written by 'python -m ci run'"
    )
    p.add_argument(
        "--fix",
        metavar="NNNN",
        help="the fix, by its first patch's number (default: the one whose tests the results hold)",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="do not run 'check' (the format and style boxes stay unticked)",
    )

    p = verbs.add_parser(
        "ab",
        help="prove one fix from the series' own trees (base against base + fix) and render "
        "its PR description: OUT/trees, OUT/<backend> (ci run), OUT/<backend>-pr-body.md",
    )
    p.add_argument("--fix", required=True, metavar="NNNN", help="the fix's first patch number")
    p.add_argument("--out", required=True, metavar="DIR", help="a new folder")
    p.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    p.add_argument("--no-check", action="store_true", help="pr-body without 'check'")

    p = verbs.add_parser(
        "audit",
        help="find every method that allocates a tensor's replacement while still holding it "
        "(reads the tree, never imports it; docs/grow-while-held-audit-0.5.23.md)",
    )
    p.add_argument("tree", metavar="TREE", help="an sglang checkout or installed package folder")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    return parser


def run(args) -> str:
    """What the verb prints on stdout."""
    if args.verb == "audit":
        sites, skipped = audit_tree.audit_package(audit_tree.package_root(args.tree))
        for line in skipped:
            print(f"skipped {line}", file=sys.stderr)
        if args.json:
            return json.dumps([s.to_dict() for s in sites], indent=2) + "\n"
        return audit_tree.render_table(sites) + "\n" + audit_tree.summary(sites) + "\n"
    if args.verb == "refresh":
        return _lines(refresh.refresh(args.patches, args.source))
    if args.verb == "materialize" and args.version:  # a named release needs no series
        return _materialized(args.version, args.dir)
    series = seriesdir.load(args.patches)
    if args.verb == "materialize":
        return _materialized(series.base.version, args.dir)
    if args.verb == "describe":
        return json.dumps(seriesdir.summary(series), indent=2) + "\n"
    if args.verb == "check":
        return _lines([*check.run_check(series, args.version), "ok"])
    if args.verb == "apply":
        fix = series.fix(args.fix) if args.fix else None
        return _lines(check.apply_to(series, args.to, fix))
    if args.verb == "ab":
        code, made = ab.run_ab(series, series.fix(args.fix), args.out, args.backend)
        if code != 0:
            raise SeriesError(f"ci run exited {code}; its summary: {made.results}/summary.txt")
        body = made.results.parent / f"{args.backend}-pr-body.md"
        args = argparse.Namespace(**{**vars(args), "results": str(made.results)})
        body.write_text(_pr_body(series, args))
        return f"{made.results}: the A/B; {body}: the description of fix {args.fix}\n"
    if args.verb == "pr-body":
        return _pr_body(series, args)
    versions = args.versions or list(matrix.DSV4_RELEASES)
    rows = [matrix.release_row(series, version) for version in versions]
    return (
        json.dumps(rows, indent=2) + "\n" if args.json else matrix.render_table(series.names, rows)
    )


def _materialized(version: str, dest) -> str:
    repo = base.materialize(version, dest)
    return f"{repo}: sglang=={version} in upstream layout, base commit tagged '{base.BASE_TAG}'\n"


def _pr_body(series, args) -> str:
    results = pr_description.load_results(args.results)
    # Refuse before the slow check.
    fix = pr_description.select_fix(series, results, args.fix)
    pr_description.verify_results_match(series, fix, results)
    # Named as upstream knows them: the description names no command of this project.
    names = ", ".join(name for name, *_ in hooks.HOOKS if " " in name) + ", pre-commit-hooks"
    state = pr_description.CheckState(None, f"upstream's pinned hooks ({names}) not run")
    if not args.no_check:
        try:
            check.run_check(series)
            state = pr_description.CheckState(
                True, f"upstream's pinned hooks pass on every file it touches: {names}"
            )
        except SeriesError as err:
            state = pr_description.CheckState(False, str(err).splitlines()[0])
    return pr_description.render(series, results, state, fix.number)


def _lines(lines) -> str:
    return "".join(f"{line}\n" for line in lines)


def main(argv=None) -> int:
    """The exit rule: 0 ok, 1 a check failed or a target was refused, 2 bad input or a missing
    prerequisite (git, a path that cannot be read), told in one line, never a traceback."""
    args = build_parser().parse_args(argv)
    try:
        sys.stdout.write(run(args))
        return OK
    except SeriesError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except (CiError, OSError) as err:  # a git that failed or is missing, an unreadable path
        said = f"{err.filename}: {err.strerror}" if getattr(err, "strerror", None) else str(err)
        print(f"error: {said}".splitlines()[0], file=sys.stderr)
        return getattr(err, "code", BAD_USAGE)


if __name__ == "__main__":
    sys.exit(main())
