"""The named mutants of each fix of the series, and the registered tests that must kill them.

Data only: a fix is the patch, the upstream file it changes, its registered test files per
backend, the tests unmodified sglang fails, and its mutants (exact substitutions on the fixed
file, each matching once). A preservation test checks what the fix must keep (it passes on
unmodified sglang too) and need not kill a mutant.
"""

from dataclasses import dataclass, field

BACKENDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    edits: tuple  # (old, new) substitutions on the fixed file, each matching once
    killed_by: dict = field(default_factory=dict)  # backend -> the tests that must kill it


@dataclass(frozen=True)
class Fix:
    patch: str
    source: str  # upstream path of the file the fix changes
    module: str
    tests: dict  # backend -> registered test files
    unmodified_killed_by: dict
    mutants: tuple
    preserved_by: tuple = ()  # preservation tests: pass on every variant
    base_file: str = ""  # the base's text in this repository (a cut's), else the installed file
    pins: str = "patches/BASE"  # the BASE that pins it


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

BQ_CPU = "test/registered/unit/layers/attention/test_dsa_q8kv8_born_q_release_order.py"
BQ_CUDA = "test/registered/kernels/ops/attention/test_dsa_q8kv8_born_q_peak.py"
BQ_RELEASE = "            self._q8kv8_born_q_buf = buf = None\n"
BQ_SENTINEL_RELEASE = "            self._q8kv8_born_q_sentinel = buf = None\n"
BQ_CPU_ORDER = (
    "test_more_tokens_release_the_old_born_q_buffer_before_allocating",
    "test_a_new_head_dim_releases_the_old_born_q_buffer_before_allocating",
)
BQ_CPU_SENTINEL = "test_more_tokens_release_the_old_sentinel_before_allocating"
BQ_CUDA_BUF = "test_1024_to_2048_tokens_peaks_at_the_new_72_mib_born_q_buffer"
BQ_CUDA_SENTINEL = "test_1024_to_2048_tokens_peaks_at_the_new_32_mib_sentinel"
BQ_CUDA_FITS = "test_a_call_that_fits_allocates_nothing"

DSA_CPU = "test/registered/unit/layers/attention/test_dsa_q8kv8_release_order.py"
DSA_CUDA = "test/registered/kernels/ops/attention/test_dsa_q8kv8_scratch_peak.py"
DSA_QPAD = "                self._q8kv8_qpad_buf = buf = None\n"
DSA_KV = "            self._q8kv8_kv_buf = kv_buf = None\n"
DSA_OUT = "            self._q8kv8_out_bufs = out_bufs = None\n"
DSA_CPU_QPAD = "test_more_tokens_release_the_old_q_pad_before_allocating"
DSA_CPU_KV = "test_more_kv_rows_release_the_old_kv_buffer_before_allocating"
DSA_CPU_OUT = "test_more_tokens_release_the_old_outputs_before_allocating"
DSA_CPU_FITS = "test_a_call_that_fits_reuses_the_scratch"
# The CUDA tests allow the new scratch + 1 MiB over what the process held before the backend
# (H200: docs/evidence/h200-0.5.23-mutants/mutants-cuda-0007-0009.txt). Tokens 1,024 -> 2,048
# (1,152 KV rows both): q pad 36 -> 72 MiB, outputs 64.5 -> 129, KV rows 0.6; new scratch 201.6.
# Old outputs held: 72 + 0.6 + 64.5 + 129 = 266.1. An old q pad held alone: 36 + 72 + 64.5 + 0.6
# = 173.1, before the outputs grow, under the 201.6 the call reaches anyway: no CUDA test sees it.
# KV rows 65,664 -> 131,200 (64 tokens): 36.1 -> 72.1 beside 6.3 of q pad and outputs, old held
# 114.4 against 78.4. The call that fits (2,048 then 1,024 tokens) keeps references to the q pad
# and KV rows it had and checks both by identity; the outputs it does not check, and smaller new
# ones, allocated after the old are freed, raise no peak.
DSA_CUDA_TOKENS = "test_1024_to_2048_tokens_peaks_at_the_new_scratch"
DSA_CUDA_KV = "test_65536_to_131072_kv_rows_peaks_at_the_new_scratch"
DSA_CUDA_FITS = "test_a_call_that_fits_allocates_no_scratch"


def released_before_the_reuse_check(release: str, read: str) -> tuple:
    """Edits that release a buffer on every call, before the check that would reuse it."""
    attribute = release.split(" = ")[0].strip()
    indent = read[: len(read) - len(read.lstrip())]
    return ((release, ""), (read, f"{indent}{attribute} = None\n" + read))


DSV4Q_CPU = "test/registered/unit/layers/attention/test_dsv4_q8kv8_qpad_release_order.py"
DSV4Q_CUDA = "test/registered/kernels/ops/attention/dsv4/test_dsv4_q8kv8_qpad_peak.py"
DSV4Q_RELEASE = "            self._q8kv8_qpad_buf = qpad = None\n"
DSV4Q_CPU_ORDER = "test_more_tokens_release_the_old_q_pad_before_allocating"
DSV4Q_CPU_FITS = "test_a_call_that_fits_reuses_the_q_pad"
# 2,048 -> 4,096 tokens: 64 -> 128 MiB, old held 192; a call that fits is checked by identity.
DSV4Q_CUDA_GROW = "test_2048_to_4096_tokens_peaks_at_the_new_128_mib"
DSV4Q_CUDA_FITS = "test_a_call_that_fits_allocates_no_q_pad"

CUT = "patches/cuts/per-ratio-workspace/"  # fix 0001 cut for upstream main at 02e8ed1b
PR_CPU = (
    CUT + "test/registered/unit/layers/attention/test_dsv4_per_ratio_workspace_release_order.py"
)
PR_CUDA = (
    CUT + "test/registered/kernels/ops/attention/dsv4/test_dsv4_per_ratio_workspace_replacement.py"
)
PR_RELEASE = "            self._buffer = None\n            self.generation += 1\n"
PR_ORDER = (
    "test_growing_releases_the_old_workspace_before_allocating",
    "test_changing_dtype_releases_the_old_workspace_before_allocating",
)
PR_KEY = (
    "test_growing_at_the_same_address_invalidates_the_cached_prefix",
    "test_changing_dtype_at_the_same_address_invalidates_the_cached_prefix",
)
PR_CUDA_PEAK = ("test_grow_64_to_96_mib_peaks_at_96_mib",)
PR_CUDA_KEY = ("test_bf16_to_fp8_in_the_freed_block_invalidates_the_cached_prefix",)
PR_FITS = ("test_a_request_that_fits_keeps_the_workspace_and_its_prefix",)
PER_RATIO = Fix(
    patch=CUT + "patches/0001-dsv4-per-ratio-release-first-and-invalidate.patch",
    source="python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py",
    module="sglang.srt.layers.attention.dsv4.sparse_prefill_utils",
    tests={"cpu": (PR_CPU,), "cuda": (PR_CUDA,)},
    unmodified_killed_by={
        "cpu": (*PR_ORDER, *PR_KEY, *PR_FITS),
        "cuda": PR_CUDA_PEAK + PR_CUDA_KEY,
    },
    mutants=(
        Mutant(
            "release-first-alone",
            "releases the workspace first but never bumps the generation",
            (("            self.generation += 1\n", ""),),
            {"cpu": PR_KEY, "cuda": PR_CUDA_KEY},
        ),
        Mutant(
            "generation-without-release",
            "bumps the generation but allocates while holding the old workspace",
            ((PR_RELEASE, "            self.generation += 1\n"),),
            {"cpu": PR_ORDER, "cuda": PR_CUDA_PEAK},
        ),
        Mutant(
            "old-workspace-kept-in-a-local",
            "clears the attribute but keeps the old workspace in a local while allocating",
            (
                (
                    "            self._buffer = None\n",
                    "            old, self._buffer = self._buffer, None\n",
                ),
            ),
            {"cpu": PR_ORDER, "cuda": PR_CUDA_PEAK},
        ),
        Mutant(
            "released-on-growth-only",
            "releases the workspace when it grows, not when the dtype changes",
            (
                (
                    "            self._buffer = None\n",
                    "            if num_tokens > current_capacity:\n                self._buffer = None\n",
                ),
            ),
            {"cpu": PR_ORDER[1:]},
        ),
        Mutant(
            "generation-bumped-on-growth-only",
            "bumps the generation when the workspace grows, not when the dtype changes",
            (
                (
                    "            self.generation += 1\n",
                    "            if num_tokens > current_capacity:\n                self.generation += 1\n",
                ),
            ),
            {"cpu": PR_KEY[1:], "cuda": PR_CUDA_KEY},
        ),
        Mutant(
            "released-before-the-capacity-check",
            "releases and bumps on every request, so one that fits reallocates",
            (
                (
                    "        assert num_tokens > 0\n",
                    "        assert num_tokens > 0\n        self._buffer = None\n        self.generation += 1\n",
                ),
            ),
            {"cpu": PR_FITS},
        ),
    ),
    base_file="tests/fixtures/upstream_main/sparse_prefill_utils-02e8ed1b.py.txt",
    pins=CUT + "patches/BASE",
)

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
    "0007": Fix(
        patch="patches/0007-dsa-q8kv8-release-first.patch",
        source="python/sglang/srt/layers/attention/dsa_backend.py",
        module="sglang.srt.layers.attention.dsa_backend",
        tests={"cpu": (DSA_CPU,), "cuda": (DSA_CUDA,)},
        unmodified_killed_by={
            "cpu": (DSA_CPU_QPAD, DSA_CPU_KV, DSA_CPU_OUT),
            "cuda": (DSA_CUDA_TOKENS, DSA_CUDA_KV),
        },
        preserved_by=("test_after_a_grow_the_kernel_reads_zero_pads_and_this_calls_rows",),
        mutants=(
            Mutant(
                "q-pad-fixed-others-not",
                "releases the q pad first, allocates the KV rows and outputs holding the old",
                ((DSA_KV, ""), (DSA_OUT, "")),
                {"cpu": (DSA_CPU_KV, DSA_CPU_OUT), "cuda": (DSA_CUDA_TOKENS, DSA_CUDA_KV)},
            ),
            Mutant(
                "kv-rows-fixed-others-not",
                "releases the KV rows first, allocates the q pad and outputs holding the old",
                ((DSA_QPAD, ""), (DSA_OUT, "")),
                {"cpu": (DSA_CPU_QPAD, DSA_CPU_OUT), "cuda": (DSA_CUDA_TOKENS,)},
            ),
            Mutant(
                "outputs-fixed-others-not",
                "releases the outputs first, allocates the q pad and KV rows holding the old",
                ((DSA_QPAD, ""), (DSA_KV, "")),
                {"cpu": (DSA_CPU_QPAD, DSA_CPU_KV), "cuda": (DSA_CUDA_KV,)},
            ),
            Mutant(
                "q-pad-attribute-cleared-local-kept",
                "clears the q pad attribute, keeps the old q pad in the local while allocating",
                ((DSA_QPAD, "                self._q8kv8_qpad_buf = None\n"),),
                {"cpu": (DSA_CPU_QPAD,)},
            ),
            Mutant(
                "kv-rows-attribute-cleared-local-kept",
                "clears the KV rows attribute, keeps the old rows in the local while allocating",
                ((DSA_KV, "            self._q8kv8_kv_buf = None\n"),),
                {"cpu": (DSA_CPU_KV,), "cuda": (DSA_CUDA_KV,)},
            ),
            Mutant(
                "outputs-attribute-cleared-local-kept",
                "clears the outputs attribute, keeps the old outputs in the local while allocating",
                ((DSA_OUT, "            self._q8kv8_out_bufs = None\n"),),
                {"cpu": (DSA_CPU_OUT,), "cuda": (DSA_CUDA_TOKENS,)},
            ),
            Mutant(
                "locals-cleared-attributes-kept",
                "clears the three locals, keeps each old buffer in its attribute while allocating",
                (
                    (DSA_QPAD, "                buf = None\n"),
                    (DSA_KV, "            kv_buf = None\n"),
                    (DSA_OUT, "            out_bufs = None\n"),
                ),
                {
                    "cpu": (DSA_CPU_QPAD, DSA_CPU_KV, DSA_CPU_OUT),
                    "cuda": (DSA_CUDA_TOKENS, DSA_CUDA_KV),
                },
            ),
            Mutant(
                "q-pad-released-before-the-reuse-check",
                "releases the q pad on every call, so a call that fits reallocates (and zeroes) it",
                released_before_the_reuse_check(
                    DSA_QPAD, "            buf = self._q8kv8_qpad_buf\n"
                ),
                {"cpu": (DSA_CPU_FITS,), "cuda": (DSA_CUDA_FITS,)},
            ),
            Mutant(
                "kv-rows-released-before-the-reuse-check",
                "releases the KV rows on every call, so a call that fits reallocates them",
                released_before_the_reuse_check(DSA_KV, "        kv_buf = self._q8kv8_kv_buf\n"),
                {"cpu": (DSA_CPU_FITS,), "cuda": (DSA_CUDA_FITS,)},
            ),
            Mutant(
                "outputs-released-before-the-reuse-check",
                "releases the outputs on every call, so a call that fits reallocates them",
                released_before_the_reuse_check(
                    DSA_OUT, "        out_bufs = self._q8kv8_out_bufs\n"
                ),
                {"cpu": (DSA_CPU_FITS,)},
            ),
            Mutant(
                "released-with-del",
                "deletes the attributes (del self.x, x) instead of clearing them, so a failed"
                " allocation leaves a backend whose next call raises AttributeError",
                (
                    (DSA_QPAD, "                del self._q8kv8_qpad_buf, buf\n"),
                    (DSA_KV, "            del self._q8kv8_kv_buf, kv_buf\n"),
                    (DSA_OUT, "            del self._q8kv8_out_bufs, out_bufs\n"),
                ),
                {"cpu": ("test_a_failed_grow_leaves_a_backend_that_serves_the_next_call",)},
            ),
        ),
    ),
    "0009": Fix(
        patch="patches/0009-dsv4-q8kv8-qpad-release-first.patch",
        source="python/sglang/srt/layers/attention/deepseek_v4_backend.py",
        module="sglang.srt.layers.attention.deepseek_v4_backend",
        tests={"cpu": (DSV4Q_CPU,), "cuda": (DSV4Q_CUDA,)},
        unmodified_killed_by={"cpu": (DSV4Q_CPU_ORDER,), "cuda": (DSV4Q_CUDA_GROW,)},
        preserved_by=(
            "test_after_a_grow_the_kernel_reads_zero_pads_and_this_calls_q",
            "test_a_failed_grow_leaves_a_backend_that_serves_the_next_call",
        ),
        mutants=(
            Mutant(
                "attribute-cleared-local-kept",
                "clears the attribute, keeps the old q pad in the local while allocating",
                ((DSV4Q_RELEASE, "            self._q8kv8_qpad_buf = None\n"),),
                {"cpu": (DSV4Q_CPU_ORDER,), "cuda": (DSV4Q_CUDA_GROW,)},
            ),
            Mutant(
                "local-cleared-attribute-kept",
                "clears the local, keeps the old q pad in the attribute while allocating",
                ((DSV4Q_RELEASE, "            qpad = None\n"),),
                {"cpu": (DSV4Q_CPU_ORDER,), "cuda": (DSV4Q_CUDA_GROW,)},
            ),
            Mutant(
                "released-before-the-reuse-check",
                "releases the q pad on every call, so a call that fits reallocates it",
                released_before_the_reuse_check(
                    DSV4Q_RELEASE, '        qpad = getattr(self, "_q8kv8_qpad_buf", None)\n'
                ),
                {"cpu": (DSV4Q_CPU_FITS,), "cuda": (DSV4Q_CUDA_FITS,)},
            ),
        ),
    ),
    "0011": Fix(
        patch="patches/0011-dsa-q8kv8-born-q-release-first.patch",
        source="python/sglang/srt/layers/attention/dsa_backend.py",
        module="sglang.srt.layers.attention.dsa_backend",
        tests={"cpu": (BQ_CPU,), "cuda": (BQ_CUDA,)},
        unmodified_killed_by={
            "cpu": (*BQ_CPU_ORDER, BQ_CPU_SENTINEL),
            "cuda": (BQ_CUDA_BUF, BQ_CUDA_SENTINEL),
        },
        preserved_by=(
            "test_after_a_grow_the_born_q_buffer_is_zero_and_the_sentinel_nan",
            "test_a_failed_grow_leaves_a_backend_that_serves_the_next_call",
        ),
        mutants=(
            Mutant(
                "born-q-attribute-cleared-local-kept",
                "clears the born-q attribute, keeps the old buffer in the local while allocating",
                ((BQ_RELEASE, "            self._q8kv8_born_q_buf = None\n"),),
                {"cpu": BQ_CPU_ORDER, "cuda": (BQ_CUDA_BUF,)},
            ),
            Mutant(
                "born-q-local-cleared-attribute-kept",
                "clears the local, keeps the old born-q buffer in the attribute while allocating",
                ((BQ_RELEASE, "            buf = None\n"),),
                {"cpu": BQ_CPU_ORDER, "cuda": (BQ_CUDA_BUF,)},
            ),
            Mutant(
                "sentinel-fixed-buffer-not",
                "releases the sentinel first, allocates the born-q buffer while holding the old",
                ((BQ_RELEASE, ""),),
                {"cpu": BQ_CPU_ORDER, "cuda": (BQ_CUDA_BUF,)},
            ),
            Mutant(
                "buffer-fixed-sentinel-not",
                "releases the born-q buffer first, allocates the sentinel while holding the old",
                ((BQ_SENTINEL_RELEASE, ""),),
                {"cpu": (BQ_CPU_SENTINEL,), "cuda": (BQ_CUDA_SENTINEL,)},
            ),
            Mutant(
                "sentinel-attribute-cleared-local-kept",
                "clears the sentinel attribute, keeps the old sentinel in the local",
                ((BQ_SENTINEL_RELEASE, "            self._q8kv8_born_q_sentinel = None\n"),),
                {"cpu": (BQ_CPU_SENTINEL,), "cuda": (BQ_CUDA_SENTINEL,)},
            ),
            Mutant(
                "born-q-released-on-growth-only",
                "releases the born-q buffer when the tokens grow, not when head_dim changes",
                (
                    (
                        BQ_RELEASE,
                        "            if buf is None or buf.shape[0] < num_tokens:\n"
                        "                self._q8kv8_born_q_buf = buf = None\n",
                    ),
                ),
                {"cpu": BQ_CPU_ORDER[1:]},
            ),
            Mutant(
                "born-q-released-before-the-reuse-check",
                "releases the born-q buffer on every call, so a call that fits reallocates",
                (
                    (BQ_RELEASE, ""),
                    (
                        "        buf = self._q8kv8_born_q_buf\n",
                        "        self._q8kv8_born_q_buf = None\n        buf = self._q8kv8_born_q_buf\n",
                    ),
                ),
                {
                    "cpu": ("test_a_call_that_fits_reuses_the_born_q_buffer",),
                    "cuda": (BQ_CUDA_FITS,),
                },
            ),
            Mutant(
                "sentinel-released-before-the-reuse-check",
                "releases the sentinel on every call, so a call that fits reallocates",
                (
                    (BQ_SENTINEL_RELEASE, ""),
                    (
                        "        buf = self._q8kv8_born_q_sentinel\n",
                        "        self._q8kv8_born_q_sentinel = None\n"
                        "        buf = self._q8kv8_born_q_sentinel\n",
                    ),
                ),
                {"cpu": ("test_a_call_that_fits_reuses_the_sentinel",), "cuda": (BQ_CUDA_FITS,)},
            ),
        ),
    ),
    "0001-per-ratio": PER_RATIO,
}
