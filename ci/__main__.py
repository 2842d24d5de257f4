"""``python -m ci``: run the registered proof A/B, report it on the PR, gate fork PRs.

The command line only: it parses arguments, wires the pipeline modules together and maps
outcomes to exit codes (0 ok, 1 failed checks, 2 bad usage or bad input). The work lives in
collect, runner, results, junit, render, pr_body, publish and gate.

  python -m ci run --out DIR [--backend cuda|cpu] [--suite S | --stage S] [--shard I/N]
                   [--modes unmodified,change] [--sglang-src PATH] [--timeout S] [--jobs N]
  python -m ci report --results DIR --repo OWNER/NAME --pr N [--sha SHA] [--post] ...
  python -m ci gate [--event PATH]
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
        choices=["results", "pending", "missing-label"],
        default="results",
        help="what to report (only `results` reads results)",
    )
    report.add_argument("--run-id", help="workflow run id, shown as Run #ID")
    report.add_argument("--run-url", help="workflow run URL")
    report.add_argument("--artifacts-url", help="where results.json, JUnit and logs are")
    report.add_argument("--bot-login", help="only edit a sticky comment written by this login")
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
    gate.add_argument("--json", action="store_true")
    gate.set_defaults(func=cmd_gate)
    return parser


# ---------------------------------------------------------------------------------------- run


def cmd_run(args) -> int:
    from ci import collect, environment, junit, results, runner

    root = os.path.abspath(args.root)
    backend = args.backend or ("cuda" if shutil.which("nvidia-smi") else "cpu")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in runner.MODES]
    if bad or not modes:
        raise UsageError(f"--modes {args.modes!r}: use a comma list of {', '.join(runner.MODES)}")
    if args.sglang_src and not os.path.isdir(os.path.join(args.sglang_src, "python", "sglang")):
        raise UsageError(f"--sglang-src {args.sglang_src}: no python/sglang inside")
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

    envs = {m: runner.mode_env(m, args.sglang_src) for m in modes}
    env_record = {}
    # The probe imports sglang (seconds); it overlaps with the test processes.
    probe = threading.Thread(target=lambda: env_record.update(environment.describe(envs, root)))
    probe.start()
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
    results.save(model, out)
    junit.write(model, out)
    summary = _run_summary(model)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_run_summary(model)
    return EXIT_OK if model.change_ok() else EXIT_FAILED


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
    from ci import pr_body, render, results

    if args.post and (not args.repo or args.pr is None):
        raise UsageError("--post needs --repo OWNER/NAME and --pr N")
    if args.repo and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", args.repo):
        raise UsageError(f"--repo {args.repo!r}: expected OWNER/NAME")
    try:
        pr_body.markers(args.slot)
        pr_body.slot_line(args.slot, args.slot_label, "")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    label = args.slot_label
    links = dict(run_id=args.run_id, run_url=args.run_url, artifacts_url=args.artifacts_url)

    model = None
    if args.state == "results":
        if not args.results:
            raise UsageError("--results DIR is required with --state results")
        try:
            model = results.load(args.results)
        except results.ResultsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        state = render.overall_state(model)
        texts = [render.slot_text(state, **links), render.slot_text(state)]
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
        texts = [render.slot_text(args.state, **links), render.slot_text(args.state)]
        comment, statuses = None, []

    plan = {
        "repo": args.repo,
        "pr": args.pr,
        "slot": args.slot,
        "slot_line": pr_body.slot_line(args.slot, label, texts[0]),
        "comment": comment,
        "statuses": statuses if args.sha else [],
        "sha": args.sha,
    }
    if not args.post:
        _print_plan(plan, args.json, statuses_skipped=bool(statuses and not args.sha))
        return EXIT_OK

    # Only publishing needs github3: a dry run works where it is not installed (a GPU runner).
    import github3.exceptions

    from ci.publish import Publisher, connect
    from ci.retry import GaveUp, RetryPolicy

    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        raise UsageError("--post needs a token in GITHUB_TOKEN")
    owner, name = args.repo.split("/")
    publisher = Publisher(connect(token, args.api_url), owner, name, args.pr, RetryPolicy())
    try:
        outcome = publisher.update_slot(args.slot, label, texts)
        print(f"PR body slot {args.slot}: {outcome}")
        if comment is not None:
            marker = render.comment_marker(args.slot)
            print(f"sticky comment: {publisher.upsert_comment(marker, comment, args.bot_login)}")
        for status in plan["statuses"]:
            publisher.set_status(args.sha, **status)
            print(f"status {status['context']}: {status['state']}")
        if statuses and not args.sha:
            print("statuses: skipped (no --sha)")
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
    ]
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as handle:
            handle.write("\n".join(lines) + "\n")
    if args.json:
        print(json.dumps({"run": decision.run, "fork": decision.fork, "reason": decision.reason}))
    else:
        print("\n".join(lines))
        print(f"reason: {decision.reason}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
