"""A tiny stand-in ``sglang`` (the patched classes' text byte for byte) and ``torch``."""

import ast
import importlib.util
from pathlib import Path

WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
FUSED_KV_MODULE = "sglang.kernels.ops.speculative.fused_kv_materialize"

TORCH = """
import math

class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize
    def __repr__(self):
        return "torch." + self.name
bfloat16 = dtype("bfloat16", 2)
float8_e4m3fn = dtype("float8_e4m3fn", 1)

class device(str):
    pass

class Tensor:
    def __init__(self, shape, dtype, base=None):
        self.shape, self.dtype, self._base = tuple(shape), dtype, base
    def __getitem__(self, rows):
        count = len(range(*rows.indices(self.shape[0])))
        return Tensor((count,) + self.shape[1:], self.dtype, self._base or self)
    def nelement(self):
        return math.prod(self.shape)
    def element_size(self):
        return self.dtype.itemsize
    def data_ptr(self):
        return id(self._base or self)

def empty(shape, dtype=bfloat16, device=None):
    return Tensor(shape, dtype)

def empty_like(tensor):
    return Tensor(tensor.shape, tensor.dtype)
"""


def real_class_source(module: str, name: str) -> str:
    """Class ``name``'s source in ``module`` of the installed sglang, found without importing."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the stand-in needs an installed sglang 0.5.23 to copy its class")
    path = Path(spec.submodule_search_locations[0], *module.split(".")[1:])
    source = path.with_suffix(".py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ast.get_source_segment(source, node)
    raise RuntimeError(f"no {name} in {path}")


def _edited(class_source: str, edit) -> str:
    if edit:
        assert class_source.count(edit[0]) == 1, f"edit anchor {edit[0]!r} not found exactly once"
        class_source = class_source.replace(*edit)
    return class_source


def _module_file(root: Path, module: str) -> Path:
    parts = module.split(".")
    for depth in range(1, len(parts)):
        package = root.joinpath(*parts[:depth])
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    return root.joinpath(*parts[:-1], parts[-1] + ".py")


def write(root: Path, *, edit=None, fused_edit=None, fused=True) -> Path:
    """The stand-in under ``root``; ``edit``/``fused_edit`` = (old, new); ``fused=False``: none."""
    root.mkdir(parents=True, exist_ok=True)
    class_source = _edited(real_class_source(WORKSPACE_MODULE, "SparsePrefillKVBuffer"), edit)
    workspace_file = _module_file(root, WORKSPACE_MODULE)
    if fused:
        helper = _edited(real_class_source(FUSED_KV_MODULE, "FusedKVMaterializeHelper"), fused_edit)
        _module_file(root, FUSED_KV_MODULE).write_text(
            "from typing import Callable, List, Optional\n\nimport torch\n\n\n" + helper + "\n"
        )
    (root / "sglang" / "version.py").write_text('__version__ = "0.5.23"\n')
    # as sglang's __init__ does: the overlay reads the version from the loaded module
    (root / "sglang" / "__init__.py").write_text("from sglang.version import __version__\n")
    header = "from typing import Optional, Tuple\n\nimport torch\n\nWORKSPACE_DIM = 512\n\n\n"
    workspace_file.write_text(header + class_source + "\n")
    (root / "sglang-0.5.23.dist-info").mkdir(exist_ok=True)
    metadata = "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n"
    (root / "sglang-0.5.23.dist-info" / "METADATA").write_text(metadata)
    (root / "torch").mkdir(exist_ok=True)
    (root / "torch" / "__init__.py").write_text(TORCH)
    return root
