"""The patched class, driven by random request sequences, against a small reference model."""

import logging
import weakref
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sglang_overlay

DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.float32)


# imported on the worker that runs this module only (sglang costs a collection 5 CPU-s)
@pytest.fixture(scope="module")
def workspace_module():
    from sglang.srt.layers.attention.dsv4 import sparse_prefill_utils

    records = sglang_overlay.apply()
    assert records[0]["state"] == "applied", records
    return sparse_prefill_utils


@dataclass
class WorkspaceModel:
    """Reuse when rows and dtype fit, else replace; kept views keep their bytes."""

    capacity: int = 0
    dtype: "torch.dtype | None" = None
    retained: list = field(default_factory=list)

    def expect_reuse(self, num_tokens, dtype) -> bool:
        return num_tokens <= self.capacity and dtype == self.dtype

    def observe(self, num_tokens, dtype, reused):
        if not reused:
            self.capacity, self.dtype = num_tokens, dtype


requests = st.lists(
    st.tuples(st.integers(1, 2048), st.sampled_from(DTYPES), st.booleans()),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_random_request_sequences_match_the_reference_model(workspace_module, sequence):
    workspace = workspace_module.SparsePrefillKVBuffer(torch.device("cpu"))
    model = WorkspaceModel()
    previous = None
    for step, (num_tokens, dtype, retain) in enumerate(sequence):
        expect_reuse = model.expect_reuse(num_tokens, dtype)
        rows = workspace.get(num_tokens, dtype)
        assert rows.shape == (num_tokens, 1, workspace_module.WORKSPACE_DIM) and rows.dtype == dtype
        # Identity, not address: released first, a new buffer may get the old address back.
        reused = previous is not None and workspace._buffer is previous()
        assert reused == expect_reuse, f"step {step}: reuse {reused}, model says {expect_reuse}"
        model.observe(num_tokens, dtype, reused)
        previous = weakref.ref(workspace._buffer)
        live = workspace._buffer.untyped_storage().data_ptr()
        # Views kept from replaced buffers own their storage: nothing may change their bytes.
        for view, snapshot in model.retained:
            if view.untyped_storage().data_ptr() != live:
                assert torch.equal(view.view(torch.uint8), snapshot), f"step {step}: view changed"
        rows.view(torch.uint8).fill_(step % 251)  # the caller overwrites what it reads
        if retain:
            model.retained.append((rows, None))
        # Views of the live buffer are the caller's scratch: their bytes are what it last wrote.
        model.retained = [
            (v, v.view(torch.uint8).clone() if v.untyped_storage().data_ptr() == live else s)
            for v, s in model.retained
        ]
        del rows


def test_get_with_head_reports_filled_only_for_the_same_source_in_the_same_storage(
    workspace_module,
):
    workspace = workspace_module.SparsePrefillKVBuffer(torch.device("cpu"))
    key = ("cache", 1, "indices", 2)
    first, filled = workspace.get_with_head(1024, key)
    assert not filled
    again, filled = workspace.get_with_head(512, key)
    assert filled and again.data_ptr() == first.data_ptr()
    del first, again
    grown, filled = workspace.get_with_head(4096, key)
    assert not filled, "a replacement must forget the head, wherever the new storage lands"
    _, filled = workspace.get_with_head(4096, key)
    assert filled


def test_each_replacement_logs_one_line_with_old_and_new_size_and_dtype(
    workspace_module, caplog, monkeypatch
):
    from sglang_overlay import release_first
    from sglang_overlay.observe import ReplacementLog

    fresh = ReplacementLog("DSV4 sparse-prefill workspace")  # its high-water mark at zero
    monkeypatch.setitem(release_first.LOGS, sglang_overlay.PATCH_ID, fresh)
    workspace = workspace_module.SparsePrefillKVBuffer(torch.device("cpu"))
    with caplog.at_level(logging.DEBUG, logger="sglang_overlay"):
        workspace.get(2048, torch.bfloat16)
        workspace.get(1024, torch.bfloat16)  # reuse: no line
        workspace.get(2048, torch.float8_e4m3fn)
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if "workspace replaced" in r.getMessage()
    ]
    assert lines == [
        (
            "INFO",
            "DSV4 sparse-prefill workspace replaced (release-first): none -> "
            "[2048, 1, 512] torch.bfloat16 2.0 MiB; high-water now 2.0 MiB",
        ),
        (
            "DEBUG",
            "DSV4 sparse-prefill workspace replaced (release-first): [2048, 1, 512] "
            "torch.bfloat16 2.0 MiB -> [2048, 1, 512] torch.float8_e4m3fn 1.0 MiB",
        ),
    ]
