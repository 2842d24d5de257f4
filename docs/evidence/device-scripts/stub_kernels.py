"""Device-only stand-ins for CUDA kernel packages the H200 image lacks and the 64 MiB carry
cannot bring (sglang-kernel alone is hundreds of MB, built for torch 2.14). Importing sglang's
test utilities on CUDA imports them by name; the registered test never calls them. Each
stand-in module answers every attribute with a placeholder that raises if it is ever called.
Installed by a .pth line (h200_registered.sh); STUB_KERNELS names the packages."""

import importlib.abc
import importlib.machinery
import os
import sys
import types

NAMES = tuple(n for n in os.environ.get("STUB_KERNELS", "").split(",") if n)


class _Placeholder:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"stub {self._name} called")

    def __getattr__(self, name):
        return _Placeholder(f"{self._name}.{name}")

    def __mro_entries__(self, bases):
        return (object,)


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in NAMES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


if NAMES:
    sys.meta_path.append(_Finder())
