"""Patch 0009 (DSV4's q8kv8 q pad), the first patch made by the overlay's generic rewrite
(``sglang_overlay/rewrite.py``: the recognised method's own source with the attribute and the
local dropped before the allocation), keeps the overlay's guarantees, each in a fresh
interpreter of this venv with the overlay installed, against a stand-in
``sglang.srt.layers.attention.deepseek_v4_backend`` that carries the installed sglang's exact
``DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink`` text (real torch; the q cast's module stood
in by torch code): applied on first import with the old buffer dead at ``torch.empty`` and the
q exactly this call's, an unknown shape left untouched with its reason, the method as fix 0009
leaves it upstream-fixed, ``SGLANG_OVERLAY_DISABLE=0009`` alone, threads racing the import,
``-W error``, ``importlib.reload`` and a spawned child; and the rewrite refuses a method it
cannot compile outside its class."""

import ast
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

PATCH = "0009-dsv4-q8kv8-qpad-release-first"
MODULE = "sglang.srt.layers.attention.deepseek_v4_backend"
CLASS = "DeepseekV4AttnBackend"
METHOD = "_prepare_q8kv8_q_and_sink"
UNKNOWN_EDIT = ("qpad = qpad[:num_tokens]\n", "qpad = qpad[:num_tokens]  # edited\n")
# What patch 0009 does to the method: both references dropped before torch.empty.
FIXED_EDIT = (
    "            qpad = torch.empty(\n",
    "            self._q8kv8_qpad_buf = qpad = None\n            qpad = torch.empty(\n",
)
TIMEOUT_S = 300

# Grows the stand-in's q pad once and prints what the overlay and the method did, as JSON.
PROBE = textwrap.dedent("""\
    import json, weakref, torch, sglang_overlay
    from sglang.srt.layers.attention import deepseek_v4_backend as m
    def call(n):
        return (torch.randn((n, 16, 512)).to(torch.bfloat16), torch.randn(16))
    b = m.DeepseekV4AttnBackend.__new__(m.DeepseekV4AttnBackend)
    b._prepare_q8kv8_q_and_sink(*call(8))
    b._q8kv8_qpad_buf.fill_(1.0)
    old, seen, real = weakref.ref(b._q8kv8_qpad_buf), [], torch.empty
    def empty(*a, **k):
        seen.append(old() is not None)
        return real(*a, **k)
    q, sink = call(12)
    torch.empty = empty
    try:
        q_fp8 = b._prepare_q8kv8_q_and_sink(q, sink)[0]
    finally:
        torch.empty = real
    want = torch.zeros((12, 64, 512), dtype=torch.float8_e4m3fn)
    want[:, :16].copy_(q)
    rows = {r["patch"]: r for r in sglang_overlay.status()}
    from sglang_overlay import release_first
    print(json.dumps({"state": rows[%r]["state"], "reason": rows[%r]["reason"],
                      "others": [r["state"] for p, r in rows.items() if p != %r],
                      "old_alive_at_empty": seen, "rows": b._q8kv8_qpad_buf.shape[0],
                      "exact": bool(torch.equal(q_fp8.float(), want.float())),
                      "high_water": release_first.high_water_bytes(%r),
                      "patched": getattr(vars(m.DeepseekV4AttnBackend)[%r], "__sglang_overlay_patch__", None)}))
""") % (PATCH, PATCH, PATCH, PATCH, METHOD)

KERNEL = """\"\"\"Stand-in for the SM90 q8kv8 kernel module: its q cast's contract in torch.\"\"\"
import torch


def q8kv8_padded_num_heads(num_heads):
    return 64 if num_heads <= 64 else 128


def cast_q_fp8_for_q8kv8_prefill(q, padded_num_heads=None, out=None):
    out[:, q.shape[1]:].zero_()
    out[:, : q.shape[1]].copy_(q)
    return out, torch.ones(())
"""


def installed_method_lines() -> "list[str]":
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the installed sglang to copy the method text")
    path = Path(spec.submodule_search_locations[0], *MODULE.split(".")[1:]).with_suffix(".py")
    source = path.read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == CLASS:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                    return source.splitlines(keepends=True)[item.lineno - 1 : item.end_lineno]
    pytest.skip(f"the installed sglang has no {CLASS}.{METHOD}")


def write_standin(root: Path, edit=None) -> Path:
    method = "".join(installed_method_lines())
    if edit is not None:
        assert method.count(edit[0]) == 1
        method = method.replace(*edit)
    package = root / "sglang"
    for sub in ("", "srt", "srt/layers", "srt/layers/attention", "kernels", "kernels/ops",
                "kernels/ops/attention"):  # fmt: skip
        (package / sub).mkdir(parents=True, exist_ok=True)
        (package / sub / "__init__.py").write_text("")
    (package / "version.py").write_text('__version__ = "0.5.23"\n')
    (package / "__init__.py").write_text("from sglang.version import __version__\n")
    (package / "kernels/ops/attention/sparse_mla_q8kv8_prefill_sm90.py").write_text(KERNEL)
    (package / "srt/layers/attention/deepseek_v4_backend.py").write_text(
        '"""Stand-in for sglang\'s DSV4 attention backend (test fixture)."""\n'
        "import torch\n\nfp8_dtype = torch.float8_e4m3fn\n\n\n"
        f"class {CLASS}:\n" + method
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


def test_first_import_applies_0009_and_the_old_buffer_is_dead_at_torch_empty(standin):
    out = run(standin, PROBE)
    assert (out["state"], out["patched"]) == ("applied", PATCH)
    assert "891f31d3a954" in out["reason"] or "99b96398f867" in out["reason"]
    assert out["old_alive_at_empty"] == [False]
    assert (out["rows"], out["exact"]) == (12, True)
    assert out["high_water"] == 12 * 64 * 512  # the replacement reached the overlay's log


def test_an_unknown_shape_is_left_untouched_with_its_reason(tmp_path):
    root = write_standin(tmp_path, edit=UNKNOWN_EDIT)
    out = run(root, PROBE)
    assert (out["state"], out["patched"]) == ("unsupported", None)
    assert f"unknown source of {CLASS}.{METHOD}" in out["reason"]
    assert out["old_alive_at_empty"] == [True] and out["exact"]  # sglang's own method


def test_the_method_as_fix_0009_leaves_it_is_upstream_fixed_and_untouched(tmp_path):
    out = run(write_standin(tmp_path, edit=FIXED_EDIT), PROBE)
    assert (out["state"], out["patched"], out["old_alive_at_empty"]) == (
        "upstream-fixed",
        None,
        [False],
    )
    assert "already drops the old _q8kv8_qpad_buf before allocating" in out["reason"]


def test_disable_0009_turns_off_only_this_patch(standin):
    out = run(standin, PROBE, SGLANG_OVERLAY_DISABLE="0009")
    assert (out["state"], out["patched"], out["old_alive_at_empty"]) == ("disabled", None, [True])
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
                          getattr(vars(m.DeepseekV4AttnBackend)[{METHOD!r}], "__sglang_overlay_patch__", None)]))
    """)
    assert run(standin, code) == [1, PATCH]


def test_w_error_imports_and_applies_with_no_warning(standin):
    out = run(standin, PROBE, "-W", "error")
    assert (out["state"], out["old_alive_at_empty"]) == ("applied", [False])


def test_reload_of_the_module_is_patched_again(standin):
    code = textwrap.dedent(f"""\
        import importlib, json, sglang_overlay
        m = importlib.import_module({MODULE!r})
        first = m.DeepseekV4AttnBackend
        importlib.reload(m)
        state = [r["state"] for r in sglang_overlay.status() if r["patch"] == {PATCH!r}][0]
        print(json.dumps([m.DeepseekV4AttnBackend is first, state,
                          getattr(vars(m.DeepseekV4AttnBackend)[{METHOD!r}], "__sglang_overlay_patch__", None)]))
    """)
    assert run(standin, code) == [False, "applied", PATCH]


def test_a_spawned_child_applies_it_on_its_own_import(standin):
    code = textwrap.dedent(f"""\
        import json, multiprocessing as mp
        def child(q):
            import importlib
            m = importlib.import_module({MODULE!r})
            q.put(getattr(vars(m.DeepseekV4AttnBackend)[{METHOD!r}], "__sglang_overlay_patch__", None))
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


def test_the_rewrite_refuses_a_method_it_cannot_compile_outside_its_class(tmp_path):
    from sglang_overlay import rewrite

    path = tmp_path / "standin_super.py"
    path.write_text(
        "import torch\n\n\nclass A:\n"
        "    def grow(self, n):\n"
        "        buf = self._buf\n"
        "        if buf is None or buf.shape[0] < n:\n"
        "            buf = torch.zeros(n)\n"
        "            self._buf = buf\n"
        "        return super().grow(n)\n"
    )
    module = types.ModuleType("standin_super")
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), vars(module))
    sys.modules["standin_super"] = module
    try:
        with pytest.raises(rewrite.RewriteError, match="super"):
            rewrite.released_method(module, "A", "grow", ("_buf",))
        path.write_text(path.read_text().replace("super().grow(n)", "buf[:n]"))
        fixed = rewrite.released_method(module, "A", "grow", ("_buf",))
        with pytest.raises(rewrite.RewriteError, match="no allocation of _other"):
            rewrite.released_method(module, "A", "grow", ("_other",))
    finally:
        del sys.modules["standin_super"]
    assert fixed.__code__.co_filename == str(path)
