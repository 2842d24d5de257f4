"""Patch 0005 (DFlash's dense draft-probability buffer) keeps the overlay's guarantees, each in
a fresh interpreter of this venv with the overlay installed, against a stand-in
``sglang.srt.speculative.dflash_worker_v2`` that carries the installed sglang's exact
``DFlashWorkerV2._selector_sampling_accept`` text (real torch; DSpark's kernel stood in):
applied on first import with the old buffer dead at ``torch.zeros``, an unknown shape left
untouched with its reason, ``SGLANG_OVERLAY_DISABLE=0005`` alone, threads racing the import,
``-W error``, ``importlib.reload`` and a spawned child."""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PATCH = "0005-dflash-draft-probs-release-first"
MODULE = "sglang.srt.speculative.dflash_worker_v2"
METHOD = "_selector_sampling_accept"
UNKNOWN_EDIT = ("gamma = block - 1\n", "gamma = block - 1  # edited\n")
# What patch 0005 does to the method: both references dropped before torch.zeros.
FIXED_EDIT = (
    "            buffer = torch.zeros(\n",
    "            self._draft_probs_buf = buffer = None\n            buffer = torch.zeros(\n",
)
TIMEOUT_S = 300

# Grows the stand-in's buffer once and prints what the overlay and the method did, as JSON.
PROBE = textwrap.dedent("""\
    import json, weakref, torch, sglang_overlay
    from sglang.srt.speculative import dflash_worker_v2 as m
    def step(bs):
        return dict(candidates=torch.zeros((bs, 4), dtype=torch.int64),
                    next_token_logits=torch.zeros((1, 32)),
                    candidate_ids=torch.arange(bs * 3 * 2).view(bs, 3, 2).remainder(32),
                    q_rows=torch.full((bs, 3, 2), 0.5), sampling_info=None, draft_input=None)
    w = m.DFlashWorkerV2.__new__(m.DFlashWorkerV2)
    w._draft_probs_buf, w._block_verification = None, False
    w._selector_sampling_accept(**step(2))
    old, seen, real = weakref.ref(w._draft_probs_buf), [], torch.zeros
    def zeros(*a, **k):
        seen.append(old() is not None)
        return real(*a, **k)
    larger = step(3)
    torch.zeros = zeros
    try:
        w._selector_sampling_accept(**larger)
    finally:
        torch.zeros = real
    rows = {r["patch"]: r for r in sglang_overlay.status()}
    print(json.dumps({"state": rows[%r]["state"], "reason": rows[%r]["reason"],
                      "others": [r["state"] for p, r in rows.items() if p != %r],
                      "old_alive_at_zeros": seen, "rows": w._draft_probs_buf.shape[0],
                      "zero_after": int(torch.count_nonzero(w._draft_probs_buf)) == 0,
                      "patched": getattr(vars(m.DFlashWorkerV2)[%r], "__sglang_overlay_patch__", None)}))
""") % (PATCH, PATCH, PATCH, METHOD)


def installed_method_lines() -> "list[str]":
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the installed sglang to copy DFlashWorkerV2's method text")
    path = Path(spec.submodule_search_locations[0], *MODULE.split(".")[1:]).with_suffix(".py")
    source = path.read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == "DFlashWorkerV2":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                    return source.splitlines(keepends=True)[item.lineno - 1 : item.end_lineno]
    pytest.skip(f"the installed sglang has no DFlashWorkerV2.{METHOD}")


def write_standin(root: Path, edit=None) -> Path:
    method = "".join(installed_method_lines())
    if edit is not None:
        assert method.count(edit[0]) == 1
        method = method.replace(*edit)
    package = root / "sglang"
    for sub in ("", "srt", "srt/speculative"):
        (package / sub).mkdir(parents=True, exist_ok=True)
        (package / sub / "__init__.py").write_text("")
    (package / "version.py").write_text('__version__ = "0.5.23"\n')
    (package / "__init__.py").write_text("from sglang.version import __version__\n")
    (package / "srt/speculative/dflash_worker_v2.py").write_text(
        '"""Stand-in for sglang\'s DFlash worker (test fixture)."""\n'
        "from typing import Tuple\n\nimport torch\n\n\n"
        "def accept_sampling(*, draft_probs, **kwargs):\n"
        "    zeros = draft_probs.new_zeros(draft_probs.shape[0])\n"
        "    return zeros, zeros, None\n\n\n"
        "class DFlashWorkerV2:\n" + method
    )
    return root


def run(root: Path, code: str, *flags, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    environ.update(PYTHONPATH=str(root), **env)
    proc = subprocess.run(
        [sys.executable, *flags, "-c", code],
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


def test_first_import_applies_0005_and_the_old_buffer_is_dead_at_torch_zeros(standin):
    out = run(standin, PROBE)
    assert (out["state"], out["patched"]) == ("applied", PATCH)
    assert "a30377ccfd23" in out["reason"] or "811c71964eb7" in out["reason"]
    assert out["old_alive_at_zeros"] == [False]
    assert (out["rows"], out["zero_after"]) == (4, True)


def test_an_unknown_shape_is_left_untouched_with_its_reason(tmp_path):
    root = write_standin(tmp_path, edit=UNKNOWN_EDIT)
    out = run(root, PROBE)
    assert (out["state"], out["patched"]) == ("unsupported", None)
    assert "unknown source of DFlashWorkerV2._selector_sampling_accept" in out["reason"]
    assert out["old_alive_at_zeros"] == [True]  # sglang's own method, unchanged


def test_the_method_as_fix_0005_leaves_it_is_upstream_fixed_and_untouched(tmp_path):
    out = run(write_standin(tmp_path, edit=FIXED_EDIT), PROBE)
    assert (out["state"], out["patched"], out["old_alive_at_zeros"]) == (
        "upstream-fixed",
        None,
        [False],
    )
    assert "already drops the old _draft_probs_buf before allocating" in out["reason"]


def test_disable_0005_turns_off_only_this_patch(standin):
    out = run(standin, PROBE, SGLANG_OVERLAY_DISABLE="0005")
    assert (out["state"], out["patched"], out["old_alive_at_zeros"]) == ("disabled", None, [True])
    assert "disabled" not in out["others"]


def test_threads_racing_the_first_import_apply_it_once(standin):
    code = textwrap.dedent(f"""\
        import importlib, json, threading, sglang_overlay
        barrier = threading.Barrier(8)
        def go():
            barrier.wait(); importlib.import_module({MODULE!r})
        threads = [threading.Thread(target=go) for _ in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        from sglang_overlay import overlay
        import sys
        m = sys.modules[{MODULE!r}]
        print(json.dumps([sum(a.patch_id == {PATCH!r} for a in overlay._applied),
                          getattr(vars(m.DFlashWorkerV2)[{METHOD!r}], "__sglang_overlay_patch__", None)]))
    """)
    assert run(standin, code) == [1, PATCH]


def test_w_error_imports_and_applies_with_no_warning(standin):
    out = run(standin, PROBE, "-W", "error")
    assert (out["state"], out["old_alive_at_zeros"]) == ("applied", [False])


def test_reload_of_the_module_is_patched_again(standin):
    code = textwrap.dedent(f"""\
        import importlib, json, sglang_overlay
        m = importlib.import_module({MODULE!r})
        first = m.DFlashWorkerV2
        importlib.reload(m)
        state = [r["state"] for r in sglang_overlay.status() if r["patch"] == {PATCH!r}][0]
        print(json.dumps([m.DFlashWorkerV2 is first, state,
                          getattr(vars(m.DFlashWorkerV2)[{METHOD!r}], "__sglang_overlay_patch__", None)]))
    """)
    assert run(standin, code) == [False, "applied", PATCH]


def test_a_spawned_child_applies_it_on_its_own_import(standin):
    code = textwrap.dedent(f"""\
        import json, multiprocessing as mp
        def child(q):
            import importlib
            m = importlib.import_module({MODULE!r})
            q.put(getattr(vars(m.DFlashWorkerV2)[{METHOD!r}], "__sglang_overlay_patch__", None))
        if __name__ == "__main__":
            ctx = mp.get_context("spawn"); q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,)); p.start()
            got = q.get(timeout=120); p.join(120)
            print(json.dumps([got, p.exitcode]))
    """)
    script = standin / "spawn_probe.py"
    script.write_text(code)
    assert run(standin, f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')") == [
        PATCH,
        0,
    ]
