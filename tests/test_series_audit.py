"""``python -m tools.series audit``: each verdict and each target form on small source trees this file
writes, the refusal of a folder that is no sglang tree, and the facts of the real sglang 0.5.23
package (read as files, never imported): the two known grow-while-held sites, the MLA decode
workspace that keeps its old buffers on purpose, and each fix of the series (0001, 0003) turning
its site into release-first, alone and together.
"""

import importlib.util
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tools.series import audit, audit_marks
from tools.series.__main__ import main
from tools.series.seriesdir import PATCHES_DIR

# patched_tree: the series applied by git am to sglang 0.5.23 (a session fixture).
pytest_plugins = ["series_fixtures"]

DSV4 = "srt/layers/attention/dsv4/sparse_prefill_utils.py"
FUSED_KV = "kernels/ops/speculative/fused_kv_materialize.py"
MLA_DECODE = "kernels/ops/attention/dsv4/flydsl_v4nm/mla_v4_decode.py"


def _sites(body: str) -> "dict[str, audit.Site]":
    """The sites of one class ``W`` whose methods are ``body``, by target."""
    source = "import torch\n\n\nclass W:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return {s.target: s for s in audit.audit_source(source, "sglang/srt/w.py")}


def _verdict(body: str, target: str = "self.buf") -> str:
    return _sites(body)[target].verdict


def test_attribute_replaced_by_a_fresh_allocation_grows_while_held():
    site = _sites(
        """
        def get(self, num_tokens):
            if self.buf is None or self.buf.shape[0] < num_tokens:
                self.buf = torch.empty(num_tokens, 512)
            return self.buf[:num_tokens]
        """
    )["self.buf"]
    assert (site.verdict, site.qualname, site.line, site.allocator) == (
        "grows-while-held",
        "W.get",
        8,
        "torch.empty",
    )
    assert site.grows_with == ("tokens",)


@pytest.mark.parametrize(
    "statement, target",
    [
        ("self.bufs[ratio] = torch.zeros(n)", "self.bufs[ratio]"),
        ("self.state.cache[layer] = x.new_empty(n)", "self.state.cache[layer]"),
        ("bufs = self.bufs\n    bufs[ratio] = torch.full((n,), -1)", "self.bufs[ratio]"),
        ("buf = torch.ones(n)\n    self.buf = buf", "self.buf"),
        ("self.buf = torch.empty(n).to(device)", "self.buf"),
        ("self.a, self.buf = None, torch.empty_like(x)", "self.buf"),
        ("self.buf: torch.Tensor = torch.zeros_like(x)", "self.buf"),
    ],
)
def test_each_target_form_is_a_replacement_site(statement, target):
    body = f"def grow(self, x, n, ratio, layer, device):\n    {statement}\n"
    assert _verdict(body, target) == "grows-while-held"


@pytest.mark.parametrize(
    "statement",
    [
        "self.buf = self.buf.to(device)",  # a copy of the old value needs the old value
        "self.buf = torch.cat([self.buf, x])",
        "self.buf[:n] = torch.arange(n)",  # written into the existing tensor
        "self.buf = torch.tensor(x)",
        "local = torch.empty(n)",
    ],
)
def test_copies_and_writes_into_an_existing_tensor_are_no_sites(statement):
    assert _sites(f"def grow(self, x, n, device):\n    {statement}\n") == {}


def test_setting_the_target_to_none_first_releases_first():
    assert (
        _verdict(
            """
            def get(self, n):
                if self.buf.shape[0] < n:
                    self.buf = None
                    self.buf = torch.empty(n)
                return self.buf
            """
        )
        == "releases-first"
    )


@pytest.mark.parametrize(
    "release", ["del self.buf", "self.bufs.clear()", "self.release()", "self.bufs = {}"]
)
def test_del_clear_and_a_releasing_helper_release_first(release):
    body = f"""
    def release(self):
        self.buf = None

    def get(self, n):
        {release}
        self.buf = torch.empty(n)
        self.bufs[n] = torch.empty(n)
    """
    sites = _sites(body)
    target = "self.bufs[n]" if "bufs" in release else "self.buf"
    assert sites[target].verdict == "releases-first"


def test_a_release_on_another_branch_does_not_count():
    assert (
        _verdict(
            """
            def get(self, n, drop):
                if drop:
                    self.buf = None
                self.buf = torch.empty(n)
            """
        )
        == "grows-while-held"
    )


def test_an_old_buffer_appended_elsewhere_first_is_kept_on_purpose():
    # the shape of the MLA decode workspace: a captured graph may still use the old one
    site = _sites(
        """
        def ensure(self, n):
            if self.buf is None or self.buf.numel() < n:
                if self.buf is not None:
                    self._keep.append(self.buf)
                self.buf = torch.empty(n)
        """
    )["self.buf"]
    assert (site.verdict, site.reason) == ("keeps-old-on-purpose", "kept in self._keep")


def test_an_old_value_copied_into_the_new_one_is_kept_on_purpose():
    assert (
        _verdict(
            """
            def grow(self, n):
                old = self.buf
                self.buf = torch.empty(n)
                self.buf[: old.shape[0]].copy_(old)
            """
        )
        == "keeps-old-on-purpose"
    )


def test_a_local_alias_of_the_old_value_does_not_keep_it_on_purpose():
    assert (
        _verdict(
            """
            def get(self, n):
                buf = self.buf
                if buf is None or buf.numel() < n:
                    buf = torch.empty(n)
                    self.buf = buf
                return buf[:n]
            """
        )
        == "grows-while-held"
    )


def test_the_inline_marker_with_a_reason_keeps_old_on_purpose():
    sites = _sites(
        """
        def a(self, n):
            # grows-while-held: keeps-old-on-purpose a captured graph reads the old one
            self.buf = torch.empty(n)

        def b(self, n):
            self.other = torch.empty(n)  # grows-while-held: keeps-old-on-purpose
        """
    )
    assert sites["self.buf"].verdict == "keeps-old-on-purpose"
    assert sites["self.buf"].reason == "marked: a captured graph reads the old one"
    assert sites["self.other"].verdict == "grows-while-held"  # a marker must say why
    assert audit_marks.marker_without_reason("x = 1  # grows-while-held: keeps-old-on-purpose")


def test_a_view_kept_by_another_method_escapes():
    site = _sites(
        """
        def grow(self, n):
            self.buf = torch.zeros(n)

        def plan(self, bs):
            self.metadata = Metadata(indices=self.buf[:bs])
        """
    )["self.buf"]
    assert (site.verdict, site.reason) == ("views-escape", "W.plan keeps a view of it")


@pytest.mark.parametrize(
    "body",
    [
        "def __init__(self, n):\n    self.buf = torch.empty(n)\n",
        "def __init__(self, n):\n    self._build(n)\n\ndef _build(self, n):\n"
        "    self.buf = torch.empty(n)\n",
        "def get(self, n):\n    if self.buf is None:\n        self.buf = torch.empty(n)\n",
        "def get(self, n):\n    if self.buf is not None:\n        return self.buf\n"
        "    self.buf = torch.empty(n)\n",
        "def get(self, k, n):\n    if k not in self.bufs:\n        self.bufs[k] = torch.empty(n)\n",
    ],
)
def test_construction_and_build_once_are_init_only(body):
    (site,) = _sites(body).values()
    assert site.verdict == "init-only"


def test_a_private_helper_called_after_construction_too_is_not_init_only():
    body = """
    def __init__(self, n):
        self._build(n)

    def resize(self, n):
        self._build(n)

    def _build(self, n):
        self.buf = torch.empty(n)
    """
    assert _verdict(body) == "grows-while-held"


@pytest.mark.parametrize(
    "size, grows_with",
    [
        ("(max_bs, 512)", ("batch",)),
        ("(seq_len,)", ("context",)),
        ("new_capacity", ("tokens", "capacity")),  # followed through the local
        ("(4096, 64)", ()),
    ],
)
def test_grows_with_comes_from_the_size_expressions_names(size, grows_with):
    body = f"""
    def grow(self, num_tokens, max_bs, seq_len):
        new_capacity = max(num_tokens, self.capacity * 2)
        self.buf = torch.empty({size})
    """
    assert _sites(body)["self.buf"].grows_with == grows_with


def _tree(tmp_path: Path, layout: str, files: "dict[str, str]") -> Path:
    root = tmp_path / ("python/sglang" if layout == "checkout" else "sglang")
    (root / "srt").mkdir(parents=True)
    (root / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return tmp_path


WORKSPACE = """
    import torch

    class Workspace:
        def get(self, num_tokens):
            self.buf = torch.empty(num_tokens, dtype=torch.int32)
    """


@pytest.mark.parametrize("layout", ["checkout", "package"])
def test_cli_json_names_files_from_the_package_down(tmp_path, capsys, layout):
    tree = _tree(tmp_path, layout, {"srt/ws.py": WORKSPACE, "srt/broken.py": "def (:\n"})
    assert main(["audit", str(tree), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [
        {
            "file": "sglang/srt/ws.py",
            "qualname": "Workspace.get",
            "line": 6,
            "target": "self.buf",
            "allocator": "torch.empty",
            "verdict": "grows-while-held",
            "grows_with": ["tokens"],
            "reason": "the old value is referenced while the new one is allocated",
            "dtype": "torch.int32",
        }
    ]
    assert "skipped sglang/srt/broken.py: SyntaxError" in err


def test_cli_table_is_readable(tmp_path, capsys):
    assert main(["audit", str(_tree(tmp_path, "package", {"srt/ws.py": WORKSPACE}))]) == 0
    out = capsys.readouterr().out
    assert "| grows-while-held | sglang/srt/ws.py:6 | `Workspace.get` | `self.buf` |" in out
    assert out.rstrip().endswith(
        "1 sites: 1 grows-while-held, 0 releases-first, "
        "0 keeps-old-on-purpose, 0 views-escape, 0 init-only"
    )


@pytest.mark.parametrize("what", ["empty", "no-srt", "missing"])
def test_a_folder_that_is_no_sglang_tree_is_one_line_and_exit_2(tmp_path, capsys, what):
    if what == "no-srt":
        (tmp_path / "sglang").mkdir()
        (tmp_path / "sglang" / "__init__.py").write_text("")
    target = tmp_path / "nowhere" if what == "missing" else tmp_path
    assert main(["audit", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "not an sglang source tree" in err


# -- the real sglang 0.5.23 package, read as files ------------------------------------------------


def _installed() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the folder; runs none of its code
    if spec is None:
        pytest.skip("sglang is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


def _real_sites(path: Path, name: str) -> "dict[str, audit.Site]":
    sites = audit.audit_source(path.read_text(), name)
    return {f"{s.qualname} {s.target}": s for s in sites}


def test_real_0_5_23_dsv4_buffer_and_fused_kv_workspaces_grow_while_held():
    root = _installed()
    dsv4 = _real_sites(root / DSV4, DSV4)
    assert dsv4["SparsePrefillKVBuffer._reserve self._buffer"].verdict == "grows-while-held"
    fused = _real_sites(root / FUSED_KV, FUSED_KV)
    for workspace in ("_proj_workspace", "_k_workspace", "_v_workspace"):
        site = fused[f"FusedKVMaterializeHelper._ensure_workspace self.{workspace}"]
        assert site.verdict == "grows-while-held"
        assert "capacity" in site.grows_with


def test_real_0_5_23_mla_decode_workspace_keeps_old_on_purpose():
    sites = _real_sites(_installed() / MLA_DECODE, MLA_DECODE)
    assert sites["_Workspace.ensure self.buf"].verdict == "keeps-old-on-purpose"
    assert all(s.verdict != "grows-while-held" for s in sites.values())


@pytest.mark.parametrize(
    "fix, path, qualname",
    [
        ("0001", DSV4, "SparsePrefillKVBuffer._reserve"),
        ("0003", FUSED_KV, "FusedKVMaterializeHelper._ensure_workspace"),
    ],
)
def test_real_0_5_23_site_releases_first_after_its_own_fix(tmp_path, capsys, fix, path, qualname):
    upstream = tmp_path / "python/sglang"
    (upstream / path).parent.mkdir(parents=True)
    (upstream / "srt").mkdir(exist_ok=True)  # what makes a folder an sglang tree to the audit
    (upstream / "__init__.py").write_text("")
    shutil.copy2(_installed() / path, upstream / path)
    (patch,) = PATCHES_DIR.glob(f"{fix}-*.patch")
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True)
    assert main(["audit", str(tmp_path), "--json"]) == 0
    found = {(s["qualname"], s["verdict"]) for s in json.loads(capsys.readouterr().out)}
    assert {verdict for name, verdict in found if name == qualname} == {"releases-first"}


@pytest.mark.parametrize(
    "fix, path, qualname, targets",
    [
        ("0005", "srt/speculative/dflash_worker_v2.py",
         "DFlashWorkerV2._selector_sampling_accept", ("self._draft_probs_buf",)),
        ("0007", "srt/layers/attention/dsa_backend.py",
         "DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8",
         ("self._q8kv8_qpad_buf", "self._q8kv8_kv_buf")),
        ("0009", "srt/layers/attention/deepseek_v4_backend.py",
         "DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink", ("self._q8kv8_qpad_buf",)),
        ("0011", "srt/layers/attention/dsa_backend.py",
         "DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer", ("self._q8kv8_born_q_buf",)),
        ("0011", "srt/layers/attention/dsa_backend.py",
         "DeepseekSparseAttnBackend.q8kv8_born_q_sentinel", ("self._q8kv8_born_q_sentinel",)),
    ],
)  # fmt: skip
def test_real_0_5_23_buffer_releases_first_after_its_own_fix(
    tmp_path, capsys, fix, path, qualname, targets
):
    # Unmodified each target grows while held; with its fix alone applied it releases first.
    upstream = tmp_path / "python/sglang"
    (upstream / path).parent.mkdir(parents=True)
    (upstream / "srt").mkdir(exist_ok=True)
    (upstream / "__init__.py").write_text("")
    shutil.copy2(_installed() / path, upstream / path)

    def verdicts():
        assert main(["audit", str(tmp_path), "--json"]) == 0
        sites = json.loads(capsys.readouterr().out)
        return [s["verdict"] for t in targets for s in sites
                if (s["qualname"], s["target"]) == (qualname, t)]  # fmt: skip

    assert verdicts() == ["grows-while-held"] * len(targets)
    (patch,) = PATCHES_DIR.glob(f"{fix}-*.patch")
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True)
    assert verdicts() == ["releases-first"] * len(targets)


# Every site a fix of the series carries, by file: (method, target) the audit reports.
CARRIED = {
    DSV4: [("SparsePrefillKVBuffer._reserve", "self._buffer")],
    FUSED_KV: [
        ("FusedKVMaterializeHelper._ensure_workspace", f"self.{w}")
        for w in ("_proj_workspace", "_k_workspace", "_v_workspace")
    ],
    "srt/speculative/dflash_worker_v2.py": [
        ("DFlashWorkerV2._selector_sampling_accept", "self._draft_probs_buf")
    ],
    "srt/layers/attention/dsa_backend.py": [
        ("DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8", "self._q8kv8_qpad_buf"),
        ("DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8", "self._q8kv8_kv_buf"),
        ("DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer", "self._q8kv8_born_q_buf"),
        ("DeepseekSparseAttnBackend.q8kv8_born_q_sentinel", "self._q8kv8_born_q_sentinel"),
    ],
    "srt/layers/attention/deepseek_v4_backend.py": [
        ("DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink", "self._q8kv8_qpad_buf")
    ],
}


def test_after_series_apply_every_carried_site_releases_first(tmp_path, capsys, patched_tree):
    # The tree ``git am`` made of the whole series (as ``series apply --to`` does), read by the
    # audit's command line; only the files the fixes change, so that it reads 5 files and not
    # 6,000.
    for path in CARRIED:
        copy = tmp_path / "python/sglang" / path
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(patched_tree / "python/sglang" / path, copy)
    (tmp_path / "python/sglang/__init__.py").write_text("")
    assert main(["audit", str(tmp_path), "--json"]) == 0
    carried = {site for sites in CARRIED.values() for site in sites}
    sites = json.loads(capsys.readouterr().out)
    verdicts = {
        (s["qualname"], s["target"]): s["verdict"]
        for s in sites
        if (s["qualname"], s["target"]) in carried
    }
    assert verdicts == dict.fromkeys(carried, "releases-first")


@pytest.mark.parametrize(
    "guard",
    [
        "if self._ready:\n        return\n    self._ready = True\n    self.buf = torch.empty(n)\n",
        'if getattr(self, "_ready", False):\n        return\n    self.buf = torch.empty(n)\n'
        "    self._ready = True\n",
        "if not self._ready and n > 0:\n        self._ready = True\n"
        "        self.buf = torch.empty(n)\n",
    ],
)
def test_behind_a_flag_the_method_sets_is_init_only(guard):
    assert _verdict(f"def ensure(self, n):\n    {guard}") == "init-only"


def test_a_flag_the_method_never_sets_guards_nothing():
    body = (
        "def ensure(self, n):\n    if self._ready:\n        return\n    self.buf = torch.empty(n)\n"
    )
    assert _verdict(body) == "grows-while-held"


def test_unittest_set_up_is_init_only():
    assert _verdict("def setUp(self):\n    self.buf = torch.randn(4)\n") == "init-only"


def test_an_old_value_copied_before_the_replacement_is_kept_on_purpose():
    site = _sites(
        """
        def grow(self, capacity):
            new = self.k.new_zeros(capacity, self.k.shape[1])
            new[: self.k.shape[0]] = self.k
            self.k = new
        """
    )["self.k"]
    assert (site.verdict, site.reason) == (
        "keeps-old-on-purpose",
        "copies the old value into the new one",
    )


def test_reading_only_the_old_values_shape_before_the_replacement_copies_nothing():
    body = """
    def grow(self, capacity):
        new = torch.zeros(capacity)
        rows = self.k.shape[0] + self.k.numel()
        self.k = new
    """
    assert _verdict(body, "self.k") == "grows-while-held"


@pytest.mark.parametrize("probe", ["self.bufs.get(vocab)", 'getattr(self, "buf", None)'])
def test_a_slot_probed_into_a_local_and_built_when_none_is_init_only(probe):
    target = "self.bufs[vocab]" if "get(" in probe else "self.buf"
    body = f"""
    def get(self, vocab, rows):
        buf = {probe}
        if buf is None:
            buf = torch.zeros(4096, vocab)
            {target} = buf
        return buf[:rows]
    """
    assert _verdict(body, target) == "init-only"


@pytest.mark.parametrize(
    "guard",
    [
        "if self.buf is None and n > 0:\n        self.buf = torch.empty(n)\n"
        "        self.lens = torch.zeros(n)\n",
        "if self.buf is not None or n == 0:\n        return\n    self.buf = torch.empty(n)\n"
        "    self.lens = torch.zeros(n)\n",
    ],
)
def test_what_is_built_beside_a_target_that_holds_nothing_is_init_only(guard):
    sites = _sites(f"def ensure(self, n):\n    {guard}")
    assert {t: s.verdict for t, s in sites.items()} == {
        "self.buf": "init-only",
        "self.lens": "init-only",
    }


def test_a_none_test_or_a_size_test_still_grows_while_held():
    body = "def ensure(self, n):\n    if self.buf is None or self.buf.numel() < n:\n"
    body += "        self.buf = torch.empty(n)\n"
    assert _verdict(body) == "grows-while-held"


def test_a_target_the_method_only_clears_guards_nothing_beside_it():
    body = """
    def forward(self, n):
        stash = self.stash
        if stash is not None:
            self.stash = None
        else:
            self.buf = torch.zeros(n)
    """
    assert _verdict(body) == "grows-while-held"
