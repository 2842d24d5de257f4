"""``python -m ci``: run the registered proof A/B, report it on the PR, gate fork PRs.

The command line only: it parses arguments, wires the pipeline modules together and maps
outcomes to exit codes (0 ok, 1 failed checks, 2 bad usage or bad input). The work lives in
collect, runner, results, junit, render, pr_body, publish and gate.

  python -m ci run --out DIR [--backend cuda|cpu] [--suite S | --stage S] [--shard I/N]
                   [--modes unmodified,change] [--sglang-src PATH] [--timeout S] [--jobs N]
  python -m ci report --results DIR --repo OWNER/NAME --pr N [--sha SHA] [--post] ...
  python -m ci gate [--event PATH]
  python -m ci watch [--versions V ...] [--out DIR] [--rows FILE] [--repo OWNER/NAME --post]
"""

import argparse
import json
import os
import re
import shutil
import sys
import threading

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_SLOT = "dsv4-workspace"
DEFAULT_LABEL = "Latest PR Test (DSV4 workspace)"
REPORT_STATES = ("results", "pending", "missing-label", "stale-label", "failure", "cancelled")
FULL_REPORT = "report.md"  # the untruncated report, in the results folder (the artifact)


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


class UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ci",
        description="Run the registered DSV4 workspace proof on unmodified sglang and with this "
        "change, then report the A/B on the pull request.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)

    run = verbs.add_parser(
        "run",
        help="run registered test files in both modes; write results.json and JUnit",
        description="Each selected file runs as its own `python FILE -v` process once per mode. "
        "Exit 0 when every case passes (or skips) with the change; unmodified failures are the "
        "expected evidence.",
    )
    run.add_argument("--out", required=True, help="directory for results.json, JUnit and logs")
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
        "--sglang-src",
        help="patched upstream checkout: change mode puts its python/ first on PYTHONPATH, "
        "overlay off",
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
        help="fork PRs: the workflow_run event payload; repo, sha and run come from it, the "
        "PR and gate decision from --gate, checked against GitHub before posting",
    )
    report.add_argument("--gate", help="gate.json from the test workflow's artifact")
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
        description="A fork PR needs the run-ci label. Prints run=true|false (also appended to "
        "$GITHUB_OUTPUT when set). Exit 0 either way: the decision is data.",
    )
    gate.add_argument(
        "--event",
        default=os.environ.get("GITHUB_EVENT_PATH"),
        help="event payload (default $GITHUB_EVENT_PATH)",
    )
    gate.add_argument("--label", default="run-ci")
    gate.add_argument("--record", help="also write the decision here as JSON (gate.json)")
    gate.add_argument("--json", action="store_true")
    gate.set_defaults(func=cmd_gate)

    from ci import watch  # stdlib-only at import; its verb's parser and command live there

    watch.add_parser(verbs)
    return parser


# ---------------------------------------------------------------------------------------- run


def cmd_run(args) -> int:
    from ci import collect, environment, junit, pictures, results, runner

    root = os.path.abspath(args.root)
    backend = args.backend or ("cuda" if shutil.which("nvidia-smi") else "cpu")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in runner.MODES]
    if bad or not modes:
        raise UsageError(f"--modes {args.modes!r}: use a comma list of {', '.join(runner.MODES)}")
    if args.sglang_src and not os.path.isdir(os.path.join(args.sglang_src, "python", "sglang")):
        raise UsageError(f"--sglang-src {args.sglang_src}: no python/sglang inside")
    envs = {m: runner.mode_env(m, args.sglang_src) for m in modes}
    env_record = {}
    # The probe imports sglang (seconds); it overlaps with selection and the test processes.
    probe = threading.Thread(
        target=lambda: env_record.update(environment.describe(envs, root)), daemon=True
    )
    probe.start()
    try:
        shard = collect.parse_shard(args.shard)
        selected = collect.select(root, backend, args.suite, args.stage, shard, args.nightly)
    except collect.SelectionError as exc:
        raise UsageError(str(exc)) from None
    except ImportError as exc:  # collect uses sglang's own registry reader
        raise UsageError(
            f"cannot import sglang's ci_register ({exc}); is sglang installed?"
        ) from None
    except ValueError as exc:  # a registration collect_tests rejects names its file
        print(f"error: registration: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not selected:
        raise UsageError(f"no registered {backend} files match the filters under {root}")

    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    log(f"ci run: {len(selected)} files x {len(modes)} modes on {backend}, {args.jobs} at a time")

    runs = runner.run_all(
        [s.path for s in selected], modes, root, args.timeout, args.jobs, args.sglang_src, log
    )
    probe.join()

    log_paths = {}
    for run in runs:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run.path) + f".{run.mode}.log"
        with open(os.path.join(out, "logs", name), "w") as handle:
            handle.write(run.output)
        log_paths[(run.path, run.mode)] = f"logs/{name}"

    model = results.build(
        runs,
        {s.path: s.suite for s in selected},
        backend,
        modes,
        {
            "suite": args.suite,
            "stage": args.stage,
            "shard": args.shard,
            "sglang_src": args.sglang_src,
            "files": [s.path for s in selected],
        },
        env_record,
        log_paths,
    )
    for case in model.cases:
        case.line = collect.test_lines(root, case.file).get(case.case_id, 1)
    model.pictures = pictures.draw_all(model, out)
    results.save(model, out)
    junit.write(model, out)
    _write_full_report(model, out)
    summary = _run_summary(model)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_run_summary(model)
    return EXIT_OK if model.change_ok() else EXIT_FAILED


def _write_full_report(model, out: str) -> None:
    from ci import render

    text = render.comment(model, DEFAULT_SLOT, limit=10**9)
    with open(os.path.join(out, FULL_REPORT), "w") as handle:
        handle.write(text)


def _run_summary(model) -> dict:
    return {
        "change_ok": model.change_ok(),
        "counts": model.counts(),
        "flags": {f.path: f.flags for f in model.files if f.flags},
    }


def _print_run_summary(model) -> None:
    for case in model.cases:
        outcomes = " ".join(f"{m}={case.modes[m].outcome}" for m in model.modes)
        print(f"{case.kind:<15} {outcomes:<36} {case.file}::{case.case_id}")
    for file in model.files:
        for flag in file.flags:
            print(f"WARNING {file.path}: {flag}")
    counts = ", ".join(f"{n} {k}" for k, n in model.counts().items() if n)
    verdict = "ok" if model.change_ok() else "FAILED"
    print(f"ci run: {verdict}: {counts}")


# ------------------------------------------------------------------------------------- report


def cmd_report(args) -> int:
    from ci import artifact, pr_body, render

    if args.workflow_run:
        _from_workflow_run(args)
    if args.post and (not args.repo or args.pr is None):
        raise UsageError("--post needs --repo OWNER/NAME and --pr N")
    if args.repo and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", args.repo):
        raise UsageError(f"--repo {args.repo!r}: expected OWNER/NAME")
    if (args.require_head or args.check_run) and not args.sha:
        raise UsageError("--require-head and --check-run need --sha")
    try:
        pr_body.markers(args.slot)
        pr_body.slot_line(args.slot, args.slot_label, "")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    label = args.slot_label
    links = dict(run_id=args.run_id, run_url=args.run_url, artifacts_url=args.artifacts_url)

    state = args.state
    if state == "results" and args.test_result and not artifact.has_results(args.results):
        # The test job left nothing behind (it failed early, timed out or was cancelled).
        state = "cancelled" if args.test_result in ("cancelled", "skipped") else "failure"
    model = None
    if state == "results":
        if not args.results:
            raise UsageError("--results DIR is required with --state results")
        try:
            model = artifact.load_results(_results_folder(args.results))
        except artifact.ArtifactError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        state = render.overall_state(model)
        comment = render.comment(model, args.slot, **links)
        statuses = [
            {
                "context": f"{args.slot}/{suite}",
                "state": s,
                "description": d,
                "target_url": args.run_url,
            }
            for suite, (s, d) in render.status_descriptions(model).items()
        ]
    else:
        comment, statuses = None, []
    texts = [render.slot_text(state, **links), render.slot_text(state)]

    if args.summary:
        with open(args.summary, "a") as handle:
            full = render.comment(model, args.slot, **links, limit=10**6) if model else None
            handle.write(full or f"{texts[0]}\n")

    plan = {
        "repo": args.repo,
        "pr": args.pr,
        "slot": args.slot,
        "slot_line": pr_body.slot_line(args.slot, label, texts[0]),
        "comment": comment,
        "statuses": statuses if args.sha else [],
        "sha": args.sha,
        "check_run": _check_run_plan(args, model, state),
    }
    if not args.post:
        _print_plan(plan, args.json, statuses_skipped=bool(statuses and not args.sha))
        return EXIT_OK
    return _publish(args, plan, texts)


def _results_folder(path: str) -> str:
    return path if os.path.isdir(path) else os.path.dirname(path) or "."


def _from_workflow_run(args) -> None:
    """Fill repo, sha, run and PR from a workflow_run payload (trusted) and gate.json (not)."""
    from ci import artifact, events, gate

    if not args.gate:
        raise UsageError("--workflow-run needs --gate gate.json from the run's artifact")
    try:
        run = events.finished_run(gate.load_event(args.workflow_run))
        record = artifact.load_gate(args.gate)
    except (OSError, ValueError) as exc:
        raise UsageError(f"workflow_run report: {exc}") from None
    if record["head_sha"] != run.head_sha:
        raise UsageError(
            f"gate.json is about {record['head_sha'][:12]}, the run about {run.head_sha[:12]}"
        )
    args.repo, args.sha, args.pr = run.repo, run.head_sha, record["pr"]
    args.run_id, args.run_url = str(run.run_id), run.html_url or None
    args.require_head = args.check_run = True
    if record["state"] != "run":
        args.state = record["state"]
    elif not args.test_result:
        args.test_result = run.conclusion


def _check_run_plan(args, model, state):
    from ci import checks

    if not args.check_run or state in ("pending", "missing-label", "stale-label"):
        return None
    now = _now()
    if model is None:
        return {"create": checks.no_results_request(state, args.sha, now, args.run_url)}
    from ci import render

    summary = render.comment(model, args.slot, limit=checks.SUMMARY_LIMIT, **_links(args))
    summary = summary.split("\n", 1)[1]  # the marker line is for the sticky comment only
    create, updates = checks.requests(model, args.sha, summary, now, args.run_url)
    return {"create": create, "updates": updates}


def _links(args) -> dict:
    return dict(run_id=args.run_id, run_url=args.run_url, artifacts_url=args.artifacts_url)


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _publish(args, plan: dict, texts: list) -> int:
    # Only publishing needs github3: a dry run works where it is not installed (a GPU runner).
    import github3.exceptions

    from ci import render
    from ci.publish import Publisher, connect
    from ci.retry import GaveUp, RetryPolicy

    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        raise UsageError("--post needs a token in GITHUB_TOKEN")
    owner, name = args.repo.split("/")
    publisher = Publisher(connect(token, args.api_url), owner, name, args.pr, RetryPolicy())
    try:
        if args.require_head:
            head = publisher.pr_head()
            if head != args.sha:
                print(
                    f"PR #{args.pr} head is {head[:12] or 'unknown'}, not {args.sha[:12]}: "
                    "this run is superseded (or not this PR's); nothing posted"
                )
                return EXIT_OK
        outcome = publisher.update_slot(args.slot, args.slot_label, texts)
        print(f"PR body slot {args.slot}: {outcome}")
        if plan["comment"] is not None:
            marker = render.comment_marker(args.slot)
            login = publisher.identity(args.bot_login)
            result = publisher.upsert_comment(marker, plan["comment"], login)
            print(f"sticky comment ({login}): {result}")
        for status in plan["statuses"]:
            publisher.set_status(args.sha, **status)
            print(f"status {status['context']}: {status['state']}")
        if plan["comment"] is not None and not args.sha:
            print("statuses: skipped (no --sha)")
        if plan["check_run"] is not None:
            check = plan["check_run"]
            run_id = publisher.create_check_run(check["create"], check.get("updates", []))
            print(f"check run {run_id}: {check['create']['conclusion']}")
    except (GaveUp, github3.exceptions.GitHubException, ValueError, RuntimeError) as exc:
        print(f"error: publishing failed: {_redact(str(exc), token)}", file=sys.stderr)
        return EXIT_FAILED
    # The A/B verdict is `ci run`'s exit code; this one only says whether publishing worked.
    return EXIT_OK


def _print_plan(plan: dict, as_json: bool, statuses_skipped: bool) -> None:
    if as_json:
        print(json.dumps(plan, indent=2))
        return
    target = f"{plan['repo']} PR #{plan['pr']}" if plan["repo"] else "none (local preview)"
    print(f"# dry run: nothing is sent. Target: {target}")
    print(f"\n## PR body: slot {plan['slot']!r} set to this line (block added if missing)\n")
    print(plan["slot_line"])
    if plan["comment"] is not None:
        print("\n## sticky comment (created, or edited in place on reruns)\n")
        print(plan["comment"], end="")
    print("\n## commit statuses" + (f" on {plan['sha']}" if plan["sha"] else "") + "\n")
    for status in plan["statuses"]:
        print(json.dumps(status))
    if statuses_skipped:
        print("(none: pass --sha to set one per suite)")
    if plan.get("check_run"):
        create = plan["check_run"]["create"]
        notes = create.get("output", {}).get("annotations", [])
        more = sum(len(u["annotations"]) for u in plan["check_run"].get("updates", []))
        print(f"\n## check run on {plan['sha']}: {create['conclusion']}\n")
        for note in notes:
            print(
                f"{note['annotation_level']} {note['path']}:{note['start_line']} {note['message']}"
            )
        if more:
            print(f"(and {more} more annotations in follow-up updates)")


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


# --------------------------------------------------------------------------------------- gate


def cmd_gate(args) -> int:
    from ci import gate

    if not args.event:
        raise UsageError("--event PATH (or GITHUB_EVENT_PATH) is required")
    try:
        decision = gate.decide(gate.load_event(args.event), args.label)
    except (OSError, ValueError) as exc:
        raise UsageError(f"event payload: {exc}") from None
    lines = [
        f"run={'true' if decision.run else 'false'}",
        f"fork={'true' if decision.fork else 'false'}",
        f"state={decision.state}",
        f"sha={decision.sha or ''}",
    ]
    if args.record:
        with open(args.record, "w") as handle:
            json.dump(decision.to_json(), handle, indent=2)
            handle.write("\n")
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as handle:
            handle.write("\n".join(lines) + "\n")
    if args.json:
        print(json.dumps(decision.to_json()))
    else:
        print("\n".join(lines))
        print(f"reason: {decision.reason}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
