"""``python -m tools.series VERB``: parse, print, and the exit rule; each verb has its module."""

import argparse
import json
import sys
from dataclasses import asdict

from ci.errors import CiError
from ci.evidence import shards
from tools.series import SeriesError, ab, audit_tree, base, check, hooks, matrix, refresh, seriesdir
from tools.series import pr_description as prd

RELEASE = ("--version", {"help": "sglang release (default: patches/BASE)"})
NO_CHECK = ("--no-check", {"action": "store_true", "help": "do not run 'check' (boxes unticked)"})
JSON = ("--json", {"action": "store_true", "help": "print JSON instead of a table"})
FIX = "the fix, by its first patch's number"
VERBS = {  # verb -> (help, its arguments)
    "materialize": ("a git repo of a release in upstream layout", [RELEASE, ("dir", {})]),
    "check": ("git am the series and each fix onto a fresh base; upstream's hooks", []),
    "apply": (
        "commit the series (or one fix) into a clean upstream sglang checkout",
        [("--to", {"required": True, "metavar": "PATH"}), ("--fix", {"metavar": "NNNN"})],
    ),
    "refresh": (
        "rewrite patches/ from the commits on top of base in a repository made by materialize",
        [("--from", {"dest": "source", "required": True, "metavar": "DIR"})],
    ),
    "matrix": (
        "how each patch applies to each release",
        [("--versions", {"nargs": "+", "metavar": "V"}), JSON],
    ),
    "describe": ("the series' ids, release, patches and fixes as JSON, for ci run --series", []),
    "pr-body": (
        "the upstream PR description of one fix from a 'python -m ci run' folder",
        [("--results", {"required": True, "metavar": "DIR"}), NO_CHECK],
    ),
    "ab": (
        "A/B one fix (base against base + fix) into OUT/<backend>, its PR description beside",
        [
            ("--fix", {"required": True, "metavar": "NNNN", "help": FIX}),
            ("--out", {"required": True, "metavar": "DIR", "help": "a new folder"}),
            ("--backend", {"choices": ("cpu", "cuda"), "required": True}),
            NO_CHECK,
        ],
    ),  # fmt: skip
    "audit": (
        "every method that allocates a tensor's replacement while still holding it",
        [("tree", {"metavar": "TREE", "help": "an sglang checkout or package folder"}), JSON],
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.series",
        description="Keep the upstream patch series in patches/ healthy.",
        epilog="Exit codes: 0 ok, 1 check failed or target refused (nothing changed), "
        "2 bad usage or a missing prerequisite (git, a release that is not on the index).",
    )
    parser.add_argument("--patches", default=str(seriesdir.PATCHES_DIR), help="series directory")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, (text, arguments) in VERBS.items():
        sub = verbs.add_parser(verb, help=text)
        for name, options in arguments:
            sub.add_argument(name, **options)
    return parser


def run(args) -> str:
    """What the verb prints on stdout."""
    if args.verb == "audit":
        sites, skipped = audit_tree.audit_package(audit_tree.package_root(args.tree))
        for line in skipped:
            print(f"skipped {line}", file=sys.stderr)
        if args.json:
            return _json([asdict(s) for s in sites])
        return audit_tree.render(sites)
    if args.verb == "refresh":
        return _lines(refresh.refresh(args.patches, args.source))
    if args.verb == "materialize":  # a named release needs no series
        version = args.version or seriesdir.load(args.patches).base.version
        repo = base.materialize(version, args.dir)
        return (
            f"{repo}: sglang=={version} in upstream layout, base commit tagged '{base.BASE_TAG}'\n"
        )
    series = seriesdir.load(args.patches)
    if args.verb == "describe":
        return _json(seriesdir.summary(series))
    if args.verb == "check":
        return _lines([*check.run_check(series), "ok"])
    if args.verb == "apply":
        return _lines(check.apply_to(series.fix(args.fix) if args.fix else series, args.to))
    if args.verb == "ab":
        made = ab.run_ab(series, series.fix(args.fix), args.out, args.backend)
        body = made.results.parent / f"{args.backend}-pr-body.md"
        body.write_text(_pr_body(series, made.results, args.no_check))
        return f"{made.results}: the A/B; {body}: the description of fix {args.fix}\n"
    if args.verb == "pr-body":
        return _pr_body(series, args.results, args.no_check)
    rows = [matrix.release_row(series, v) for v in args.versions or matrix.DSV4_RELEASES]
    return _json(rows) if args.json else matrix.render_table(series.names, rows)


def _pr_body(series, folder, no_check) -> str:
    results = shards.load(str(folder))  # an EvidenceError: bad input, one line
    fix = prd.select_fix(series, results)  # refuse before the slow check
    # Named as upstream knows them: the description names no command of this project.
    names = ", ".join(name for name in hooks.table() if " " in name) + ", pre-commit-hooks"
    state = prd.CheckState(None, f"upstream's pinned hooks ({names}) not run")
    if not no_check:
        try:
            check.run_check(series)
            said = f"upstream's pinned hooks pass on every file it touches: {names}"
            state = prd.CheckState(True, said)
        except SeriesError as err:
            state = prd.CheckState(False, str(err).splitlines()[0])
    return prd.render(series, results, state, fix)


def _json(data) -> str:
    return json.dumps(data, indent=2) + "\n"


def _lines(lines) -> str:
    return "".join(f"{line}\n" for line in lines)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sys.stdout.write(run(args))
        return 0
    except (CiError, OSError) as err:  # also a git that failed or is missing, an unreadable path
        code = getattr(err, "code", 2)
        said = getattr(err, "strerror", None) or str(err)  # an OSError: its words, no errno
        said = f"{err.filename}: {said}" if getattr(err, "filename", None) else said
        said = f"error: {said}"  # a failure says all it found; bad input, one line
        print(said if code == 1 else said.splitlines()[0], file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
