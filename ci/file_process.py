"""The process one registered test file runs in under ``ci run``: ``python FILE ARGS...`` with
CUDA left uninitialised through the imports, and a record of what the process ran with.

Run as ``python ci/file_process.py --environment-fd N FILE ARGS...`` (by path, so it works from
any checkout): it runs FILE as ``__main__`` exactly as ``python FILE ARGS...`` would (same
``sys.argv``, ``sys.path[0]``, exit code), after two changes that leave every answer the same:

- ``PYTORCH_NVML_BASED_CUDA_CHECK=1``, torch's own setting for asking NVML rather than the CUDA
  runtime whether a GPU exists, so ``torch.cuda.is_available()`` does not initialise the driver;
- ``torch.cuda.get_device_name`` answers from NVML while this process has no CUDA context, and
  from CUDA once it has one. sglang 0.5.23 resolves its platform at import time with that call
  (``_is_sail_available``), which otherwise creates a CUDA context in any process that imports it.

So a file can import sglang once and fork a child per CUDA case (each child creates its own CUDA
context and allocator cap), instead of starting an interpreter per case. When NVML cannot answer,
the real call runs: the file then sees an initialised CUDA and starts fresh interpreters, as it
does under upstream's runner. At exit the process writes one JSON object to the fd: torch, CUDA,
GPU, sglang, and the overlay's status as this very process saw them.

Not for anything else: it imports nothing of this project, so it runs PR code's environment only.
"""

import json
import os
import runpy
import sys

WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
NVML_NAME_BYTES = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE


def nvml_device_name(torch, device=None):
    """The device's name from NVML, without a CUDA context; None when NVML cannot say."""
    try:
        from ctypes import CDLL, byref, c_void_p, create_string_buffer

        # torch maps a CUDA index to an NVML one through CUDA_VISIBLE_DEVICES; an unset device
        # is device 0, which is the current device of a process without a context.
        index = torch.cuda._get_nvml_device_index(0 if device is None else device)
        nvml = CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        handle, name = c_void_p(), create_string_buffer(NVML_NAME_BYTES)
        if nvml.nvmlDeviceGetHandleByIndex_v2(index, byref(handle)) != 0:
            return None
        if nvml.nvmlDeviceGetName(handle, name, NVML_NAME_BYTES) != 0:
            return None
        return name.value.decode("utf-8", "replace")
    except Exception:  # no NVML library, an odd torch, a bad index: let CUDA answer
        return None


def defer_cuda_init(torch) -> None:
    """Install the NVML answers on ``torch`` (idempotent)."""
    os.environ[NVML_CHECK_ENV] = "1"
    real = torch.cuda.get_device_name
    if getattr(real, "_answers_from_nvml", False):
        return

    def get_device_name(device=None):
        if not torch.cuda.is_initialized():
            name = nvml_device_name(torch, device)
            if name is not None:
                return name
        return real(device)

    get_device_name._answers_from_nvml = True
    get_device_name.__wrapped__ = real
    torch.cuda.get_device_name = get_device_name


def describe_process() -> dict:
    """What this process ran with; a part that cannot be read says why instead of failing."""
    info: dict = {}
    torch = sys.modules.get("torch")
    if torch is None:
        info["torch_error"] = "torch was not imported"
    else:
        try:
            info["torch"] = torch.__version__
            info["cuda"] = torch.version.cuda
            info["cuda_available"] = torch.cuda.is_available()
            if info["cuda_available"]:
                info["gpu"] = torch.cuda.get_device_name(0)
        except Exception as exc:
            info["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from importlib.metadata import version

        info["sglang"] = version("sglang")
    except Exception:
        info["sglang"] = None
    try:
        import importlib

        info["sglang_path"] = importlib.import_module("sglang").__file__
        # The overlay reports "applied" only once the module it patches is imported; the
        # registered file has imported it already, so this is a dictionary lookup.
        importlib.import_module(WORKSPACE_MODULE)
    except Exception as exc:
        info["sglang_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import sglang_overlay
    except ImportError:
        info["overlay"] = None
    else:
        info["overlay"] = sglang_overlay.status()
    return info


def write_record(fd: int, record: dict) -> None:
    data = json.dumps(record, default=str).encode()
    with os.fdopen(fd, "wb", buffering=0) as channel:
        while data:
            data = data[channel.write(data) :]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--environment-fd":
        print("usage: file_process.py --environment-fd N FILE [ARGS...]", file=sys.stderr)
        return 2
    fd, path, args = int(argv[1]), argv[2], argv[3:]
    try:
        import torch
    except ImportError:
        pass  # the file reports its own missing torch; the record says it was not imported
    else:
        defer_cuda_init(torch)
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as ``python FILE`` sets it
    code = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    finally:
        try:
            write_record(fd, describe_process())
        except Exception as exc:  # never let the record change the file's own result
            print(f"file_process: no environment record: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
