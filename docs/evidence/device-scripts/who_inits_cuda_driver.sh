#!/usr/bin/env bash
. "$(dirname "$0")/preamble.sh"
cat > /tmp/who.py <<'PY'
import builtins, os, sys, traceback
def cuda_thread():
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("cuda"):
                    return True
        except OSError:
            pass
    return False
import torch
print("after import torch:", cuda_thread())
torch.cuda.device_count(); print("after device_count (NVML):", cuda_thread())
sys.path.insert(0, os.getcwd())
from ci import file_process; file_process.defer_cuda_init(torch)
print("nvml name:", torch.cuda.get_device_name(), "thread:", cuda_thread())
real = builtins.__import__
found = []
def traced(name, *a, **k):
    module = real(name, *a, **k)
    if not found and cuda_thread():
        found.append(name)
        print("== first import after which a cuda driver thread exists:", name)
        print("".join(traceback.format_stack(limit=14)))
    return module
builtins.__import__ = traced
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils
builtins.__import__ = real
print("end:", cuda_thread(), "torch initialised:", torch.cuda.is_initialized())
PY
PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 /tmp/who.py 2>&1 | grep -v "Warning\|warn("
