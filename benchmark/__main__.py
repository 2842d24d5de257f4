"""``python -m benchmark``: run the side-by-side benchmarks and write the results as JSON.

Writes ``benchmark/results/<machine>.json`` (``--out`` to change) and prints it. ``--quick``
runs fewer rounds, for a smoke test.
"""

import argparse
import json
import platform
import socket
from pathlib import Path

from benchmark import hot_path, startup


def machine_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0).replace(" ", "-").lower()
    except Exception:
        pass
    return f"cpu-{platform.machine()}-{socket.gethostname()[:12]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark", description=__doc__)
    parser.add_argument(
        "--out", type=Path, help="result file (default benchmark/results/<machine>.json)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    parser.add_argument(
        "--device", default=None, help="workspace device (default: cuda if available)"
    )
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    report = {
        "machine": machine_name(),
        "torch": torch.__version__,
        "hot_path": hot_path.measure(
            device, rounds=5 if args.quick else 21, number=2000 if args.quick else 20000
        ),
        "startup": startup.measure(runs=4 if args.quick else 30),
    }
    out = args.out or Path(__file__).parent / "results" / f"{report['machine']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
