"""``python -m ci``: run registered tests A/B, report it on the PR, gate fork PRs.

Arguments in, the runner or the reporter called, exit codes out (``ci.errors``). The reporter is
imported only inside ``ci report`` and ``ci gate``: ``ci run``, in the job that runs PR code,
loads no reporter code and no github3."""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from importlib import metadata

from ci.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CiError


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader gone early is seen below
        return code
    except CiError as exc:
        stream = sys.stdout if exc.code == EXIT_OK else sys.stderr
        print(f"{exc.prefix}{_line(args.verb, exc)}", file=stream)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted: every test process this run started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # a reader that stopped early (``| head``): the verdict still counts
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return getattr(args, "exit_code", EXIT_FAILED)


def printable(text) -> str:
    """``text`` as one line: each character that does not print as its escape (``\\n``)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


def _line(verb: str, text) -> str:
    if verb == "run":  # its job's log, where PR code writes anyway; the others hold a token
        return printable(text)
    from ci.reporter.escape import one_line

    return one_line(text)


def _version() -> str:
    """This project's release, as installed (the bot never imports the package it proves)."""
    try:
        return metadata.version("sglang-overlay")
    except metadata.PackageNotFoundError:
        return "(not installed)"


# The command line as data: (flag, help) or (flag, help, add_argument's other keywords), in
# --help order. The README says more about each flag.
SWITCH = {"action": "store_true"}
DIR, FILE, REV = {"metavar": "DIR"}, {"metavar": "FILE"}, {"metavar": "REV"}
DIRS, COUNT = {"nargs": "+", "metavar": "DIR"}, {"type": int, "metavar": "N"}
NAME, MODULES = {"metavar": "NAME"}, {"metavar": "MODULES"}
ENV = {"action": "append", "metavar": "NAME=VALUE", "default": []}
REPORT_STATES = ("results", "pending", "missing-label", "stale-label", "failure", "cancelled")
TEST_RESULTS = ("success", "failure", "cancelled", "skipped")
RUN_FLAGS = (
    ("--out", "folder for results.json, JUnit, the report and logs", {"required": True}),
    ("--tests", "tests under --root (default test/registered)", {"nargs": "+", "metavar": "PATH"}),
    ("--backend", "default: cuda when nvidia-smi exists, else cpu", {"choices": ["cuda", "cpu"]}),
    ("--suite", "only files registered for this effective suite"),
    ("--stage", "only files registered for this stage"),
    ("--shard", "I/N: run partition I (0-based) of N, split by est_time"),
    ("--unmodified-src", "a tree holding python/sglang for this side", DIR),
    ("--change-src", "a tree holding python/sglang for this side", DIR),
    ("--unmodified-env", "a setting of this side's test processes (repeatable)", ENV),
    ("--change-env", "a setting of this side's test processes (repeatable)", ENV),
    ("--git-base", "both sides from git: the base commit of the checkout at --root", REV),
    ("--git-head", "the head commit: its added/modified registered tests run on both", REV),
    ("--regressions", "tests that must fail unmodified (default ci/regressions.txt)", FILE),
    ("--series", "the patch series, as `python -m tools.series describe` prints it", FILE),
    ("--timeout", "seconds per file and side (default 1800)", {"type": float, "default": 1800}),
    ("--jobs", "processes at once (default 2)", {"type": int, "default": 2}),
    ("--root", "repository root (default: current directory)", {"default": "."}),
    ("--preload", "comma list a side imports once, then forks its files; none: fresh", MODULES),
    ("--nightly", "include nightly registrations", SWITCH),
    ("--outside-upstream-ci", "without SGLANG_IS_IN_CI and sglang CI's retries", SWITCH),
    ("--json", "print the summary as JSON", SWITCH),
)
REPORT_FLAGS = (
    ("--results", "`ci run`'s --out (or results.json); several: the shards of one run", DIRS),
    ("--repo", "OWNER/NAME (required with --post)"),
    ("--pr", "pull request number (required with --post)", {"type": int}),
    ("--sha", "head commit for the statuses (none are set without it)"),
    ("--api-url", "GitHub Enterprise base URL (client adds /api/v3)"),
    ("--slot", "slot name (default dsv4-workspace)"),
    ("--slot-label", "text before the slot"),
    ("--state", "what to report (only results reads results)", {"choices": REPORT_STATES}),
    ("--test-result", "the test job's result (needs.test.result)", {"choices": TEST_RESULTS}),
    ("--require-head", "post only while --sha is still the PR's head", SWITCH),
    ("--check-run", "also create a check run on --sha (needs an installation token)", SWITCH),
    ("--summary", "append the full report here ($GITHUB_STEP_SUMMARY)"),
    ("--workflow-run", "fork PRs: the workflow_run event payload", {"metavar": "EVENT"}),
    ("--artifact", "fork PRs: the run's results artifact (default dsv4-results)", NAME),
    ("--shards", "fork PRs: the run's shard count (artifacts NAME-0 .. NAME-(N-1))", COUNT),
    ("--run-id", "workflow run id, shown as Run #ID"),
    ("--run-url", "workflow run URL"),
    ("--artifacts-url", "where results.json, JUnit and logs are"),
    ("--bot-login", "the login our comments carry (default: GET /user, else the Actions bot)"),
    ("--post", "publish (default: dry run)", SWITCH),
    ("--json", "print the plan as JSON", SWITCH),
)
GATE_FLAGS = (
    ("--event", "event payload (default $GITHUB_EVENT_PATH)"),
    ("--api-url", "GitHub Enterprise base URL (client adds /api/v3)"),
)


# verb -> (help, description, flags)
VERBS = {
    "run": (
        "run registered test files on both sides; write results.json, JUnit, logs",
        "Each selected file runs as `python FILE -v` once per side, as sglang's CI runs it "
        "(retries included). A side is a tree (installed, --*-src, --git-*) plus the settings "
        "--*-env gives it. Exit 0 when the change passes at its first attempt and the listed "
        "regressions fail unmodified; 1, with one line saying why, otherwise.",
        RUN_FLAGS,
    ),
    "report": (
        "render the A/B and (with --post) publish it on the PR",
        "Dry-run by default: prints exactly what would be sent. --post publishes with the token "
        "in GITHUB_TOKEN: the PR-body slot, one sticky comment, one commit status per suite.",
        REPORT_FLAGS,
    ),
    "gate": (
        "decide from the event payload whether this PR may run CI",
        "A fork PR's head runs only once a writer approved that commit. Prints run=true|false "
        "(also to $GITHUB_OUTPUT). Exit 0 either way, 1 when GitHub could not be read.",
        GATE_FLAGS,
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ci",
        description="Run registered tests on two sides (unmodified and with a change), then "
        "report the A/B on the pull request.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb, (help_text, description, flags) in VERBS.items():
        sub = verbs.add_parser(verb, help=help_text, description=description)
        for name, flag_help, *more in flags:
            sub.add_argument(name, help=flag_help, **(more[0] if more else {}))
        sub.set_defaults(func=globals()[f"cmd_{verb}"])
    return parser


def cmd_run(args) -> int:
    from ci.runner import run

    results, refused = run.execute(
        args, lambda line: print(printable(line), file=sys.stderr, flush=True)
    )
    args.exit_code = EXIT_OK if results.verdict == "ok" and refused is None else EXIT_FAILED
    if args.json:
        summary = {"verdict": results.verdict, "reasons": list(results.reasons)}
        print(json.dumps({**summary, "counts": results.counts()}, indent=2))
    else:
        print("\n".join(printable(line) for line in run.summary_lines(results)))
    if refused is not None:
        print(f"error: ci report would refuse these results: {printable(refused)}", file=sys.stderr)
    return args.exit_code


def cmd_report(args) -> int:
    from ci.reporter import github_io  # here: the job that runs `ci run` has no github3
    from ci.reporter import plan as reporting
    from ci.reporter.escape import inert, one_line

    fields = {f.name for f in dataclasses.fields(reporting.ReportRequest)}
    given = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    request = reporting.prepare(reporting.ReportRequest(**given))
    if not request.post and len(request.results) == 1:
        _write_report(request.results[0])
    with tempfile.TemporaryDirectory(prefix="ci-report-") as folder:
        if request.workflow_run:
            request, why = github_io.fork(request, folder)
            if why:
                print(one_line(why))
            if request is None:
                return EXIT_OK
        plan = reporting.plan(request)
    reporting.write_summary(request, plan)
    if plan.invalid:
        print(f"error: {reporting.INVALID_NOTE}: {one_line(plan.invalid)}", file=sys.stderr)
    if not request.post:
        print(inert(reporting.dry_run_text(plan, args.json)), end="")
    else:
        github_io.publish(request, plan, lambda line: print(one_line(line)))
    return EXIT_USAGE if plan.invalid else EXIT_OK


def _write_report(results: str) -> None:
    """report.md (and the memory pictures) beside a run's results.json, for the dry run."""
    from ci.evidence import shards
    from ci.reporter import pictures, render

    folder = results if os.path.isdir(results) else os.path.dirname(os.path.abspath(results))
    try:
        model = shards.load(results)
    except (OSError, ValueError):  # refused by the report itself, which says why
        return
    try:
        model = dataclasses.replace(model, pictures=pictures.draw_all(model, folder))
        render.write_full_report(model, folder)
    except OSError as exc:  # a read-only folder: the dry run itself still prints
        print(f"note: report.md not written in {folder}: {exc.strerror}", file=sys.stderr)


def cmd_gate(args) -> int:
    from ci.reporter import gate, github_io
    from ci.reporter.escape import one_line

    path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        raise CiError("--event PATH (or GITHUB_EVENT_PATH) is required")
    try:
        event = gate.load_event(path)
        facts = gate.event_facts(event)
        repo = gate.field_object(event, "repository").get("full_name")
        sender = gate.field_object(event, "sender").get("login")
    except (OSError, ValueError) as exc:
        raise CiError(f"event payload: {exc}") from None
    if facts is not None and facts.fork:
        facts = github_io.fork_facts(repo, facts.pr, sender, args.api_url)
    decision = gate.decide(facts) if facts else gate.Gate(True, False, "not a pull_request event")
    lines = [f"run={str(decision.run).lower()}", f"fork={str(decision.fork).lower()}"]
    lines += [f"state={decision.state}", f"sha={decision.sha or ''}"]
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        try:
            with open(output, "a") as handle:
                handle.write("\n".join(lines) + "\n")
        except OSError as exc:
            raise CiError(f"GITHUB_OUTPUT {output}: {exc.strerror}") from None
    print("\n".join(lines))
    print(f"reason: {one_line(decision.reason)}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
