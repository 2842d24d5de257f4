"""The fix: methods that release the old tensors before allocating anew. DSV4 and fused-KV
get a hand-written method, every other shape its own source with each released attribute (and
its local) set to None before the allocation. Each replacement is logged and published.
"""

import __future__

import ast
import copy
import inspect
import math

import torch

from sglang_overlay import FUSED_KV_PATCH_ID, PATCH_ID, shapes
from sglang_overlay.observe import MIB, ReplacementLog

# patch id -> the log of its replacements, by what it calls the buffers
LOGS = {
    PATCH_ID: ReplacementLog("DSV4 sparse-prefill workspace"),
    FUSED_KV_PATCH_ID: ReplacementLog("fused KV materialisation workspace"),
    "0005-dflash-draft-probs-release-first": ReplacementLog("DFlash draft-probability buffer"),
    "0007-dsa-q8kv8-release-first": ReplacementLog("DSA q8kv8 q pad, KV rows and outputs"),
    "0009-dsv4-q8kv8-qpad-release-first": ReplacementLog("DSV4 q8kv8 q pad"),
    "0011-dsa-q8kv8-born-q-release-first": ReplacementLog("DSA q8kv8 born-fp8 q and sentinel"),
}
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def layout(values) -> list:
    """Shapes and dtypes of the buffers (never the tensors: that would keep them)."""
    parts = (t for v in values for t in (v if isinstance(v, (tuple, list)) else (v,)))
    return [(t.shape, t.dtype) for t in parts if t is not None]


def describe(layout) -> str:
    if not layout:
        return "none"
    shapes = ", ".join(f"{list(shape)} {dtype}" for shape, dtype in layout)
    return f"{shapes} {_nbytes(layout) / MIB:.1f} MiB"


def _nbytes(layout) -> int:
    return sum(math.prod(shape) * dtype.itemsize for shape, dtype in layout)


def _logged(patch_id, owner, released, old, publish) -> None:
    """Log and publish a replacement of the ``old`` layout, never inside a torch.compile graph."""
    if _compiling():
        return
    now = layout(getattr(owner, a, None) for a in released)
    LOGS[patch_id].replaced(describe(old), describe(now), _nbytes(now))
    publish()


def build(site, found, module, publish):
    """The release-first method for what ``shapes.recognise`` ``found`` in ``module``."""
    if found.shape.name == "fused-kv-ensure-workspace":
        return _build_ensure_workspace(module, publish)
    if site is shapes.DSV4:
        return _build_dsv4(module, publish, found.shape.name)
    method, released = released_method(module, found.node, site.released), site.released

    def released_first(self, *args, **kwargs):
        before = None if _compiling() else layout(getattr(self, a, None) for a in released)
        try:
            return method(self, *args, **kwargs)
        finally:
            if before is not None and layout(getattr(self, a, None) for a in released) != before:
                _logged(site.patch_id, self, released, before, publish)

    return released_first


def _build_dsv4(module, publish, shape):
    """The DSV4 workspace: reuse when rows and dtype fit; else drop the owner's reference (and
    a reserve's cached head, so no stale rows count as filled), then allocate."""

    def workspace(self, num_tokens, dtype, forget_head) -> torch.Tensor:
        assert num_tokens > 0
        buffer = self._buffer
        if buffer is not None and num_tokens <= buffer.shape[0] and dtype == buffer.dtype:
            return buffer[:num_tokens]
        del buffer  # a local reference would keep the old storage alive
        old = None if _compiling() else layout([self._buffer])
        self._buffer = None
        if forget_head:
            self._head_source = None
        self._buffer = torch.empty(
            (num_tokens, 1, module.WORKSPACE_DIM), dtype=dtype, device=self.device
        )
        _logged(PATCH_ID, self, ("_buffer",), old, publish)
        return self._buffer[:num_tokens]

    def _reserve(self, num_tokens: int, dtype: torch.dtype) -> torch.Tensor:
        return workspace(self, num_tokens, dtype, True)

    def get(self, num_tokens: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return workspace(self, num_tokens, dtype, False)

    def get_bf16(self, num_tokens: int) -> torch.Tensor:
        return workspace(self, num_tokens, torch.bfloat16, False)

    return {"kv-buffer-reserve": _reserve, "workspace-get-dtype": get}.get(shape, get_bf16)


FUSED_KV = ("_proj_workspace", "_k_workspace", "_v_workspace")


def _build_ensure_workspace(module, publish):
    """sglang's reuse rule and doubling, with the old workspaces, capacity and dtype dropped."""

    def _ensure_workspace(self, total_ctx: int, dtype: torch.dtype) -> None:
        fits = self._workspace_capacity >= total_ctx and self._workspace_dtype == dtype
        if fits and all(getattr(self, a) is not None for a in FUSED_KV):
            return
        new_capacity = max(1, total_ctx, self._workspace_capacity * 2)  # at least double
        old = None if _compiling() else layout(getattr(self, a) for a in FUSED_KV)
        # No reference to the old workspaces while the new ones are allocated, and no
        # capacity or dtype claiming a workspace if an allocation raises.
        self._proj_workspace = self._k_workspace = self._v_workspace = None
        self._workspace_capacity, self._workspace_dtype = 0, None
        width = self.n_layers * self.layer_out_dim
        self._proj_workspace = torch.empty((new_capacity, width), dtype=dtype, device=self.device)
        rows = (self.n_layers, new_capacity, self.num_kv_heads, self.head_dim)
        self._k_workspace = torch.empty(rows, dtype=dtype, device=self.device)
        self._v_workspace = torch.empty_like(self._k_workspace)
        self._workspace_capacity, self._workspace_dtype = new_capacity, dtype
        _logged(FUSED_KV_PATCH_ID, self, FUSED_KV, old, publish)

    return _ensure_workspace


def released_method(module, node: ast.FunctionDef, released) -> "object":
    """The method ``node`` of ``module``, compiled from its source in the module's globals, file
    and lines, with ``self.<attr> = <local> = None`` inserted for each ``released`` attribute
    before ``<local> = <allocation>`` where a later ``self.<attr> = <local>`` stores it."""
    node = copy.deepcopy(node)  # the recognised tree stays the module's own text
    for body in list(_statement_lists(node)):
        last_set = {}  # local -> the statement of this block that last assigned it
        for stmt in [s for s in body if isinstance(s, ast.Assign)]:
            at = last_set.get(stmt.value.id if isinstance(stmt.value, ast.Name) else None)
            if at is not None and _allocates(at.value):
                for attr in {shapes._self_attr(t) for t in stmt.targets} & set(released):
                    drop = ast.parse(f"self.{attr} = {stmt.value.id} = None").body[0]
                    body.insert(body.index(at), ast.copy_location(drop, at))
            last_set.update((t.id, stmt) for t in stmt.targets if isinstance(t, ast.Name))
    tree = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
    # Annotations stay strings: names imported only under TYPE_CHECKING must not be looked up.
    flags = __future__.annotations.compiler_flag
    code = compile(tree, inspect.getsourcefile(module), "exec", flags=flags, dont_inherit=True)
    namespace = {}
    exec(code, vars(module), namespace)  # the def only: the module's globals, as the original's
    return namespace[node.name]


def _statement_lists(node):
    for sub in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(sub, field, None), list):
                yield getattr(sub, field)


def _allocates(value) -> bool:
    """A call, or a tuple of calls."""
    if isinstance(value, ast.Tuple):
        return bool(value.elts) and all(isinstance(e, ast.Call) for e in value.elts)
    return isinstance(value, ast.Call)
