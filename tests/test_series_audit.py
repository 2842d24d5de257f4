"""``python -m tools.series audit``: verdicts, the command line, hostile trees, sglang 0.5.23."""

import importlib.util
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from ci import gitcmd
from tools.series import audit, audit_tree
from tools.series.__main__ import main
from tools.series.seriesdir import PATCHES_DIR

SITE = "self.buf = torch.empty(n)"
KEEP = "# grows-while-held: keeps-old-on-purpose"


def _module(body: str) -> str:
    return "import torch\n\n\nclass W:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def _sites(body: str) -> "dict[str, audit.Site]":
    """The sites of one class ``W`` whose methods are ``body``, by target."""
    return {s.target: s for s in audit.audit_source(_module(body), "sglang/srt/w.py")}


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
        # no site: a copy of the old value needs the old value; a write into it; host data
        ("self.buf = self.buf.to(device)", None),
        ("self.buf = torch.cat([self.buf, x])", None),
        ("self.buf[:n] = torch.arange(n)", None),
        ("self.buf = torch.tensor(x)", None),
        ("local = torch.empty(n)", None),
    ],
)
def test_each_target_form_is_a_replacement_site_and_copies_are_none(statement, target):
    sites = _sites(f"def grow(self, x, n, ratio, layer, device):\n    {statement}\n")
    want = {target: "grows-while-held"} if target else {}
    assert {t: s.verdict for t, s in sites.items()} == want


# (body of class W, target, verdict, reason or None): one behaviour a row.
VERDICTS = {
    "none-first": (
        f"def get(self, n):\n    if self.buf.shape[0] < n:\n        self.buf = None\n        {SITE}\n",
        "self.buf", "releases-first", None),
    "del": (f"def get(self, n):\n    del self.buf\n    {SITE}\n", "self.buf", "releases-first", None),
    "clear": ("def get(self, n):\n    self.bufs.clear()\n    self.bufs[n] = torch.empty(n)\n",
              "self.bufs[n]", "releases-first", None),
    "emptied": ("def get(self, n):\n    self.bufs = {}\n    self.bufs[n] = torch.empty(n)\n",
                "self.bufs[n]", "releases-first", None),
    "releasing-helper": (
        f"def release(self):\n    self.buf = None\n\ndef get(self, n):\n    self.release()\n    {SITE}\n",
        "self.buf", "releases-first", None),
    "release-on-another-branch": (
        f"def get(self, n, drop):\n    if drop:\n        self.buf = None\n    {SITE}\n",
        "self.buf", "grows-while-held", None),
    "appended-elsewhere-first": (
        "def ensure(self, n):\n    if self.buf is None or self.buf.numel() < n:\n"
        "        if self.buf is not None:\n            self._keep.append(self.buf)\n"
        f"        {SITE}\n", "self.buf", "keeps-old-on-purpose", "kept in self._keep"),
    "copied-into-the-new": (
        f"def grow(self, n):\n    old = self.buf\n    {SITE}\n    self.buf[: old.shape[0]].copy_(old)\n",
        "self.buf", "keeps-old-on-purpose", None),
    "copied-before-the-replacement": (
        "def grow(self, capacity):\n    new = self.k.new_zeros(capacity, self.k.shape[1])\n"
        "    new[: self.k.shape[0]] = self.k\n    self.k = new\n",
        "self.k", "keeps-old-on-purpose", "copies the old value into the new one"),
    "only-the-shape-read": (
        "def grow(self, capacity):\n    new = torch.zeros(capacity)\n"
        "    rows = self.k.shape[0] + self.k.numel()\n    self.k = new\n",
        "self.k", "grows-while-held", None),
    "local-alias": (
        "def get(self, n):\n    buf = self.buf\n    if buf is None or buf.numel() < n:\n"
        "        buf = torch.empty(n)\n        self.buf = buf\n    return buf[:n]\n",
        "self.buf", "grows-while-held", None),
    "marker-above": (
        f"def a(self, n):\n    {KEEP} a captured graph reads the old one\n"
        f"    # (and a second comment line)\n    {SITE}\n",
        "self.buf", "keeps-old-on-purpose", "marked: a captured graph reads the old one"),
    "marker-trailing": (f"def a(self, n):\n    {SITE}  {KEEP} graph reads it\n",
                        "self.buf", "keeps-old-on-purpose", "marked: graph reads it"),
    "marker-on-another-statement": (
        f"def a(self, n):\n    self.x = torch.empty(n)  {KEEP} graph reads it\n    {SITE}\n",
        "self.buf", "grows-while-held", None),
    "marker-without-reason": (f"def a(self, n):\n    {SITE}  {KEEP}\n",
                              "self.buf", "grows-while-held", None),
    "marker-in-docstring": (f'def get(self, n):\n    """{KEEP} doc"""\n    {SITE}\n',
                            "self.buf", "grows-while-held", None),
    "marker-in-string": (f'def get(self, n):\n    s = "{KEEP} x"\n    {SITE}\n',
                         "self.buf", "grows-while-held", None),
    "marker-in-string-same-line": (f'def get(self, n):\n    {SITE}; s = "{KEEP} x"\n',
                                   "self.buf", "grows-while-held", None),
    "marker-in-multiline-string": (f'def get(self, n):\n    s = """\n{KEEP} x\n"""\n    {SITE}\n',
                                   "self.buf", "grows-while-held", None),
    "view-kept-by-another-method": (
        "def grow(self, n):\n    self.buf = torch.zeros(n)\n\n"
        "def plan(self, bs):\n    self.metadata = Metadata(indices=self.buf[:bs])\n",
        "self.buf", "views-escape", "W.plan keeps a view of it"),
    "init": ("def __init__(self, n):\n    self.buf = torch.empty(n)\n",
             "self.buf", "init-only", None),
    "helper-of-init": (
        f"def __init__(self, n):\n    self._build(n)\n\ndef _build(self, n):\n    {SITE}\n",
        "self.buf", "init-only", None),
    "helper-of-init-and-resize": (
        "def __init__(self, n):\n    self._build(n)\n\ndef resize(self, n):\n    self._build(n)\n\n"
        f"def _build(self, n):\n    {SITE}\n", "self.buf", "grows-while-held", None),
    "setUp": ("def setUp(self):\n    self.buf = torch.randn(4)\n", "self.buf", "init-only", None),
    "built-when-none": (f"def get(self, n):\n    if self.buf is None:\n        {SITE}\n",
                        "self.buf", "init-only", None),
    "returned-when-set": (
        f"def get(self, n):\n    if self.buf is not None:\n        return self.buf\n    {SITE}\n",
        "self.buf", "init-only", None),
    "slot-built-when-absent": (
        "def get(self, k, n):\n    if k not in self.bufs:\n        self.bufs[k] = torch.empty(n)\n",
        "self.bufs[k]", "init-only", None),
    "none-or-size-test": (
        f"def get(self, n):\n    if self.buf is None or self.buf.numel() < n:\n        {SITE}\n",
        "self.buf", "grows-while-held", None),
    "flag-set": (f"def e(self, n):\n    if self._ready:\n        return\n    self._ready = True\n    {SITE}\n",
                 "self.buf", "init-only", None),
    "flag-by-getattr": (
        f'def e(self, n):\n    if getattr(self, "_ready", False):\n        return\n    {SITE}\n'
        "    self._ready = True\n", "self.buf", "init-only", None),
    "flag-negated": (
        f"def e(self, n):\n    if not self._ready and n > 0:\n        self._ready = True\n        {SITE}\n",
        "self.buf", "init-only", None),
    "flag-never-set": (f"def e(self, n):\n    if self._ready:\n        return\n    {SITE}\n",
                       "self.buf", "grows-while-held", None),
    "probed-by-get": (
        "def get(self, vocab, rows):\n    buf = self.bufs.get(vocab)\n    if buf is None:\n"
        "        buf = torch.zeros(4096, vocab)\n        self.bufs[vocab] = buf\n    return buf\n",
        "self.bufs[vocab]", "init-only", None),
    "probed-by-getattr": (
        'def get(self, vocab, rows):\n    buf = getattr(self, "buf", None)\n    if buf is None:\n'
        "        buf = torch.zeros(4096, vocab)\n        self.buf = buf\n    return buf\n",
        "self.buf", "init-only", None),
    "built-beside-an-empty-target": (
        f"def e(self, n):\n    if self.buf is None and n > 0:\n        {SITE}\n"
        "        self.lens = torch.zeros(n)\n", "self.lens", "init-only", None),
    "built-after-returning-when-set": (
        f"def e(self, n):\n    if self.buf is not None or n == 0:\n        return\n    {SITE}\n"
        "    self.lens = torch.zeros(n)\n", "self.lens", "init-only", None),
    "beside-a-target-only-cleared": (
        "def forward(self, n):\n    stash = self.stash\n    if stash is not None:\n"
        f"        self.stash = None\n    else:\n        {SITE}\n", "self.buf", "grows-while-held", None),
}  # fmt: skip


@pytest.mark.parametrize("case", VERDICTS)
def test_each_pattern_gets_its_verdict(case):
    body, target, verdict, reason = VERDICTS[case]
    site = _sites(body)[target]
    assert site.verdict == verdict, site
    assert reason is None or site.reason == reason


@pytest.mark.parametrize("reason", ["\u200b", "\u200b\u200d\ufeff", "\u202e", " \t", "\u00a0"])
def test_a_reason_of_invisible_characters_is_no_reason(reason):
    source = _module(f"def get(self, n):\n    {SITE}  {KEEP} {reason}\n")
    assert [s.verdict for s in audit.audit_source(source, "m.py")] == ["grows-while-held"]
    assert audit.expr.bare_markers(source) == [6]


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


# -- the command line ---------------------------------------------------------------------------

WORKSPACE = _module(
    "def get(self, num_tokens):\n    self.buf = torch.empty(num_tokens, dtype=torch.int32)\n"
)


def _tree(tmp_path: Path, layout: str, files: "dict[str, str]") -> Path:
    root = tmp_path / ("python/sglang" if layout == "checkout" else "sglang")
    (root / "srt").mkdir(parents=True)
    (root / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("layout", ["checkout", "package"])
def test_json_and_table_name_files_from_the_package_down(tmp_path, capsys, layout):
    tree = _tree(tmp_path, layout, {"srt/ws.py": WORKSPACE, "srt/broken.py": "def (:\n"})
    assert main(["audit", str(tree), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [
        {"file": "sglang/srt/ws.py", "qualname": "W.get", "line": 6, "target": "self.buf",
         "allocator": "torch.empty", "verdict": "grows-while-held", "grows_with": ["tokens"],
         "reason": "the old value is referenced while the new one is allocated",
         "dtype": "torch.int32"}
    ]  # fmt: skip
    assert "skipped sglang/srt/broken.py: SyntaxError" in err
    assert main(["audit", str(tree)]) == 0
    out = capsys.readouterr().out
    assert "| grows-while-held | sglang/srt/ws.py:6 | `W.get` | `self.buf` |" in out
    assert out.rstrip().endswith(
        "1 sites: 1 grows-while-held, 0 releases-first, "
        "0 keeps-old-on-purpose, 0 views-escape, 0 init-only"
    )


@pytest.mark.parametrize("what", ["empty", "no-srt", "missing", "unreadable"])
def test_a_folder_that_is_no_sglang_tree_is_one_line_and_exit_2(tmp_path, capsys, what):
    if what == "no-srt":
        (tmp_path / "sglang").mkdir()
        (tmp_path / "sglang" / "__init__.py").write_text("")
    target = {"missing": tmp_path / "nowhere", "unreadable": tmp_path / ("a" * 5000)}
    assert main(["audit", str(target.get(what, tmp_path))]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    said = "File name too long" if what == "unreadable" else "not an sglang source tree"
    assert said in err


def _hostile_tree(root: Path) -> Path:
    """An sglang-shaped tree with one unreadable entry of each kind, and good files after them."""
    srt = root / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt.parent / "__init__.py").write_text("")
    (srt / "deep_attr.py").write_text(_module("def g(self, n):\n    x = a" + ".b" * 1000 + "\n"))
    (srt / "long_expr.py").write_text(_module("def g(self):\n    x = " + "+".join("a" * 3000)))
    latin1 = "# -*- coding: latin-1 -*-\n" + _module(
        f"def get(self, n):\n    s = 'caf\u00e9'\n    {SITE}\n"
    )
    (srt / "latin1.py").write_bytes(latin1.encode("latin-1"))
    (srt / "loop.py").symlink_to("loop.py")
    (srt / "zero.py").symlink_to("/dev/zero")
    os.mkfifo(srt / "fifo.py")
    os.mkfifo(srt / "bad\x1b[2K\u202ename.py")  # shown escaped, never obeyed
    (srt / "badcoding.py").write_text("# coding: nope\nx = 1\n")
    with open(srt / "huge.py", "wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse: refused by size before any read
    (srt / "loopdir").symlink_to("..")
    (srt / "zz_good.py").write_text(_module(f"def get(self, n):\n    {SITE}\n"))
    return srt


UNREADABLE = {
    "bad\\x1b[2K\\u202ename": "not a regular file",
    "badcoding": "cannot decode",
    "deep_attr": "nested too deep",
    "fifo": "not a regular file",
    "huge": "byte bound",
    "long_expr": "nested too deep",
    "loop": "a link, not followed",
    "zero": "a link, not followed",
}


def test_each_unreadable_file_is_named_and_the_walk_goes_on(tmp_path):
    _hostile_tree(tmp_path)
    sites, skipped = audit_tree.audit_package(tmp_path / "sglang")
    said = {line.split(":")[0].removeprefix("sglang/srt/")[:-3]: line for line in skipped}
    assert sorted(said) == sorted(UNREADABLE)
    assert all(why in said[name] for name, why in UNREADABLE.items()), said
    assert not any("\x1b" in line or "\u202e" in line for line in skipped)
    assert {(s.file, s.line) for s in sites} == {
        ("sglang/srt/latin1.py", 8), ("sglang/srt/zz_good.py", 6)
    }  # fmt: skip


# -- the real sglang 0.5.23 package, read as files ------------------------------------------------

DSV4 = "srt/layers/attention/dsv4/sparse_prefill_utils.py"
FUSED_KV = "kernels/ops/speculative/fused_kv_materialize.py"
MLA_DECODE = "kernels/ops/attention/dsv4/flydsl_v4nm/mla_v4_decode.py"
DSA = "srt/layers/attention/dsa_backend.py"
# Each fix: the file, and the (method, target) sites it carries.
CARRIED = {
    "0001": (DSV4, [("SparsePrefillKVBuffer._reserve", "self._buffer")]),
    "0003": (FUSED_KV, [("FusedKVMaterializeHelper._ensure_workspace", f"self.{w}")
                        for w in ("_proj_workspace", "_k_workspace", "_v_workspace")]),
    "0005": ("srt/speculative/dflash_worker_v2.py",
             [("DFlashWorkerV2._selector_sampling_accept", "self._draft_probs_buf")]),
    "0007": (DSA, [("DeepseekSparseAttnBackend._forward_flashmla_sparse_q8kv8", f"self.{t}")
                   for t in ("_q8kv8_qpad_buf", "_q8kv8_kv_buf")]),
    "0009": ("srt/layers/attention/deepseek_v4_backend.py",
             [("DeepseekV4AttnBackend._prepare_q8kv8_q_and_sink", "self._q8kv8_qpad_buf")]),
    "0011": (DSA, [("DeepseekSparseAttnBackend.q8kv8_acquire_born_q_buffer", "self._q8kv8_born_q_buf"),
                   ("DeepseekSparseAttnBackend.q8kv8_born_q_sentinel", "self._q8kv8_born_q_sentinel")]),
}  # fmt: skip


def _installed() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the folder; runs none of its code
    if spec is None:
        pytest.skip("sglang is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


def _verdicts(tree: Path, capsys) -> dict:
    assert main(["audit", str(tree), "--json"]) == 0
    return {(s["qualname"], s["target"]): s["verdict"] for s in json.loads(capsys.readouterr().out)}


def test_real_0_5_23_mla_decode_workspace_keeps_old_on_purpose():
    sites = audit.audit_source((_installed() / MLA_DECODE).read_text(), MLA_DECODE)
    verdicts = {(s.qualname, s.target): s.verdict for s in sites}
    assert verdicts[("_Workspace.ensure", "self.buf")] == "keeps-old-on-purpose"
    assert "grows-while-held" not in verdicts.values()


@pytest.mark.parametrize("fix", CARRIED)
def test_each_carried_site_grows_while_held_on_0_5_23_and_releases_first_with_its_fix(
    tmp_path, capsys, fix
):
    path, carried = CARRIED[fix]
    upstream = tmp_path / "python/sglang"
    (upstream / path).parent.mkdir(parents=True)
    (upstream / "srt").mkdir(exist_ok=True)  # what makes a folder an sglang tree to the audit
    (upstream / "__init__.py").write_text("")
    shutil.copy2(_installed() / path, upstream / path)
    assert {_verdicts(tmp_path, capsys)[site] for site in carried} == {"grows-while-held"}
    (patch,) = PATCHES_DIR.glob(f"{fix}-*.patch")
    gitcmd.run(["apply", str(patch)], tmp_path, ceiling=tmp_path.parent)
    assert {_verdicts(tmp_path, capsys)[site] for site in carried} == {"releases-first"}
