"""``python -m tools.benchmark.preload``: what ``ci run``'s default preloading saves, side by side
in one run.

Six small registered CPU files that each import the DSV4 workspace module, added on a branch of
a local sglang 0.5.23 repository in upstream's layout (``tools.series.base``), run with both sides
from git (12 file runs) by ``ci run --git-base main --git-head six``: as ``ci run`` runs them by
default (each side preloads what the files import of torch and sglang, here that module, once,
and forks a child per file), and with ``--preload none`` (each file in a fresh interpreter);
and, as the yardstick, one bare ``python -c "import MODULE"``. Alternated in each repeat so a
busy machine slows them alike; every command must exit 0. Prints the figures as JSON, with the
CPU seconds of each command and its children, and writes them to
``tools/benchmark/results/preload/cpu-<machine>.json``. Goal: the default run in at most 2.5x
the bare import on a 2-core machine.
"""

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

from ci import gitcmd
from sglang_overlay import WORKSPACE_MODULE
from sglang_overlay.config import DISABLE_ENV
from tools.benchmark import launch, summary

GOAL = 2.5
FILE = """import unittest

from sglang.srt.layers.attention.dsv4.sparse_prefill_utils import SparsePrefillKVBuffer


def register_cpu_ci(**kwargs):
    pass


register_cpu_ci(est_time={n}, suite="base-a-test-cpu")


class TestSmall{n}(unittest.TestCase):
    def test_the_workspace_class_is_there(self):
        self.assertTrue(callable(SparsePrefillKVBuffer))


if __name__ == "__main__":
    unittest.main()
"""


def _git(repo: Path, *args: str) -> None:
    identity = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid"}
    identity.update(GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.invalid")
    gitcmd.run(list(args), repo, env=identity)


def make_repo(dest: Path) -> Path:
    from tools.series import base, seriesdir

    repo = base.materialize(seriesdir.load().base.version, dest)
    (repo / "test/registered").mkdir(parents=True)
    (repo / "test/registered/README").write_text("registered tests\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "test/registered")
    _git(repo, "checkout", "-q", "-b", "six")
    for n in range(1, 7):
        (repo / f"test/registered/test_small_{n}.py").write_text(FILE.format(n=n))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "six small registered files")
    _git(repo, "checkout", "-q", "main")
    return repo


def measure(repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-preload-") as tmp:
        repo = make_repo(Path(tmp) / "sglang")
        ci_run = [sys.executable, "-m", "ci", "run", "--backend", "cpu", "--jobs", "2", "--json"]
        ci_run += ["--root", str(repo), "--git-base", "main", "--git-head", "six"]
        # The trees are the sides: the overlay is off on both.
        ci_run += [f"--unmodified-env={DISABLE_ENV}=1", f"--change-env={DISABLE_ENV}=1"]
        runs = launch.alternate(
            {
                "import": [sys.executable, "-c", f"import {WORKSPACE_MODULE}"],
                "fresh": lambda r: [*ci_run, "--preload", "none", "--out", f"{tmp}/fresh-{r}"],
                "default": lambda r: [*ci_run, "--out", f"{tmp}/default-{r}"],
            },
            repeats,
            launch.side_env("unmodified"),
        )
        for kind, r in ((k, r) for k in ("fresh", "default") for r in range(repeats)):
            data = json.loads(Path(f"{tmp}/{kind}-{r}/results.json").read_text())
            preload = data["environment"].get("preload", {})
            forked = bool(preload) and all(p["forked"] for p in preload.values())
            if len(data["files"]) != 6 or data["verdict"] != "ok" or forked != (kind == "default"):
                raise launch.BenchmarkError(
                    f"{kind} run {r} is not what it measures: {data['reasons']}"
                )
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "module": WORKSPACE_MODULE,
        "file_runs": 12,
        "repeats": repeats,
        "seconds": {kind: summary(r.wall_s for r in ran) for kind, ran in runs.items()},
        "cpu_seconds": {kind: summary(r.cpu_s for r in ran) for kind, ran in runs.items()},
        "over_bare_import": launch.over(runs, ("fresh", "default"), "import"),
        "goal": {"default": GOAL},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark.preload", description=__doc__)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        report = measure(args.repeats)
    except launch.BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    # Beside the tables' results, not among them: BENCHMARKS.md renders every results/*.json.
    folder = Path(__file__).resolve().parent / "results" / "preload"
    folder.mkdir(exist_ok=True)
    (folder / f"cpu-{platform.machine()}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
