"""The torch checkpoint reader on crafted files: a checkpoint is refused with CheckpointError,
never executed, never read outside its storages, never allowed to allocate far more than its
own size. The files are assembled here opcode by opcode (no torch, no stand-in modules), so
each test controls exactly what the reader sees. Cases that could crash or exhaust the
process on a broken reader run in a child process with a 2 GiB address-space limit."""

from __future__ import annotations

import importlib
import os
import pickle
import re
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

_MODULE = "nncert.mlts.torch_checkpoint"
tc = importlib.import_module(_MODULE)
CheckpointError, load_state_dict = tc.CheckpointError, tc.load_state_dict

_MAGIC = 0x1950A86A20F9469CFC6C
_INFO = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}
_PICKLES = ("magic", "protocol", "sys_info", "object", "keys")

# ---------------------------------------------------------------------------------------
# A protocol 2 pickle assembler for what torch.save writes


def _int(n: int) -> bytes:  # LONG1 or LONG4: any int
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True) if n else b""
    return (b"\x8a" + bytes([len(raw)]) if len(raw) < 256 else b"\x8b" + struct.pack("<i", len(raw))) + raw


def _str(s: str) -> bytes:  # BINUNICODE
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _tuple(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _storage(key: str, numel: int, kind: str = "FloatStorage", view: tuple | None = None) -> bytes:
    """A storage persistent id; ``view`` = (offset, size) makes it a legacy view of ``key``."""
    v = b"N" if view is None else _tuple(_str(f"{key}v"), _int(view[0]), _int(view[1]))
    return _tuple(_str("storage"), _global("torch", kind), _str(key), _str("cpu"), _int(numel), v) + b"Q"


def _tensor(storage: bytes, offset: int, size: tuple, stride: tuple) -> bytes:
    return (_global("torch._utils", "_rebuild_tensor_v2")
            + _tuple(storage, _int(offset), _tuple(*map(_int, size)), _tuple(*map(_int, stride)), b"\x89",
                     _global("collections", "OrderedDict") + b")R")
            + b"R")


def _state_dict(tensors: dict[str, bytes]) -> bytes:
    items = b"".join(_str(name) + t for name, t in tensors.items())
    return b"\x80\x02" + _global("collections", "OrderedDict") + b")R(" + items + b"u."


def _legacy(path, obj: bytes, storages: dict[str, np.ndarray], tail: bytes | None = None,
            **pickles: object) -> str:
    """A legacy checkpoint: five pickles, then each storage as int64 count + bytes. A keyword
    named after one of the five pickles replaces it (bytes as they are, else pickled)."""
    parts = {"magic": _MAGIC, "protocol": 1001, "sys_info": _INFO, "object": obj, "keys": list(storages)}
    parts.update(pickles)
    head = b"".join(p if isinstance(p, bytes) else pickle.dumps(p, protocol=2)
                    for p in (parts[name] for name in _PICKLES))
    if tail is None:
        tail = b"".join(struct.pack("<q", a.size) + a.tobytes() for a in storages.values())
    path.write_bytes(head + tail)
    return str(path)


def _zip(path, obj: bytes, storages: dict[str, np.ndarray]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", obj)
        for key, a in storages.items():
            z.writestr(f"archive/data/{key}", a.tobytes())
    return str(path)


def _write(fmt: str, path, obj: bytes, storages: dict[str, np.ndarray]) -> str:
    return _legacy(path, obj, storages) if fmt == "legacy" else _zip(path, obj, storages)


def _one_tensor(fmt: str, tmp_path, numel: int, offset: int, size: tuple, stride: tuple) -> str:
    obj = _state_dict({"w": _tensor(_storage("0", numel), offset, size, stride)})
    return _write(fmt, tmp_path / f"w.{fmt}", obj, {"0": np.arange(numel, dtype=np.float32)})


_CHILD = """
import resource, sys, time
from {module} import CheckpointError, load_state_dict
resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))
t = time.perf_counter()
try:
    load_state_dict(sys.argv[1])
except CheckpointError as e:
    # VmHWM: this process's own peak (ru_maxrss would include the parent's, kept across exec)
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(f"seconds={{time.perf_counter() - t:.3f}} peak_kib={{peak}} {{e}}")
    sys.exit(3)
print("loaded")
"""


def _load_in_child(path: str) -> tuple[int, str]:
    """Exit status (3: refused with CheckpointError; negative: killed by that signal) and
    output of loading ``path`` in a child process limited to 2 GiB of address space."""
    r = subprocess.run([sys.executable, "-c", _CHILD.format(module=_MODULE), path],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def _assert_refused_in_child(path: str, match: str) -> float:
    """Refused cleanly, with ``match`` in the message, having used under 256 MiB at its peak
    (an interpreter with numpy takes about 60); returns the seconds the refusal took."""
    rc, out = _load_in_child(path)
    assert rc == 3, f"exit status {rc}, not a clean refusal:\n{out[-2000:]}"
    peak_kib = int(out.split("peak_kib=")[1].split()[0])
    assert peak_kib < 256 * 1024, f"peak memory {peak_kib} KiB: {out}"
    assert match in out, out
    return float(out.split("seconds=")[1].split()[0])


# ---------------------------------------------------------------------------------------
# Genuine checkpoints still load


@pytest.mark.parametrize("fmt", ["legacy", "zip"])
def test_genuine_checkpoint_layouts_load_as_before(tmp_path, fmt):
    flat = np.arange(24, dtype=np.float32) * 0.5
    longs = np.array([7, -3], dtype=np.int64)
    bf16 = (np.array([1.5, -2.0], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    shared = _storage("0", 24)
    obj = _state_dict({
        "conv.weight": _tensor(shared, 0, (2, 3, 4), (12, 4, 1)),
        "conv.weight_t": _tensor(shared, 0, (4, 3), (1, 4)),  # a transposed view
        "bn.bias": _tensor(shared, 20, (4,), (1,)),  # an offset into the same storage
        "bn.expanded": _tensor(shared, 20, (3, 4), (0, 1)),  # broadcast: stride 0
        "empty": _tensor(shared, 24, (0, 5), (5, 1)),
        "steps": _tensor(_storage("1", 2, "LongStorage"), 1, (), ()),
        "half": _tensor(_storage("2", 2, "BFloat16Storage"), 0, (2,), (1,)),
    })
    path = _write(fmt, tmp_path / "model.pth", obj, {"0": flat, "1": longs, "2": bf16})
    got = load_state_dict(path)
    assert list(got) == ["conv.weight", "conv.weight_t", "bn.bias", "bn.expanded", "empty", "steps", "half"]
    np.testing.assert_array_equal(got["conv.weight"], flat.reshape(2, 3, 4))
    np.testing.assert_array_equal(got["conv.weight_t"], flat[:12].reshape(3, 4).T)
    np.testing.assert_array_equal(got["bn.bias"], flat[20:24])
    np.testing.assert_array_equal(got["bn.expanded"], np.broadcast_to(flat[20:24], (3, 4)))
    assert got["empty"].shape == (0, 5) and got["empty"].dtype == np.float32
    assert got["steps"].dtype == np.int64 and got["steps"].shape == () and got["steps"] == -3
    np.testing.assert_array_equal(got["half"], np.array([1.5, -2.0], dtype=np.float32))
    assert all(a.flags.writeable for a in got.values())


def test_legacy_storage_views_load_within_the_view(tmp_path):
    flat = np.arange(8, dtype=np.float32)
    obj = _state_dict({"w": _tensor(_storage("0", 8, view=(2, 4)), 1, (3,), (1,))})
    got = load_state_dict(_legacy(tmp_path / "v.pth", obj, {"0": flat}))
    np.testing.assert_array_equal(got["w"], [3, 4, 5])


# ---------------------------------------------------------------------------------------
# Every pickle of a legacy file is refused, not run, when it names a global


class _Mkdir:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.mark.parametrize("which", _PICKLES)
def test_a_payload_in_any_of_the_five_pickles_is_refused_not_run(tmp_path, which):
    marker = tmp_path / "payload-ran"
    payload = _Mkdir(str(marker))
    pickles = {which: pickle.dumps({"w": payload} if which == "object" else payload, protocol=2)}
    flat = np.zeros(4, np.float32)
    obj = _state_dict({"w": _tensor(_storage("0", 4), 0, (4,), (1,))})
    path = _legacy(tmp_path / "evil.pth", obj, {"0": flat}, **pickles)
    with pytest.raises(CheckpointError) as e:
        load_state_dict(path)
    assert not marker.exists(), "the payload ran"
    assert re.fullmatch(r".*evil\.pth: .*mkdir.*", str(e.value)), str(e.value)  # one line, names the file


def test_wrong_magic_number_is_refused(tmp_path):
    obj = _state_dict({"w": _tensor(_storage("0", 1), 0, (), ())})
    for magic in (1234, "0x1950A86A20F9469CFC6C", [_MAGIC]):
        path = _legacy(tmp_path / "m.pth", obj, {"0": np.ones(1, np.float32)}, magic=magic)
        with pytest.raises(CheckpointError, match="bad magic number"):
            load_state_dict(path)


@pytest.mark.parametrize("protocol", ["1001", 1001.0, [1001], None])
def test_protocol_version_must_be_the_int_1001(tmp_path, protocol):
    obj = _state_dict({"w": _tensor(_storage("0", 1), 0, (), ())})
    path = _legacy(tmp_path / "p.pth", obj, {"0": np.ones(1, np.float32)}, protocol=protocol)
    with pytest.raises(CheckpointError, match=r"protocol version is a \w+, not an int"):
        load_state_dict(path)


@pytest.mark.parametrize("info", [
    {**_INFO, "little_endian": "no"},  # truthy: once read as little-endian
    {**_INFO, "type_sizes": [2, 4, 4]},
    [("little_endian", True)],
    None,
], ids=["little_endian-str", "type_sizes-list", "list", "None"])
def test_sys_info_must_be_a_dict_of_the_expected_plain_types(tmp_path, info):
    obj = _state_dict({"w": _tensor(_storage("0", 1), 0, (), ())})
    path = _legacy(tmp_path / "s.pth", obj, {"0": np.ones(1, np.float32)}, sys_info=info)
    with pytest.raises(CheckpointError, match="sys info pickle is not a dict of the expected plain values"):
        load_state_dict(path)


@pytest.mark.parametrize("keys", [5, "0", [0], None], ids=["int", "str", "list-of-int", "None"])
def test_storage_keys_must_be_a_list_of_strings(tmp_path, keys):
    obj = _state_dict({"w": _tensor(_storage("0", 1), 0, (), ())})
    path = _legacy(tmp_path / "k.pth", obj, {"0": np.ones(1, np.float32)}, keys=keys)
    with pytest.raises(CheckpointError, match="storage keys pickle is not a list of strings"):
        load_state_dict(path)


@pytest.mark.parametrize(("name", "size", "match"), [
    (_str("w"), (2**64,), "malformed offset, size or stride"),
    (_int(10**5000), (1,), "a tensor is named by an int of 16610 bits, not a string"),
], ids=["size-past-int64", "key-of-5000-digits"])
def test_ints_past_int64_are_refused_with_a_one_line_error(tmp_path, name, size, match):
    tensor = _tensor(_storage("0", 1), 0, size, (1,))
    obj = b"\x80\x02" + _global("collections", "OrderedDict") + b")R" + name + tensor + b"s."
    path = _legacy(tmp_path / "i.pth", obj, {"0": np.ones(1, np.float32)})
    with pytest.raises(CheckpointError, match=match):
        load_state_dict(path)


# ---------------------------------------------------------------------------------------
# Plain values can still attack the unpickler itself (child process: these crash or exhaust
# a reader that lets them through)


def _nested_tuple_key(depth: int) -> bytes:  # {((((),),),...): 1}
    return b"\x80\x02}" + b")" + b"\x85" * depth + b"K\x01s."


@pytest.mark.parametrize(("which", "raw", "match"), [
    # LONG_BINPUT 2**26: the C unpickler grows its memo table to 2**27 slots, 1 GiB zeroed
    # for a 12-byte pickle (2**32 - 1 would take 64 GiB)
    ("magic", b"\x80\x02K\x01r" + struct.pack("<I", 2**26) + b".", "LONG_BINPUT"),
    # BYTEARRAY8 of 64 GiB: allocated before its bytes are read
    ("protocol", b"\x80\x05\x96" + struct.pack("<Q", 2**36) + b".", "bytearray8"),
    # hashing a dict key nested a million tuples deep overflows the C stack (SIGSEGV)
    ("sys_info", _nested_tuple_key(10**6), "nests tuples deeper"),
], ids=["memo-index", "bytearray8", "deep-tuple-key"])
def test_pickles_that_exhaust_the_unpickler_are_refused(tmp_path, which, raw, match):
    obj = _state_dict({"w": _tensor(_storage("0", 1), 0, (), ())})
    path = _legacy(tmp_path / "u.pth", obj, {"0": np.ones(1, np.float32)}, **{which: raw})
    _assert_refused_in_child(path, match)


# ---------------------------------------------------------------------------------------
# Tensor views stay inside their storage (child process: a broken reader segfaults here)


@pytest.mark.parametrize("fmt", ["legacy", "zip"])
@pytest.mark.parametrize(("numel", "offset", "size", "stride"), [
    (4, 3, (4,), (-1,)),  # reads before the storage
    (4, 0, (2,), (-2**40,)),  # 4 TiB before the storage: SIGSEGV
    # last element (offset 3) in range, element (1, 0) at 5 past the end of 4
    (4, 2, (2, 3), (3, -1)),
], ids=["stride-1", "stride-huge", "middle-dimension"])
def test_negative_strides_are_refused(tmp_path, fmt, numel, offset, size, stride):
    path = _one_tensor(fmt, tmp_path, numel, offset, size, stride)
    _assert_refused_in_child(path, "negative offset, size or stride")


# Regression guards: the reader refused these before it checked strides, too.
@pytest.mark.parametrize("fmt", ["legacy", "zip"])
@pytest.mark.parametrize(("offset", "size", "stride"), [
    (4, (1,), (1,)),  # offset at the end
    (2**62, (2,), (1,)),
    (0, (2, 2), (3, 1)),  # last element (1, 1) at 4 of 4
], ids=["offset-at-end", "offset-huge", "extent"])
def test_views_past_the_end_of_the_storage_are_refused(tmp_path, fmt, offset, size, stride):
    path = _one_tensor(fmt, tmp_path, 4, offset, size, stride)
    _assert_refused_in_child(path, "storage 0")


def test_a_tensor_may_not_reach_past_its_legacy_view(tmp_path):
    # The view is elements [2, 6) of 8; the tensor would read 6 and 7, another tensor's data.
    obj = _state_dict({"w": _tensor(_storage("0", 8, view=(2, 4)), 1, (5,), (1,))})
    path = _legacy(tmp_path / "v.pth", obj, {"0": np.arange(8, dtype=np.float32)})
    with pytest.raises(CheckpointError, match=r"'w': tensor of size \[5\].* reaches element 5 .* has 4"):
        load_state_dict(path)


def test_build_cannot_overwrite_a_checked_tensor(tmp_path):
    # A BUILD opcode after the rebuild call would set a stride 4 TiB backwards on the checked object.
    tensor = _tensor(_storage("0", 4), 0, (4,), (1,)) + b"}" + _str("stride") + _tuple(_int(-2**40)) + b"sb"
    path = _legacy(tmp_path / "b.pth", _state_dict({"w": tensor}), {"0": np.zeros(4, np.float32)})
    _assert_refused_in_child(path, "cannot carry pickled state")


# ---------------------------------------------------------------------------------------
# A small file cannot make the reader allocate much more than its size


@pytest.mark.parametrize("size", [(2**40,), (2**31,), (2**32 + 1, 2**32 - 1)],
                         ids=["4TiB", "8GiB", "int64-wrap"])
def test_a_huge_stride_0_tensor_is_refused_fast_without_allocating(tmp_path, size):
    path = _one_tensor("legacy", tmp_path, 1, 0, size, (0,) * len(size))
    seconds = _assert_refused_in_child(path, "elements")
    assert seconds < 0.25


def test_many_stride_0_tensors_within_the_per_tensor_limit_exhaust_the_file_budget(tmp_path):
    # 64 tensors of 2**22 elements each: 1 GiB from a file of a few kilobytes.
    storage = _storage("0", 1)
    obj = _state_dict({f"w{i}": _tensor(storage, 0, (2**22,), (0,)) for i in range(64)})
    path = _legacy(tmp_path / "many.pth", obj, {"0": np.ones(1, np.float32)})
    assert os.path.getsize(path) < 10_000
    seconds = _assert_refused_in_child(path, "more than a checkpoint of this size")
    assert seconds < 1


@pytest.mark.parametrize(("declared", "match"), [
    (1000, "storage 0 is truncated"),  # a regression guard: refused before, too
    (2**40, "declares 1099511627776 elements"),  # a reader that believes it allocates 4 TiB
    (-1, "declares -1 elements"),
], ids=["short", "huge", "negative"])
def test_storage_sizes_are_checked_against_the_bytes_in_the_file(tmp_path, declared, match):
    obj = _state_dict({"w": _tensor(_storage("0", 10), 0, (10,), (1,))})
    tail = struct.pack("<q", declared) + np.zeros(10, np.float32).tobytes()
    path = _legacy(tmp_path / "t.pth", obj, {"0": np.zeros(10, np.float32)}, tail=tail)
    _assert_refused_in_child(path, match)


def test_a_zip_bomb_storage_is_refused_before_it_is_decompressed(tmp_path):
    # 256 MiB of zeros deflate to about 256 KiB; the tensor reads 4 elements of it.
    path = tmp_path / "bomb.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _state_dict({"w": _tensor(_storage("0", 2**26), 0, (4,), (1,))}))
        info = zipfile.ZipInfo("archive/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w") as w:
            for _ in range(64):
                w.write(bytes(2**22))
    assert os.path.getsize(path) < 2**20
    _assert_refused_in_child(str(path), "archive/data/0 needs 268435456 bytes, more than a checkpoint")
