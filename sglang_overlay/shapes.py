"""The overlay's table (a ``Site`` per method a patch replaces, with its known shapes) and its
recognition of a loaded module; ``foreign_hook``: another plugin's hook over ours.
"""

import ast
import hashlib
import inspect
import sys
from collections import namedtuple

from sglang_overlay import FUSED_KV_PATCH_ID, PATCH_ID, PATCH_IDS

CODE_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # the order of WorkspaceShape.code_sha256


# One published form of a method: sha256 (12 hex digits) of its source text, and of its code
# object under each of CODE_PYTHONS (none: the source is needed).
WorkspaceShape = namedtuple("WorkspaceShape", "name source_sha256 releases code_sha256")


def _shapes(*rows) -> "tuple[WorkspaceShape, ...]":
    return tuple(WorkspaceShape(n, source, rel, tuple(code)) for n, source, rel, *code in rows)


# One method a patch replaces: its class's names, the method's names (the first the class
# defines), the attributes set to None before they are allocated anew, its shapes, and a
# hazard (module -> a reason not to patch it, or None).
Site = namedtuple("Site", "patch_id class_names methods released shapes hazard", defaults=[None])


def _address_keyed_validity(module) -> "str | None":
    gather = getattr(module, "CompressedGather", None)
    if "dequantized_source" in getattr(gather, "__dataclass_fields__", {}):
        return (
            "CompressedGather.dequantized_source keys prefix validity on the workspace's "
            "allocation address; releasing first could let a replacement reuse that address "
            "and match a stale key"
        )
    return None


# fmt: off
KNOWN_SHAPES = _shapes(  # DSV4's workspace: get() to 0.5.22, _reserve() from 0.5.23
    ("workspace-get-bf16", "d521f0e4199e", "0.5.15-0.5.18",
     "b64061b4e6d9", "5b9fade88fc2", "43bafab7deed", "147d4f608767"),
    ("workspace-get-dtype", "6e444f7823ac", "0.5.19-0.5.22",
     "0912c84244b6", "3cb8b13f2108", "02a282a47edc", "3d94ba3a92c6"),
    ("kv-buffer-reserve", "08fa9779e685", "0.5.23",
     "dae76ad0319a", "1b62c33967d7", "794386905f04", "473d06d0e8a5"),
)
DSA, BORN_Q = ("DeepseekSparseAttnBackend",), "0011-dsa-q8kv8-born-q-release-first"
# Every method a patch replaces, in series order. 0005 on are of the local-variable form
# (``buf = self.x; if ...: buf = torch.zeros(...); self.x = buf``): the generic rewrite.
ALL_SITES = (
    Site(PATCH_ID, ("SparsePrefillKVBuffer", "SparsePrefillWorkspace"), ("_reserve", "get"),
         ("_buffer",), KNOWN_SHAPES, _address_keyed_validity),
    # one text, under sglang.srt.speculative.triton_ops in 0.5.15, sglang.kernels.ops from 0.5.16
    Site(FUSED_KV_PATCH_ID, ("FusedKVMaterializeHelper",), ("_ensure_workspace",),
         ("_proj_workspace", "_k_workspace", "_v_workspace"), _shapes(
             ("fused-kv-ensure-workspace", "b8159246ef0b", "0.5.15-0.5.23",
              "72a2dea80493", "d4b114a43831", "0bef42aa2975", "5a9d83b2d489"))),
    # 0.5.22 on pass block verification to DSpark's kernel; 0.5.15-0.5.18 have no such method
    Site("0005-dflash-draft-probs-release-first", ("DFlashWorkerV2",),
         ("_selector_sampling_accept",), ("_draft_probs_buf",), _shapes(
             ("dflash-selector-accept", "811c71964eb7", "0.5.19-0.5.21"),
             ("dflash-selector-accept-block-verification", "a30377ccfd23", "0.5.22-0.5.23"))),
    # 0.5.16 has the q pad only, 0.5.17 on the KV rows and outputs too
    Site("0007-dsa-q8kv8-release-first", DSA, ("_forward_flashmla_sparse_q8kv8",),
         ("_q8kv8_qpad_buf", "_q8kv8_kv_buf", "_q8kv8_out_bufs"), _shapes(
             ("dsa-q8kv8-qpad", "169a7df46251", "0.5.16"),
             ("dsa-q8kv8-kv-out", "13f42ab64c02", "0.5.17-0.5.21"),
             ("dsa-q8kv8-kv-out-0.5.22", "f0c6ed52b57c", "0.5.22"),
             ("dsa-q8kv8-kv-out-0.5.23", "eb7abba41a0a", "0.5.23"))),
    Site("0009-dsv4-q8kv8-qpad-release-first", ("DeepseekV4AttnBackend",),
         ("_prepare_q8kv8_q_and_sink",), ("_q8kv8_qpad_buf",), _shapes(
             ("dsv4-q8kv8-qpad", "99b96398f867", "0.5.19-0.5.22"),
             ("dsv4-q8kv8-qpad-0.5.23", "891f31d3a954", "0.5.23"))),
    # the opt-in born-fp8 q (SGLANG_ENABLE_DSA_Q8KV8_BORN_FP8_Q) and its NaN sentinel
    Site(BORN_Q, DSA, ("q8kv8_acquire_born_q_buffer",), ("_q8kv8_born_q_buf",), _shapes(
        ("dsa-q8kv8-born-q", "c9be682c090c", "0.5.17-0.5.23"))),
    Site(BORN_Q, DSA, ("q8kv8_born_q_sentinel",), ("_q8kv8_born_q_sentinel",), _shapes(
        ("dsa-q8kv8-born-q-sentinel", "61428e17cdd3", "0.5.17-0.5.23"))),
)
# fmt: on
DSV4 = ALL_SITES[0]
SITES = {p: tuple(s for s in ALL_SITES if s.patch_id == p) for p in PATCH_IDS}  # in order


# state: recognised, not-present, upstream-fixed or unsupported
Recognition = namedtuple(
    "Recognition", "state target reason shape cls method node", defaults=[None, None, "", None]
)


def workspace_class(module, site: "Site | None" = None) -> "type | None":
    """The class ``site`` patches (the DSV4 workspace by default) that ``module`` defines."""
    site = site or DSV4
    for name in site.class_names:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            # a plugin's subclass in its place (HookRegistry REPLACE): its MRO's definer
            defines = (c for c in cls.__mro__ if any(m in vars(c) for m in site.methods))
            return next(defines, cls)
    return None


def code_sha256(code) -> str:
    """A code object's behaviour (nested code included), without file name or line numbers."""

    def parts(c):
        consts = tuple(parts(k) if isinstance(k, type(c)) else repr(k) for k in c.co_consts)
        return (c.co_code, c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars,
                c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags, consts)  # fmt: skip

    return hashlib.sha256(repr(parts(code)).encode()).hexdigest()[:12]


def recognise(module, site: "Site | None" = None) -> Recognition:
    """Classify the method ``site`` (DSV4 by default) patches in ``module``."""
    site, name = site or DSV4, module.__name__
    cls = workspace_class(module, site)
    if cls is None:
        return Recognition(
            "not-present", name, f"{name} defines none of {', '.join(site.class_names)}"
        )
    method = next((m for m in site.methods if m in vars(cls)), site.methods[-1])
    where, func = f"{cls.__name__}.{method}", vars(cls).get(method)
    target = f"{name}.{where}"
    if not inspect.isfunction(func):
        return Recognition("unsupported", target, f"{cls.__name__} has no plain {method}() method")
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError) as exc:
        python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        digest, evidence, node = code_sha256(func.__code__), "bytecode only, code sha256", None
        ours = func.__qualname__ == where and func.__module__ == name
        codes = {s: dict(zip(CODE_PYTHONS, s.code_sha256, strict=False)) for s in site.shapes}
        found = [s for s in site.shapes if ours and codes[s].get(python) == digest]
        unknown = (f"source of {name} unreadable ({exc}); the bytecode of {where} "
                   f"(Python {python}, code sha256 {digest}) is not a known shape's")  # fmt: skip
    else:
        node = _method_node(ast.parse(source), cls.__name__, method)
        if (
            node is None
            or func.__code__.co_firstlineno != (node.decorator_list or [node])[0].lineno
        ):
            how = f"{where} is not the function defined in {name}'s source"
            return Recognition("unsupported", target, f"{how} (something else already replaced it)")
        text = ast.get_source_segment(source, node)
        digest, evidence = hashlib.sha256(text.encode()).hexdigest()[:12], "sha256"
        found = [s for s in site.shapes if s.source_sha256 == digest]
        if not found and releases_first(node, site.released):
            fixed = f"{where} (sha256 {digest}) already drops the old {', '.join(site.released)}"
            return Recognition("upstream-fixed", target, f"{fixed} before allocating")
        known = ", ".join(f"{s.source_sha256} ({s.releases})" for s in site.shapes)
        unknown = f"unknown source of {where} (sha256 {digest}); known: {known}"
    hazard = site.hazard(module) if found and site.hazard else None
    if not found or hazard:
        return Recognition("unsupported", target, hazard or unknown)
    reason = f"{found[0].name} ({found[0].releases}), {evidence} {digest}"
    return Recognition("recognised", target, reason, found[0], cls, method, node)


def all_or_none(found: "list[Recognition]") -> Recognition:
    """One patch's recognition from its methods': a state all share, else unsupported."""
    states = {f.state for f in found}
    state = states.pop() if len(states) == 1 else "unsupported"
    reasons = list(dict.fromkeys(f.reason for f in found))
    if len(reasons) > 1:
        reasons = [f"{f.target.rsplit('.', 1)[-1]}: {f.reason}" for f in found]
    if state == "unsupported" and len(found) > 1:
        reasons.append("the patch replaces all of its methods or none")
    return Recognition(state, ", ".join(dict.fromkeys(f.target for f in found)), "; ".join(reasons))


def releases_first(method_node: ast.FunctionDef, released=("_buffer",)) -> bool:
    """Whether each ``self.<attr> = <call>`` (or ``= <local>`` holding a call's result) of the
    ``released`` attributes follows a ``self.<attr> = None``, in source order."""
    assigns = sorted(
        (n for n in ast.walk(method_node) if isinstance(n, ast.Assign)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    dropped, allocated, fresh = set(), False, set()
    for node in assigns:
        for attr in {_self_attr(t) for t in node.targets} & set(released):
            fresh_local = isinstance(node.value, ast.Name) and node.value.id in fresh
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                dropped.add(attr)
            elif isinstance(node.value, ast.Call) or fresh_local:
                if attr not in dropped:
                    return False
                allocated = True
        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        fresh = fresh | names if isinstance(node.value, ast.Call) else fresh - names
    return allocated


def _method_node(tree: ast.Module, class_name: str, method: str) -> "ast.FunctionDef | None":
    classes = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    functions = (f for c in classes for f in c.body if isinstance(f, ast.FunctionDef))
    return next((f for f in functions if f.name == method), None)


def _self_attr(target: ast.expr) -> "str | None":
    is_self = isinstance(target, ast.Attribute) and getattr(target.value, "id", None) == "self"
    return target.attr if is_self else None


def foreign_hook(live, ours) -> "tuple[str, str] | None":
    """``("wrapped" | "replaced", reason)`` when ``live``'s ``__wrapped__`` chain leads to
    ``ours``: wrapped when each link holds the next in its closure (AROUND, BEFORE, AFTER),
    replaced when one does not (REPLACE)."""
    calls, outer = True, live
    for _ in range(100):  # a chain, not a cycle
        inner = getattr(outer, "__wrapped__", None)
        if inner is None or outer is ours:
            return None
        calls = calls and any(_cell(c) is inner for c in getattr(outer, "__closure__", None) or ())
        if inner is ours:
            code = getattr(live, "__code__", None)
            at = f"{code.co_name} in {code.co_filename}:{code.co_firstlineno}" if code else live
            hook = f"another hook's function ({at})"
            how = (
                "wraps the overlay's release-first method and can call it: release-first runs "
                "where that hook calls through"
                if calls
                else "names the overlay's release-first method as __wrapped__ but does not hold "
                "it: that hook runs instead, release-first does not"
            )
            return ("wrapped" if calls else "replaced"), f"{hook} {how}"
        outer = inner
    return None


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
