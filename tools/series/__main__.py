"""``python -m tools.series VERB``: the command line of the series tools (patches/README.md). It only
parses arguments and prints; each verb lives in its own module.
"""

import argparse
import json
import os
import sys

from ci.errors import CiError
from tools.series import (
    BAD_USAGE,
    OK,
    SeriesError,
    ab,
    apply,
    audit_tree,
    base,
    basearg,
    check,
    matrix,
    pr_description,
    refresh,
    seriesdir,
    usage,
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
        "2 bad usage or a missing prerequisite (git, a release that is not on PyPI).",
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
    basearg.add_arguments(p)
    p.add_argument("dir", help="new directory for the repository")

    p = verbs.add_parser(
        "check",
        help="git am the series, and each fix alone, onto a fresh base; the tests it adds are "
        "the project's; upstream's pinned hooks pass on what it touches",
    )
    p.add_argument("--version", **release)
    basearg.add_arguments(p)

    p = verbs.add_parser("apply", help="apply the series to a checkout or installed package")
    p.add_argument(
        "--to",
        metavar="PATH",
        help="an upstream git checkout, site-packages/sglang, or site-packages "
        "(default: the --checkout)",
    )
    basearg.add_arguments(p)
    p.add_argument(
        "--fix",
        metavar="NNNN",
        help="only the fix starting at this patch number (a pull request's branch)",
    )

    p = verbs.add_parser("refresh", help="rewrite patches/ from the commits on top of base")
    p.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="a repository made by materialize, with the edited commits "
        "(or --checkout: a checkout with them on top of --rev)",
    )
    basearg.add_arguments(p)

    p = verbs.add_parser("matrix", help="how each patch applies to each release")
    p.add_argument(
        "--versions",
        nargs="+",
        type=_version,
        metavar="V",
        help="releases to try (default: every release with the workspace; none with --checkout)",
    )
    basearg.add_arguments(p)
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
    basearg.add_arguments(p)

    p = verbs.add_parser(
        "ab",
        help="prove one fix from the series' own trees (base against base + fix) and render "
        "its PR description: OUT/trees, OUT/<backend> (ci run), OUT/<backend>-pr-body.md",
    )
    p.add_argument("--fix", required=True, metavar="NNNN", help="the fix's first patch number")
    p.add_argument("--out", required=True, metavar="DIR", help="a new folder")
    p.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    p.add_argument("--no-check", action="store_true", help="pr-body without 'check'")
    basearg.add_arguments(p)

    p = verbs.add_parser(
        "audit",
        help="find every method that allocates a tensor's replacement while still holding it "
        "(reads the tree, never imports it; docs/grow-while-held-audit-0.5.23.md)",
    )
    p.add_argument("tree", metavar="TREE", help="an sglang checkout or installed package folder")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    return parser


def _audit(args) -> str:
    sites, skipped = audit_tree.audit_package(audit_tree.package_root(args.tree))
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    if args.json:
        return json.dumps([s.to_dict() for s in sites], indent=2) + "\n"
    return audit_tree.render_table(sites) + "\n" + audit_tree.summary(sites) + "\n"


def run(args) -> str:
    """What the verb prints on stdout."""
    if args.verb == "audit":
        return _audit(args)
    # Told the release, or the checkout and its commit, materialize needs no series.
    pinned = _Pinned(args.patches)
    if args.verb == "refresh":
        return _lines(_refresh(args, pinned))
    if args.verb == "materialize":
        where = basearg.resolve(args, pinned)
        repo = where.materialize(args.dir)
        if where.checkout is not None:
            return f"{repo}: {where.checkout} at {where.commit[:12]}, tagged '{base.BASE_TAG}'\n"
        return f"{repo}: {where.name} in upstream layout, base commit tagged '{base.BASE_TAG}'\n"
    if args.verb == "describe":
        return json.dumps(seriesdir.summary(seriesdir.load(args.patches)), indent=2) + "\n"
    series = seriesdir.load(args.patches)
    if args.verb == "check":
        return _lines([*check.run_check(series, basearg.resolve(args, series.base)), "ok"])
    if args.verb == "apply":
        fix = series.fix(args.fix) if args.fix else None
        return _lines(_apply(series, args, fix))
    if args.verb == "ab":
        where = basearg.resolve(args, series.base)
        code, made = ab.run_ab(series, series.fix(args.fix), args.out, args.backend, where)
        if code != 0:
            raise SeriesError(f"ci run exited {code}; its report: {made.results}/report.md")
        body = made.results.parent / f"{args.backend}-pr-body.md"
        args = argparse.Namespace(**{**vars(args), "results": str(made.results)})
        body.write_text(_pr_body(series, args))
        return f"{made.results}: the A/B; {body}: the description of fix {args.fix}\n"
    if args.verb == "pr-body":
        return _pr_body(series, args)
    return _matrix(series, args)


class _Pinned:
    """patches/BASE, read only when a verb's base needs what it pins (``basearg.resolve``)."""

    def __init__(self, patches):
        self._patches, self._base = patches, None

    def __getattr__(self, name):
        if self._base is None:
            self._base = seriesdir.load(self._patches).base
        return getattr(self._base, name)


def _refresh(args, pinned) -> list:
    checkout = basearg.checkout_given(args)
    if args.source and (args.checkout or args.rev):
        raise usage("--from DIR is the source; --checkout and --rev name another, give one")
    if args.source:
        return refresh.refresh(args.patches, args.source)
    if not checkout:
        raise usage("refresh needs --from DIR (made by materialize) or --checkout PATH")
    rev = args.rev or pinned.git
    if rev is None:
        raise usage("--rev: the upstream commit the series' commits sit on in the checkout")
    return refresh.refresh_checkout(args.patches, checkout, rev)


def _apply(series, args, fix) -> list:
    checkout = basearg.checkout_given(args)
    target = args.to or checkout
    if target is None:
        raise usage("apply needs --to PATH (or --checkout PATH, or $SGLANG_CHECKOUT)")
    if args.to and args.checkout and os.path.abspath(args.to) != os.path.abspath(args.checkout):
        raise usage("--to and --checkout name two targets; give one")
    # A git base is a commit the checkout must be at; a release base is not checked (as before).
    return apply.apply_to(series, target, fix, at=args.rev or series.base.git)


def _matrix(series, args) -> str:
    at = None
    if basearg.checkout_given(args) or args.rev:
        at = basearg.resolve(args, series.base)  # bad input: exit 2 before any download
    versions = args.versions or ([] if at else list(matrix.DSV4_RELEASES))
    rows = [matrix.release_row(series, version) for version in versions]
    rows += [matrix.checkout_row(series, at)] if at else []
    return (
        json.dumps(rows, indent=2) + "\n" if args.json else matrix.render_table(series.names, rows)
    )


def _pr_body(series, args) -> str:
    known, where = series.base, None
    if basearg.checkout_given(args) or args.rev or not args.no_check:
        where = basearg.resolve(args, series.base)  # bad input: exit 2 before anything runs
        known = where.upstream(series.base) if where.checkout is not None else known
    results = pr_description.load_results(args.results)
    # Refuse before the slow check.
    fix = pr_description.select_fix(series, results, args.fix)
    pr_description.verify_results_match(series, fix, results, known)
    # Named as upstream knows them: the description names no command of this project.
    hooks = ", ".join(name for name, *_ in check.HOOKS if " " in name) + ", pre-commit-hooks"
    state = pr_description.CheckState(None, f"upstream's pinned hooks ({hooks}) not run")
    if where is not None and not args.no_check:
        try:
            check.run_check(series, where)
            state = pr_description.CheckState(
                True, f"upstream's pinned hooks pass on every file it touches: {hooks}"
            )
        except SeriesError as err:
            state = pr_description.CheckState(False, str(err).splitlines()[0])
    return pr_description.render(series, results, state, fix.number, known)


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
        return BAD_USAGE


if __name__ == "__main__":
    sys.exit(main())
