"""The generic rewrite's patches (0005, 0007, 0009, 0011) keep the overlay's guarantees."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("overlay_patch_probe.py")
TIMEOUT_S = 300

DFLASH = "sglang.srt.speculative.dflash_worker_v2"
DSA = "sglang.srt.layers.attention.dsa_backend"
DSV4 = "sglang.srt.layers.attention.deepseek_v4_backend"
# class -> the installed methods its stand-in copies (a helper the fix does not touch too)
COPIED = {
    (DFLASH, "DFlashWorkerV2"): ("_selector_sampling_accept",),
    (DSA, "DeepseekSparseAttnBackend"): (
        "q8kv8_acquire_born_q_buffer",
        "q8kv8_born_q_sentinel",
        "_pad_topk_width_buffered",
        "_forward_flashmla_sparse_q8kv8",
    ),
    (DSV4, "DeepseekV4AttnBackend"): ("_prepare_q8kv8_q_and_sink",),
}
CLASS_OF = {method: cls for (_, cls), methods in COPIED.items() for method in methods}


def release(method, attr, local, allocation, indent=12):
    """``self.<attr> = <local> = None`` before ``allocation`` in ``method``."""
    line = f"{' ' * indent}{allocation}\n"
    return (method, line, f"{' ' * indent}self.{attr} = {local} = None\n{line}")


def unknown(method, line):
    """An edit of one line of ``method`` that no fix or release has: an unknown shape."""
    return (method, f"{line}\n", f"{line}  # x\n")


# patch -> methods, shas, allocations, rows, high water, unknown edit, fix edits, fixed reason
SELECT, DSA_Q8, DSV4_Q8 = (
    "_selector_sampling_accept",
    "_forward_flashmla_sparse_q8kv8",
    "_prepare_q8kv8_q_and_sink",
)
BORN_Q, SENTINEL = "q8kv8_acquire_born_q_buffer", "q8kv8_born_q_sentinel"
PATCHES = {
    "0005-dflash-draft-probs-release-first": dict(
        methods=(SELECT,), sha256=(("a30377ccfd23", "811c71964eb7"),), allocations=1, rows=4,
        high_water=4 * 3 * 32 * 4,  # (cap 4, gamma 3, vocab 32) float32
        unknown=unknown(SELECT, "gamma = block - 1"),
        fixed=(release(SELECT, "_draft_probs_buf", "buffer", "buffer = torch.zeros("),),
        upstream=("_draft_probs_buf",),
    ),
    "0007-dsa-q8kv8-release-first": dict(
        methods=(DSA_Q8,), sha256=(("eb7abba41a0a", "f0c6ed52b57c", "13f42ab64c02", "169a7df46251"),),
        allocations=4, rows=12,  # the q pad (zeros), then the three outputs (empty)
        # q pad 12 x 64 x 24 fp8, KV rows 160 x 24 fp8, outputs 12 x 64 x 16 bf16 + 2 x 12 x 64 fp32
        high_water=12 * 64 * 24 + 160 * 24 + 12 * 64 * 16 * 2 + 2 * 12 * 64 * 4,
        unknown=unknown(DSA_Q8, "dev = q_nope.device"),
        fixed=(release(DSA_Q8, "_q8kv8_qpad_buf", "buf", "buf = torch.zeros(", 16),
               release(DSA_Q8, "_q8kv8_kv_buf", "kv_buf", "kv_buf = torch.empty("),
               release(DSA_Q8, "_q8kv8_out_bufs", "out_bufs", "out_bufs = (")),
        upstream=("_q8kv8_qpad_buf, _q8kv8_kv_buf, _q8kv8_out_bufs",),
    ),
    "0009-dsv4-q8kv8-qpad-release-first": dict(
        methods=(DSV4_Q8,), sha256=(("891f31d3a954", "99b96398f867"),), allocations=1, rows=12,
        high_water=12 * 64 * 512,  # the q pad, fp8
        unknown=unknown(DSV4_Q8, "qpad = qpad[:num_tokens]"),
        fixed=(release(DSV4_Q8, "_q8kv8_qpad_buf", "qpad", "qpad = torch.empty("),),
        upstream=("_q8kv8_qpad_buf",),
    ),
    "0011-dsa-q8kv8-born-q-release-first": dict(
        methods=(BORN_Q, SENTINEL), sha256=(("c9be682c090c",), ("61428e17cdd3",)),
        allocations=2, rows=12,  # the born-q buffer (zeros), then the sentinel (full)
        high_water=12 * 64 * 24,  # the larger of the two: the born-q buffer, fp8
        # only the sentinel's text changes: the buffer's method, recognised, stays sglang's too
        unknown=unknown(SENTINEL, "numel = num_tokens * num_heads * v_head_dim"),
        fixed=(release(BORN_Q, "_q8kv8_born_q_buf", "buf", "buf = torch.zeros("),
               release(SENTINEL, "_q8kv8_born_q_sentinel", "buf", "buf = torch.full(")),
        upstream=("_q8kv8_born_q_buf", "_q8kv8_born_q_sentinel"),
    ),
}  # fmt: skip
IDS = [p[:4] for p in PATCHES]

KERNEL = '''"""Stand-in for the SM90 q8kv8 kernel module: its contracts in torch."""
import torch

LAST_Q = []


def q8kv8_padded_num_heads(num_heads):
    return 64 if num_heads <= 64 else 128


def cast_q_fp8_for_q8kv8_prefill(q, padded_num_heads=None, out=None):
    out[:, q.shape[1]:].zero_()
    out[:, : q.shape[1]].copy_(q)
    return out, torch.ones(())


def sparse_mla_q8kv8_prefill_fwd(*, q, out, max_logits, lse, **kwargs):
    LAST_Q[:] = [q.clone()]
    return out, max_logits, lse
'''
HEADERS = {
    DFLASH: "from typing import Tuple\n\nimport torch\n\n\n"
    "def accept_sampling(*, draft_probs, **kwargs):\n"
    "    zeros = draft_probs.new_zeros(draft_probs.shape[0])\n"
    "    return zeros, zeros, None\n",
    DSA: "from typing import Optional, Tuple\n\nimport torch\n\n\n"
    "def concat_and_cast_q_fp8_pad(q_fp8, q_nope, q_rope, num_heads):\n"
    "    q_fp8[:, :num_heads, : q_nope.shape[-1]].copy_(q_nope)\n"
    "    q_fp8[:, :num_heads, q_nope.shape[-1] :].copy_(q_rope)\n",
    DSV4: "import torch\n\nfp8_dtype = torch.float8_e4m3fn\n",
}


def installed_methods(module: str, cls: str, methods) -> dict:
    """Each method's exact lines in the installed sglang's ``module``."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the installed sglang to copy the methods' text")
    path = Path(spec.submodule_search_locations[0], *module.split(".")[1:]).with_suffix(".py")
    source = path.read_text()
    lines = source.splitlines(keepends=True)
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in methods:
                    found[item.name] = "".join(lines[item.lineno - 1 : item.end_lineno])
    missing = set(methods) - set(found)
    if missing:
        pytest.skip(f"the installed sglang has no {cls}.{', '.join(sorted(missing))}")
    return found


def write_standin(root: Path, edits=()) -> Path:
    """The stand-in sglang under ``root``; ``edits`` are (method, old, new)."""
    package = root / "sglang"
    for sub in ("", "srt", "srt/speculative", "srt/layers", "srt/layers/attention", "kernels",
                "kernels/ops", "kernels/ops/attention"):  # fmt: skip
        (package / sub).mkdir(parents=True, exist_ok=True)
        (package / sub / "__init__.py").write_text("")
    (package / "version.py").write_text('__version__ = "0.5.23"\n')
    (package / "__init__.py").write_text("from sglang.version import __version__\n")
    (package / "kernels/ops/attention/sparse_mla_q8kv8_prefill_sm90.py").write_text(KERNEL)
    for (module, cls), methods in COPIED.items():
        texts = installed_methods(module, cls, methods)
        for method, old, new in edits:
            if method in texts:
                assert texts[method].count(old) == 1, (method, old)
                texts[method] = texts[method].replace(old, new)
        path = package.joinpath(*module.split(".")[1:]).with_suffix(".py")
        path.write_text(
            f'"""Stand-in for {module} (test fixture)."""\n{HEADERS[module]}\n\n'
            f"class {cls}:\n" + "\n".join(texts[m] for m in methods)
        )
    return root


def observe(root: Path, what: str, *flags, **env) -> dict:
    """``overlay_patch_probe.py what`` in a fresh interpreter; its JSON."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    environ.update(PYTHONPATH=str(root), **env)
    proc = subprocess.run(
        [sys.executable, *flags, str(PROBE), what],
        capture_output=True,
        text=True,
        env=environ,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    return write_standin(tmp_path_factory.mktemp("standin"))


VARIANTS = {
    "known": lambda p: (),
    "unknown": lambda p: [p["unknown"]],
    "fixed": lambda p: p["fixed"],
}


@pytest.fixture(scope="module")
def grown(tmp_path_factory, standin):
    """``grow`` of each variant of the stand-in (``-W error`` for the known one), once."""
    runs = {}

    def get(variant):
        if variant not in runs:
            edits = [e for p in PATCHES.values() for e in VARIANTS[variant](p)]
            root = write_standin(tmp_path_factory.mktemp(variant), edits) if edits else standin
            runs[variant] = observe(root, "grow", *(() if edits else ("-W", "error")))
        return runs[variant]

    return get


@pytest.fixture(scope="module")
def lived(standin):
    return observe(standin, "lifecycle")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("patch", PATCHES, ids=IDS)
def test_applied_on_first_import_unknown_shapes_untouched_the_fix_upstream_fixed(
    grown, variant, patch
):
    out, expect = grown(variant)[patch], PATCHES[patch]
    state, mark, alive = {"known": ("applied", patch, False), "unknown": ("unsupported", None, True),
                          "fixed": ("upstream-fixed", None, False)}[variant]  # fmt: skip
    assert (out["state"], out["marks"]) == (state, [mark] * len(expect["methods"]))
    assert (out["old_alive"], out["exact"]) == ([alive] * expect["allocations"], True)
    if variant == "known":  # each method recognised by its own text; the replacement logged
        assert all(any(sha in out["reason"] for sha in alt) for alt in expect["sha256"])
        assert (out["rows"], out["high_water"]) == (expect["rows"], expect["high_water"])
    elif variant == "unknown":
        method = expect["unknown"][0]
        assert f"unknown source of {CLASS_OF[method]}.{method}" in out["reason"]
        all_or_none = "the patch replaces all of its methods or none" in out["reason"]
        assert (all_or_none or len(expect["methods"]) == 1, out["high_water"]) == (True, 0)
    else:
        for released in expect["upstream"]:
            assert f"already drops the old {released} before allocating" in out["reason"]


def test_disabling_patches_by_number_turns_off_those_and_no_other(standin):
    # 0007 and 0011 patch one class: turning one off leaves the other applied
    off = ("0005", "0007")
    out = observe(standin, "grow", SGLANG_OVERLAY_DISABLE=",".join(off))
    for patch, expect in PATCHES.items():
        disabled = patch[:4] in off
        assert (out[patch]["state"], out[patch]["marks"], out[patch]["old_alive"]) == (
            "disabled" if disabled else "applied",
            [None if disabled else patch] * len(expect["methods"]),
            [disabled] * expect["allocations"],
        )


@pytest.mark.parametrize("patch", PATCHES, ids=IDS)
def test_threads_reload_a_spawned_child_and_another_hook(lived, patch):
    marked = [patch] * len(PATCHES[patch]["methods"])
    out = lived[patch]
    assert out["threads"] == [1, marked]  # threads racing the first import apply it once
    assert out["reload"] == [False, "applied", marked]  # the reloaded module patched again
    assert out["spawn"] == [marked, 0]  # a spawned child applies it on its own import
    states, marks = out["hooks"]  # another hook over one method of 0011, then remove()
    if patch.startswith("0011"):
        # an AROUND calls ours, a REPLACE does not; remove() says so and restores the other method
        assert (states, marks) == (["wrapped", "replaced", "replaced"], [None] * len(marked))
    else:  # the other patches (0007: the same class) stay applied until remove()
        assert (states, marks) == (["applied", "applied", "pending"], [None] * len(marked))
