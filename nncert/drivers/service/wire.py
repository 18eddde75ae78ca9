"""The driver service's wire format (docs/service-protocol.md): framed messages on a Unix
stream socket, file descriptors as SCM_RIGHTS, and the JSON shapes of models, requests and
results.

A message is a 20-byte header, a UTF-8 JSON object and an optional binary part::

    magic "NNSV" | u16 protocol version | u16 descriptor count | u32 call id |
    u32 JSON length | u32 binary length          (little endian)

The descriptors travel as ancillary data of the message's first byte. Everything here is
plain data (ints, lists, strings) so that a service written in another language can speak it.
"""

from __future__ import annotations

import array
import enum
import json
import os
import socket
import struct
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from nncert.hal.codec import decode_subgraph, encode_subgraph
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import (
    Capabilities,
    DataLocation,
    Model,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    Timing,
)
from nncert.hal.types import ErrorStatus, OperandType

PROTOCOL_VERSION = 1
MAGIC = b"NNSV"
HEADER = struct.Struct("<4sHHIII")
#: Linux refuses more than 253 descriptors in one message (SCM_MAX_FD).
MAX_FDS = 253
MAX_JSON = 64 << 20
MAX_BLOB = 1 << 30
_FDS_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)


class ProtocolError(Exception):
    """A message that does not follow the protocol (bad magic, version, sizes or fields)."""


E = TypeVar("E", bound=enum.IntEnum)


_MEMBERS: dict[type, dict[int, enum.IntEnum]] = {}


def enum_or_int(cls: type[E], value: Any) -> E | int:
    """The enum member for ``value``, or the raw int when it names none: invalid codes must
    reach the hosted driver unchanged so that it can reject them (VAL-1). A table lookup:
    models are decoded on every call."""
    if type(value) is not int:
        raise ProtocolError(f"{cls.__name__} code {value!r} is not an integer")
    members = _MEMBERS.get(cls)
    if members is None:
        members = _MEMBERS[cls] = {int(m): m for m in cls}
    return members.get(value, value)  # type: ignore[return-value]


def enum_strict(cls: type[E], value: Any) -> E:
    """The enum member for ``value``; any other value is a protocol error (INVALID_ARGUMENT).
    Only a JSON integer names a code: ``true`` or ``1.0`` would pass ``cls(value)``."""
    if value.__class__ is not int:
        raise ProtocolError(f"{value!r} is not a {cls.__name__} code")
    try:
        return cls(value)
    except ValueError:
        raise ProtocolError(f"{value!r} is not a {cls.__name__} code") from None


def integer(value: Any, what: str) -> int:
    """A JSON integer field; anything else (``true``, ``4.0``, ``"4"``) is a protocol error:
    the protocol converts nothing, so that every service reads a message the same way."""
    if value.__class__ is not int:
        raise ProtocolError(f"{what} {value!r} is not an integer")
    return value


def optional_integer(value: Any, what: str) -> int | None:
    """An integer field that may be null (deadlines, durations)."""
    return None if value is None else integer(value, what)


def count(value: Any, what: str) -> int:
    """A number of descriptors or files: an integer >= 0."""
    if integer(value, what) < 0:
        raise ProtocolError(f"{what} {value} is negative")
    return value


# -- framing ------------------------------------------------------------------------------

def send_message(sock: socket.socket, call_id: int, body: dict, blob: bytes | memoryview = b"",
                 fds: Sequence[int] = ()) -> None:
    """Send one message (a connection carries one call at a time: no lock is needed)."""
    if len(fds) > MAX_FDS:
        raise ProtocolError(f"{len(fds)} descriptors in one message (at most {MAX_FDS})")
    text = json.dumps(body, separators=(",", ":")).encode()
    data = b"".join((HEADER.pack(MAGIC, PROTOCOL_VERSION, len(fds), call_id, len(text), len(blob)),
                     text, blob))
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([data], ancillary)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


def _recv_exact(sock: socket.socket, buf: memoryview) -> bool:
    got = 0
    while got < len(buf):
        n = sock.recv_into(buf[got:])
        if n == 0:
            return False
        got += n
    return True


def recv_message(sock: socket.socket) -> tuple[int, dict, bytes, list[int]] | None:
    """One message as (call id, body, binary part, descriptors); None at end of stream.

    Received descriptors belong to the caller, who must close those it does not keep."""
    header = bytearray(HEADER.size)
    n, ancdata, flags, _ = sock.recvmsg_into([header], _FDS_SPACE)
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[:len(data) - len(data) % arr.itemsize])
            fds.extend(arr)
    try:
        if n == 0:
            return None
        if flags & socket.MSG_CTRUNC:
            raise ProtocolError("descriptors were truncated (too many in one message)")
        if n < HEADER.size and not _recv_exact(sock, memoryview(header)[n:]):
            raise ProtocolError("connection closed inside a message header")
        magic, version, nfds, call_id, json_len, blob_len = HEADER.unpack(header)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {bytes(magic)!r}")
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol version {version}, this side speaks {PROTOCOL_VERSION}")
        if nfds != len(fds):
            raise ProtocolError(f"header announces {nfds} descriptors, {len(fds)} arrived")
        if json_len > MAX_JSON or blob_len > MAX_BLOB:
            raise ProtocolError(f"message too large ({json_len} + {blob_len} bytes)")
        payload = bytearray(json_len + blob_len)
        if not _recv_exact(sock, memoryview(payload)):
            raise ProtocolError("connection closed inside a message")
        body = json.loads(payload[:json_len])
        if not isinstance(body, dict):
            raise ProtocolError("message body is not a JSON object")
        return call_id, body, bytes(payload[json_len:]), fds
    except (ProtocolError, ValueError, UnicodeDecodeError, struct.error) as e:
        close_fds(fds)
        raise ProtocolError(str(e)) from None


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class FdReader:
    """Hands out a message's descriptors in order; closes the ones nobody took."""

    def __init__(self, fds: Sequence[int]) -> None:
        self.fds = list(fds)
        self.next = 0

    def remaining(self) -> int:
        return len(self.fds) - self.next

    def take(self) -> int:
        if self.next >= len(self.fds):
            raise ProtocolError("fewer descriptors than the message body names")
        fd = self.fds[self.next]
        self.next += 1
        return fd

    def close_rest(self) -> None:
        close_fds(self.fds[self.next:])
        self.next = len(self.fds)


# -- memories ------------------------------------------------------------------------------

def encode_pool(pool: Memory | int, fds: list[int]) -> dict:
    """A pool's description; a shared-memory pool adds its descriptor to ``fds`` (only one
    sealed against shrinking: ``Memory.shared_fd``)."""
    if isinstance(pool, Memory):
        fds.append(pool.shared_fd())
        return {"kind": pool.kind, "size": pool.size, "offset": pool.offset}
    return {"token": int(pool)}


def decode_pool(desc: Any, fdr: FdReader) -> Memory | int:
    if not isinstance(desc, dict):
        raise ProtocolError(f"pool description {desc!r} is not an object")
    if "token" in desc:
        return integer(desc["token"], "buffer token")
    try:
        kind, size, offset = desc["kind"], desc["size"], desc["offset"]
    except KeyError as e:
        raise ProtocolError(f"pool description {desc!r:.80} has no {e} field") from None
    if not isinstance(kind, str):
        raise ProtocolError(f"memory kind {kind!r} is not a string")
    size, offset = integer(size, "pool size"), integer(offset, "pool offset")
    try:
        return Memory.adopt(kind, fdr.take(), size, offset)
    except (OSError, ValueError, OverflowError) as e:
        # MEM-3: a pool the driver cannot map fails the call with GENERAL_FAILURE. (One not
        # sealed against shrinking is refused as the sender's fault: adopt's INVALID_ARGUMENT.)
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot map {kind} pool of {size} bytes: {e}") from None


# -- models ------------------------------------------------------------------------------

def _ints(values: Any) -> tuple[int, ...]:
    if not all(type(x) is int for x in values):
        raise ProtocolError(f"{values!r} is not a list of integers")
    return tuple(values)


def encode_model(model: Model, fds: list[int]) -> tuple[dict, bytes]:
    """The model's JSON description and its operand values (the binary part); the pools'
    descriptors are appended to ``fds`` (MEM-1: constants by reference stay in shared memory)."""
    return {"main": encode_subgraph(model.main),
            "referenced": [encode_subgraph(s) for s in model.referenced],
            "relax": bool(model.relax_computation_float32_to_float16),
            "pools": [encode_pool(p, fds) for p in model.pools]}, model.operand_values


def decode_model(d: Any, blob: bytes, fdr: FdReader) -> Model:
    try:
        relax = d["relax"]
        if relax.__class__ is not bool:
            raise TypeError(f"relax {relax!r} is not true or false")
        return Model(decode_subgraph(d["main"]), [decode_subgraph(s) for s in d["referenced"]],
                     blob, [decode_pool(p, fdr) for p in d["pools"]], relax)
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"malformed model: {type(e).__name__}: {e}") from None


# -- requests and results -------------------------------------------------------------------

def encode_arguments(args: Sequence[RequestArgument]) -> list:
    return [[a.has_no_value, [a.location.pool_index, a.location.offset, a.location.length,
                              a.location.padding], list(a.dimensions)] for a in args]


def decode_location(v: Any) -> DataLocation:
    """``[pool_index, offset, length, padding]``; ``padding`` may be left out (0), the HAL's
    DataLocation before it had one, which the burst-validation suite's messages use."""
    if not isinstance(v, list) or len(v) not in (3, 4):
        raise ProtocolError(f"data location {v!r:.80} is not 3 or 4 integers")
    return DataLocation(*_ints(v))


def decode_arguments(v: Any) -> list[RequestArgument]:
    if not isinstance(v, list):
        raise ProtocolError(f"request arguments {v!r:.80} are not a list")
    args = []
    try:
        for none, loc, dims in v:
            if none.__class__ is not bool:
                raise ProtocolError(f"has_no_value {none!r} is not true or false")
            args.append(RequestArgument(none, decode_location(loc), _ints(dims)))
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"malformed request arguments: {e}") from None
    return args


def encode_request(request: Request, fds: list[int]) -> dict:
    return {"inputs": encode_arguments(request.inputs), "outputs": encode_arguments(request.outputs),
            "pools": [encode_pool(p, fds) for p in request.pools]}


def decode_request(d: Any, fdr: FdReader) -> Request:
    try:
        return Request(decode_arguments(d["inputs"]), decode_arguments(d["outputs"]),
                       [decode_pool(p, fdr) for p in d["pools"]])
    except (KeyError, TypeError) as e:
        raise ProtocolError(f"malformed request: {e}") from None


def encode_shapes(shapes: Sequence[OutputShape]) -> list:
    return [[list(s.dimensions), bool(s.is_sufficient)] for s in shapes]


def decode_shapes(v: Any) -> list[OutputShape]:
    return [OutputShape(tuple(int(d) for d in dims), bool(ok)) for dims, ok in v or ()]


def encode_timing(t: Timing) -> list[int]:
    return [int(t.time_on_device), int(t.time_in_driver)]


def decode_timing(v: Any) -> Timing:
    return Timing(int(v[0]), int(v[1]))


def _perf(p: PerformanceInfo) -> list[float]:
    return [p.exec_time, p.power_usage]


def encode_capabilities(c: Capabilities) -> dict:
    return {"relaxed_scalar": _perf(c.relaxed_float32_to_float16_performance_scalar),
            "relaxed_tensor": _perf(c.relaxed_float32_to_float16_performance_tensor),
            "operands": [[int(t), *_perf(p)] for t, p in c.operand_performance.items()],
            "if": _perf(c.if_performance), "while": _perf(c.while_performance)}


def decode_capabilities(d: dict) -> Capabilities:
    return Capabilities(PerformanceInfo(*d["relaxed_scalar"]), PerformanceInfo(*d["relaxed_tensor"]),
                        {enum_or_int(OperandType, t): PerformanceInfo(e, p) for t, e, p in d["operands"]},
                        PerformanceInfo(*d["if"]), PerformanceInfo(*d["while"]))


def iter_ints(v: Any, what: str) -> Iterator[int]:
    if not isinstance(v, list):
        raise ProtocolError(f"{what} is not a list")
    for x in v:
        if not isinstance(x, int) or isinstance(x, bool):
            raise ProtocolError(f"{what} holds {x!r}, not an integer")
        yield x
