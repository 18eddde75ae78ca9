"""The driver service: hosts one driver in this process and serves it over a Unix socket
(docs/service-protocol.md), the way a HAL service serves the NNAPI runtime.

Run by ``service:<spec>`` (which hands over an already listening socket with ``--fd``; the
service then exits when that client disconnects), or by hand to serve a socket path that
clients attach to (``service:@PATH``) until it is killed::

    python -m nncert.drivers.service.server --driver reference --socket /tmp/nn.sock

Each client owns its handles (prepared models, bursts, fenced callbacks); they are
released when the client asks, or all at once when its last connection closes (DRV-5: a
dead client leaks nothing). A client has one connection per call in flight, each served
by a thread of its own, so several clients and threads are served at once (DRV-4).

Only this user's processes are served: a connection whose peer (SO_PEERCRED) runs as another
uid is closed at accept, as is one beyond ``MAX_CONNECTIONS``; a message begun must be
complete within ``MESSAGE_TIMEOUT_S``, and its memory is allocated only as it arrives
(wire.py). A socket path is created 0600 in a directory of this user's that no one else
may write into.
"""

from __future__ import annotations

import argparse
import errno
import gc
import itertools
import json
import os
import secrets
import select
import socket
import string
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.base import Burst, Driver, FencedExecutionCallback, PreparedModel, SyncFence
from nncert.drivers.service import wire
from nncert.drivers.service.buffers import BufferEntry, BufferOps
from nncert.drivers.service.fmq import CorruptMessageError, MessageQueue, QueueAborted
from nncert.drivers.service.spin import arrived, poll_readable
from nncert.files import UnsafePathError, own_dir
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import Model, Request
from nncert.hal.types import ErrorStatus, ExecutionPreference, MeasureTiming, Priority

Reply = tuple[dict, bytes, list[int]]

#: Connections served at once (every client's together); more are closed at accept, so that
#: no client, stalled or runaway, can take every thread and descriptor of the service.
MAX_CONNECTIONS = 64
#: Seconds a message may take from its first byte to its last: a sender that stops half-way
#: loses its connection, and the memory of what it sent, after that long.
MESSAGE_TIMEOUT_S = 10.0
BACKLOG = 64
#: The calls beyond the HAL's that this service answers, named in ``hello``'s reply: a client
#: makes them only to a service that names them (docs/service-protocol.md).
EXTRA_CALLS = ("first_run",)


class BurstWorker:
    """The service end of a burst: reads requests from the request queue, runs them on the
    hosted driver's burst object, writes results to the result queue (BURST-1..3).

    While a burst lives its requests are awaited by polling for a while before sleeping:
    the burst asks for a high-performance state for its lifetime (BURST-1)."""

    POLL_S = 0.0005

    def __init__(self, burst: Burst, requests: MessageQueue, results: MessageQueue) -> None:
        self.burst = burst
        self.requests = requests
        self.results = results
        self.slots: dict[int, Memory | int] = {}
        #: Slots the hosted burst has seen (it learns a slot at its first execution).
        self.used: set[int] = set()
        self.stop_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._stop_lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="nncert-burst", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            while True:
                try:
                    message = self.requests.read(None, (self.stop_fd,), self.POLL_S)
                except CorruptMessageError as e:
                    # read() has dropped every published byte (message boundaries are lost);
                    # one result answers them, so that the client never waits in vain (VAL-1).
                    result = _encode(error_body(HalError(ErrorStatus.INVALID_ARGUMENT,
                                                         f"malformed burst message: {e}")))
                else:
                    result = self._run(message)
                if not self.results.fits(result):
                    # Every request gets exactly one result, however long the driver's message.
                    result = _encode(error_body(HalError(
                        ErrorStatus.GENERAL_FAILURE, f"the result ({len(result)} bytes) does not fit the "
                                                     f"result ring ({self.results.capacity} bytes)")))
                self.results.write(result, None, (self.stop_fd,))
        except QueueAborted:
            pass
        except Exception as e:  # a bug of the worker: say so; the client then times out
            print(f"nncert service: burst stopped: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            self.requests.close()
            self.results.close()
            with self._stop_lock:
                os.close(self.stop_fd)
                self.stop_fd = -1

    def _run(self, message: bytes) -> bytes:
        try:
            request, slots, measure, deadline, loop_timeout = self._decode(message)
            self.used.update(slots)
            shapes, timing = self.burst.execute(request, slots, measure, deadline, loop_timeout)
            body = ok({"shapes": wire.encode_shapes(shapes), "timing": wire.encode_timing(timing)})
        except Exception as e:
            body = error_body(e)
        return _encode(body)

    def _decode(self, message: bytes) -> tuple[Request, list[int], MeasureTiming, int | None, int | None]:
        """A burst request message; anything malformed in it is INVALID_ARGUMENT (VAL-1)."""
        try:
            d = json.loads(message)
            if not isinstance(d, dict):  # dict() would turn [[key, value], ...] into one
                raise wire.ProtocolError(f"a burst request is a JSON object, not {type(d).__name__}")
            d = Body(d)
            slots = list(wire.iter_ints(d["slots"], "slots"))
            inputs, outputs = wire.decode_arguments(d["inputs"]), wire.decode_arguments(d["outputs"])
            measure = wire.enum_strict(MeasureTiming, d["measure"])
            times = [wire.optional_integer(d.get("deadline"), "deadline"),
                     wire.optional_integer(d.get("loop_timeout"), "loop_timeout")]
        except (HalError, wire.ProtocolError):
            raise
        except Exception as e:
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"malformed burst message: {type(e).__name__}: {e}") from None
        missing = [s for s in slots if s not in self.slots]
        if missing:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"burst memory slots {missing} were never sent")
        return Request(inputs, outputs, [self.slots[s] for s in slots]), slots, measure, times[0], times[1]

    def stop(self) -> None:
        with self._stop_lock:
            if self.stop_fd >= 0:  # not already stopped on its own
                os.eventfd_write(self.stop_fd, 1)


#: The kinds of hosted objects ``stats`` counts (its ``live`` field).
HOSTED_KINDS = ("prepared_models", "bursts", "buffers")


def _hosted_object(obj: Any) -> tuple[str | None, Any]:
    """The hosted driver's own object behind a handle, and its kind (None: not counted)."""
    if isinstance(obj, PreparedModel):
        return "prepared_models", obj
    if isinstance(obj, BurstWorker):
        return "bursts", obj.burst
    if isinstance(obj, BufferEntry):
        return "buffers", obj.buffer
    return None, None


def _encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


#: Burst memory slot ids are non-negative int64 values (the HAL's int32/int64 slot).
SLOT_LIMIT = 2**63


def _slot(value: Any) -> int:
    """A burst memory slot id; anything outside 0 .. 2**63 - 1 is INVALID_ARGUMENT (VAL-1)."""
    slot = wire.integer(value, "memory slot")
    if not 0 <= slot < SLOT_LIMIT:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"invalid memory slot {slot}")
    return slot


def _token(value: Any) -> bytes:
    """A compilation-cache token: a string of hex digits, two per byte."""
    if not isinstance(value, str) or len(value) % 2 or not all(c in string.hexdigits for c in value):
        raise wire.ProtocolError(f"cache token {value!r:.80} is not a string of hex digit pairs")
    return bytes.fromhex(value)


def _times(body: dict) -> tuple[int | None, int | None]:
    """An execution's deadline (absolute CLOCK_MONOTONIC ns) and loop timeout (ns), or null."""
    return (wire.optional_integer(body.get("deadline"), "deadline"),
            wire.optional_integer(body.get("loop_timeout"), "loop_timeout"))


class FencedEntry:
    """A fenced execution's callback and the fence the hosted driver returned: kept alive
    until the client releases the callback, since the driver signals that very fence."""

    def __init__(self, callback: FencedExecutionCallback, fence: SyncFence | None) -> None:
        self.callback = callback
        self.fence = fence


class Body(dict):
    """A call's JSON body: a missing field is a protocol error (INVALID_ARGUMENT), not a
    KeyError that would read as a bug of the hosted driver."""

    def __missing__(self, key: str) -> Any:
        raise wire.ProtocolError(f"the call has no {key!r} field")


def ok(body: dict | None = None) -> dict:
    return {"status": 0, **(body or {})}


def error_body(e: BaseException) -> dict:
    if isinstance(e, HalError):
        return {"status": int(e.status), "message": e.message, "shapes": wire.encode_shapes(e.output_shapes)}
    if isinstance(e, wire.ProtocolError):
        return {"status": int(ErrorStatus.INVALID_ARGUMENT), "message": f"protocol: {e}", "shapes": []}
    # A driver bug: surface it as a status with its origin, never kill the service.
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    origin = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
    return {"status": int(ErrorStatus.GENERAL_FAILURE), "message": f"{type(e).__name__}: {e}{origin}",
            "shapes": []}


class Client:
    """One client of the service: the handles it owns, shared by all its connections.

    A client opens one connection per call it has in flight (the first at ``hello``, more
    with ``hello`` + ``join`` when its threads call at once), so that each connection is
    served by one thread that reads a call, answers it and reads the next: no hand-off
    between threads, and concurrent calls really run at once (DRV-4)."""

    def __init__(self, service: Service, number: int, owner: bool) -> None:
        self.service = service
        self.number = number
        self.key = secrets.token_hex(16)  # joining needs it: no client reaches another's (VAL-2)
        self.owner = owner
        self.connections = 0
        self.handles: dict[int, Any] = {}
        self.counter = itertools.count(1)
        self.lock = threading.Lock()

    def add(self, obj: Any) -> int:
        with self.lock:
            handle = next(self.counter)
            self.handles[handle] = obj
        return handle

    def get(self, handle: Any, kind: type) -> Any:
        # Only an integer names a handle (True and 1.0 would find handle 1 in the dict).
        obj = self.handles.get(handle) if handle.__class__ is int else None
        if not isinstance(obj, kind):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"no {kind.__name__} with handle {handle!r}")
        return obj

    def release(self, handles: Any) -> None:
        for handle in wire.iter_ints(handles, "release"):
            with self.lock:
                obj = self.handles.pop(handle, None)
            if isinstance(obj, BurstWorker):
                obj.stop()

    def release_all(self) -> None:
        """DRV-5: a client that is gone leaves nothing behind."""
        with self.lock:
            objects, self.handles = list(self.handles.values()), {}
        for obj in objects:
            if isinstance(obj, BurstWorker):
                obj.stop()


class Session(BufferOps):
    """One connection: reads a call, answers it, reads the next (one call in flight)."""

    def __init__(self, service: Service, sock: socket.socket, peer_pid: int = 0) -> None:
        self.service = service
        self.driver = service.driver
        self.sock = sock
        #: The connecting process, from the kernel (SO_PEERCRED at accept).
        self.peer_pid = peer_pid
        self.client: Client | None = None

    @property
    def owner(self) -> Client:
        if self.client is None:
            raise wire.ProtocolError("the first call on a connection must be hello")
        return self.client

    def add(self, obj: Any) -> int:
        self.service.track(obj)
        return self.owner.add(obj)

    def get(self, handle: Any, kind: type) -> Any:
        return self.owner.get(handle, kind)

    #: Seconds the next call is polled for after an answer (spin.py): a client's calls
    #: tend to come in quick succession.
    POLL_S = 0.0005

    def serve(self) -> None:
        latency = 0.0
        try:
            while True:
                started = poll_readable(self.sock.fileno(), self.POLL_S, latency)
                try:
                    message = wire.recv_message(self.sock, stall=self.service.message_timeout)
                except wire.ProtocolError as e:
                    print(f"nncert service: dropping a connection: {e}", file=sys.stderr)
                    break
                except OSError:
                    break
                if message is None:
                    break
                latency = arrived(latency, started)
                call_id, body, blob, fds = message
                self.dispatch(call_id, body.get("op"), Body(body), blob, fds)
        finally:
            self.sock.close()
            self.service.connection_closed()
            if self.client is not None:
                self.service.detach(self.client)

    def dispatch(self, call_id: int, op: Any, body: dict, blob: bytes, fds: list[int]) -> None:
        fdr = wire.FdReader(fds)
        out_fds: list[int] = []
        try:
            if op != "hello":
                client = self.owner  # every call but hello needs a client
                if "release" in body:
                    client.release(body["release"])
            handler: Callable[..., Reply] | None = getattr(self, f"op_{op}", None) if isinstance(op, str) \
                else None
            if handler is None:
                raise wire.ProtocolError(f"unknown operation {op!r}")
            reply, reply_blob, out_fds = handler(body, blob, fdr)
        except Exception as e:
            reply, reply_blob = error_body(e), b""
        finally:
            fdr.close_rest()
        if body.get("noreply"):
            return
        try:
            wire.send_message(self.sock, call_id, reply, reply_blob, out_fds)
        except OSError:
            pass  # the client is gone; serve() notices and cleans up

    # -- connection --
    def op_hello(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        if self.client is not None:
            raise wire.ProtocolError("hello twice on one connection")
        protocol = body.get("protocol")
        if protocol.__class__ is not int or protocol != wire.PROTOCOL_VERSION:
            raise wire.ProtocolError(f"client speaks protocol {protocol!r:.40}, "
                                     f"this service {wire.PROTOCOL_VERSION}")
        self.client = self.service.attach(body.get("join"), body.get("key"))
        if self.client.owner and body.get("join") is None:
            # The owner's process as the kernel knows it, not as the hello names it.
            self.service.watch_owner(self.peer_pid)
        d = self.driver
        return ok({"protocol": wire.PROTOCOL_VERSION, "pid": os.getpid(), "driver": d.name,
                   "client": self.client.number, "key": self.client.key,
                   "feature_level": int(d.feature_level), "device_type": int(d.type()),
                   "extra_calls": list(EXTRA_CALLS)}), b"", []

    # -- device queries (DRV-1) --
    def op_capabilities(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return ok({"value": wire.encode_capabilities(self.driver.capabilities())}), b"", []

    def op_version_string(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return ok({"value": self.driver.version_string()}), b"", []

    def op_type(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return ok({"value": int(self.driver.type())}), b"", []

    def op_supported_extensions(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return ok({"value": list(self.driver.supported_extensions())}), b"", []

    def op_number_of_cache_files_needed(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return ok({"value": list(self.driver.number_of_cache_files_needed())}), b"", []

    def op_ping(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return ok(), b"", []

    def op_stats(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        """What this client holds, how many clients there are, and what the hosted driver
        still holds of what it handed over (DRV-5 checks)."""
        client = self.owner
        with client.lock:
            kinds = sorted(type(h).__name__ for h in client.handles.values())
        return ok({"handles": len(kinds), "kinds": kinds, "connections": client.connections,
                   "clients": len(self.service.clients), "live": self.service.live()}), b"", []

    # -- compilation --
    def op_supported_operations(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return self._supported(wire.decode_model(body["model"], blob, fdr)), b"", []

    def _supported(self, model: Model) -> dict:
        # The reasons come with the flags (one call of the hosted driver answers both).
        reasons = self.driver.decline_reasons(model)
        return ok({"value": [r is None for r in reasons],
                   "reasons": [None if r is None else str(r) for r in reasons]})

    def op_first_run(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        """``supported_operations``; when every operation is claimed, ``prepare_model`` of the
        same model with the defaults; when that succeeds and the call has a ``request``, one
        synchronous execution of it: the calls a test makes in a row, in one round trip.
        Each later call's outcome is a reply of its own inside this one (``prepared``,
        ``executed``), as it would be apart; the request's pools follow the model's."""
        model = wire.decode_model(body["model"], blob, fdr)
        reply = self._supported(model)
        if not all(reply["value"]):
            return reply, b"", []
        try:
            prepared = self.driver.prepare_model(model)
            reply["prepared"] = ok({"handle": self.add(prepared)})
        except Exception as e:
            reply["prepared"] = error_body(e)
            return reply, b"", []
        if body.get("request") is not None:
            try:
                reply["executed"] = self._execute(prepared, body, fdr)
            except Exception as e:
                reply["executed"] = error_body(e)
        return reply, b"", []

    def _caches(self, body: dict, fdr: wire.FdReader) -> tuple[list[int], list[int]]:
        """The cache files' descriptors (taken last: nothing may fail between taking them and
        the hosted call, whose ``finally`` closes them)."""
        n_model = wire.count(body.get("model_cache", 0), "model_cache")
        n_data = wire.count(body.get("data_cache", 0), "data_cache")
        if fdr.remaining() != n_model + n_data:
            raise wire.ProtocolError(f"{n_model} + {n_data} cache files announced, "
                                     f"{fdr.remaining()} descriptors left")
        return [fdr.take() for _ in range(n_model)], [fdr.take() for _ in range(n_data)]

    def op_prepare_model(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        model = wire.decode_model(body["model"], blob, fdr)
        preference = wire.enum_or_int(ExecutionPreference, body["preference"])
        priority = wire.enum_or_int(Priority, body["priority"])
        token = _token(body["token"]) if body.get("token") is not None else None
        deadline = wire.optional_integer(body.get("deadline"), "deadline")
        model_cache, data_cache = self._caches(body, fdr)
        try:
            prepared = self.driver.prepare_model(model, preference, priority, deadline,
                                                 model_cache, data_cache, token)
        finally:
            wire.close_fds(model_cache + data_cache)
        return ok({"handle": self.add(prepared)}), b"", []

    def op_prepare_model_from_cache(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        token = _token(body["token"])
        deadline = wire.optional_integer(body.get("deadline"), "deadline")
        model_cache, data_cache = self._caches(body, fdr)
        try:
            prepared = self.driver.prepare_model_from_cache(deadline, model_cache, data_cache, token)
        finally:
            wire.close_fds(model_cache + data_cache)
        return ok({"handle": self.add(prepared)}), b"", []

    # -- execution (EXE-1) --
    def op_execute(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        return self._execute(self.get(body["handle"], PreparedModel), body, fdr), b"", []

    def _execute(self, prepared: PreparedModel, body: dict, fdr: wire.FdReader) -> dict:
        request = wire.decode_request(body["request"], fdr)
        self.check_tokens(request.pools)  # VAL-2
        measure = wire.enum_strict(MeasureTiming, body["measure"])
        deadline, loop_timeout = _times(body)
        if body.get("mode") == "async":
            result = prepared.execute(request, measure, deadline, loop_timeout).wait(None)
            shapes, timing = result.raise_for_status()
        else:
            shapes, timing = prepared.execute_synchronously(request, measure, deadline, loop_timeout)
        return ok({"shapes": wire.encode_shapes(shapes), "timing": wire.encode_timing(timing)})

    def op_execute_fenced(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        prepared = self.get(body["handle"], PreparedModel)
        request = wire.decode_request(body["request"], fdr)
        self.check_tokens(request.pools)  # VAL-2
        measure = wire.enum_strict(MeasureTiming, body["measure"])
        deadline, loop_timeout = _times(body)
        after_fence = wire.optional_integer(body.get("timeout_after_fence"), "timeout_after_fence")
        wait_for = [SyncFence.adopt(fdr.take()) for _ in range(wire.count(body["fences"], "fences"))]
        fence, callback = prepared.execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                                  after_fence)
        handle = self.add(FencedEntry(callback, fence))
        return ok({"callback": handle, "fence": fence is not None}), b"", [fence.fd] if fence else []

    def op_fenced_info(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        info = self.get(body["handle"], FencedEntry).callback.get_execution_info()
        return ok({"info": [int(info.status), wire.encode_timing(info.timing_launched),
                            wire.encode_timing(info.timing_fenced)], "message": info.message}), b"", []

    # -- bursts (BURST-1..4) --
    def op_burst_configure(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        prepared = self.get(body["handle"], PreparedModel)
        size = wire.integer(body["queue_size"], "queue_size")
        if fdr.remaining() != 6:
            raise wire.ProtocolError(f"a burst needs 6 descriptors, {fdr.remaining()} arrived")
        queues: list[MessageQueue] = []
        try:
            for _ in range(2):
                try:  # unsealed (HalError INVALID_ARGUMENT), or shorter than its size
                    memory = Memory.adopt("ashmem", fdr.take(), size)
                except (OSError, ValueError, OverflowError) as e:
                    raise HalError(ErrorStatus.INVALID_ARGUMENT, f"cannot map a burst ring of {size} bytes: "
                                                                 f"{e}") from None
                data_fd, space_fd = fdr.take(), fdr.take()
                try:
                    queues.append(MessageQueue(memory, data_fd, space_fd))
                except ValueError as e:  # not a ring the client laid out: a bad argument
                    memory.close()
                    wire.close_fds([data_fd, space_fd])
                    raise HalError(ErrorStatus.INVALID_ARGUMENT, str(e)) from None
            worker = BurstWorker(prepared.configure_execution_burst(), *queues)
        except BaseException:
            for queue in queues:
                queue.close()
            raise
        return ok({"handle": self.add(worker)}), b"", []

    def op_burst_memory(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        worker = self.get(body["handle"], BurstWorker)
        slot = _slot(body["slot"])
        if slot in worker.slots:
            # A slot names one memory until it is released (BURST-2); the hosted burst may have
            # cached the old one, so silently replacing it would run on stale memory.
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"memory slot {slot} is already registered")
        memory = wire.decode_pool(body["pool"], fdr)
        try:
            self.check_tokens([memory])  # a slot may hold a buffer token of this client (MEM-4, VAL-2)
        except HalError:
            if isinstance(memory, Memory):
                memory.close()
            raise
        worker.slots[slot] = memory
        return ok(), b"", []

    def op_burst_release_memory(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        worker = self.get(body["handle"], BurstWorker)
        slot = _slot(body["slot"])
        if slot not in worker.slots:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"memory slot {slot} is not registered")
        del worker.slots[slot]
        if slot in worker.used:
            # The hosted burst learns a slot only when a request names it; it may also never
            # have cached it (that request failed before it got there): nothing to free then.
            worker.used.discard(slot)
            try:
                worker.burst.release_memory_resource(slot)
            except HalError as e:
                if e.status is not ErrorStatus.INVALID_ARGUMENT:
                    raise
        return ok(), b"", []


class Service:
    """Accepts connections, one thread each. With an owner (``service:SPEC``), the first
    client owns the service: when its last connection closes the service exits, so a dead
    harness leaves no orphan behind."""

    def __init__(self, driver: Driver, listener: socket.socket, owned: bool = True,
                 max_connections: int = MAX_CONNECTIONS, message_timeout: float = MESSAGE_TIMEOUT_S) -> None:
        self.driver = driver
        self.listener = listener
        self.owned = owned
        self.max_connections = max_connections
        self.message_timeout = message_timeout
        self.connections = 0
        self.clients: dict[int, Client] = {}
        self.numbers = itertools.count(1)
        self.lock = threading.Lock()
        #: Weak references to what the hosted driver handed over, by kind and number; each
        #: removes itself when its object dies (``live``).
        self._hosted: dict[str, dict[int, weakref.ref]] = {kind: {} for kind in HOSTED_KINDS}
        self._hosted_numbers = itertools.count()

    def track(self, obj: Any) -> None:
        """Remember, weakly, an object of the hosted driver that a client now holds a handle on."""
        kind, target = _hosted_object(obj)
        if kind is None:
            return
        refs, number = self._hosted[kind], next(self._hosted_numbers)
        try:
            refs[number] = weakref.ref(target, lambda _, refs=refs, number=number: refs.pop(number, None))
        except TypeError:  # an object that cannot be referenced weakly is not counted
            pass

    def live(self) -> dict[str, int]:
        """How many prepared models, bursts and buffers of the hosted driver are still alive
        (after a garbage collection): once every client has released its handles, anything
        left is held by the driver itself, which DRV-5 forbids."""
        gc.collect()
        return {kind: len(refs) for kind, refs in self._hosted.items()}

    def serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)  # out of descriptors or memory for now: not a reason to stop
                continue
            refusal, pid = self.admit(sock)
            if refusal is not None:
                print(f"nncert service: refusing a connection: {refusal}", file=sys.stderr, flush=True)
                sock.close()
                continue
            session = Session(self, sock, pid)
            threading.Thread(target=session.serve, name="nncert-connection", daemon=True).start()

    def admit(self, sock: socket.socket) -> tuple[str | None, int]:
        """Why a new connection is refused (or None: then it counts until it closes), and
        its peer's pid. Refused: a peer that runs as another user (the kernel's
        SO_PEERCRED), or one more connection than ``max_connections``."""
        try:
            pid, uid, _ = wire.peer_credentials(sock)
        except OSError as e:
            return f"its peer is unknown ({e.strerror or e})", 0
        if uid != os.geteuid():
            return f"its process (pid {pid}) runs as uid {uid}, not as this service's user " \
                   f"(uid {os.geteuid()})", pid
        with self.lock:
            if self.connections >= self.max_connections:
                return f"{self.connections} connections are open, the most this service serves at once", pid
            self.connections += 1
        return None, pid

    def connection_closed(self) -> None:
        with self.lock:
            self.connections -= 1

    def attach(self, join: Any, key: Any) -> Client:
        """A new client, or (``join``) one more connection of an existing one."""
        with self.lock:
            if join is None:
                number = next(self.numbers)
                client = self.clients[number] = Client(self, number, self.owned and number == 1)
            else:
                client = self.clients.get(join) if join.__class__ is int else None
                # Bytes, compared in constant time: compare_digest refuses non-ASCII str.
                given = key.encode("utf-8", "surrogatepass") if isinstance(key, str) else None
                if client is None or given is None or not secrets.compare_digest(given, client.key.encode()):
                    raise wire.ProtocolError(f"no client {join!r:.40} to join (or a wrong key)")
            client.connections += 1
        return client

    def watch_owner(self, pid: int) -> None:
        """Exit when the owner's process ends, even while a call of its is stuck in the
        driver (its connections only notice between calls)."""
        if pid <= 0:
            return
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return

        def wait() -> None:
            select.select([pidfd], [], [])
            self._exit()

        threading.Thread(target=wait, name="nncert-owner-watch", daemon=True).start()

    @staticmethod
    def _exit() -> None:
        # Nobody is left to restart or stop us: stop now. os._exit, because a hosted
        # driver's threads may be stuck in a call that will never return.
        sys.stderr.flush()
        os._exit(0)

    def detach(self, client: Client) -> None:
        with self.lock:
            client.connections -= 1
            gone = client.connections == 0
            if gone:
                del self.clients[client.number]
        if gone:
            client.release_all()
            if client.owner:
                self._exit()


def _refuse(listener: socket.socket, message: str) -> None:
    """Answer the owner's hello (the first connection of this user's) with the reason the
    driver could not be loaded."""
    while True:
        sock, _ = listener.accept()
        try:
            if wire.peer_credentials(sock)[1] == os.geteuid():
                break
        except OSError:
            pass
        sock.close()
    try:
        got = wire.recv_message(sock, stall=MESSAGE_TIMEOUT_S)
    except (wire.ProtocolError, OSError):
        got = None
    if got is not None:
        wire.close_fds(got[3])
        body = {"status": int(ErrorStatus.GENERAL_FAILURE), "message": message, "spec_error": True}
        wire.send_message(sock, got[0], body)
    sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nncert.drivers.service.server",
                                     description="Serve one nncert driver over a Unix socket.")
    parser.add_argument("--driver", required=True, help="spec of the driver to host")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--fd", type=int, help="an inherited socket, bound (this process listens on it)")
    where.add_argument("--socket", help="a socket path to create (0600, in a directory of this user's "
                                        "that no one else may write into) and listen on")
    parser.add_argument("--ready", type=int, help="an inherited descriptor to write one byte to, and "
                                                  "close, once listening")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                        help=f"connections served at once (default {MAX_CONNECTIONS})")
    parser.add_argument("--message-timeout", type=float, default=MESSAGE_TIMEOUT_S,
                        help=f"seconds a message may take from its first byte to its last "
                             f"(default {MESSAGE_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    if args.fd is not None:
        listener = socket.socket(fileno=args.fd)
    else:
        try:
            listener = _bind_private(args.socket)
        except (OSError, UnsafePathError) as e:
            print(f"nncert service: cannot serve {args.socket}: {e}", file=sys.stderr)
            return 2
    # Listening here (again, for an inherited socket that already was) makes this process
    # the socket's peer as the kernel reports it to clients (SO_PEERCRED).
    listener.listen(BACKLOG)
    if args.ready is not None:
        try:
            os.write(args.ready, b"1")
        except OSError:
            pass  # the client gave up waiting: its hello will not come either
        os.close(args.ready)
    try:
        driver = load_driver(args.driver)
    except DriverSpecError as e:
        _refuse(listener, str(e))
        return 2
    Service(driver, listener, owned=args.fd is not None, max_connections=args.max_connections,
            message_timeout=args.message_timeout).serve()
    return 0


def _bind_private(path: str) -> socket.socket:
    """A socket bound at ``path``, mode 0600, in a directory of this user's that no one else
    may write into (made 0700 if missing): clients refuse to attach anywhere else, and no
    other user can connect, or replace the socket. It is made 0600 before it listens, so
    nobody can connect in between."""
    directory = own_dir(os.path.dirname(os.path.abspath(path)), mode=0o700, private=True)
    path = os.path.join(directory, os.path.basename(path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o600)
    except OSError:
        listener.close()
        raise
    return listener


if __name__ == "__main__":
    sys.exit(main())
