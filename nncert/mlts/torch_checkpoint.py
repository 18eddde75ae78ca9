"""Read a PyTorch checkpoint (``torch.save`` of a state dict) into numpy arrays, without torch.

Two on-disk formats exist:

- **zip** (torch >= 1.6): a zip archive ``<name>/data.pkl`` (the pickled object) plus
  ``<name>/data/<key>``, one raw little-endian file per storage;
- **legacy** (older torch, and many published checkpoints): five concatenated pickles — a
  magic number, the protocol version (1001), system information, the object, the list of
  storage keys — then each storage in that order as an int64 element count and its bytes.

In both, a tensor is pickled as ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)`` whose storage is a persistent id ``("storage", <torch.XStorage>, key, location,
numel[, view])``. The unpickler here resolves only those globals (and OrderedDict): a
checkpoint that names anything else is refused, never executed. The element type comes from
the storage class, the shape, strides and offset (in elements) from the rebuild arguments.
"""

from __future__ import annotations

import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import IO, Any

import numpy as np

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

#: torch storage class -> element type (BFloat16 is read as uint16 and widened to float32).
STORAGE_DTYPES: dict[str, np.dtype] = {name: np.dtype(dt) for name, dt in {
    "DoubleStorage": "<f8", "FloatStorage": "<f4", "HalfStorage": "<f2", "BFloat16Storage": "<u2",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1", "BoolStorage": "?",
}.items()}


class CheckpointError(ValueError):
    """A file that is not a torch checkpoint this reader understands."""


class _Storage:
    def __init__(self, kind: str, key: str, numel: int) -> None:
        if kind not in STORAGE_DTYPES:
            raise CheckpointError(f"storage type torch.{kind} is not supported "
                                  f"(known: {', '.join(STORAGE_DTYPES)})")
        self.dtype = STORAGE_DTYPES[kind]
        self.bfloat16 = kind == "BFloat16Storage"
        self.key = key
        self.numel = int(numel)
        self.view: tuple[int, int] | None = None  # legacy views: (offset, size) into the root
        self.data: np.ndarray | None = None


class _Tensor:
    """A tensor whose storage is read after the pickle (the legacy format stores data last)."""

    def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple) -> None:
        self.storage, self.offset, self.size, self.stride = storage, int(offset), tuple(size), tuple(stride)

    def array(self, roots: dict[str, _Storage]) -> np.ndarray:
        root = roots[self.storage.key]
        flat = root.data
        if flat is None:
            raise CheckpointError(f"storage {self.storage.key} has no data")
        base = self.offset
        if self.storage.view is not None:
            base += self.storage.view[0]
        count = int(np.prod(self.size)) if self.size else 1
        last = base + sum((n - 1) * s for n, s in zip(self.size, self.stride, strict=True)) if count else base
        if count and (base < 0 or last >= flat.size):
            raise CheckpointError(f"tensor of size {list(self.size)} overruns storage {self.storage.key} "
                                  f"({flat.size} elements)")
        item = flat.itemsize
        arr = np.lib.stride_tricks.as_strided(flat[base:], self.size, tuple(s * item for s in self.stride))
        arr = np.array(arr)  # own, contiguous, writeable
        if self.storage.bfloat16:
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr


def _rebuild_tensor_v2(storage: _Storage, offset: int, size: tuple, stride: tuple, *_: Any) -> _Tensor:
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data: _Tensor, *_: Any) -> _Tensor:
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name.endswith("Storage"):
            return name  # resolved by persistent_load from the name
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            raise CheckpointError(f"checkpoint refers to {module}.{name}, which a state dict of "
                                  f"tensors does not need") from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage" or len(pid) < 5:
            raise CheckpointError(f"unsupported persistent id {pid!r}")
        kind, key, numel = pid[1], str(pid[2]), pid[4]
        view = pid[5] if len(pid) > 5 else None
        root = self.storages.get(key)
        if root is None:
            root = self.storages[key] = _Storage(kind, key, numel)
        if view is None:
            return root
        # Legacy storage view: (view key, offset, size) into the root storage.
        _, offset, size = view
        st = _Storage(kind, key, size)
        st.view = (int(offset), int(size))
        return st


def _resolve(obj: Any, roots: dict[str, _Storage]) -> Any:
    if isinstance(obj, _Tensor):
        return obj.array(roots)
    if isinstance(obj, dict):
        return {k: _resolve(v, roots) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_resolve(v, roots) for v in obj)
    return obj


def _load_zip(path: str | os.PathLike) -> Any:
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pkl) != 1:
            raise CheckpointError(f"{path}: a torch zip checkpoint has one data.pkl, found {len(pkl)}")
        prefix = pkl[0][: -len("data.pkl")]
        with z.open(pkl[0]) as f:
            up = _Unpickler(f)
            obj = up.load()
        roots = up.storages
        for key, st in roots.items():
            try:
                raw = z.read(f"{prefix}data/{key}")
            except KeyError:
                raise CheckpointError(f"{path}: storage file {prefix}data/{key} is missing") from None
            if len(raw) < st.numel * st.dtype.itemsize:
                raise CheckpointError(f"{path}: storage {key} has {len(raw)} bytes, needs "
                                      f"{st.numel * st.dtype.itemsize}")
            st.data = np.frombuffer(raw, st.dtype, st.numel)
    return _resolve(obj, roots)


def _load_legacy(path: str | os.PathLike) -> Any:
    with open(path, "rb") as f:
        try:
            magic = pickle.load(f)
        except Exception as e:
            raise CheckpointError(f"{path}: neither a zip nor a legacy torch checkpoint ({e})") from None
        if magic != _LEGACY_MAGIC:
            raise CheckpointError(f"{path}: not a torch checkpoint (bad magic number)")
        if pickle.load(f) != _LEGACY_PROTOCOL:
            raise CheckpointError(f"{path}: unsupported legacy protocol version")
        info = pickle.load(f)
        if not info.get("little_endian", True):
            raise CheckpointError(f"{path}: big-endian checkpoints are not supported")
        up = _Unpickler(f)
        obj = up.load()
        keys = pickle.load(f)
        roots = up.storages
        for key in keys:
            st = roots.get(str(key))
            (numel,) = struct.unpack("<q", f.read(8))
            if st is None:
                raise CheckpointError(f"{path}: data for storage {key} that no tensor uses")
            raw = f.read(numel * st.dtype.itemsize)
            if len(raw) < numel * st.dtype.itemsize:
                raise CheckpointError(f"{path}: storage {key} is truncated")
            st.data = np.frombuffer(raw, st.dtype, numel)
    return _resolve(obj, roots)


def load_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a torch checkpoint holding a state dict (or ``{"state_dict": ...}``),
    by name, as numpy arrays of the stored dtype and shape."""
    obj = _load_zip(path) if zipfile.is_zipfile(path) else _load_legacy(path)
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    out = {str(k): v for k, v in obj.items() if isinstance(v, np.ndarray)}
    if not out:
        raise CheckpointError(f"{path}: holds no tensors")
    return out
