"""``python -m tools.benchmark``: the parts below, merged into ``results/<machine>.json`` (a part
that fails is recorded, the others still run). Exit 0 when every part ran, 1 when one failed."""

import argparse
import datetime
import json
import platform
import socket
import sys
import time
from pathlib import Path

from tools.benchmark import processes, workspace

RESULTS = Path(__file__).resolve().parent / "results"
# Each part: (what it measures, its key in the results, its function of (device, quick)).
PARTS = {
    "peaks": ("replacement peak / new size", "peaks", workspace.peaks),
    "hot": ("reuse-path calls per s", "hot_path", workspace.hot_path),
    "startup": ("the .pth hook's start-up cost", "startup", processes.startup),
    "proof": ("ci run's wall time", "proof", processes.proof),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    about = "; ".join(f"{k} ({v[0]})" for k, v in PARTS.items())
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {about}")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or any(p not in PARTS for p in parts):
        parser.error(f"--parts {args.parts!r}: use a comma list of {', '.join(PARTS)}")
    import torch

    started = time.monotonic()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        name = torch.cuda.get_device_name(0).replace(" ", "-").lower()
    else:
        name = f"cpu-{platform.machine()}-{socket.gethostname()[:12]}"
    path = RESULTS / f"{name}.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    report.update(machine=name, device=device, torch=torch.__version__, quick=args.quick)
    report.update(python=platform.python_version(), generated=datetime.date.today().isoformat())
    report["command"] = "python -m tools.benchmark" + (" --quick" if args.quick else "")
    errors = report.setdefault("errors", {})
    for part in parts:
        part_started = time.monotonic()
        print(f"benchmark: {part} ...", file=sys.stderr, flush=True)
        try:
            _, key, measure = PARTS[part]
            report[key] = measure(device, args.quick)
            errors.pop(part, None)
        except Exception as exc:  # one failing part must not lose the others
            errors[part] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300].replace("`", "'")
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
