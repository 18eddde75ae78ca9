"""``service:<spec>``: any driver hosted in a child process, spoken to over a Unix socket
(docs/service-protocol.md), as the NNAPI runtime speaks to a HAL service.

- Memory pools and cache files travel as descriptors (SCM_RIGHTS), never as copied bytes.
- Prepared models, bursts and fenced callbacks are handles in the service, released when the
  client drops its proxy (DRV-5) or disconnects.
- The child's death, during or between calls, fails every pending and later call of this
  instance with ``DriverFault`` (DEVICE_UNAVAILABLE, outcome CRASH) until ``restart()``.
- Every call has a deadline (``timeout=`` seconds, default: the harness's hang timeout; a
  HAL deadline shortens it). A call past it is a HANG: the service is killed and the call
  fails, it never blocks.
- Bursts run over a shared-memory ring buffer signalled with eventfds (fmq.py, BURST-1..4).

``service:@PATH`` attaches to a service already listening on PATH (another client's, e.g.
the MLTS stress clients share one service); ``ServiceDriver.attach_spec`` names it.

Nothing the other end says is taken on trust (docs/service-protocol.md, docs/security.md):
- every socket's peer is checked with the kernel (SO_PEERCRED) before anything is sent: it
  must run as this user, and be the one service process (the spawned child's pid, or for
  ``service:@PATH`` the process that listens there); an attach path whose directory or
  socket another user owns or may write into is refused before connecting;
- the service's process is known from the kernel and pinned by a pidfd at connect time, and
  only ever signalled through it, so a hang kills that process and nothing else, whatever
  pid the service names;
- every reply is checked field by field: a malformed one is the service's CRASH
  (``Connection.broken``), never an exception of the harness's own.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from nncert.drivers import DriverSpecError
from nncert.drivers.base import (
    Burst,
    Deadline,
    Driver,
    ExecutionCallback,
    ExecutionResult,
    FencedExecutionCallback,
    FencedExecutionInfo,
    FirstRun,
    PreparedModel,
    SyncFence,
    hang_timeout,
    process_resources,
    readable,
)
from nncert.drivers.service import buffers, wire
from nncert.drivers.service.buffers import RemoteBuffer
from nncert.drivers.service.fmq import MessageQueue, QueueAborted, QueueTimeout
from nncert.drivers.service.spin import arrived, poll_readable
from nncert.files import UnsafePathError, check_dir
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.memory import Memory
from nncert.hal.model import BufferDesc, BufferRole, Capabilities, Model, OutputShape, Request, Timing
from nncert.hal.types import (
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    Priority,
    Version,
)

#: Extra seconds a call may take beyond its HAL deadline before the service counts as hung.
DEADLINE_GRACE_S = 1.0
STDERR_TAIL = 2000


class UntrustedPeer(Exception):  # noqa: N818 - a refusal, named as such
    """A socket whose other end is not the service this client may talk to (another user's
    process, or not the service's process): refused before anything is sent on it."""


def check_attach_path(path: str) -> None:
    """Refuse (``DriverSpecError``, one line) an attach path another user could have put
    there or could replace: its directory must be a real directory of this user's that no
    one else may write into (``nncert.files.check_dir``), and the path a socket of this
    user's that no one else may write to."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise DriverSpecError(f"no driver service at {path}: {e.strerror}") from None
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "it is a symlink"
    elif not stat.S_ISSOCK(st.st_mode):
        why = "it is not a socket"
    elif st.st_uid != os.geteuid():
        why = f"the socket is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"the socket is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    if why is None:
        try:
            check_dir(os.path.dirname(os.path.abspath(path)), private=True)
        except UnsafePathError as e:
            why = str(e)
    if why is not None:
        raise DriverSpecError(f"refusing to attach to the driver service at {path}: {why}")


def _one_line(text: str, limit: int = 300) -> str:
    """A service's text for a one-line message: its first line, cut short."""
    line = text.strip().partition("\n")[0]
    return line if len(line) <= limit else line[:limit] + "..."


def _integer(v: Any, what: str) -> int:
    return wire.integer(v, what)


_RESULT: dict[str, Callable[[Any, str], Any] | None] = {
    "shapes": lambda v, _: wire.decode_shapes(v), "timing": lambda v, _: wire.decode_timing(v)}

#: What a successful reply of each call must carry, and how each field is decoded: ``call``
#: replaces the fields with their decoded values; a field missing or malformed makes the
#: service broken (CRASH). Calls not listed (ping, stats, buffer copies, releases) need
#: nothing but their status.
REPLIES: dict[str, dict[str, Callable[[Any, str], Any] | None]] = {
    "hello": {"pid": _integer, "client": _integer, "key": wire.string, "driver": wire.string,
              "feature_level": lambda v, _: wire.enum_strict(Version, v),
              "device_type": lambda v, _: wire.enum_strict(DeviceType, v)},
    "capabilities": {"value": lambda v, _: wire.decode_capabilities(v)},
    "version_string": {"value": wire.string},
    "type": {"value": lambda v, _: wire.enum_or_int(DeviceType, v)},
    "supported_extensions": {"value": lambda v, what: wire.list_of(v, wire.string, what)},
    "number_of_cache_files_needed": {"value": lambda v, what: wire.list_of(v, _integer, what, 2)},
    "supported_operations": {"value": lambda v, what: wire.list_of(v, wire.boolean, what)},
    "first_run": {"value": lambda v, what: wire.list_of(v, wire.boolean, what)},
    "prepare_model": {"handle": _integer},
    "prepare_model_from_cache": {"handle": _integer},
    "execute": _RESULT,
    "execute_fenced": {"callback": _integer, "fence": wire.boolean},
    "fenced_info": {"info": lambda v, _: _decode_info(v), "message": None},
    "burst_configure": {"handle": _integer},
    "burst execution": _RESULT,  # a result read from the burst's result ring
    "allocate": {"handle": _integer, "token": _integer},
}


def _decode_info(v: Any) -> tuple[ErrorStatus, Timing, Timing]:
    if not (isinstance(v, list) and len(v) == 3):
        raise wire.ProtocolError(f"fenced execution info {v!r:.80} is not [status, timing, timing]")
    return wire.decode_status(v[0]), wire.decode_timing(v[1]), wire.decode_timing(v[2])


class Connection:
    """This process's client of a service: one socket per call in flight, and the service's
    fate (alive, crashed, hung) shared by every proxy made through it.

    A call takes an idle socket (or opens one more, which joins this client with ``hello``),
    sends, and reads its reply from that socket itself: one call per socket, so replies need
    no matching and no thread hands them over; concurrent calls from several threads run
    on several sockets, and so at once in the service (DRV-4).

    The service's process is the kernel's answer, never the service's: the spawned child,
    or the process listening on the socket (SO_PEERCRED), pinned by a pidfd (``death_fd``)
    through which alone it is ever signalled. ``open`` checks every socket's peer before
    anything is sent on it."""

    #: Seconds a reply is polled for before sleeping (spin.py).
    POLL_S = 0.0005

    def __init__(self, address: str, process: subprocess.Popen | None, stderr_path: str | None,
                 label: str, timeout: float | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.process = process
        self.stderr_path = stderr_path
        self.label = label
        self.owner_pid = os.getpid()
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.idle: list[socket.socket] = []
        self.sockets: list[socket.socket] = []
        self.client: tuple[int, str] | None = None
        #: How long replies have lately taken (spin.arrived): whether polling for one pays.
        self.latency = 0.0
        #: The calls beyond the HAL's that the service offers (its ``hello``).
        self.extra_calls: frozenset[str] = frozenset()
        self.releases: collections.deque[int] = collections.deque()
        self.fault: DriverFault | None = None
        #: The service's pid, from the kernel (the spawned child's, or SO_PEERCRED's).
        self.service_pid: int | None = None
        #: A pidfd of the service's process: what a hang signals, and readable once the
        #: process has ended (burst waiters watch it, BURST-4).
        self.death_fd: int | None = None
        if process is not None:
            # Our own child, not yet reaped: its pid cannot have been reused.
            self.service_pid = process.pid
            try:
                self.death_fd = os.pidfd_open(process.pid)
            except OSError:
                self.death_fd = None  # kill() falls back to Popen.kill, as safe for a child

    def open(self) -> socket.socket:
        """A new socket to the service, its peer checked (``UntrustedPeer`` otherwise) before
        anything is sent: a process of this user's, and the service's process (the first
        socket of an attached client learns which that is, and pins it with a pidfd)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.address)
            pid, uid, _ = wire.peer_credentials(sock)
            if uid != os.geteuid():
                raise UntrustedPeer(f"the process listening at {self.address} (pid {pid}) runs as uid {uid}, "
                                    f"not as this user (uid {os.geteuid()}): nothing is sent to it")
            if pid <= 0:
                raise UntrustedPeer(f"the process listening at {self.address} is in a pid namespace this "
                                    f"process cannot see: it could not be stopped on a hang")
            if self.service_pid is not None and pid != self.service_pid:
                raise UntrustedPeer(f"the process listening at {self.address} is pid {pid}, not the driver "
                                    f"service (pid {self.service_pid})")
            if self.death_fd is None:
                try:
                    self.death_fd = wire.peer_pidfd(sock, pid)
                except OSError as e:
                    raise UntrustedPeer(f"the process listening at {self.address} (pid {pid}) cannot be "
                                        f"pinned with a pidfd ({e.strerror or e}): it could not be stopped "
                                        f"safely on a hang") from None
                self.service_pid = pid
        except BaseException:
            sock.close()
            raise
        with self.lock:
            self.sockets.append(sock)
            if self.fault is not None:  # failed meanwhile: _fail shut the others down
                sock.shutdown(socket.SHUT_RDWR)
        return sock

    def hello(self) -> dict:
        """Become a client of the service (the first call of the first socket)."""
        reply, _, _ = self.call("hello", {"protocol": wire.PROTOCOL_VERSION, "pid": os.getpid()})
        if reply["pid"] != self.service_pid:
            self.broken(f"hello: the service says its pid is {reply['pid']}, but the process serving "
                        f"{self.address} is pid {self.service_pid}")
        try:
            extra = wire.list_of(reply.get("extra_calls", []), wire.string, "extra_calls")
        except wire.ProtocolError as e:
            self.broken(f"hello: malformed reply from the service: {e}")
        self.extra_calls = frozenset(extra)
        self.client = (reply["client"], reply["key"])
        return reply

    def _take_socket(self) -> socket.socket:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        if self.client is None:
            raise AssertionError("a second socket before hello")
        try:
            sock = self.open()
        except UntrustedPeer as e:
            self.broken(str(e))
        except OSError:
            self.died("connect")
            raise self.error() from None
        number, key = self.client
        reply, _, fds = self._exchange(sock, "join", {"op": "hello", "protocol": wire.PROTOCOL_VERSION,
                                                      "join": number, "key": key}, b"", (), self.limit(None))
        self._check_reply("hello (join)", reply, fds)
        wire.close_fds(fds)
        return sock

    # -- calls --
    def call(self, op: str, body: dict | None = None, blob: bytes = b"", fds: Sequence[int] = (),
             deadline: Deadline = None, keep_fds: bool = False) -> tuple[dict, bytes, list[int]]:
        """Send one call and wait for its reply; raises HalError for an error status and
        DriverFault when the service dies, misses the call's deadline or answers something
        malformed. The fields ``REPLIES`` lists for ``op`` come decoded. Descriptors in the
        reply are closed unless ``keep_fds`` (then they are the caller's)."""
        self.check()
        message = {"op": op, **(body or {})}
        sock = self._take_socket()
        if self.releases:
            message["release"] = self._drain_releases()
        reply, reply_blob, reply_fds = self._exchange(sock, op, message, blob, fds, self.limit(deadline))
        with self.lock:
            self.idle.append(sock)
        self._check_reply(op, reply, reply_fds)
        if not keep_fds:
            wire.close_fds(reply_fds)
            reply_fds = []
        return reply, reply_blob, reply_fds

    def _check_reply(self, op: str, reply: dict, fds: Sequence[int] = ()) -> None:
        """Raise the HalError an error reply carries; decode the fields ``REPLIES`` lists
        for ``op`` in place. Anything malformed (a status that is not a status code, a
        missing or mistyped field) breaks the service (CRASH): no working service says it."""
        error = None
        try:
            status = wire.decode_status(reply["status"])
            if status is not ErrorStatus.NONE:
                message = wire.string(reply.get("message", ""), "message")
                error = HalError(status, message, wire.decode_shapes(reply.get("shapes", [])))
            else:
                for field, decode in REPLIES.get(op, {}).items():
                    if decode is None:  # optional, a string
                        reply[field] = wire.string(reply.get(field, ""), field)
                    else:
                        reply[field] = decode(reply[field], field)
        except (wire.ProtocolError, KeyError, TypeError, ValueError, IndexError, AttributeError,
                OverflowError) as e:
            wire.close_fds(fds)
            what = f"no {e} field" if isinstance(e, KeyError) else str(e)
            self.broken(f"{op}: malformed reply from the service: {what}")
        if error is not None:
            wire.close_fds(fds)
            raise error

    def _exchange(self, sock: socket.socket, op: str, message: dict, blob: bytes, fds: Sequence[int],
                  limit: float) -> tuple[dict, bytes, list[int]]:
        """One call on one socket: send, then read the reply within ``limit`` seconds."""
        call_id = next(self.ids)
        try:
            sock.settimeout(limit)
            deadline = time.monotonic() + limit
            wire.send_message(sock, call_id, message, blob, fds)
            started = poll_readable(sock.fileno(), self.POLL_S, self.latency)
            got = wire.recv_message(sock, deadline=deadline, max_blob=0)  # replies carry no binary part
            self.latency = arrived(self.latency, started)
        except TimeoutError:
            self.hang(op, limit)
        except (OSError, wire.TruncatedMessage):  # the service went away
            got = None
        except wire.ProtocolError as e:  # it is there, and speaks garbage
            self.broken(f"{op}: unreadable reply from the service: {e}")
        if got is None:
            self.died(op)
            raise self.error()
        if got[0] != call_id:
            wire.close_fds(got[3])
            self.broken(f"the service answered call {got[0]} to call {call_id}")
        return got[1], got[2], got[3]

    def limit(self, deadline: Deadline) -> float:
        """Seconds this call may take: the hang timeout, or less when a HAL deadline is near."""
        limit = self.timeout or hang_timeout()
        if deadline is not None:
            limit = min(limit, max(0.0, (deadline - time.monotonic_ns()) / 1e9) + DEADLINE_GRACE_S)
        return limit

    def release(self, handle: int) -> None:
        """Forget a remote handle; the release rides on the next call."""
        if self.fault is None:
            self.releases.append(handle)

    def _drain_releases(self) -> list[int]:
        out = []
        while self.releases:
            out.append(self.releases.popleft())
        return out

    # -- fate --
    def alive(self) -> bool:
        if self.fault is None and self.process is not None and self.process.poll() is not None:
            self.died("no call (between calls)")
        return self.fault is None

    def check(self) -> None:
        if self.fault is not None:
            raise self.error()

    def error(self) -> DriverFault:
        """The error every call gets once the service is dead (DEVICE_UNAVAILABLE)."""
        fault = self.fault or DriverFault("CRASH", "the driver service is gone")
        return DriverFault(fault.outcome, f"{self.label} is unavailable: {fault.reason}", fault.detail)

    def hang(self, op: str, seconds: float) -> NoReturn:
        """The service missed a deadline: kill it, fail everything pending, raise HANG."""
        self._fail(DriverFault("HANG", f"{op} gave no answer within {seconds:.1f} s; the driver service "
                                       f"was killed", self.stderr_tail()))
        self.kill()
        raise self.error()

    def broken(self, reason: str) -> NoReturn:
        """The service said something no working service says (a reply to another call, a
        malformed reply or burst result, a pid that is not its own): it is dead to us
        (CRASH), and killed so that it cannot answer anyone else wrongly."""
        self._fail(DriverFault("CRASH", _one_line(reason), self.stderr_tail()))
        self.kill()
        raise self.error()

    def kill(self) -> None:
        """SIGKILL the service's process, through its pidfd only: never a pid, which may
        have been recycled, and never a process the service merely named."""
        with self.lock:
            fd = self.death_fd
            if fd is not None:
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                except OSError:  # ended already (ESRCH), or not ours to signal
                    pass
        if fd is None and self.process is not None:
            try:
                self.process.kill()  # Popen: never signals a child it has reaped
            except OSError:
                pass
        if self.process is not None:
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def died(self, during: str) -> None:
        how = "closed the connection"
        if self.process is not None:
            try:
                code = self.process.wait(2)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None and code < 0:
                how = f"was killed by {signal.Signals(-code).name}"
            elif code is not None:
                how = f"exited with code {code}"
        tail = self.stderr_tail()
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
        self._fail(DriverFault("CRASH", f"the driver service {how} during {during}"
                                        + (f" ({last.strip()[:200]})" if last else ""), tail))

    def _fail(self, fault: DriverFault) -> None:
        with self.lock:
            if self.fault is not None:
                return
            self.fault = fault
            sockets = list(self.sockets)
        for sock in sockets:  # wakes every call still waiting on one
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stderr_tail(self) -> str:
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - STDERR_TAIL))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """End this client: its sockets closed; a spawned service, which exits when its
        owner goes, is waited for (2 s) and killed if it does not."""
        if self.fault is None:
            self._fail(DriverFault("CRASH", "the connection was closed by the client"))
        for sock in self.sockets:
            sock.close()
        if self.process is not None:
            try:
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                self.kill()
        with self.lock:
            fd, self.death_fd = self.death_fd, None
        if fd is not None:
            os.close(fd)


def _deadline_body(deadline: Deadline, loop_timeout: int | None) -> dict:
    return {"deadline": deadline, "loop_timeout": loop_timeout}


class RemotePreparedModel(PreparedModel):
    """A prepared model living in the service (a handle); released when dropped (DRV-5)."""

    def __init__(self, conn: Connection, handle: int) -> None:
        self.conn = conn
        self.handle = handle

    def _execute(self, mode: str, request: Request, measure: MeasureTiming, deadline: Deadline,
                 loop_timeout: int | None) -> tuple[list[OutputShape], Timing]:
        fds: list[int] = []
        body = {"handle": self.handle, "mode": mode, "request": wire.encode_request(request, fds),
                "measure": int(measure), **_deadline_body(deadline, loop_timeout)}
        reply, _, _ = self.conn.call("execute", body, fds=fds, deadline=deadline)
        return reply["shapes"], reply["timing"]  # decoded and checked (REPLIES)

    def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                              deadline: Deadline = None,
                              loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        return self._execute("sync", request, measure, deadline, loop_timeout)

    def execute(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                deadline: Deadline = None, loop_timeout: int | None = None) -> ExecutionCallback:
        """The service runs the hosted driver's own asynchronous path; the reply notifies."""
        callback = ExecutionCallback()

        def run() -> None:
            try:
                shapes, timing = self._execute("async", request, measure, deadline, loop_timeout)
            except HalError as e:  # DriverFault included: the status is DEVICE_UNAVAILABLE
                callback.notify(ExecutionResult(e.status, e.output_shapes, Timing(), e.message))
            else:
                callback.notify(ExecutionResult(ErrorStatus.NONE, shapes, timing))

        threading.Thread(target=run, name="nncert-remote-execute", daemon=True).start()
        return callback

    def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                       measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                       loop_timeout: int | None = None, timeout_after_fence: int | None = None
                       ) -> tuple[SyncFence | None, FencedExecutionCallback]:
        fds: list[int] = []
        body = {"handle": self.handle, "request": wire.encode_request(request, fds),
                "fences": len(wait_for), "measure": int(measure),
                "timeout_after_fence": timeout_after_fence, **_deadline_body(deadline, loop_timeout)}
        fds.extend(f.fd for f in wait_for)
        reply, _, reply_fds = self.conn.call("execute_fenced", body, fds=fds, deadline=deadline,
                                             keep_fds=True)
        if reply["fence"] and not reply_fds:
            self.conn.broken("execute_fenced: malformed reply from the service: it announces a fence "
                             "but sent no descriptor")
        fence = SyncFence.adopt(reply_fds.pop(0)) if reply["fence"] else None
        wire.close_fds(reply_fds)
        return fence, RemoteFencedCallback(self.conn, reply["callback"])

    def configure_execution_burst(self) -> RemoteBurst:
        return RemoteBurst(self)

    def release(self) -> None:
        if self.handle:
            self.conn.release(self.handle)
            self.handle = 0

    def __del__(self) -> None:
        self.release()


class RemoteFencedCallback(FencedExecutionCallback):
    def __init__(self, conn: Connection, handle: int) -> None:
        super().__init__()
        self.conn = conn
        self.handle = handle

    def get_execution_info(self) -> FencedExecutionInfo:
        """The service's answer; its death, hang or a malformed answer raise the DriverFault
        (CRASH, HANG) rather than pass for a status of the execution."""
        try:
            reply, _, _ = self.conn.call("fenced_info", {"handle": self.handle})
        except DriverFault:
            raise
        except HalError as e:
            return FencedExecutionInfo(e.status, message=e.message)
        status, launched, fenced = reply["info"]  # decoded and checked (REPLIES)
        return FencedExecutionInfo(status, launched, fenced, reply["message"])

    def __del__(self) -> None:
        self.conn.release(self.handle)


class RemoteBurst(Burst):
    """A burst whose requests and results travel over two shared-memory queues (BURST-3).

    A memory is sent to the service (as a descriptor) the first time its slot is used; later
    requests name the slot only, and the service keeps the mapping until
    ``release_memory_resource`` (BURST-2)."""

    QUEUE_CAPACITY = 1 << 16
    #: Seconds a result is polled for before sleeping (MessageQueue.read).
    POLL_S = 0.0005

    def __init__(self, prepared: RemotePreparedModel) -> None:
        self.prepared = prepared
        self.conn = prepared.conn
        self.slots: dict[int, Memory | int] = {}
        self._lock = threading.Lock()
        self.requests = MessageQueue.create(self.QUEUE_CAPACITY)
        self.results = MessageQueue.create(self.QUEUE_CAPACITY)
        body = {"handle": prepared.handle, "queue_size": self.requests.memory.size}
        reply, _, _ = self.conn.call("burst_configure", body, fds=self.requests.fds() + self.results.fds())
        self.handle = reply["handle"]

    def execute(self, request: Request, slots: Sequence[int],
                measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        with self._lock:  # one execution at a time per burst, as the HAL's burst controller
            for slot, pool in zip(slots, request.pools, strict=False):
                if slot not in self.slots:
                    fds: list[int] = []
                    desc = wire.encode_pool(pool, fds)
                    body = {"handle": self.handle, "slot": slot, "pool": desc}
                    self.conn.call("burst_memory", body, fds=fds)
                    self.slots[slot] = pool
            message = {"slots": list(slots), "inputs": wire.encode_arguments(request.inputs),
                       "outputs": wire.encode_arguments(request.outputs), "measure": int(measure),
                       **_deadline_body(deadline, loop_timeout)}
            payload = json.dumps(message, separators=(",", ":")).encode()
            if not self.requests.fits(payload):
                # Too big for the queue (thousands of arguments): the ordinary path, as the
                # NNAPI runtime falls back when a request does not fit its burst's queue.
                return self.prepared.execute_synchronously(request, measure, deadline, loop_timeout)
            self.conn.check()
            limit = self.conn.limit(deadline)
            give_up = time.monotonic() + limit
            abort = () if self.conn.death_fd is None else (self.conn.death_fd,)
            try:
                self.requests.write(payload, give_up, abort)
                reply = json.loads(self.results.read(give_up, abort, self.POLL_S))
                if not isinstance(reply, dict):
                    raise ValueError(f"a burst result is not a JSON object: {reply!r:.80}")
            except RecursionError:  # JSON nested beyond the parser's depth
                self.conn.broken("burst execution: unreadable result: nested too deeply")
            except QueueAborted:  # the service process ended (BURST-4)
                self.conn.died("burst execution")
                raise self.conn.error() from None
            except QueueTimeout:
                self.conn.hang("burst execution", limit)
                raise self.conn.error() from None
            except ValueError as e:
                # A result ring the service corrupted is a broken service, as a framing error
                # in a reply is: never read on from a lost message boundary.
                self.conn.broken(f"burst execution: unreadable result: {e}")
        self.conn._check_reply("burst execution", reply)
        return reply["shapes"], reply["timing"]  # decoded and checked (REPLIES)

    def release_memory_resource(self, slot: int) -> None:
        self.conn.call("burst_release_memory", {"handle": self.handle, "slot": slot})
        self.slots.pop(slot, None)

    def __del__(self) -> None:
        handle = getattr(self, "handle", 0)
        if handle:
            self.conn.release(handle)
        for queue in (getattr(self, "requests", None), getattr(self, "results", None)):
            if queue is not None:
                queue.close()


class ServiceDriver(Driver):
    """A driver hosted in a child process (or attached to a running service)."""

    def __init__(self, spec: str, timeout: float | None = None, address: str | None = None) -> None:
        self.spec = spec
        self.name = f"service:{spec}" if spec else f"service:@{address}"
        self.timeout = timeout
        self._attach = address
        self._dir: str | None = None
        self._conn: Connection | None = None
        self._start()

    # -- lifecycle --
    @property
    def address(self) -> str:
        return self._attach or os.path.join(self._dir or "", "sock")

    @property
    def attach_spec(self) -> str:
        """The spec another process uses to talk to this very service."""
        return f"service:@{self.address}"

    def _start(self) -> None:
        if self._attach:
            # Who may have put the socket there, and who listens on it, are checked before
            # anything is sent: the model, the pools and the cache files would go to them.
            check_attach_path(self._attach)
            conn = Connection(self._attach, None, None, self.name, self.timeout)
            try:
                sock = conn.open()
            except UntrustedPeer as e:
                conn.close()
                raise DriverSpecError(f"refusing to attach to the driver service at {self._attach}: {e}") \
                    from None
            except OSError as e:
                conn.close()
                raise DriverSpecError(f"no driver service at {self._attach}: {e.strerror or e}") from None
            conn.idle.append(sock)
            self._conn = conn
        try:
            if not self._attach:
                self._spawn()
            reply = self._conn.hello()  # type: ignore[union-attr]
        except HalError as e:
            self._stop()
            raise DriverSpecError(_one_line(e.message) if not isinstance(e, DriverFault) else
                                  f"{self.name} did not start: {e.message}") from None
        self.feature_level = reply["feature_level"]
        self.device_type = reply["device_type"]
        self.hosted_name = reply["driver"]

    def _spawn(self) -> None:
        """Start the service on a socket in a private directory. The child listens on it
        itself (so the kernel names the child as the socket's peer) and says so on a pipe;
        only then does this process connect."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="nncert-service-")  # 0700, this user's
        path = os.path.join(self._dir, "sock")
        if os.path.exists(path):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ready_r, ready_w = os.pipe()
        try:
            listener.bind(path)
            os.chmod(path, 0o600)  # not listening yet: nobody could connect in between
            stderr_path = os.path.join(self._dir, f"stderr-{time.monotonic_ns()}")
            with open(stderr_path, "wb") as err:
                process = subprocess.Popen(
                    [sys.executable, "-m", "nncert.drivers.service.server", "--fd", str(listener.fileno()),
                     "--ready", str(ready_w), "--driver", self.spec],
                    stdin=subprocess.DEVNULL, stdout=err, stderr=err, pass_fds=[listener.fileno(), ready_w],
                    start_new_session=True)
        finally:
            listener.close()
            os.close(ready_w)
        conn = self._conn = Connection(path, process, stderr_path, self.name, self.timeout)
        try:
            limit = conn.limit(None)
            if not readable([ready_r], limit):
                conn.hang("start", limit)
            if not os.read(ready_r, 1):  # the child ended before it listened
                conn.died("start")
                raise conn.error()
        finally:
            os.close(ready_r)
        try:
            conn.idle.append(conn.open())
        except UntrustedPeer as e:
            conn.broken(f"start: {e}")
        except OSError:
            conn.died("connect")
            raise conn.error() from None

    def _stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.close()  # a spawned service exits when its owner disconnects; else it is killed
        if conn.stderr_path:
            try:
                os.unlink(conn.stderr_path)
            except OSError:
                pass

    def alive(self) -> bool:
        conn = self._conn
        return conn is not None and conn.owner_pid == os.getpid() and conn.alive()

    def restart(self) -> None:
        self._stop()
        self._start()

    def fault(self) -> DriverFault | None:
        conn = self._conn
        return None if conn is None or conn.fault is None else conn.error()

    def close(self) -> None:
        self._stop()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def conn(self) -> Connection:
        conn = self._conn
        if conn is None:
            raise DriverFault("CRASH", f"{self.name} is closed")
        if conn.owner_pid != os.getpid():
            # A forked child (--isolate, MLTS clients) must not share the parent's socket:
            # it becomes a client of its own on the same service.
            self._attach = self._attach or self.address
            self._dir = None  # the parent's: never removed from here
            self._conn = None
            self._start()
            return self._conn  # type: ignore[return-value]
        return conn

    def held_resources(self) -> dict[str, int]:
        """The service's descriptors, threads and memory (from /proc, the kernel's word), and
        the prepared models, bursts and buffers of the hosted driver still alive (``stats``;
        a service that does not answer it reports the /proc figures only)."""
        conn = self.conn
        try:
            reply = conn.call("stats")[0]
        except DriverFault:
            raise
        except HalError:
            reply = {}
        live = reply.get("live")
        held = {}
        if isinstance(live, dict):
            held = {f"service live {kind}": _integer(n, f"stats: live {kind}") for kind, n in live.items()
                    if isinstance(kind, str)}
        return held | process_resources(conn.service_pid, prefix="service ")

    def _query(self, op: str) -> Any:
        return self.conn.call(op)[0]["value"]

    # -- device queries (DRV-1): asked every time, never cached, so instability shows --
    # (each reply's value comes decoded and checked: REPLIES)
    def capabilities(self) -> Capabilities:
        return self._query("capabilities")

    def version_string(self) -> str:
        return self._query("version_string")

    def type(self) -> DeviceType:
        return self._query("type")

    def supported_extensions(self) -> list[str]:
        return self._query("supported_extensions")

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        model, data = self._query("number_of_cache_files_needed")
        return model, data

    # -- compilation --
    def supported_operations(self, model: Model) -> list[bool]:
        return list(self._supported_operations(model)["value"])

    def decline_reasons(self, model: Model) -> list[str | None]:
        reply = self._supported_operations(model)
        return _reasons(list(reply["value"]), reply.get("reasons"))

    def first_run(self, model: Model, request: Request | None = None) -> FirstRun:
        """One round trip where the service offers it (``first_run``): the flags; when every
        operation is claimed, the model prepared with the defaults right after (or why it
        could not be); when it was and ``request`` is given, that request run once on it
        synchronously (or why it failed). A prepared model nobody takes is released as any
        dropped proxy is; its outputs are in the request's pools already."""
        conn = self.conn
        if "first_run" not in conn.extra_calls:
            return super().first_run(model, request)
        fds: list[int] = []
        desc, blob = wire.encode_model(model, fds)
        body: dict[str, Any] = {"model": desc}
        if request is not None:
            body.update(request=wire.encode_request(request, fds), measure=int(MeasureTiming.NO))
        reply = conn.call("first_run", body, blob, fds)[0]
        flags = list(reply["value"])
        apart = FirstRun(flags, functools.partial(self.prepare_model, model),
                         lambda prepared: prepared.execute_synchronously(request),  # type: ignore[arg-type]
                         _reasons(flags, reply.get("reasons")))
        prepared_reply = self._nested(reply, "prepared", all(flags), "prepare_model")
        ran = isinstance(prepared_reply, dict) and request is not None
        executed = self._nested(reply, "executed", ran, "execute")
        if prepared_reply is None:
            return apart
        if isinstance(prepared_reply, HalError):
            return FirstRun(flags, _raiser(prepared_reply), apart.execute, apart.reasons)
        prepared = RemotePreparedModel(conn, prepared_reply["handle"])
        if executed is None:
            return FirstRun(flags, lambda: prepared, apart.execute, apart.reasons)

        outcome = [executed]

        def execute(target: PreparedModel) -> tuple[list[OutputShape], Timing]:
            if target is not prepared or not outcome:  # another model, or the run is spent: run it
                return apart.execute(target)
            result = outcome.pop()
            if isinstance(result, HalError):
                raise result
            return result["shapes"], result["timing"]

        return FirstRun(flags, lambda: prepared, execute, apart.reasons)

    def _nested(self, reply: dict, field: str, expected: bool, op: str) -> dict | HalError | None:
        """The reply of a later call inside a ``first_run`` reply, checked as that call's
        own reply would be (``op``), or its HalError; None when it is absent, as it must be
        unless ``expected``. Anything else breaks the service (CRASH)."""
        nested = reply.get(field)
        if (nested is not None) != expected:
            what = f"no {field!r} field" if nested is None else f"a {field!r} field it cannot have"
            self.conn.broken(f"first_run: malformed reply from the service: {what}")
        if nested is None:
            return None
        try:
            self.conn._check_reply(op, nested)
        except DriverFault:
            raise
        except HalError as e:
            return e
        return nested

    def _supported_operations(self, model: Model) -> dict:
        fds: list[int] = []
        desc, blob = wire.encode_model(model, fds)
        return self.conn.call("supported_operations", {"model": desc}, blob, fds)[0]

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        fds: list[int] = []
        desc, blob = wire.encode_model(model, fds)
        fds.extend(model_cache)
        fds.extend(data_cache)
        body = {"model": desc, "preference": int(preference), "priority": int(priority), "deadline": deadline,
                "model_cache": len(model_cache), "data_cache": len(data_cache),
                "token": None if token is None else bytes(token).hex()}
        conn = self.conn
        reply, _, _ = conn.call("prepare_model", body, blob, fds, deadline=deadline)
        return RemotePreparedModel(conn, reply["handle"])

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        body = {"deadline": deadline, "model_cache": len(model_cache), "data_cache": len(data_cache),
                "token": bytes(token).hex()}
        conn = self.conn
        reply, _, _ = conn.call("prepare_model_from_cache", body, fds=[*model_cache, *data_cache],
                                deadline=deadline)
        return RemotePreparedModel(conn, reply["handle"])

    # -- memory domains (MEM-4..7): the buffer lives in the service, a token names it --
    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]
                 ) -> tuple[RemoteBuffer, int]:
        return buffers.allocate(self.conn, desc, prepared_models, input_roles, output_roles)


def _reasons(flags: list[bool], reasons: Any) -> list[str | None]:
    """``decline_reasons`` from a reply's flags and its optional ``reasons`` field."""
    if not isinstance(reasons, list) or len(reasons) != len(flags):  # an optional field
        reasons = [None] * len(flags)
    return [None if ok else (r if isinstance(r, str) else "") for ok, r in zip(flags, reasons, strict=True)]


def _raiser(error: HalError) -> Callable[[], NoReturn]:
    def fail() -> NoReturn:
        raise error
    return fail


def create(spec: str = "", timeout: str | None = None) -> ServiceDriver:
    """``service:<driver spec>`` hosts that driver in a child process; ``service:@PATH``
    attaches to a running service. ``timeout`` (seconds) overrides the hang timeout."""
    spec = spec.strip()
    if not spec:
        raise ValueError("service needs the driver to host, e.g. service:reference")
    seconds = None
    if timeout is not None:
        try:
            seconds = float(timeout)
        except ValueError:
            raise ValueError(f"timeout {timeout!r} is not a number of seconds") from None
    if spec.startswith("@"):
        return ServiceDriver("", seconds, address=spec[1:])
    if spec.split(":", 1)[0] == "service":
        raise ValueError("a service cannot host another service")
    return ServiceDriver(spec, seconds)


create.raw_spec = True  # type: ignore[attr-defined]  # the rest of the spec is the hosted driver's

__all__ = ["Connection", "RemoteBurst", "RemotePreparedModel", "ServiceDriver", "create"]
