"""Mutants of the series' fixes against the registered tests: which test kills which mutant.

Each fix of the series (its mutants in ``fixes.py``) is applied to the installed sglang's
base file (pinned by sha256 in patches/BASE), then changed into each named mutant, a plausible wrong version of the fix.
Every variant (unmodified, the fix, each mutant) is loaded in place of the real module and
the fix's registered tests for one backend run against it, in this process. The table says,
per mutant and test, whether the test killed it (failed or errored) or let it survive.

    python3 -m tools.registered_mutants --backend cpu     # the CPU files, anywhere
    python3 -m tools.registered_mutants --backend cuda    # the CUDA files, on a GPU

Needs only the standard library, torch and the sglang release of patches/BASE (installed
with --no-deps will do); run it from the repository's top with the runtime overlay off
(SGLANG_OVERLAY_DISABLE=1). Exit 0 when the fix passes every test, every mutant dies by at
least the tests named for it, and every test but a preservation test kills a mutant; 1 otherwise;
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
from pathlib import Path

from tools.registered_mutants.fixes import BACKENDS, FIXES, Fix

REPO = Path(__file__).resolve().parents[2]


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
    # In sys.modules before it runs, as an import puts it: a dataclass with string annotations
    # (the DSA backend's) looks its module up while the class is made.
    sys.modules[fix.module] = module
    exec(compile(text, origin, "exec"), module.__dict__)
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
            name = test.split("::")[1]
            if name in fix.preserved_by:
                # A preservation test holds on unmodified sglang as on the fix.
                if outcomes["unmodified"][test] != "pass":
                    problems.append(f"{number}: preservation test {test} fails unmodified")
            elif name not in killers:
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
        prog="python -m tools.registered_mutants", description=__doc__.splitlines()[0]
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
        print(f"registered_mutants: {err}", file=sys.stderr)
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
