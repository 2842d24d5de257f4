"""The process one registered test file runs in under ``ci run``: ``python FILE ARGS...`` with
CUDA left uninitialised through the imports, and a record of what the process ran with.

Run as ``python ci/file_process.py --environment-fd N FILE ARGS...`` (by path, so it works from
any checkout): it runs FILE as ``__main__`` exactly as ``python FILE ARGS...`` would (the same
``sys.argv``, ``sys.path[0]`` (the file's real directory), absolute ``__file__``, loader and
builtins, exit code; the file stays ``__main__`` for its threads and atexit handlers), after two
changes that leave every answer the same:

- ``PYTORCH_NVML_BASED_CUDA_CHECK=1``, torch's own setting for asking NVML rather than the CUDA
  runtime whether a GPU exists, so ``torch.cuda.is_available()`` does not initialise the driver;
- ``torch.cuda.get_device_name`` answers from NVML while this process has no CUDA context, and
  from CUDA once it has one. sglang 0.5.23 resolves its platform at import time with that call
  (``_is_sail_available``), which otherwise creates a CUDA context in any process that imports it.

torch itself is imported by the file, when the file imports it (what the file sets up first,
``OMP_NUM_THREADS`` or ``TORCH_LOGS``, still counts): a finder first on ``sys.meta_path`` puts
the NVML answer in place the moment torch has run, before anything that imported it can ask.
So a file can import sglang once and fork a child per CUDA case (each child creates its own CUDA
context and allocator cap), instead of starting an interpreter per case. When NVML cannot answer,
the real call runs: the file then sees an initialised CUDA and starts fresh interpreters, as it
does under upstream's runner. When the file's body ends, this process (never a child the file
forked) writes one JSON object to the fd: torch, CUDA, GPU, sglang, and the overlay's status as
this very process saw them; it imports neither torch nor sglang for that, only reads what the
file imported.

Not for anything else: it imports nothing of this project, so it runs PR code's environment only.
"""

import builtins
import json
import os
import sys
import types
from importlib.machinery import SourceFileLoader

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


class AfterTorchRuns:
    """Meta-path finder for ``torch`` alone: hands back torch's own spec with its loader
    wrapped, so ``defer_cuda_init`` runs right after torch has executed. ``find_spec`` imports
    nothing and never touches ``sys.meta_path`` (importlib holds its lock there)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        finders = list(sys.meta_path)  # a snapshot: importlib may be iterating the live list
        for finder in finders[finders.index(self) + 1 if self in finders else 0 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = DeferringLoader(spec.loader)
                return spec
        return None


class DeferringLoader:
    """torch's own loader, then ``defer_cuda_init``; otherwise indistinguishable from it.

    The overlay's start-up hook wraps a loader the same way (``ActivatingLoader``); this one is
    kept apart on purpose: the process that runs the proof must not depend on the package under
    test (the unmodified mode runs with it turned off, and a broken overlay must not break it).
    """

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):
        if name == "loader":  # not set yet (copy, unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # torch sees its real loader, as if this wrapper had never been there.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None and module.__spec__.loader is self:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            defer_cuda_init(module)
        except Exception:  # an odd torch: it then answers as it always does
            pass


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
    # What the file imported, never an import of our own: at exit, that would be seconds of
    # sglang (and its warnings, or a crash) that ``python FILE`` never runs.
    sglang = sys.modules.get("sglang")
    if sglang is None:
        info["sglang_error"] = "this process did not import sglang"
    else:
        info["sglang_path"] = getattr(sglang, "__file__", None)
    overlay = sys.modules.get("sglang_overlay")
    try:
        if overlay is None:
            import sglang_overlay as overlay  # its package: constants and a lazy status()
        info["overlay"] = overlay.status()
    except ImportError:
        info["overlay"] = None
    except Exception as exc:
        info["overlay_error"] = f"{type(exc).__name__}: {exc}"
    return info


def write_record(fd: int, record: dict) -> None:
    data = json.dumps(record, default=str).encode()
    with os.fdopen(fd, "wb", buffering=0) as channel:
        while data:
            data = data[channel.write(data) :]


def run_as_main(path: str) -> None:
    """Run ``path`` as ``python FILE`` does: compiled under its absolute name, in a fresh
    ``__main__`` module that stays in ``sys.modules`` after the body ends."""
    file = os.path.abspath(path)
    try:
        with open(file, "rb") as source:
            text = source.read()
    except OSError as exc:
        print(
            f"{sys.executable}: can't open file {file!r}: [Errno {exc.errno}] {exc.strerror}",
            file=sys.stderr,
        )
        sys.exit(2)
    code = compile(text, file, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=file,
        __cached__=None,
        __builtins__=builtins,
        __loader__=SourceFileLoader("__main__", file),
    )
    sys.modules["__main__"] = main
    exiting = False
    try:
        exec(code, main.__dict__)
    except SystemExit:
        exiting = True  # python FILE exits from inside its run, __file__ still set
        raise
    finally:
        if not exiting:  # once the body has returned or raised, python FILE drops these
            main.__dict__.pop("__file__", None)
            main.__dict__.pop("__cached__", None)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[0] != "--environment-fd":
        print("usage: file_process.py --environment-fd N FILE [ARGS...]", file=sys.stderr)
        sys.exit(2)
    fd, path, args = int(argv[1]), argv[2], argv[3:]
    os.environ[NVML_CHECK_ENV] = "1"
    if "torch" in sys.modules:  # a site hook imported it already
        defer_cuda_init(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, AfterTorchRuns())
    sys.argv = [path, *args]
    if not getattr(sys.flags, "safe_path", False):  # ``python -P`` adds no directory
        sys.path[0] = os.path.dirname(os.path.realpath(path))  # as ``python FILE`` sets it
    started = os.getpid()
    try:
        run_as_main(path)  # SystemExit and any exception end the process as they would there
    finally:
        # A child the file forked that ends through SystemExit comes here too: the record is
        # the starting process's alone. Nothing raised here may replace the file's outcome.
        if os.getpid() == started:
            try:
                write_record(fd, describe_process())
            except BaseException as exc:
                print(f"file_process: no environment record: {exc!r}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
