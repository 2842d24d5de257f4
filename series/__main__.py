"""Keep the upstream patch series in ``patches/`` healthy: ``python -m series VERB``.

  materialize [--version V] DIR   a git repo of sglang==V in upstream layout, base committed
  check [--version V]             applies to a fresh base, 0002's test is the project's,
                                  upstream's pinned hooks pass on what it touches
  apply --to PATH                 apply to an upstream checkout or an installed sglang package
  refresh --from DIR              rewrite patches/ from the commits on top of base in DIR
  matrix [--versions V ...]       how each patch applies to each release with the workspace
  pr-body --results DIR           the upstream PR description from a 'ci run' results folder

Exit codes: 0 ok, 1 a check failed or a target was refused (nothing changed), 2 bad usage or
a missing prerequisite (git, a release that is not on PyPI). This module only parses
arguments and prints; each verb lives in its own module.
"""

import argparse
import sys

from series import apply, base, check, matrix, pr_description, refresh, seriesdir
from series.errors import OK, SeriesError
from series.pins import check_version


def _version(text: str) -> str:
    try:
        return check_version(text)
    except SeriesError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m series",
        description=__doc__.split("\n\nExit codes", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 ok, 1 check failed or target refused (nothing changed), "
        "2 bad usage or a missing prerequisite.",
    )
    parser.add_argument(
        "--patches",
        default=str(seriesdir.PATCHES_DIR),
        help="the series directory (default: %(default)s)",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser("materialize", help="make a git repo of a release in upstream layout")
    p.add_argument("--version", type=_version, help="sglang release (default: patches/BASE)")
    p.add_argument("dir", help="new directory for the repository")

    p = verbs.add_parser("check", help="git am the series onto a fresh base and verify it")
    p.add_argument("--version", type=_version, help="sglang release (default: patches/BASE)")

    p = verbs.add_parser("apply", help="apply the series to a checkout or installed package")
    p.add_argument(
        "--to",
        required=True,
        metavar="PATH",
        help="an upstream git checkout, site-packages/sglang, or site-packages",
    )

    p = verbs.add_parser("refresh", help="regenerate patches/ from commits on top of base")
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="DIR",
        help="a repository made by materialize, with the edited commits",
    )

    p = verbs.add_parser("matrix", help="which patch applies to which release")
    p.add_argument(
        "--versions",
        nargs="+",
        type=_version,
        default=list(matrix.DSV4_RELEASES),
        metavar="V",
        help="releases to try (default: every release with the workspace)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = verbs.add_parser("pr-body", help="the upstream PR description from a ci run folder")
    p.add_argument(
        "--results", required=True, metavar="DIR", help="a folder written by 'python -m ci run'"
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="do not run 'check' (the format and style boxes stay unticked)",
    )
    return parser


def run(args) -> int:
    if args.verb == "refresh":
        for line in refresh.refresh(args.patches, args.source):
            print(line)
        return OK
    if args.verb == "materialize" and args.version:
        version = args.version  # materialize needs no series when told the release
    else:
        series = seriesdir.load(args.patches)
        version = getattr(args, "version", None) or series.base.version
    if args.verb == "materialize":
        repo = base.materialize(version, args.dir)
        print(f"{repo}: sglang=={version} in upstream layout, base commit tagged '{base.BASE_TAG}'")
        return OK
    if args.verb == "check":
        for line in check.run_check(series, args.version):
            print(line)
        print("ok")
        return OK
    if args.verb == "pr-body":
        results = pr_description.load_results(args.results)
        pr_description.verify_results_match(series, results)  # refuse before the slow check
        state = pr_description.CheckState(None, "'series.series check' not run")
        if not args.no_check:
            try:
                check.run_check(series)
                state = pr_description.CheckState(
                    True, "upstream's pinned hooks pass: series.series check"
                )
            except SeriesError as err:
                state = pr_description.CheckState(False, str(err).splitlines()[0])
        sys.stdout.write(pr_description.render(series, results, args.results, state))
        return OK
    if args.verb == "apply":
        for line in apply.apply_to(series, args.to):
            print(line)
        return OK
    rows = matrix.build(series, args.versions)
    sys.stdout.write(
        matrix.render_json(rows) if args.json else matrix.render_table(series.names, rows)
    )
    return OK


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except SeriesError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
