"""The fix itself: workspace methods that release the old tensor before allocating anew.

One builder per shape in ``shapes.KNOWN_SHAPES``, each with the original's signature and reuse
rule (a request that fits the current rows and dtype gets a view of the same storage). Each
replacement calls the ``publish`` it was built with (the overlay's: record and gauges).
"""

import torch

from sglang_overlay.replacement_log import MIB, ReplacementLog

REPLACEMENTS = ReplacementLog()
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def _describe(tensor) -> str:
    if tensor is None:
        return "none"
    return f"{tensor.shape[0]} rows {tensor.dtype} {_nbytes(tensor) / MIB:.1f} MiB"


def _nbytes(tensor) -> int:
    return tensor.nelement() * tensor.element_size()


def _replace(workspace, num_tokens: int, dtype, width: int, forget_head: bool, publish):
    """Drop the owner's reference, then allocate. Returns the new full buffer."""
    # The bookkeeping (log, process record, gauges) stays out of a torch.compile graph:
    # dynamo reads is_compiling() as True while it traces and drops those branches.
    old = None if _compiling() else _describe(workspace._buffer)
    # The release-first step: with the old tensor unreferenced (and no caller view keeping
    # its storage alive) the allocator can reuse or return its memory for the new one.
    workspace._buffer = None
    if forget_head:
        # Invalidate before allocating, so that neither an allocation landing at the old
        # address nor an allocation that raises leaves stale rows reported as filled.
        workspace._head_source = None
    buffer = torch.empty((num_tokens, 1, width), dtype=dtype, device=workspace.device)
    workspace._buffer = buffer
    if not _compiling():
        REPLACEMENTS.replaced(old, _describe(buffer), _nbytes(buffer))
        publish()
    return buffer


def build(shape, module, publish):
    """The release-first method for ``shape``, bound to ``module``'s WORKSPACE_DIM; it calls
    ``publish()`` after each replacement (outside a torch.compile graph)."""
    builders = {
        "kv-buffer-reserve": _build_reserve,
        "workspace-get-dtype": _build_get_dtype,
        "workspace-get-bf16": _build_get_bf16,
    }
    return builders[shape.name](module, publish)


def _build_reserve(module, publish):
    def _reserve(self, num_tokens: int, dtype: torch.dtype) -> torch.Tensor:
        assert num_tokens > 0
        buffer = self._buffer
        if buffer is not None and num_tokens <= buffer.shape[0] and dtype == buffer.dtype:
            return buffer[:num_tokens]
        del buffer  # a local reference would keep the old storage alive
        return _replace(self, num_tokens, dtype, module.WORKSPACE_DIM, True, publish)[:num_tokens]

    return _reserve


def _build_get_dtype(module, publish):
    def get(self, num_tokens: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        assert num_tokens > 0
        buffer = self._buffer
        if buffer is not None and num_tokens <= buffer.shape[0] and dtype == buffer.dtype:
            return buffer[:num_tokens]
        del buffer
        return _replace(self, num_tokens, dtype, module.WORKSPACE_DIM, False, publish)[:num_tokens]

    return get


def _build_get_bf16(module, publish):
    def get(self, num_tokens: int) -> torch.Tensor:
        assert num_tokens > 0
        buffer = self._buffer
        if buffer is not None and num_tokens <= buffer.shape[0]:
            return buffer[:num_tokens]
        del buffer
        return _replace(self, num_tokens, torch.bfloat16, module.WORKSPACE_DIM, False, publish)[
            :num_tokens
        ]

    return get
