"""Named mutants of each fix, and which registered tests kill each (``cpu|cuda`` by hand)."""

import contextlib
import hashlib
import importlib.util
import io
import json
import subprocess
import sys
import tempfile
import types
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNIT, KERNELS = "test/registered/unit/", "test/registered/kernels/ops/"

# Edits shared by rows below: the fixed file's release lines.
DSV4 = "            self._buffer = None\n"
DSV4_HEAD = "            self._head_source = None\n"
CAP = "        self._workspace_capacity = 0\n        self._workspace_dtype = None\n"
FKV = "        self._proj_workspace = None\n        self._k_workspace = None\n"
FKV += "        self._v_workspace = None\n" + CAP
ALLOC = "        self._proj_workspace = torch.empty("
ENSURE = "    def _ensure_workspace(self, total_ctx: int, dtype: torch.dtype) -> None:\n"
DFP = "            self._draft_probs_buf = buffer = None\n"
QPAD = "                self._q8kv8_qpad_buf = buf = None\n"
KV = "            self._q8kv8_kv_buf = kv_buf = None\n"
OUT = "            self._q8kv8_out_bufs = out_bufs = None\n"
DSV4Q = "            self._q8kv8_qpad_buf = qpad = None\n"
BQ = "            self._q8kv8_born_q_buf = buf = None\n"
SENT = "            self._q8kv8_born_q_sentinel = buf = None\n"


def _parts(release: str) -> tuple:
    """(indent, attribute, local) of a ``self.x = x = None`` release line."""
    indent = release[: len(release) - len(release.lstrip())]
    attribute, local, _ = (part.strip() for part in release.split("="))
    return indent, attribute, local


def keeps(release: str, which: str) -> tuple:
    """The release clearing only the attribute (``which='local'``) or only the local."""
    indent, attribute, local = _parts(release)
    return (release, f"{indent}{attribute if which == 'local' else local} = None\n")


def deleted(release: str) -> tuple:
    """``del`` instead of ``= None``: a failed allocation leaves no attribute at all."""
    indent, attribute, local = _parts(release)
    return (release, f"{indent}del {attribute}, {local}\n")


def on_growth_only(release: str, condition: str) -> tuple:
    indent = release[: len(release) - len(release.lstrip())]
    return (release, f"{indent}if {condition}:\n    " + release)


def early(release: str, read: str) -> tuple:
    """Edits that release a buffer on every call, before the check that would reuse it."""
    attribute = release.split(" = ")[0].strip()
    indent = read[: len(read) - len(read.lstrip())]
    return ((release, ""), (read, f"{indent}{attribute} = None\n" + read))


# fix -> (patch, module, {backend: file}, {variant: (edits, CPU, CUDA killers)})
# fmt: off
FIXES = {
    "0001": (
        "0001-dsv4-sparse-prefill-release-first.patch",
        "sglang.srt.layers.attention.dsv4.sparse_prefill_utils",
        {
            "cpu": UNIT + "layers/attention/test_dsv4_sparse_prefill_release_order.py",
            "cuda": KERNELS + "attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
        },
        {
            "unmodified": ((), "growing changing_dtype", "grow_64 replace_48 shrink"),
            "head-never-cleared": (((DSV4_HEAD, ""),), "failed", ""),
            "head-cleared-after-allocating": (((DSV4_HEAD, ""), ("            )\n        return self._buffer[", "            )\n" + DSV4_HEAD + "        return self._buffer[",),), "failed", "",),
            "old-scratch-kept-in-a-local": (((DSV4, "            old, self._buffer = self._buffer, None\n"),), "growing changing_dtype", "grow_64 replace_48 shrink",),
            "released-on-growth-only": ((on_growth_only(DSV4, "num_tokens > current_capacity"),), "changing_dtype", "replace_48 shrink",),
            "released-before-the-capacity-check": (early(DSV4, "        current_capacity = "), "fits", "",),
            "grown-in-place": (((DSV4, "            if self._buffer is not None and dtype == current_dtype:\n" "                self._head_source = None\n" "                self._buffer.resize_((num_tokens, 1, WORKSPACE_DIM))\n" "                return self._buffer[:num_tokens]\n" + DSV4,),), "growing view failed", "grow_64",),
        },
    ),
    "0003": (
        "0003-fused-kv-workspace-release-first.patch",
        "sglang.kernels.ops.speculative.fused_kv_materialize",
        {
            "cpu": UNIT + "kernels/ops/speculative/test_fused_kv_workspace_release_order.py",
            "cuda": KERNELS + "speculative/test_fused_kv_workspace_peak.py",
        },
        {
            "unmodified": ((), "growing changing_dtype failed", "grow float16"),
            "only-the-projection-released": ((("        self._k_workspace = None\n        self._v_workspace = None\n", ""),), "growing changing_dtype", "grow float16",),
            "old-workspaces-kept-in-a-local": (((FKV, "        old = (self._k_workspace, self._v_workspace)\n" + FKV),), "growing changing_dtype", "grow float16",),
            "capacity-and-dtype-kept": (((CAP + ALLOC, ALLOC),), "failed", "",),
            "released-on-growth-only": (((FKV, "        if total_ctx > self._workspace_capacity:\n" + "".join("    " + line for line in FKV.splitlines(True)),),), "changing_dtype failed", "float16",),
            "released-before-the-reuse-check": (((FKV, ""), (ENSURE, ENSURE + FKV)), "growing fits", "grow float16",),
        },
    ),
    "0005": (
        "0005-dflash-draft-probs-release-first.patch",
        "sglang.srt.speculative.dflash_worker_v2",
        {
            "cpu": UNIT + "speculative/test_dflash_draft_probs_release_order.py",
            "cuda": KERNELS + "speculative/test_dflash_draft_probs_peak.py",
        },
        {
            "unmodified": ((), "growing gamma", "growing"),
            "old-buffer-kept-in-the-local": ((keeps(DFP, "local"),), "growing gamma", "growing"),
            "old-buffer-kept-in-the-attribute": ((keeps(DFP, "attribute"),), "growing gamma", "growing",),
            "released-before-the-reuse-check": (early(DFP, "        buffer = self._draft_probs_buf\n"), "growing fits", "growing",),
            "released-with-del": ((deleted(DFP),), "failed", ""),
        },
    ),
    "0007": (
        "0007-dsa-q8kv8-release-first.patch",
        "sglang.srt.layers.attention.dsa_backend",
        {
            "cpu": UNIT + "layers/attention/test_dsa_q8kv8_release_order.py",
            "cuda": KERNELS + "attention/test_dsa_q8kv8_scratch_peak.py",
        },
        {
            "unmodified": ((), "q_pad kv_buffer outputs", "1024 65536"),
            "q-pad-fixed-others-not": (((KV, ""), (OUT, "")), "kv_buffer outputs", "1024 65536"),
            "kv-rows-fixed-others-not": (((QPAD, ""), (OUT, "")), "q_pad outputs", "1024"),
            # the q pad's extra 36 MiB stays below the 100.5 MiB the outputs' growth reaches
            "outputs-fixed-others-not": (((QPAD, ""), (KV, "")), "q_pad kv_buffer", "65536"),
            "q-pad-local-kept": ((keeps(QPAD, "local"),), "q_pad", ""),
            "kv-rows-local-kept": ((keeps(KV, "local"),), "kv_buffer", "65536"),
            "outputs-local-kept": ((keeps(OUT, "local"),), "outputs", "1024"),
            "attributes-kept": (tuple(keeps(release, "attribute") for release in (QPAD, KV, OUT)), "q_pad kv_buffer outputs", "1024 65536",),
            "q-pad-released-before-the-reuse-check": (early(QPAD, "            buf = self._q8kv8_qpad_buf\n"), "fits", "",),
            # and the other torch.empty buffer's order test, which sees one more allocation
            "kv-rows-released-before-the-reuse-check": (early(KV, "        kv_buf = self._q8kv8_kv_buf\n"), "fits outputs", "",),
            "outputs-released-before-the-reuse-check": (early(OUT, "        out_bufs = self._q8kv8_out_bufs\n"), "fits kv_buffer", "",),
            "released-with-del": (tuple(deleted(r) for r in (QPAD, KV, OUT)), "failed", ""),
        },
    ),
    "0009": (
        "0009-dsv4-q8kv8-qpad-release-first.patch",
        "sglang.srt.layers.attention.deepseek_v4_backend",
        {
            "cpu": UNIT + "layers/attention/test_dsv4_q8kv8_qpad_release_order.py",
            "cuda": KERNELS + "attention/dsv4/test_dsv4_q8kv8_qpad_peak.py",
        },
        {
            "unmodified": ((), "more_tokens", "2048"),
            "local-kept": ((keeps(DSV4Q, "local"),), "more_tokens", "2048"),
            "attribute-kept": ((keeps(DSV4Q, "attribute"),), "more_tokens", "2048"),
            "released-before-the-reuse-check": (early(DSV4Q, '        qpad = getattr(self, "_q8kv8_qpad_buf", None)\n'), "fits", "",),
        },
    ),
    "0011": (
        "0011-dsa-q8kv8-born-q-release-first.patch",
        "sglang.srt.layers.attention.dsa_backend",
        {
            "cpu": UNIT + "layers/attention/test_dsa_q8kv8_born_q_release_order.py",
            "cuda": KERNELS + "attention/test_dsa_q8kv8_born_q_peak.py",
        },
        {
            "unmodified": ((), "release_the_old_born head_dim sentinel_before", "72_mib 32_mib"),
            "born-q-local-kept": ((keeps(BQ, "local"),), "release_the_old_born head_dim", "72_mib"),
            "born-q-attribute-kept": ((keeps(BQ, "attribute"),), "release_the_old_born head_dim", "72_mib",),
            "sentinel-local-kept": ((keeps(SENT, "local"),), "sentinel_before", "32_mib"),
            "sentinel-attribute-kept": ((keeps(SENT, "attribute"),), "sentinel_before", "32_mib"),
            "born-q-released-on-growth-only": ((on_growth_only(BQ, "buf is None or buf.shape[0] < num_tokens"),), "head_dim", "",),
            "born-q-released-before-the-reuse-check": (early(BQ, "        buf = self._q8kv8_born_q_buf\n"), "reuses_the_born_q", "",),
            "sentinel-released-before-the-reuse-check": (early(SENT, "        buf = self._q8kv8_born_q_sentinel\n"), "reuses_the_sentinel", "",),
            "released-with-del": ((deleted(BQ), deleted(SENT)), "failed", ""),
        },
    ),
}
# fmt: on


class Refused(Exception):
    """A table row or a base that does not fit: one line."""


def substitute(text: str, old: str, new: str, what: str) -> str:
    count = text.count(old)
    if count != 1:
        raise Refused(f"{what}: {old.splitlines()[0].strip()!r} matches {count} times, not once")
    return text.replace(old, new)


def pinned_sha256(module: str) -> str:
    upstream = "python/" + module.replace(".", "/") + ".py"
    for line in (REPO / "patches/BASE").read_text().splitlines():
        if line.startswith(f"file: {upstream} sha256="):
            return line.rsplit("=", 1)[1]
    raise Refused(f"patches/BASE pins no {upstream}")


def fixed_text(patch: str, module: str, base: str) -> str:
    """``base`` with ``patch`` applied by git, in a scratch tree."""
    upstream = "python/" + module.replace(".", "/") + ".py"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / upstream).parent.mkdir(parents=True)
        (Path(tmp) / upstream).write_text(base)
        subprocess.run(
            ["git", "apply", "--include", upstream, str(REPO / "patches" / patch)],
            cwd=tmp,
            check=True,
            capture_output=True,
        )
        return (Path(tmp) / upstream).read_text()


def load_variant(module_name: str, text: str, origin: str) -> None:
    module = types.ModuleType(module_name)
    module.__file__ = origin
    module.__spec__ = importlib.util.spec_from_file_location(module_name, origin)
    package, _, leaf = module_name.rpartition(".")
    module.__package__ = package
    # in sys.modules before it runs: a dataclass with string annotations looks it up
    sys.modules[module_name] = module
    exec(compile(text, origin, "exec"), module.__dict__)
    setattr(sys.modules[package], leaf, module)


def run_file(path: str) -> dict:
    """test method -> 'pass' or 'fail' (failed, errored or skipped) for the file at ``path``."""
    spec = importlib.util.spec_from_file_location("registered_" + Path(path).stem, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    names = [t._testMethodName for s in suite for t in s]
    result = unittest.TestResult()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        suite.run(result)
    failed = {t._testMethodName for t, _ in result.failures + result.errors + result.skipped}
    return {name: "fail" if name in failed else "pass" for name in names}


def run(backend: str) -> dict:
    """fix -> variant -> test method -> outcome, for every fix's ``backend`` file."""
    report = {}
    for number, (patch, module, files, rows) in FIXES.items():
        origin = importlib.util.find_spec(module).origin
        base = Path(origin).read_text()
        if hashlib.sha256(base.encode()).hexdigest() != pinned_sha256(module):
            raise Refused(f"{origin} is not the file patches/BASE pins")
        fixed = fixed_text(patch, module, base)
        report[number] = {}
        original = sys.modules.get(module)
        try:
            for variant, (edits, *_) in {"fix": ((),), **rows}.items():
                text = base if variant == "unmodified" else fixed
                for old, new in edits:
                    text = substitute(text, old, new, f"{number} {variant}")
                load_variant(module, text, origin)
                report[number][variant] = run_file(files[backend])
        finally:
            package, _, leaf = module.rpartition(".")
            if original is None:
                sys.modules.pop(module, None)
                vars(sys.modules[package]).pop(leaf, None)
            else:
                sys.modules[module] = original
                setattr(sys.modules[package], leaf, original)
    return report


def killers(words: str, tests, where: str) -> set:
    """The tests ``words`` name, each word naming exactly one of ``tests``."""
    named = set()
    for word in words.split():
        matches = [t for t in tests if word in t]
        if len(matches) != 1:
            raise Refused(f"{where}: {word!r} names {len(matches)} tests, not one")
        named |= set(matches)
    return named


def problems(backend: str, report: dict) -> list:
    """Where ``report`` differs from the table, one line each; empty when it agrees."""
    out = []
    column = {"cpu": 1, "cuda": 2}[backend]
    for number, outcomes in report.items():
        tests = list(outcomes["fix"])
        out += [f"{number}: the fix fails {t}" for t, r in outcomes["fix"].items() if r != "pass"]
        killed_somewhere = set()
        for variant, row in FIXES[number][3].items():
            expected = killers(row[column], tests, f"{number} {variant}")
            killed = {t for t, r in outcomes[variant].items() if r == "fail"}
            killed_somewhere |= killed
            if killed != expected:
                out.append(
                    f"{number} {variant}: killed by {sorted(killed)}, not {sorted(expected)}"
                )
        out += [f"{number}: {t} kills no variant" for t in tests if t not in killed_somewhere]
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(run(sys.argv[1])))
    except Refused as err:
        print(f"registered_mutants: {err}", file=sys.stderr)
        sys.exit(2)
