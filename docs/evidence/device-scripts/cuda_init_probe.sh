#!/usr/bin/env bash
# Which import of sglang's DSV4 module initialises CUDA? (so a preloaded parent could fork)
. "$(dirname "$0")/preamble.sh"
cd /tmp && python3 - <<'PY'
import time, traceback, torch, torch.cuda
orig = torch.cuda._lazy_init
def traced():
    if not torch.cuda.is_initialized():
        print("== CUDA initialised here:"); traceback.print_stack(limit=25)
    return orig()
torch.cuda._lazy_init = traced
t = time.time()
import sglang
print("sglang", round(time.time() - t, 2), torch.cuda.is_initialized())
for name in ("sglang.srt.utils.common", "sglang.kernels.ops.attention.dsv4.dequant_k_cache",
             "sglang.kernels.ops.attention.dsv4.sparse_prefill_kernels",
             "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"):
    t = time.time()
    try:
        __import__(name)
    except Exception as exc:
        print(name, "failed", exc)
    print(name, round(time.time() - t, 2), "initialised:", torch.cuda.is_initialized())
PY
