"""The named mutants of the q8kv8 prefill fixes (0007: the DSA scratch, 0009: DSV4's q pad,
0011: the DSA born-fp8 q and its sentinel) and the registered tests that must kill them; the
rest of the table is ``fixes``. Data only, as there.
"""

from tools.registered_mutants.model import Fix, Mutant

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


Q8KV8_FIXES = {
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
}
