"""``python -m tools.benchmark``: run the side-by-side benchmarks and write the results.

Writes ``tools/benchmark/results/<machine>.json`` (merged: parts not run keep their last figures);
BENCHMARKS.md is a document, edited by hand from these figures. Parts: peaks (replacement peak /
new size), fit (largest replacement under a cap), hot (reuse-path cost), startup (.pth hook
cost), proof (``ci run`` wall time). ``--quick`` runs fewer rounds and the regression test's
transitions only. A part that fails is recorded and the others still run. Exit 0 when every
part ran, 1 when one failed, 2 for bad usage.
"""

import argparse
import datetime
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from tools.benchmark import capped, hot_path, proof, startup

RESULTS = Path(__file__).resolve().parent / "results"


def _peaks(plan) -> dict:
    return {"peaks": capped.peaks(plan.device, plan.peak_repeats, plan.jobs, plan.quick)}


# Each part: the plan -> the keys it sets in the report.
PARTS = {
    "peaks": _peaks,
    "fit": lambda p: {"largest_fit": capped.largest_fit(p.device, p.fit_caps, 1, p.jobs)},
    "hot": lambda p: {"hot_path": hot_path.measure(p.device, **p.hot)},
    "startup": lambda p: {"startup": startup.measure(runs=p.startup_runs)},
    "proof": lambda p: {"proof": proof.measure(p.device, p.proof_repeats)},
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)} (default: all)"
    )
    parser.add_argument("--device", help="workspace device (default: cuda if available)")
    parser.add_argument("--jobs", type=int, help="capped children at once (default: CPUs, max 12)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if any(p not in PARTS for p in parts) or not parts:
        parser.error(f"--parts {args.parts!r}: use a comma list of {', '.join(PARTS)}")
    import torch

    started = time.monotonic()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda, quick = device == "cuda", args.quick
    # How many repeats each part gets: CPU probes cost ~4 s, CUDA ones ~15 s but run wide.
    plan = SimpleNamespace(
        device=device,
        jobs=args.jobs or min(12, os.cpu_count() or 1),
        quick=quick,
        peak_repeats=(1 if quick else 3) if cuda else 1,
        fit_caps=[128, 1024] if cuda else [128],
        hot=dict(rounds=5, number=2000) if quick else dict(rounds=21, number=20000),
        startup_runs=4 if quick else (10 if cuda else 20),
        # The goals are ratios of medians: noise needs repeats.
        proof_repeats=1 if quick else (5 if cuda else 3),
    )
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0).replace(" ", "-").lower()
    else:
        name = f"cpu-{platform.machine()}-{socket.gethostname()[:12]}"
    path = RESULTS / f"{name}.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    report.update(
        machine=name,
        device=device,
        torch=torch.__version__,
        python=platform.python_version(),
        generated=datetime.date.today().isoformat(),
        command="python -m tools.benchmark" + (" --quick" if quick else ""),
        quick=quick,
    )
    errors = report.setdefault("errors", {})
    for part in parts:
        part_started = time.monotonic()
        print(f"benchmark: {part} ...", file=sys.stderr, flush=True)
        try:
            report.update(PARTS[part](plan))
            errors.pop(part, None)
        except Exception as exc:  # one failing part must not lose the others
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            errors[part] = message.replace("`", "'")
            print(f"benchmark: {part} failed: {errors[part]}", file=sys.stderr)
        took = time.monotonic() - part_started
        print(f"benchmark: {part} took {took:.0f} s", file=sys.stderr, flush=True)
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"benchmark: wrote {path} in {report['elapsed_s']} s", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
