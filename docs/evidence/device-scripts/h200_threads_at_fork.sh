#!/usr/bin/env bash
# Device run: which threads the registered file's process has when it forks its cases (Python
# 3.12 warns "multi-threaded, use of fork() may lead to deadlocks").
. "$(dirname "$0")/preamble.sh"
cat > /tmp/threads.py <<'PY'
import os, sys, threading
def threads(when):
    names = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        names[name] = names.get(name, 0) + 1
    print(when, "os threads:", sum(names.values()), dict(sorted(names.items())),
          "python threads:", [t.name for t in threading.enumerate()])
threads("start")
import torch; threads("after import torch")
sys.path.insert(0, os.getcwd())
from ci import file_process; file_process.defer_cuda_init(torch)
from ci import harness
harness.registered(); threads("after importing the registered file (sglang)")
import importlib; importlib.import_module(harness.WORKSPACE_MODULE); threads("after the workspace module")
torch.set_num_threads(1); torch.empty(1).add_(1); threads("after one CPU op")
print("cuda initialised:", torch.cuda.is_initialized())
PY
"$PY" /tmp/threads.py 2>&1 | grep -v Warning
