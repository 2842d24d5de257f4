"""Mutants of the series' fixes against the registered tests: which test kills which mutant.

Each fix (patch 0001, the DSV4 sparse-prefill scratch; patch 0003, the DFlash fused KV
workspaces) is applied to the installed sglang's base file (pinned by sha256 in
patches/BASE), then changed into each named mutant, a plausible wrong version of the fix.
Every variant (unmodified, the fix, each mutant) is loaded in place of the real module and
the fix's registered tests for one backend run against it, in this process. The table says,
per mutant and test, whether the test killed it (failed or errored) or let it survive.

    python3 tools/registered_mutants.py --backend cpu     # the CPU files, anywhere
    python3 tools/registered_mutants.py --backend cuda    # the CUDA files, on a GPU

Needs only the standard library, torch and the sglang release of patches/BASE (installed
with --no-deps will do); run it from the repository's top with the runtime overlay off
(SGLANG_OVERLAY_DISABLE=1). Exit 0 when the fix passes every test, every mutant dies by at
least the tests named for it here, and every test kills at least one mutant; 1 otherwise;
2 on bad usage or a base file that is not the pinned one.
"""

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import sys
import types
import unittest
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    edits: tuple  # (old, new) substitutions on the fixed file, each matching once
    killed_by: dict = field(default_factory=dict)  # backend -> the tests that must kill it


@dataclass(frozen=True)
class Fix:
    patch: str
    source: str  # upstream path of the file the fix changes
    module: str
    tests: dict  # backend -> registered test files
    unmodified_killed_by: dict
    mutants: tuple
    base_file: str = ""  # the base's text in this repository (a cut's), else the installed file
    pins: str = "patches/BASE"  # the BASE that pins it


DSV4_CPU = "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
DSV4_CUDA = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
DSV4_RELEASE = "            self._buffer = None\n"
DSV4_HEAD_FIRST = (
    "            self._head_source = None\n            self._buffer = torch.empty(",
    "            self._buffer = torch.empty(",
)
DSV4_CUDA_DTYPE = (
    "test_replace_48_mib_fp8_with_96_mib_bf16_peaks_at_96_mib",
    "test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib",
)
DSV4_CUDA_ALL = ("test_grow_64_to_96_mib_bf16_peaks_at_96_mib", *DSV4_CUDA_DTYPE)
DSV4_CPU_ORDER = (
    "test_growing_releases_the_old_scratch_before_allocating",
    "test_changing_dtype_releases_the_old_scratch_before_allocating",
)

FKV_CPU = "test/registered/unit/kernels/ops/speculative/test_fused_kv_workspace_release_order.py"
FKV_CUDA = "test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py"
FKV_CLEAR = (
    "        self._proj_workspace = None\n"
    "        self._k_workspace = None\n"
    "        self._v_workspace = None\n"
    "        self._workspace_capacity = 0\n"
    "        self._workspace_dtype = None\n"
)
FKV_CPU_ORDER = (
    "test_growing_releases_the_old_workspaces_before_allocating",
    "test_changing_dtype_releases_the_old_workspaces_before_allocating",
)
FKV_FAILED = "test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype"
FKV_CUDA_ALL = (
    "test_grow_2048_to_4096_tokens_peaks_at_the_new_128_mib",
    "test_float16_to_bfloat16_doubles_and_peaks_at_the_new_128_mib",
)

CUT = "patches/cuts/per-ratio-workspace/"  # fix 0001 cut for upstream main at 02e8ed1b
PR_CPU = (
    CUT + "test/registered/unit/layers/attention/test_dsv4_per_ratio_workspace_release_order.py"
)
PR_CUDA = (
    CUT + "test/registered/kernels/ops/attention/dsv4/test_dsv4_per_ratio_workspace_replacement.py"
)
PR_RELEASE = "            self._buffer = None\n            self.generation += 1\n"
PR_ORDER = (
    "test_growing_releases_the_old_workspace_before_allocating",
    "test_changing_dtype_releases_the_old_workspace_before_allocating",
)
PR_KEY = (
    "test_growing_at_the_same_address_invalidates_the_cached_prefix",
    "test_changing_dtype_at_the_same_address_invalidates_the_cached_prefix",
)
PR_CUDA_PEAK = ("test_grow_64_to_96_mib_peaks_at_96_mib",)
PR_CUDA_KEY = ("test_bf16_to_fp8_in_the_freed_block_invalidates_the_cached_prefix",)
PR_FITS = ("test_a_request_that_fits_keeps_the_workspace_and_its_prefix",)
PER_RATIO = Fix(
    patch=CUT + "patches/0001-dsv4-per-ratio-release-first-and-invalidate.patch",
    source="python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py",
    module="sglang.srt.layers.attention.dsv4.sparse_prefill_utils",
    tests={"cpu": (PR_CPU,), "cuda": (PR_CUDA,)},
    unmodified_killed_by={
        "cpu": (*PR_ORDER, *PR_KEY, *PR_FITS),
        "cuda": PR_CUDA_PEAK + PR_CUDA_KEY,
    },
    mutants=(
        Mutant(
            "release-first-alone",
            "releases the workspace first but never bumps the generation",
            (("            self.generation += 1\n", ""),),
            {"cpu": PR_KEY, "cuda": PR_CUDA_KEY},
        ),
        Mutant(
            "generation-without-release",
            "bumps the generation but allocates while holding the old workspace",
            ((PR_RELEASE, "            self.generation += 1\n"),),
            {"cpu": PR_ORDER, "cuda": PR_CUDA_PEAK},
        ),
        Mutant(
            "old-workspace-kept-in-a-local",
            "clears the attribute but keeps the old workspace in a local while allocating",
            (
                (
                    "            self._buffer = None\n",
                    "            old, self._buffer = self._buffer, None\n",
                ),
            ),
            {"cpu": PR_ORDER, "cuda": PR_CUDA_PEAK},
        ),
        Mutant(
            "released-on-growth-only",
            "releases the workspace when it grows, not when the dtype changes",
            (
                (
                    "            self._buffer = None\n",
                    "            if num_tokens > current_capacity:\n                self._buffer = None\n",
                ),
            ),
            {"cpu": PR_ORDER[1:]},
        ),
        Mutant(
            "generation-bumped-on-growth-only",
            "bumps the generation when the workspace grows, not when the dtype changes",
            (
                (
                    "            self.generation += 1\n",
                    "            if num_tokens > current_capacity:\n                self.generation += 1\n",
                ),
            ),
            {"cpu": PR_KEY[1:], "cuda": PR_CUDA_KEY},
        ),
        Mutant(
            "released-before-the-capacity-check",
            "releases and bumps on every request, so one that fits reallocates",
            (
                (
                    "        assert num_tokens > 0\n",
                    "        assert num_tokens > 0\n        self._buffer = None\n        self.generation += 1\n",
                ),
            ),
            {"cpu": PR_FITS},
        ),
    ),
    base_file="tests/fixtures/upstream_main/sparse_prefill_utils-02e8ed1b.py.txt",
    pins=CUT + "patches/BASE",
)

FIXES = {
    "0001": Fix(
        patch="patches/0001-dsv4-sparse-prefill-release-first.patch",
        source="python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py",
        module="sglang.srt.layers.attention.dsv4.sparse_prefill_utils",
        tests={"cpu": (DSV4_CPU,), "cuda": (DSV4_CUDA,)},
        unmodified_killed_by={"cpu": DSV4_CPU_ORDER, "cuda": DSV4_CUDA_ALL},
        mutants=(
            Mutant(
                "head-never-cleared",
                "releases the scratch first but never clears the head key on replacement",
                (DSV4_HEAD_FIRST,),
                {"cpu": ("test_a_failed_replacement_keeps_no_head_for_rows_it_dropped",)},
            ),
            Mutant(
                "head-cleared-after-allocating",
                "releases the scratch first, clears the head key after torch.empty",
                (
                    DSV4_HEAD_FIRST,
                    (
                        "            )\n        return self._buffer[:num_tokens]",
                        "            )\n            self._head_source = None\n"
                        "        return self._buffer[:num_tokens]",
                    ),
                ),
                {"cpu": ("test_a_failed_replacement_keeps_no_head_for_rows_it_dropped",)},
            ),
            Mutant(
                "old-scratch-kept-in-a-local",
                "clears the attribute but keeps the old scratch in a local while allocating",
                ((DSV4_RELEASE, "            old_scratch, self._buffer = self._buffer, None\n"),),
                {"cpu": DSV4_CPU_ORDER, "cuda": DSV4_CUDA_ALL},
            ),
            Mutant(
                "released-on-growth-only",
                "releases the scratch when it grows, not when the dtype changes",
                (
                    (
                        DSV4_RELEASE,
                        "            if num_tokens > current_capacity:\n"
                        "                self._buffer = None\n",
                    ),
                ),
                {"cpu": DSV4_CPU_ORDER[1:], "cuda": DSV4_CUDA_DTYPE},
            ),
            Mutant(
                "released-before-the-capacity-check",
                "releases the scratch on every request, so one that fits reallocates",
                (
                    (
                        "        assert num_tokens > 0\n",
                        "        assert num_tokens > 0\n" + DSV4_RELEASE[4:],
                    ),
                ),
                {"cpu": ("test_a_request_that_fits_keeps_the_scratch",)},
            ),
            Mutant(
                "grown-in-place",
                "grows the old scratch in place (Tensor.resize_) under views callers hold",
                (
                    (
                        DSV4_RELEASE,
                        "            if self._buffer is not None and dtype == current_dtype:\n"
                        "                self._head_source = None\n"
                        "                self._buffer.resize_((num_tokens, 1, WORKSPACE_DIM))\n"
                        "                return self._buffer[:num_tokens]\n" + DSV4_RELEASE,
                    ),
                ),
                {
                    "cpu": (
                        DSV4_CPU_ORDER[0],
                        "test_a_view_held_across_a_replacement_keeps_its_values",
                    ),
                    "cuda": DSV4_CUDA_ALL[:1],
                },
            ),
        ),
    ),
    "0003": Fix(
        patch="patches/0003-fused-kv-workspace-release-first.patch",
        source="python/sglang/kernels/ops/speculative/fused_kv_materialize.py",
        module="sglang.kernels.ops.speculative.fused_kv_materialize",
        tests={"cpu": (FKV_CPU,), "cuda": (FKV_CUDA,)},
        unmodified_killed_by={"cpu": (*FKV_CPU_ORDER, FKV_FAILED), "cuda": FKV_CUDA_ALL},
        mutants=(
            Mutant(
                "only-the-projection-released",
                "releases one of the three workspaces (the projection) before allocating",
                (
                    (
                        "        self._k_workspace = None\n        self._v_workspace = None\n"
                        "        self._workspace_capacity = 0\n",
                        "        self._workspace_capacity = 0\n",
                    ),
                ),
                {"cpu": FKV_CPU_ORDER, "cuda": FKV_CUDA_ALL},
            ),
            Mutant(
                "old-workspaces-kept-in-locals",
                "clears the attributes but keeps the old workspaces in a local while allocating",
                (
                    (
                        FKV_CLEAR,
                        "        old = (self._proj_workspace, self._k_workspace, self._v_workspace)\n"
                        + FKV_CLEAR,
                    ),
                ),
                {"cpu": FKV_CPU_ORDER, "cuda": FKV_CUDA_ALL},
            ),
            Mutant(
                "capacity-and-dtype-kept",
                "releases the three workspaces but leaves the capacity and the dtype set",
                (
                    (
                        "        self._workspace_capacity = 0\n        self._workspace_dtype = None\n"
                        "        self._proj_workspace = torch.empty(",
                        "        self._proj_workspace = torch.empty(",
                    ),
                ),
                {"cpu": (FKV_FAILED,)},
            ),
            Mutant(
                "released-on-growth-only",
                "releases the workspaces when the capacity grows, not when the dtype changes",
                (
                    (
                        FKV_CLEAR,
                        "        if total_ctx > self._workspace_capacity:\n"
                        + "".join("    " + line + "\n" for line in FKV_CLEAR.splitlines()),
                    ),
                ),
                {"cpu": (FKV_CPU_ORDER[1], FKV_FAILED), "cuda": FKV_CUDA_ALL[1:]},
            ),
            Mutant(
                "released-before-the-reuse-check",
                "releases the workspaces on every batch, so one that fits reallocates",
                (
                    (FKV_CLEAR, ""),
                    (
                        "    def _ensure_workspace(self, total_ctx: int, dtype: torch.dtype) -> None:\n",
                        "    def _ensure_workspace(self, total_ctx: int, dtype: torch.dtype) -> None:\n"
                        + FKV_CLEAR,
                    ),
                ),
                {
                    "cpu": (FKV_CPU_ORDER[0], "test_a_request_that_fits_reuses_the_workspaces"),
                    "cuda": FKV_CUDA_ALL,
                },
            ),
        ),
    ),
    "0001-per-ratio": PER_RATIO,
}


class Refused(Exception):
    """Bad usage or a base that is not the pinned one: one line, exit 2."""


def substitute(text: str, old: str, new: str, what: str) -> str:
    count = text.count(old)
    if count != 1:
        raise Refused(f"{what}: {old.splitlines()[0].strip()!r} matches {count} times, not once")
    return text.replace(old, new)


def apply_patch(text: str, patch: Path) -> str:
    """``text`` with every hunk of ``patch`` (one file's diff) applied by exact context."""
    diff = patch.read_text().split("\ndiff --git ", 1)[1]
    for hunk in re.split(r"\n@@ [^\n]*@@[^\n]*\n", diff)[1:]:
        old, new = [], []
        for line in hunk.splitlines(keepends=True):
            if line.startswith("-- \n") or line.startswith("\\"):
                break
            tag, body = line[:1], line[1:]
            if tag in " -":
                old.append(body)
            if tag in " +":
                new.append(body)
        text = substitute(text, "".join(old), "".join(new), patch.name)
    return text


def pinned_sha256(path: str, pins: str = "patches/BASE") -> str:
    for line in (REPO / pins).read_text().splitlines():
        match = re.fullmatch(r"file: (\S+) sha256=([0-9a-f]{64})", line.strip())
        if match and match.group(1) == path:
            return match.group(2)
    raise Refused(f"{pins} pins no sha256 for {path}")


def base_text(fix: Fix) -> tuple:
    """The base file's text, and the installed module's path (where the variants load)."""
    spec = importlib.util.find_spec(fix.module)
    data = (REPO / fix.base_file if fix.base_file else Path(spec.origin)).read_bytes()
    if hashlib.sha256(data).hexdigest() != pinned_sha256(fix.source, fix.pins):
        raise Refused(f"{fix.base_file or spec.origin} is not the base {fix.pins} pins")
    return data.decode(), spec.origin


def variants(fix: Fix, base: str) -> dict:
    fixed = apply_patch(base, REPO / fix.patch)
    out = {"unmodified": base, "fix": fixed}
    for mutant in fix.mutants:
        text = fixed
        for old, new in mutant.edits:
            text = substitute(text, old, new, f"mutant {mutant.name}")
        out[mutant.name] = text
    return out


def load_variant(fix: Fix, text: str, origin: str) -> None:
    module = types.ModuleType(fix.module)
    module.__file__ = origin
    module.__spec__ = importlib.util.spec_from_file_location(fix.module, origin)  # find_spec
    package, _, leaf = fix.module.rpartition(".")
    module.__package__ = package
    exec(compile(text, origin, "exec"), module.__dict__)
    sys.modules[fix.module] = module
    setattr(sys.modules[package], leaf, module)


def run_file(path: str) -> dict:
    """test name -> 'pass', 'fail', 'error' or 'skip', for the test file at ``path``."""
    name = "registered_mutants_" + re.sub(r"\W", "_", path)
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)

    def tests(s):
        for t in s:
            yield from tests(t) if isinstance(t, unittest.TestSuite) else [t]

    # Every test passes unless the result says otherwise (the suite forgets its tests as
    # it runs them, so they are named first); what the tests print goes nowhere.
    outcome = {test._testMethodName: "pass" for test in tests(suite)}
    result = unittest.TestResult()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        suite.run(result)
    for kind, entries in (("fail", result.failures), ("error", result.errors)):
        for test, _ in entries:
            outcome[getattr(test, "_testMethodName", str(test))] = kind
    for test, _ in result.skipped:
        outcome[test._testMethodName] = "skip"
    return outcome


def run(backend: str, fixes) -> dict:
    report = {}
    for number in fixes:
        fix = FIXES[number]
        base, origin = base_text(fix)
        texts = variants(fix, base)
        outcomes = {}
        try:
            for variant, text in texts.items():
                load_variant(fix, text, origin)
                outcomes[variant] = {}
                for path in fix.tests[backend]:
                    for test, result in run_file(path).items():
                        outcomes[variant][f"{Path(path).name}::{test}"] = result
        finally:
            load_variant(fix, Path(origin).read_text(), origin)  # the installed module again
        report[number] = outcomes
    return report


def verdict(backend: str, report: dict) -> list:
    """What is wrong with ``report``, one line each (empty: the tests kill every mutant)."""
    problems = []
    for number, outcomes in report.items():
        fix = FIXES[number]
        expected = {"unmodified": fix.unmodified_killed_by.get(backend, ())}
        expected |= {m.name: m.killed_by.get(backend, ()) for m in fix.mutants}
        for test, result in outcomes["fix"].items():
            if result in ("fail", "error", "skip"):
                problems.append(f"{number}: the fix does not pass {test} ({result})")
        killers = set()
        for variant, must_kill in expected.items():
            killed = {
                t.split("::")[1] for t, r in outcomes[variant].items() if r in ("fail", "error")
            }
            killers |= killed
            # A mutant named for another backend only (the head key, on CPU) may pass here.
            if not killed and (must_kill or variant == "unmodified"):
                problems.append(f"{number}: mutant {variant} survives every {backend} test")
            missing = sorted(set(must_kill) - killed)
            if missing:
                problems.append(f"{number}: mutant {variant} survives {', '.join(missing)}")
        for test in outcomes["fix"]:
            if test.split("::")[1] not in killers:
                problems.append(f"{number}: {test} kills no mutant on {backend}")
    return problems


def table(report: dict) -> str:
    out = io.StringIO()
    for number, outcomes in report.items():
        tests = list(outcomes["fix"])
        print(f"fix {number} ({FIXES[number].patch}):", file=out)
        for i, test in enumerate(tests):
            print(f"  t{i + 1} = {test}", file=out)
        width = max(len(v) for v in outcomes)
        print(
            f"  {'':{width}}  " + "  ".join(f"{'t' + str(i + 1):>8}" for i in range(len(tests))),
            file=out,
        )
        for variant, results in outcomes.items():
            cells = []
            for test in tests:
                result = results.get(test, "absent")
                if variant != "fix":
                    result = "killed" if result in ("fail", "error") else "survived"
                cells.append(f"{result:>8}")
            print(f"  {variant:{width}}  " + "  ".join(cells), file=out)
    return out.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="registered_mutants.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--backend", choices=BACKENDS, required=True)
    parser.add_argument("--fix", action="append", choices=sorted(FIXES), help="default: every fix")
    parser.add_argument(
        "--json", action="store_true", help="the outcomes as JSON, then the verdict"
    )
    args = parser.parse_args(argv)
    try:
        if "sglang_overlay" in sys.modules and os.environ.get("SGLANG_OVERLAY_DISABLE") != "1":
            raise Refused("the runtime overlay is on: run with SGLANG_OVERLAY_DISABLE=1")
        import torch

        if args.backend == "cuda" and not torch.cuda.is_available():
            raise Refused("--backend cuda: torch sees no CUDA device")
        report = run(args.backend, args.fix or sorted(FIXES))
    except Refused as err:
        print(f"registered_mutants.py: {err}", file=sys.stderr)
        return 2
    print(
        json.dumps(report, indent=1) if args.json else table(report),
        end="" if not args.json else "\n",
    )
    problems = verdict(args.backend, report)
    for line in problems:
        print(f"PROBLEM {line}")
    print(f"verdict: {'ok' if not problems else 'failed'} ({args.backend})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
