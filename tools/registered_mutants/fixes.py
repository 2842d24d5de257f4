"""The named mutants of each fix of the series, and the registered tests that must kill them.

Data only: a fix is the patch, the upstream file it changes, its registered test files per
backend, the tests unmodified sglang fails, and its mutants (exact substitutions on the fixed
file, each matching once). A preservation test checks what the fix must keep (it passes on
unmodified sglang too) and need not kill a mutant.
"""

from tools.registered_mutants.model import BACKENDS, Fix, Mutant  # noqa: F401 (the table's API)
from tools.registered_mutants.q8kv8_fixes import Q8KV8_FIXES

DSV4_CPU = "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
DSV4_CUDA = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
DSV4_RELEASE = "            self._buffer = None\n"
DSV4_HEAD_FIRST = (
    "            self._head_source = None\n            self._buffer = torch.empty(",
    "            self._buffer = torch.empty(",
)
DSV4_CUDA_DTYPE = (
    "test_replace_48_mib_fp8_with_96_mib_bf16_peaks_at_96_mib",
    "test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib",
)
DSV4_CUDA_ALL = ("test_grow_64_to_96_mib_bf16_peaks_at_96_mib", *DSV4_CUDA_DTYPE)
DSV4_CPU_ORDER = (
    "test_growing_releases_the_old_scratch_before_allocating",
    "test_changing_dtype_releases_the_old_scratch_before_allocating",
)

FKV_CPU = "test/registered/unit/kernels/ops/speculative/test_fused_kv_workspace_release_order.py"
FKV_CUDA = "test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py"
FKV_CLEAR = (
    "        self._proj_workspace = None\n"
    "        self._k_workspace = None\n"
    "        self._v_workspace = None\n"
    "        self._workspace_capacity = 0\n"
    "        self._workspace_dtype = None\n"
)
FKV_CPU_ORDER = (
    "test_growing_releases_the_old_workspaces_before_allocating",
    "test_changing_dtype_releases_the_old_workspaces_before_allocating",
)
FKV_FAILED = "test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype"
FKV_CUDA_ALL = (
    "test_grow_2048_to_4096_tokens_peaks_at_the_new_128_mib",
    "test_float16_to_bfloat16_doubles_and_peaks_at_the_new_128_mib",
)

DFP_CPU = "test/registered/unit/speculative/test_dflash_draft_probs_release_order.py"
DFP_CUDA = "test/registered/spec/dflash/test_dflash_draft_probs_peak.py"
DFP_RELEASE = "            self._draft_probs_buf = buffer = None\n"
DFP_CPU_ORDER = (
    "test_growing_the_batch_releases_the_old_buffer_before_allocating",
    "test_changing_gamma_releases_the_old_buffer_before_allocating",
)
DFP_CUDA_GROW = "test_growing_256_to_257_requests_peaks_at_the_new_128_mib"

FIXES = {
    "0001": Fix(
        patch="patches/0001-dsv4-sparse-prefill-release-first.patch",
        source="python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py",
        module="sglang.srt.layers.attention.dsv4.sparse_prefill_utils",
        tests={"cpu": (DSV4_CPU,), "cuda": (DSV4_CUDA,)},
        unmodified_killed_by={"cpu": DSV4_CPU_ORDER, "cuda": DSV4_CUDA_ALL},
        mutants=(
            Mutant(
                "head-never-cleared",
                "releases the scratch first but never clears the head key on replacement",
                (DSV4_HEAD_FIRST,),
                {"cpu": ("test_a_failed_replacement_keeps_no_head_for_rows_it_dropped",)},
            ),
            Mutant(
                "head-cleared-after-allocating",
                "releases the scratch first, clears the head key after torch.empty",
                (
                    DSV4_HEAD_FIRST,
                    (
                        "            )\n        return self._buffer[:num_tokens]",
                        "            )\n            self._head_source = None\n"
                        "        return self._buffer[:num_tokens]",
                    ),
                ),
                {"cpu": ("test_a_failed_replacement_keeps_no_head_for_rows_it_dropped",)},
            ),
            Mutant(
                "old-scratch-kept-in-a-local",
                "clears the attribute but keeps the old scratch in a local while allocating",
                ((DSV4_RELEASE, "            old_scratch, self._buffer = self._buffer, None\n"),),
                {"cpu": DSV4_CPU_ORDER, "cuda": DSV4_CUDA_ALL},
            ),
            Mutant(
                "released-on-growth-only",
                "releases the scratch when it grows, not when the dtype changes",
                (
                    (
                        DSV4_RELEASE,
                        "            if num_tokens > current_capacity:\n"
                        "                self._buffer = None\n",
                    ),
                ),
                {"cpu": DSV4_CPU_ORDER[1:], "cuda": DSV4_CUDA_DTYPE},
            ),
            Mutant(
                "released-before-the-capacity-check",
                "releases the scratch on every request, so one that fits reallocates",
                (
                    (
                        "        assert num_tokens > 0\n",
                        "        assert num_tokens > 0\n" + DSV4_RELEASE[4:],
                    ),
                ),
                {"cpu": ("test_a_request_that_fits_keeps_the_scratch",)},
            ),
            Mutant(
                "grown-in-place",
                "grows the old scratch in place (Tensor.resize_) under views callers hold",
                (
                    (
                        DSV4_RELEASE,
                        "            if self._buffer is not None and dtype == current_dtype:\n"
                        "                self._head_source = None\n"
                        "                self._buffer.resize_((num_tokens, 1, WORKSPACE_DIM))\n"
                        "                return self._buffer[:num_tokens]\n" + DSV4_RELEASE,
                    ),
                ),
                {
                    "cpu": (
                        DSV4_CPU_ORDER[0],
                        "test_a_view_held_across_a_replacement_keeps_its_values",
                    ),
                    "cuda": DSV4_CUDA_ALL[:1],
                },
            ),
        ),
    ),
    "0003": Fix(
        patch="patches/0003-fused-kv-workspace-release-first.patch",
        source="python/sglang/kernels/ops/speculative/fused_kv_materialize.py",
        module="sglang.kernels.ops.speculative.fused_kv_materialize",
        tests={"cpu": (FKV_CPU,), "cuda": (FKV_CUDA,)},
        unmodified_killed_by={"cpu": (*FKV_CPU_ORDER, FKV_FAILED), "cuda": FKV_CUDA_ALL},
        mutants=(
            Mutant(
                "only-the-projection-released",
                "releases one of the three workspaces (the projection) before allocating",
                (
                    (
                        "        self._k_workspace = None\n        self._v_workspace = None\n"
                        "        self._workspace_capacity = 0\n",
                        "        self._workspace_capacity = 0\n",
                    ),
                ),
                {"cpu": FKV_CPU_ORDER, "cuda": FKV_CUDA_ALL},
            ),
            Mutant(
                "old-workspaces-kept-in-locals",
                "clears the attributes but keeps the old workspaces in a local while allocating",
                (
                    (
                        FKV_CLEAR,
                        "        old = (self._proj_workspace, self._k_workspace, self._v_workspace)\n"
                        + FKV_CLEAR,
                    ),
                ),
                {"cpu": FKV_CPU_ORDER, "cuda": FKV_CUDA_ALL},
            ),
            Mutant(
                "capacity-and-dtype-kept",
                "releases the three workspaces but leaves the capacity and the dtype set",
                (
                    (
                        "        self._workspace_capacity = 0\n        self._workspace_dtype = None\n"
                        "        self._proj_workspace = torch.empty(",
                        "        self._proj_workspace = torch.empty(",
                    ),
                ),
                {"cpu": (FKV_FAILED,)},
            ),
            Mutant(
                "released-on-growth-only",
                "releases the workspaces when the capacity grows, not when the dtype changes",
                (
                    (
                        FKV_CLEAR,
                        "        if total_ctx > self._workspace_capacity:\n"
                        + "".join("    " + line + "\n" for line in FKV_CLEAR.splitlines()),
                    ),
                ),
                {"cpu": (FKV_CPU_ORDER[1], FKV_FAILED), "cuda": FKV_CUDA_ALL[1:]},
            ),
            Mutant(
                "released-before-the-reuse-check",
                "releases the workspaces on every batch, so one that fits reallocates",
                (
                    (FKV_CLEAR, ""),
                    (
                        "    def _ensure_workspace(self, total_ctx: int, dtype: torch.dtype) -> None:\n",
                        "    def _ensure_workspace(self, total_ctx: int, dtype: torch.dtype) -> None:\n"
                        + FKV_CLEAR,
                    ),
                ),
                {
                    "cpu": (FKV_CPU_ORDER[0], "test_a_request_that_fits_reuses_the_workspaces"),
                    "cuda": FKV_CUDA_ALL,
                },
            ),
        ),
    ),
    "0005": Fix(
        patch="patches/0005-dflash-draft-probs-release-first.patch",
        source="python/sglang/srt/speculative/dflash_worker_v2.py",
        module="sglang.srt.speculative.dflash_worker_v2",
        tests={"cpu": (DFP_CPU,), "cuda": (DFP_CUDA,)},
        unmodified_killed_by={"cpu": DFP_CPU_ORDER, "cuda": (DFP_CUDA_GROW,)},
        preserved_by=(
            "test_after_a_growth_the_kernel_sees_exactly_this_steps_probabilities",
            "test_a_failed_growth_leaves_a_worker_that_serves_the_next_batch",
        ),
        mutants=(
            Mutant(
                "old-buffer-kept-in-the-local",
                "clears the attribute, keeps the old buffer in the local while allocating",
                ((DFP_RELEASE, "            self._draft_probs_buf = None\n"),),
                {"cpu": DFP_CPU_ORDER, "cuda": (DFP_CUDA_GROW,)},
            ),
            Mutant(
                "old-buffer-kept-in-the-attribute",
                "clears the local, keeps the old buffer in the attribute while allocating",
                ((DFP_RELEASE, "            buffer = None\n"),),
                {"cpu": DFP_CPU_ORDER, "cuda": (DFP_CUDA_GROW,)},
            ),
            Mutant(
                "released-before-the-reuse-check",
                "releases the buffer on every call, so a batch that fits reallocates",
                (
                    (DFP_RELEASE, ""),
                    (
                        "        buffer = self._draft_probs_buf\n",
                        "        self._draft_probs_buf = None\n        buffer = self._draft_probs_buf\n",
                    ),
                ),
                {"cpu": ("test_a_batch_that_fits_reuses_the_buffer",)},
            ),
        ),
    ),
    **Q8KV8_FIXES,
}
