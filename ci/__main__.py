"""``python -m ci``: run registered tests A/B, report it on the PR, gate fork PRs, watch releases.

The command line only: it parses arguments, hands them to the orchestration (``abtest.run``,
``report.plan``, ``report.gate``, ``releases.watch``) and maps outcomes to exit codes (0 ok, 1
failed checks or a void proof, 2 bad usage or bad input, 130 interrupted).
"""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from importlib import metadata

from abtest import run
from evidence import model as evidence
from releases import watch
from report import gate, pictures, render
from report.pr_states import DEFAULT_LABEL, DEFAULT_SLOT, REPORT_STATES

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted: every test process this run started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


def one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped: what the bot prints
    can quote an artifact, and a line that starts with ``::`` would be a workflow command."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


class UsageError(Exception):
    pass


def _version() -> str:
    """This project's release, as installed (the bot never imports the package under test)."""
    try:
        return metadata.version("sglang-overlay")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ci",
        description="Run registered tests on two sides (unmodified and with a change), then "
        "report the A/B on the pull request.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    verbs = parser.add_subparsers(dest="verb", required=True)

    run = verbs.add_parser(
        "run",
        help="run registered test files on both sides; write results.json, JUnit and the report",
        description="Each selected file runs as its own `python FILE -v` process once per mode, "
        "unchanged: the runner reports each test's result from outside (unittest and pytest). "
        "Sides: the installed sglang with the overlay off and on, or two source trees. Exit 0 "
        "when every test passes (or skips) on the change side and the listed regressions fail "
        "on the unmodified side; 1, with one line saying why, otherwise.",
    )
    run.add_argument("--out", required=True, help="folder for results.json, JUnit and logs")
    run.add_argument(
        "--tests",
        nargs="+",
        default=(),
        metavar="PATH",
        help="registered-test folders or files under --root (default test/registered)",
    )
    run.add_argument(
        "--backend",
        choices=["cuda", "cpu"],
        help="registrations to run (default: cuda when nvidia-smi exists, else cpu)",
    )
    which = run.add_mutually_exclusive_group()
    which.add_argument("--suite", help="only files registered for this effective suite")
    which.add_argument("--stage", help="only files registered for this stage")
    run.add_argument("--shard", help="I/N: run partition I (0-based) of N, split by est_time")
    run.add_argument("--modes", default="unmodified,change", help="comma list (default both)")
    run.add_argument(
        "--unmodified-src",
        metavar="DIR",
        help="a tree holding python/sglang (a PR's base) for the unmodified side; overlay off",
    )
    run.add_argument(
        "--change-src",
        metavar="DIR",
        help="a tree holding python/sglang (a PR's head) for the change side; overlay off",
    )
    run.add_argument(
        "--regressions",
        metavar="FILE",
        help="tests that must fail on the unmodified side, one FILE::Class.test pattern a line "
        "(default ci/regressions.txt)",
    )
    run.add_argument("--timeout", type=float, default=1800, help="seconds per file and mode")
    run.add_argument("--jobs", type=int, default=2, help="processes at once (default 2)")
    run.add_argument("--root", default=".", help="repository root (default: current directory)")
    run.add_argument("--nightly", action="store_true", help="include nightly registrations")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.set_defaults(func=cmd_run)

    report = verbs.add_parser(
        "report",
        help="render the A/B and (with --post) publish it on the PR",
        description="Dry-run by default: prints exactly what would be sent. --post publishes "
        "with the token in GITHUB_TOKEN: the PR-body slot, one sticky comment, one commit "
        "status per suite.",
    )
    report.add_argument("--results", help="the --out directory of `ci run` (or results.json)")
    report.add_argument("--repo", help="OWNER/NAME (required with --post)")
    report.add_argument("--pr", type=int, help="pull request number (required with --post)")
    report.add_argument("--sha", help="head commit for the statuses (none are set without it)")
    report.add_argument("--api-url", help="GitHub Enterprise base URL (client adds /api/v3)")
    report.add_argument("--slot", default=DEFAULT_SLOT, help=f"slot name (default {DEFAULT_SLOT})")
    report.add_argument("--slot-label", default=DEFAULT_LABEL, help="text before the slot")
    report.add_argument(
        "--state",
        choices=list(REPORT_STATES),
        default="results",
        help="what to report (only `results` reads results)",
    )
    report.add_argument(
        "--test-result",
        choices=["success", "failure", "cancelled", "skipped"],
        help="the test job's result (needs.test.result): without results.json the slot and "
        "check run say failure or cancelled instead of staying pending",
    )
    report.add_argument(
        "--require-head",
        action="store_true",
        help="post only while --sha is still the PR's head (a superseded run posts nothing)",
    )
    report.add_argument(
        "--check-run",
        action="store_true",
        help="also create a check run on --sha (Checks API; needs an installation token)",
    )
    report.add_argument("--summary", help="append the full report here ($GITHUB_STEP_SUMMARY)")
    report.add_argument(
        "--workflow-run",
        metavar="EVENT",
        help="fork PRs: the workflow_run event payload; repo, sha and run come from it; the PR, "
        "its approval, the bot's code at the head and the results artifact are read from GitHub",
    )
    report.add_argument("--run-id", help="workflow run id, shown as Run #ID")
    report.add_argument("--run-url", help="workflow run URL")
    report.add_argument("--artifacts-url", help="where results.json, JUnit and logs are")
    report.add_argument(
        "--bot-login",
        help="the login our comments carry (default: GET /user, or github-actions[bot] for an "
        "Actions token); only comments by it are edited",
    )
    report.add_argument("--post", action="store_true", help="publish (default: dry run)")
    report.add_argument("--json", action="store_true", help="print the plan as JSON")
    report.set_defaults(func=cmd_report)

    gate = verbs.add_parser(
        "gate",
        help="decide from the event payload whether this PR may run CI",
        description="A fork PR's head runs only when someone with write permission approved that "
        "commit (an approving review of it, a `/run-ci SHA` comment, or adding run-ci after "
        "reviewing it), read from GitHub with GITHUB_TOKEN. Prints run=true|false (also appended "
        "to $GITHUB_OUTPUT when set). Exit 0 either way (the decision is data), 1 when GitHub "
        "could not be read.",
    )
    gate.add_argument(
        "--event",
        default=os.environ.get("GITHUB_EVENT_PATH"),
        help="event payload (default $GITHUB_EVENT_PATH)",
    )
    gate.add_argument("--label", default="run-ci")
    gate.add_argument("--api-url", help="GitHub Enterprise base URL (client adds /api/v3)")
    gate.add_argument("--json", action="store_true")
    gate.set_defaults(func=cmd_gate)

    watch.add_parser(verbs)
    return parser


# ---------------------------------------------------------------------------------------- run


def cmd_run(args) -> int:
    args.tests = tuple(args.tests)
    request = run.RunRequest(**_fields(run.RunRequest, args))
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if run.resolve_backend(args.backend) == "cuda":
        pictures.preload()  # pictures are drawn from CUDA peaks only
    try:
        results = run.execute(request, log)
    except run.RequestError as exc:
        raise UsageError(str(exc)) from None
    except run.RegistrationError as exc:
        print(f"error: registration: {exc}", file=sys.stderr)
        return EXIT_FAILED
    out = os.path.abspath(args.out)
    results = dataclasses.replace(results, pictures=pictures.draw_all(results, out))
    evidence.save(results, out)
    render.write_full_report(results, out)
    if args.json:
        summary = {"verdict": results.verdict, "reasons": list(results.reasons)}
        print(json.dumps({**summary, "counts": results.counts()}, indent=2))
    else:
        print("\n".join(run.summary_lines(results)))
    return EXIT_OK if results.verdict == "ok" else EXIT_FAILED


# ------------------------------------------------------------------------------------- report


def cmd_report(args) -> int:
    # Here, not at the top: the test job that runs `ci run` installs no github3 (the report
    # side's client), only the report jobs do.
    from report import plan as reporting

    try:
        request = reporting.prepare(
            reporting.ReportRequest(**_fields(reporting.ReportRequest, args))
        )
        with tempfile.TemporaryDirectory(prefix="ci-report-") as folder:
            if request.workflow_run:
                request, why = reporting.fork(request, folder)
                if request is None:
                    print(one_line(why))
                    return EXIT_OK
            plan = reporting.plan(request)
        reporting.write_summary(request, plan)
        if plan.invalid:
            print(f"error: {reporting.INVALID_NOTE}: {one_line(plan.invalid)}", file=sys.stderr)
        if not request.post:
            print(reporting.dry_run_text(plan, args.json), end="")
        else:
            reporting.publish(request, plan, lambda line: print(one_line(line)))
    except reporting.RequestError as exc:
        raise UsageError(str(exc)) from None
    except reporting.PublishFailed as exc:
        print(f"error: publishing failed: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_USAGE if plan.invalid else EXIT_OK


def _fields(record_type, args) -> dict:
    """The parsed arguments a request record has fields for."""
    names = {f.name for f in dataclasses.fields(record_type)}
    return {name: value for name, value in vars(args).items() if name in names}


# --------------------------------------------------------------------------------------- gate


def cmd_gate(args) -> int:
    if not args.event:
        raise UsageError("--event PATH (or GITHUB_EVENT_PATH) is required")
    try:
        event = gate.load_event(args.event)
    except (OSError, ValueError) as exc:
        raise UsageError(f"event payload: {exc}") from None
    facts = gate.event_facts(event)
    if facts is None:
        decision = gate.Gate(run=True, fork=False, reason="not a pull_request event")
    else:
        if facts.fork:
            # Here, not at the top: only the jobs that talk to GitHub install github3.
            from report import plan as reporting

            try:
                facts = reporting.fork_facts(event, facts.pr, args.api_url)
            except reporting.RequestError as exc:
                raise UsageError(str(exc)) from None
            except reporting.PublishFailed as exc:
                print(f"error: reading PR #{facts.pr}: {one_line(str(exc))}", file=sys.stderr)
                return EXIT_FAILED
        decision = gate.decide(facts, args.label)
    lines = [
        f"run={'true' if decision.run else 'false'}",
        f"fork={'true' if decision.fork else 'false'}",
        f"state={decision.state}",
        f"sha={decision.sha or ''}",
    ]
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as handle:
            handle.write("\n".join(lines) + "\n")
    if args.json:
        print(json.dumps(decision.to_json()))
    else:
        print("\n".join(lines))
        print(f"reason: {one_line(decision.reason)}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
