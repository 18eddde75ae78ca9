"""The driver service's wire format (docs/service-protocol.md): framed messages on a Unix
stream socket, file descriptors as SCM_RIGHTS, and the JSON shapes of models, requests and
results.

A message is a 20-byte header, a UTF-8 JSON object and an optional binary part::

    magic "NNSV" | u16 protocol version | u16 descriptor count | u32 call id |
    u32 JSON length | u32 binary length          (little endian)

The descriptors travel as ancillary data of the message's first byte. Everything here is
plain data (ints, lists, strings) so that a service written in another language can speak it.

Neither side trusts the other's header: a receiver allocates a message's memory as its bytes
arrive (never more than what has arrived plus ``CHUNK``), so a header claiming a gigabyte
costs nothing until the gigabyte comes, and it may bound how long a begun message takes
(``recv_message``'s ``deadline`` and ``stall``). ``peer_credentials`` is the kernel's word on
who is at the other end (SO_PEERCRED): both sides check it (docs/service-protocol.md).
"""

from __future__ import annotations

import array
import contextlib
import enum
import errno
import json
import os
import select
import socket
import struct
import time
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
#: The largest message either side reads: its JSON and binary parts at their limits.
MAX_MESSAGE = MAX_JSON + MAX_BLOB
#: A receiver allocates a message's memory in pieces of at most this many bytes, each only
#: once the bytes before it have arrived.
CHUNK = 1 << 20
_FDS_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
_CRED = struct.Struct("3i")
#: getsockopt(SO_PEERPIDFD) (Linux 6.5): a pidfd of the peer, from the kernel's own reference
#: to its process (so never a process that took over a recycled pid).
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)


class ProtocolError(Exception):
    """A message that does not follow the protocol (bad magic, version, sizes or fields)."""


class TruncatedMessage(ProtocolError):  # noqa: N818 - an event: the sender went away
    """The connection ended inside a message: the sender died (or closed) while sending."""


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


class _Reader:
    """Reads the rest of a message whose first bytes have arrived, within the receiver's
    limits: ``deadline`` (an absolute ``time.monotonic()``; past it, ``TimeoutError``) and
    ``stall`` (seconds the whole message may take from its first byte; past them, a
    ``ProtocolError``). The first read is made as the socket stands (a blocking one without
    waiting), so the usual message, sent whole, costs no timeout changes; later reads wait
    only until the nearer limit."""

    __slots__ = ("deadline", "saved", "sock", "stall", "until")

    def __init__(self, sock: socket.socket, deadline: float | None, stall: float | None) -> None:
        self.sock = sock
        self.deadline = deadline
        self.stall = None if stall is None else time.monotonic() + stall
        self.until: float | None = None  # set once reads wait (armed)
        self.saved: float | bool | None = False  # the socket's own timeout, once changed

    def _arm(self) -> None:
        """Wait from now on, within the nearer of the two limits."""
        limits = [t for t in (self.deadline, self.stall) if t is not None]
        self.until = min(limits) if limits else float("inf")

    def _expired(self) -> Exception:
        if self.stall is not None and (self.deadline is None or self.stall <= self.deadline):
            return ProtocolError("the message was not complete within the receiver's time limit "
                                 "(a stalled sender)")
        return TimeoutError("the message did not arrive before the deadline")

    def _recv(self, view: memoryview) -> int:
        if self.until is None:
            # The first read: a message is usually sent whole, so its rest is already here.
            self._arm()
            if self.sock.gettimeout() is None:  # blocking: try without waiting
                try:
                    return self.sock.recv_into(view, 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    pass
            else:  # the socket's own timeout bounds this one read (the caller set it)
                try:
                    return self.sock.recv_into(view)
                except TimeoutError:
                    raise self._expired() from None
        if self.until != float("inf"):
            left = self.until - time.monotonic()  # type: ignore[operator]
            if left <= 0:
                raise self._expired()
            if self.saved is False:
                self.saved = self.sock.gettimeout()
            self.sock.settimeout(left)
        try:
            return self.sock.recv_into(view)
        except TimeoutError:
            raise self._expired() from None

    def fill(self, view: memoryview) -> bool:
        """Fill ``view``; False at end of stream."""
        got, size = 0, len(view)
        while got < size:
            n = self._recv(view[got:])
            if n == 0:
                return False
            got += n
        return True

    def read(self, size: int) -> bytearray | bytes | None:
        """``size`` bytes, allocated piece by piece as they arrive; None at end of stream."""
        if size <= CHUNK:
            buf = bytearray(size)
            return buf if self.fill(memoryview(buf)) else None
        parts = []
        while size:
            part = bytearray(min(size, CHUNK))
            if not self.fill(memoryview(part)):
                return None
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def restore(self) -> None:
        if self.saved is not False:
            with contextlib.suppress(OSError):  # closed meanwhile (the client shut it down)
                self.sock.settimeout(self.saved)  # type: ignore[arg-type]


def recv_message(sock: socket.socket, deadline: float | None = None, stall: float | None = None,
                 max_json: int = MAX_JSON, max_blob: int = MAX_BLOB
                 ) -> tuple[int, dict, bytes, list[int]] | None:
    """One message as (call id, body, binary part, descriptors); None at end of stream.

    The header is checked before anything is allocated for the rest, which is read as it
    arrives: ``deadline`` (``time.monotonic()``) bounds the whole message (then
    ``TimeoutError``), ``stall`` the seconds from its first byte to its last (then
    ``ProtocolError``: a sender that stopped half-way); ``max_json`` and ``max_blob`` may
    lower the size limits (a reply has no binary part). Received descriptors belong to the
    caller, who must close those it does not keep."""
    header = bytearray(HEADER.size)
    n, ancdata, flags, _ = sock.recvmsg_into([header], _FDS_SPACE, socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[:len(data) - len(data) % arr.itemsize])
            fds.extend(arr)
    if n == 0:
        close_fds(fds)
        return None
    reader = None
    try:
        if flags & socket.MSG_CTRUNC:
            raise ProtocolError("descriptors were truncated (too many in one message)")
        if n < HEADER.size:
            reader = _Reader(sock, deadline, stall)
            if not reader.fill(memoryview(header)[n:]):
                raise TruncatedMessage("connection closed inside a message header")
        magic, version, nfds, call_id, json_len, blob_len = HEADER.unpack(header)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {bytes(magic)!r}")
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol version {version}, this side speaks {PROTOCOL_VERSION}")
        if nfds > MAX_FDS or nfds != len(fds):
            raise ProtocolError(f"header announces {nfds} descriptors, {len(fds)} arrived")
        if not 2 <= json_len <= max_json or blob_len > max_blob:
            raise ProtocolError(f"message sizes out of bounds ({json_len} bytes of JSON, at least 2 and "
                                f"at most {max_json}; {blob_len} binary, at most {max_blob})")
        total = json_len + blob_len
        if total <= CHUNK:
            payload = bytearray(total)
            got = 0
            if reader is None:
                # The usual message came whole: read it as the socket stands (a blocking one
                # without waiting; one with a timeout, the caller's, within it); only a
                # message still arriving gets a reader with the limits.
                if sock.gettimeout() is None:
                    try:
                        got = sock.recv_into(payload, 0, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        pass
                else:
                    try:
                        got = sock.recv_into(payload)
                    except TimeoutError:
                        raise _Reader(sock, deadline, stall)._expired() from None
            if got < total:
                reader = reader or _Reader(sock, deadline, stall)
                if not reader.fill(memoryview(payload)[got:]):
                    raise TruncatedMessage("connection closed inside a message")
            text, blob = payload[:json_len], bytes(memoryview(payload)[json_len:])
        else:
            reader = reader or _Reader(sock, deadline, stall)
            text, data = reader.read(json_len), reader.read(blob_len) if blob_len else b""
            if text is None or data is None:
                raise TruncatedMessage("connection closed inside a message")
            blob = bytes(data)
        body = json.loads(text)
        if not isinstance(body, dict):
            raise ProtocolError("message body is not a JSON object")
        return call_id, body, blob, fds
    except ProtocolError:
        close_fds(fds)
        raise
    except (ValueError, RecursionError, struct.error) as e:  # UnicodeDecodeError is a ValueError
        close_fds(fds)
        raise ProtocolError(str(e) or type(e).__name__) from None
    except BaseException:
        close_fds(fds)
        raise
    finally:
        if reader is not None:
            reader.restore()


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket, from the
    kernel (SO_PEERCRED): for a connecting side, the process that called ``listen``; for an
    accepted connection, the one that called ``connect``. pid 0: a process this one's pid
    namespace cannot see."""
    return _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))


def peer_pidfd(sock: socket.socket, pid: int) -> int:
    """A pidfd of the peer ``peer_credentials`` named as ``pid``: straight from the kernel's
    reference to its process where the kernel offers it (SO_PEERPIDFD), else
    ``os.pidfd_open(pid)`` (then checked to be the peer's as far as can be: the connection
    still open, so the peer has not died and left its pid for reuse). OSError otherwise."""
    try:
        return sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError as e:
        if e.errno not in (errno.ENOPROTOOPT, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    fd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(sock, select.POLLHUP | getattr(select, "POLLRDHUP", 0))
    if poller.poll(0):
        os.close(fd)
        raise OSError(errno.ESRCH, "the peer hung up before its process could be pinned")
    return fd


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
    """``[[dimensions, is_sufficient], ...]`` exactly; anything else is a ProtocolError."""
    if not isinstance(v, list):
        raise ProtocolError(f"output shapes {v!r:.80} are not a list")
    shapes = []
    for s in v:
        if not (isinstance(s, list) and len(s) == 2 and isinstance(s[0], list) and s[1].__class__ is bool
                and all(d.__class__ is int for d in s[0])):
            raise ProtocolError(f"output shape {s!r:.80} is not [[integer, ...], true or false]")
        shapes.append(OutputShape(tuple(s[0]), s[1]))
    return shapes


def encode_timing(t: Timing) -> list[int]:
    return [int(t.time_on_device), int(t.time_in_driver)]


def decode_timing(v: Any) -> Timing:
    """``[time_on_device, time_in_driver]``, two integers; anything else is a ProtocolError."""
    if not (isinstance(v, list) and len(v) == 2 and v[0].__class__ is int and v[1].__class__ is int):
        raise ProtocolError(f"timing {v!r:.80} is not two integers")
    return Timing(v[0], v[1])


def string(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise ProtocolError(f"{what} {v!r:.80} is not a string")
    return v


def boolean(v: Any, what: str) -> bool:
    if v.__class__ is not bool:
        raise ProtocolError(f"{what} {v!r:.80} is not true or false")
    return v


def list_of(v: Any, check: Any, what: str, length: int | None = None) -> list:
    """``v`` as a list whose every item ``check(item, what)`` accepts (and returns)."""
    if not isinstance(v, list) or (length is not None and len(v) != length):
        size = "" if length is None else f" of {length}"
        raise ProtocolError(f"{what} {v!r:.80} is not a list{size}")
    return [check(x, what) for x in v]


_STATUSES = {int(s): s for s in ErrorStatus}


def decode_status(v: Any) -> ErrorStatus:
    """A status code of a reply: one of the ErrorStatus codes (0..8), as a JSON integer."""
    status = _STATUSES.get(v) if v.__class__ is int else None
    if status is None:
        raise ProtocolError(f"{v!r:.80} is not an ErrorStatus code")
    return status


def _perf(p: PerformanceInfo) -> list[float]:
    return [p.exec_time, p.power_usage]


def encode_capabilities(c: Capabilities) -> dict:
    return {"relaxed_scalar": _perf(c.relaxed_float32_to_float16_performance_scalar),
            "relaxed_tensor": _perf(c.relaxed_float32_to_float16_performance_tensor),
            "operands": [[int(t), *_perf(p)] for t, p in c.operand_performance.items()],
            "if": _perf(c.if_performance), "while": _perf(c.while_performance)}


def _decode_perf(v: Any) -> PerformanceInfo:
    if not (isinstance(v, list) and len(v) == 2 and all(x.__class__ in (int, float) for x in v)):
        raise ProtocolError(f"performance {v!r:.80} is not two numbers")
    return PerformanceInfo(*v)


def decode_capabilities(d: Any) -> Capabilities:
    """Capabilities exactly as ``encode_capabilities`` writes them; an operand type code
    outside the enum stays a plain int (a check of the capabilities may name it)."""
    if not isinstance(d, dict):
        raise ProtocolError(f"capabilities {d!r:.80} are not an object")
    try:
        fields = [d[k] for k in ("relaxed_scalar", "relaxed_tensor", "operands", "if", "while")]
    except KeyError as e:
        raise ProtocolError(f"capabilities have no {e} field") from None
    operands = {}
    for entry in list_of(fields[2], lambda x, _: x, "capabilities operands"):
        if not (isinstance(entry, list) and len(entry) == 3):
            raise ProtocolError(f"operand performance {entry!r:.80} is not [type, exec_time, power_usage]")
        operands[enum_or_int(OperandType, entry[0])] = _decode_perf(entry[1:])
    return Capabilities(_decode_perf(fields[0]), _decode_perf(fields[1]), operands,
                        _decode_perf(fields[3]), _decode_perf(fields[4]))


def iter_ints(v: Any, what: str) -> Iterator[int]:
    if not isinstance(v, list):
        raise ProtocolError(f"{what} is not a list")
    for x in v:
        if not isinstance(x, int) or isinstance(x, bool):
            raise ProtocolError(f"{what} holds {x!r}, not an integer")
        yield x
