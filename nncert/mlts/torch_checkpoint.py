"""Read a PyTorch checkpoint (``torch.save`` of a state dict) into numpy arrays, without torch.

Two on-disk formats exist:

- **zip** (torch >= 1.6): a zip archive ``<name>/data.pkl`` (the pickled object) plus
  ``<name>/data/<key>``, one raw little-endian file per storage;
- **legacy** (older torch, and many published checkpoints): five concatenated pickles — a
  magic number, the protocol version (1001), system information, the object, the list of
  storage keys — then each storage in that order as an int64 element count and its bytes.

In both, a tensor is pickled as ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)`` whose storage is a persistent id ``("storage", <torch.XStorage>, key, location,
numel[, view])``. The element type comes from the storage class, the shape, strides and offset
(in elements) from the rebuild arguments.

A checkpoint is untrusted input, read without running any of it:

- every pickle of the file goes through one restricted unpickler. The object pickle may name
  only the globals of ``_GLOBALS`` and torch storage classes; the other pickles of the legacy
  format may name none (plain ints, strings, lists, dicts...) and each must have the type the
  format gives it. The opcodes are walked before unpickling, so that no memo index or buffer
  length makes the unpickler allocate beyond the pickle's size, and no tuple nests deep
  enough to overflow the C stack when hashed;
- a storage's declared size is checked against the bytes present in the file before it is
  read, and is at most ``MAX_ELEMENTS`` elements;
- a tensor's strides and sizes are non-negative, its element count is at most ``MAX_ELEMENTS``
  and every element it addresses lies inside its storage (or legacy view), checked before
  numpy looks at it; the checked fields cannot be overwritten by pickled state (BUILD);
- all tensors copied out, and the zip members decompressed, together take at most
  ``MATERIALISE_FACTOR`` times the file's size plus ``MATERIALISE_SLACK``, so neither
  stride-0 tensors nor a compressed storage can blow memory up.

Anything else raises ``CheckpointError`` naming the file and what is wrong with it.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import pickletools
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import IO, Any

import numpy as np

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

#: The most elements one storage or one tensor may have (1 GiB of float32); an empty
#: dimension counts as 1, so no dimension exceeds it either.
MAX_ELEMENTS = 2**28
#: The most dimensions a tensor may have (numpy 1.x's limit).
MAX_NDIM = 32
#: Tensors are copied out of their storages; all copies together may take at most this many
#: times the checkpoint's size in bytes, plus MATERIALISE_SLACK (tied or broadcast tensors of a
#: genuine checkpoint stay well below; a header of stride-0 tensors does not).
MATERIALISE_FACTOR = 4
MATERIALISE_SLACK = 2**26

#: torch storage class -> element type (BFloat16 is read as uint16 and widened to float32).
STORAGE_DTYPES: dict[str, np.dtype] = {name: np.dtype(dt) for name, dt in {
    "DoubleStorage": "<f8", "FloatStorage": "<f4", "HalfStorage": "<f2", "BFloat16Storage": "<u2",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1", "BoolStorage": "?",
}.items()}

# Never written by torch.save. Protocol 5 buffers: the unpickler allocates a BYTEARRAY8's
# declared length before reading it.
# Extension codes resolve through copyreg's cache, which may bypass find_class.
_REFUSED_OPCODES = frozenset({"BYTEARRAY8", "NEXT_BUFFER", "READONLY_BUFFER", "EXT1", "EXT2", "EXT4"})
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_NESTING_OPCODES = frozenset({"EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "FROZENSET"})
#: The deepest nesting of tuples a pickle may build (hashing a tuple recurses in C without a
#: depth check: a dict key nested a million deep crashes the process).
MAX_NESTING = 100


class CheckpointError(ValueError):
    """A file that is not a torch checkpoint this reader understands."""


class _NotAPickleError(CheckpointError):
    """Bytes that do not parse as a pickle at all."""


class _Budget:
    """Bytes that may still be allocated for the data of one checkpoint."""

    def __init__(self, file_size: int) -> None:
        self.left = MATERIALISE_FACTOR * file_size + MATERIALISE_SLACK

    def take(self, nbytes: int, what: str) -> None:
        if nbytes > self.left:
            raise CheckpointError(f"{what} needs {nbytes} bytes, more than a checkpoint of this size "
                                  f"may make the reader allocate ({self.left} left)")
        self.left -= nbytes


def _is_int(x: Any) -> bool:
    """An int64, as every count, size, stride and offset of a torch checkpoint is."""
    return isinstance(x, int) and not isinstance(x, bool) and -2**63 <= x < 2**63


def _show(x: Any) -> str:
    """An untrusted value for a message: short, and never a deep repr or a huge int's digits."""
    if isinstance(x, int) and not -2**63 <= x < 2**63:
        return f"an int of {x.bit_length()} bits"
    if isinstance(x, str | bytes):
        return repr(x[:60])
    if isinstance(x, int | float | None):
        return repr(x)
    return f"a {type(x).__name__}"


class _Storage:
    def __init__(self, kind: Any, key: str, numel: Any) -> None:
        if not isinstance(kind, str) or kind not in STORAGE_DTYPES:
            raise CheckpointError(f"storage type {_show(kind)} is not supported "
                                  f"(known: {', '.join(STORAGE_DTYPES)})")
        if not _is_int(numel) or not 0 <= numel <= MAX_ELEMENTS:
            raise CheckpointError(f"storage {key} declares {_show(numel)} elements (at most {MAX_ELEMENTS})")
        self.dtype = STORAGE_DTYPES[kind]
        self.bfloat16 = kind == "BFloat16Storage"
        self.key = key
        self.numel = numel
        self.view: tuple[int, int] | None = None  # legacy views: (offset, size) into the root
        self.data: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        # A BUILD opcode would overwrite the checked fields.
        raise CheckpointError("a storage cannot carry pickled state")


class _Tensor:
    """A tensor whose storage is read after the pickle (the legacy format stores data last)."""

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any) -> None:
        if not isinstance(storage, _Storage):
            raise CheckpointError(f"a tensor's storage is a {type(storage).__name__}, not a storage")
        if not (isinstance(size, tuple | list) and isinstance(stride, tuple | list)
                and len(size) == len(stride) <= MAX_NDIM
                and all(_is_int(n) for n in (offset, *size, *stride))):
            raise CheckpointError(f"tensor on storage {storage.key} has a malformed offset, size or "
                                  f"stride: expected an int and two tuples of at most {MAX_NDIM} "
                                  f"int64s of equal length")
        if offset < 0 or any(n < 0 for n in size) or any(s < 0 for s in stride):
            raise CheckpointError(f"tensor on storage {storage.key} has a negative offset, size or "
                                  f"stride (offset {offset}, size {list(size)}, stride {list(stride)})")
        # Empty dimensions count as 1, so that no dimension exceeds the limit either.
        if math.prod(max(n, 1) for n in size) > MAX_ELEMENTS:
            raise CheckpointError(f"tensor of size {list(size)} on storage {storage.key} has more "
                                  f"than {MAX_ELEMENTS} elements")
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def __setstate__(self, state: Any) -> None:
        raise CheckpointError("a tensor cannot carry pickled state")

    def array(self, roots: dict[str, _Storage], budget: _Budget) -> np.ndarray:
        root = roots.get(self.storage.key)
        if root is None or root.data is None:
            raise CheckpointError(f"storage {self.storage.key} has no data")
        flat = root.data
        out_dtype = np.dtype(np.float32) if root.bfloat16 else flat.dtype
        count = math.prod(self.size)
        budget.take(count * out_dtype.itemsize, f"a tensor of size {list(self.size)}")
        if count == 0:
            return np.empty(self.size, out_dtype)
        start, end = 0, flat.size  # the elements this tensor may address
        if self.storage.view is not None:
            start, view_size = self.storage.view
            end = start + view_size
            if end > flat.size:
                raise CheckpointError(f"view [{start}, {end}) overruns storage {self.storage.key} "
                                      f"({flat.size} elements)")
        # Strides are non-negative, so the last element is the farthest one.
        first = start + self.offset
        last = first + sum((n - 1) * s for n, s in zip(self.size, self.stride, strict=True))
        if last >= end:
            raise CheckpointError(f"tensor of size {list(self.size)}, stride {list(self.stride)} at "
                                  f"offset {self.offset} reaches element {last - start} of storage "
                                  f"{self.storage.key}, which has {end - start}")
        item = flat.itemsize
        arr = np.lib.stride_tricks.as_strided(flat[first:last + 1], self.size,
                                              tuple(s * item for s in self.stride))
        arr = np.array(arr)  # its own copy, writeable (numpy keeps the stride order)
        if root.bfloat16:
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> _Tensor:
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    """The one unpickler of every pickle of a checkpoint. With ``objects`` (the pickled state
    dict) it resolves ``_GLOBALS``, torch storage classes and storage persistent ids; without
    (the legacy format's other pickles) it resolves nothing: plain values only."""

    def __init__(self, file: IO[bytes], objects: bool) -> None:
        super().__init__(file)
        self.objects = objects
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if not self.objects:
            raise CheckpointError(f"names the global {module}.{name} where only plain values belong")
        if module == "torch" and name.endswith("Storage"):
            return name  # resolved by persistent_load from the name
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            raise CheckpointError(f"refers to {module}.{name}, which a state dict of "
                                  f"tensors does not need") from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not self.objects:
            raise CheckpointError("holds a persistent id where only plain values belong")
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise CheckpointError(f"unsupported persistent id ({_show(pid)})")
        kind, key, numel = pid[1], pid[2], pid[4]
        if _is_int(key):
            key = str(key)
        if not (isinstance(key, str) and 0 < len(key) <= 100 and key.isprintable()):
            raise CheckpointError(f"storage key {_show(key)} is not a short printable string or an int")
        view = pid[5] if len(pid) > 5 else None
        root = self.storages.get(key)
        if root is None:
            root = self.storages[key] = _Storage(kind, key, numel)
        if view is None:
            return root
        # Legacy storage view: (view key, offset, size) into the root storage.
        if not (isinstance(view, tuple) and len(view) == 3 and _is_int(view[1]) and view[1] >= 0):
            raise CheckpointError(f"storage {key} has a malformed view ({_show(view)})")
        st = _Storage(kind, key, view[2])
        st.view = (view[1], view[2])
        return st


def _check_opcodes(f: IO[bytes]) -> None:
    """Walk one pickle's opcodes, running nothing, and refuse what could exhaust memory or the
    C stack however harmless the values: a memo index larger than the number of opcodes before
    it (the C unpickler sizes and zero-fills its memo table by the largest index named, so 12
    bytes could take 64 GiB), protocol 5 buffers, tuples nested deeper than MAX_NESTING.

    Nesting is tracked on a model of the unpickler's stack: each entry the deepest tuple
    nesting it may contain (an over-estimate through lists and dicts), marks as positions."""
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    for n, (op, arg, _) in enumerate(pickletools.genops(f)):
        name = op.name
        if name in _REFUSED_OPCODES or (name in _MEMO_PUTS and arg > n):
            raise CheckpointError(f"uses {name} {_show(arg)}, which a checkpoint never needs")
        fence = marks[-1] if marks else 0
        if name in _MEMO_PUTS or name == "MEMOIZE":
            if len(stack) <= fence:
                raise CheckpointError(f"has {name} with nothing to memoize")
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
            continue
        if name in _MEMO_GETS:
            stack.append(memo.get(arg, 0))
            continue
        popped: list[int] = []
        before = op.stack_before
        if pickletools.markobject in before:
            if not marks:
                raise CheckpointError(f"has {name} without a MARK")
            popped = stack[marks[-1]:]
            del stack[marks.pop():]
            k = before.index(pickletools.markobject)
            fence = marks[-1] if marks else 0
        else:
            k = len(before)
        if len(stack) - fence < k:
            raise CheckpointError(f"has {name} with too few operands")
        if k:
            popped += stack[-k:]
            del stack[-k:]
        depth = max(popped, default=0) + (name in _NESTING_OPCODES)
        if depth > MAX_NESTING:
            raise CheckpointError(f"nests tuples deeper than {MAX_NESTING}")
        for item in op.stack_after:
            if item is pickletools.markobject:
                marks.append(len(stack))
            else:
                stack.append(depth)


def _unpickle(f: IO[bytes], what: str, objects: bool) -> tuple[Any, dict[str, _Storage]]:
    """One pickle from ``f`` (a seekable in-memory file, so reads past the end come back short
    rather than allocated) and the storages it refers to. ``what`` prefixes every error."""
    start = f.tell()
    try:
        try:
            _check_opcodes(f)
        except CheckpointError:
            raise
        except Exception as e:
            raise _NotAPickleError(f"not a valid pickle ({type(e).__name__}: {_first_line(e)})") from None
        f.seek(start)
        up = _Unpickler(f, objects)
        try:
            return up.load(), up.storages
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"unpickling failed ({type(e).__name__}: {_first_line(e)})") from None
    except CheckpointError as e:
        raise type(e)(f"{what}: {e}") from None


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:200]


def _read_zip_member(z: zipfile.ZipFile, name: str, nbytes: int, budget: _Budget) -> bytes:
    """The first ``nbytes`` of a member, refused before reading if it declares fewer."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise CheckpointError(f"{name} is missing") from None
    if info.file_size < nbytes:
        raise CheckpointError(f"{name} has {info.file_size} bytes, needs {nbytes}")
    budget.take(nbytes, name)
    with z.open(info) as member:
        raw = member.read(nbytes)
    if len(raw) < nbytes:
        raise CheckpointError(f"{name} is truncated")
    return raw


def _load_zip(path: str | os.PathLike, budget: _Budget) -> tuple[Any, dict[str, _Storage]]:
    try:
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pkl) != 1:
                raise CheckpointError(f"a torch zip checkpoint has one data.pkl, found {len(pkl)}")
            prefix = pkl[0][: -len("data.pkl")]
            raw = _read_zip_member(z, pkl[0], z.getinfo(pkl[0]).file_size, budget)
            obj, roots = _unpickle(io.BytesIO(raw), "the object pickle", objects=True)
            for key, st in roots.items():
                raw = _read_zip_member(z, f"{prefix}data/{key}", st.numel * st.dtype.itemsize, budget)
                st.data = np.frombuffer(raw, st.dtype, st.numel)
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError) as e:
        raise CheckpointError(f"damaged zip archive ({_first_line(e)})") from None
    return obj, roots


#: The legacy format's system information, by key: its type (other keys: plain values).
_SYS_INFO = {"protocol_version": int, "little_endian": bool, "type_sizes": dict}


def _check_sys_info(info: Any) -> None:
    def plain(v: Any) -> bool:
        return isinstance(v, int | str) or (
            isinstance(v, dict) and all(isinstance(k, str) and _is_int(x) for k, x in v.items()))

    if not (isinstance(info, dict) and all(isinstance(k, str) and plain(v) for k, v in info.items())
            and all(isinstance(info[k], t) for k, t in _SYS_INFO.items() if k in info)):
        raise CheckpointError(f"the sys info pickle is not a dict of the expected plain values "
                              f"({_show(info)})")
    if not info.get("little_endian", True):
        raise CheckpointError("big-endian checkpoints are not supported")


def _load_legacy(blob: bytes) -> tuple[Any, dict[str, _Storage]]:
    f = io.BytesIO(blob)
    try:
        magic, _ = _unpickle(f, "the magic number pickle", objects=False)
    except _NotAPickleError as e:
        raise CheckpointError(f"neither a zip nor a legacy torch checkpoint ({e})") from None
    if type(magic) is not int or magic != _LEGACY_MAGIC:
        raise CheckpointError(f"not a torch checkpoint (bad magic number {_show(magic)})")
    protocol, _ = _unpickle(f, "the protocol version pickle", objects=False)
    if not _is_int(protocol):
        raise CheckpointError(f"the legacy protocol version is a {type(protocol).__name__}, not an int")
    if protocol != _LEGACY_PROTOCOL:
        raise CheckpointError(f"unsupported legacy protocol version {_show(protocol)}")
    info, _ = _unpickle(f, "the sys info pickle", objects=False)
    _check_sys_info(info)
    obj, roots = _unpickle(f, "the object pickle", objects=True)
    keys, _ = _unpickle(f, "the storage keys pickle", objects=False)
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise CheckpointError(f"the storage keys pickle is not a list of strings ({_show(keys)})")
    for key in keys:
        st = roots.get(key)
        if st is None:
            raise CheckpointError(f"data for storage {_show(key)} that no tensor uses")
        pos = f.tell()
        if len(blob) - pos < 8:
            raise CheckpointError(f"storage {key} is truncated (no element count)")
        (numel,) = struct.unpack_from("<q", blob, pos)
        left = len(blob) - pos - 8
        if not 0 <= numel <= MAX_ELEMENTS:
            raise CheckpointError(f"storage {key} declares {numel} elements (at most {MAX_ELEMENTS})")
        if numel * st.dtype.itemsize > left:
            raise CheckpointError(f"storage {key} is truncated: declares {numel * st.dtype.itemsize} "
                                  f"bytes, {left} left in the file")
        st.data = np.frombuffer(blob, st.dtype, numel, offset=pos + 8)  # a view: nothing allocated
        f.seek(pos + 8 + numel * st.dtype.itemsize)
    return obj, roots


def _load(path: str | os.PathLike) -> dict[str, np.ndarray]:
    if zipfile.is_zipfile(path):
        budget = _Budget(os.path.getsize(path))
        obj, roots = _load_zip(path, budget)
    else:
        with open(path, "rb") as f:
            blob = f.read()
        budget = _Budget(len(blob))
        obj, roots = _load_legacy(blob)
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CheckpointError(f"holds a {type(obj).__name__}, not a state dict")
    out = {}
    for k, v in obj.items():
        if isinstance(v, _Tensor):  # only the state dict's own tensors are ever materialised
            if not isinstance(k, str):
                raise CheckpointError(f"a tensor is named by {_show(k)}, not a string")
            try:
                out[k] = v.array(roots, budget)
            except CheckpointError as e:
                raise CheckpointError(f"{_show(k)}: {e}") from None
    if not out:
        raise CheckpointError("holds no tensors")
    return out


def load_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a torch checkpoint holding a state dict (or ``{"state_dict": ...}``),
    by name, as numpy arrays of the stored dtype and shape. Raises ``CheckpointError`` for a
    file that is not one, whatever it holds."""
    try:
        return _load(path)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
