"""The driver protocol (the NN HAL's IDevice / IPreparedModel / IBurst, Python-cased) and a
base class that supplies what a driver does not implement itself.

A driver implements at least ``capabilities``, ``supported_operations``, ``prepare_model``
and its prepared model's ``execute_synchronously``. ``Driver`` / ``PreparedModel`` then
supply, the way the AOSP utilities do:

- asynchronous execution (``execute``): the synchronous path on a worker thread, whose
  result is read from an ``ExecutionCallback`` (EXE-1);
- fenced execution (``execute_fenced``): a worker waits for every given ``SyncFence``, runs
  the synchronous path and signals a fence of its own; the callback gives the status and the
  launched/fenced timings of EXE-8 (with nothing to wait for, the run completes inside the
  call and no fence is returned, as EXE-1 allows);
- bursts (``configure_execution_burst``): a ``Burst`` that caches memories by slot id and
  forgets them on ``release_memory_resource`` (BURST-1/2);
- "not supported" for compilation caching and memory domains.
"""

from __future__ import annotations

import functools
import math
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nncert.hal.errors import DriverFault, HalError
from nncert.hal.memory import Memory
from nncert.hal.model import (
    NO_TIMING_INFO,
    BufferDesc,
    BufferRole,
    Capabilities,
    Model,
    OutputShape,
    Request,
    Timing,
)
from nncert.hal.types import (
    LATEST,
    NO_TIMING,
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    Priority,
    Version,
)

#: Deadlines are absolute ``time.monotonic_ns()`` values (CLOCK_MONOTONIC, the same clock in
#: every process of the machine); None means no deadline (EXE-10).
Deadline = int | None

#: How long (seconds) a driver call, or a fence a driver returned, may take before it counts
#: as a hang (MLTS-2). The pytest plugin's ``--hang-timeout`` sets it; see set_hang_timeout.
HANG_TIMEOUT_S = 30.0


def set_hang_timeout(seconds: float) -> None:
    global HANG_TIMEOUT_S
    if not seconds > 0:
        raise ValueError(f"hang timeout must be positive, not {seconds}")
    HANG_TIMEOUT_S = float(seconds)


def hang_timeout() -> float:
    return HANG_TIMEOUT_S


def readable(fds: Sequence[int], timeout: float | None) -> list[int]:
    """The descriptors of ``fds`` that are readable (or hung up) within ``timeout`` seconds
    (None: no limit). poll, not select: a driver that leaks descriptors pushes the harness's
    own past FD_SETSIZE (1024), where select fails; that is the driver's leak to report
    (DRV-5), never the harness's error."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        # poll takes at most 2**31 - 1 ms at a time ("no deadline" may be years away)
        ms = None if end is None else max(0, min(math.ceil((end - time.monotonic()) * 1000), 2**31 - 1))
        ready = poller.poll(ms)
        if ready or end is None or time.monotonic() >= end:
            return [fd for fd, _ in ready]


class SyncFence:
    """A sync fence: an eventfd that becomes readable once signalled (EXE-1).

    The descriptor can be passed to another process and waited on with poll/select.
    """

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._closed = False

    @classmethod
    def adopt(cls, fd: int) -> SyncFence:
        """A fence around an eventfd received from another process (the fd is taken over)."""
        fence = cls.__new__(cls)
        fence.fd = fd
        fence._closed = False
        return fence

    @classmethod
    def signalled(cls) -> SyncFence:
        fence = cls()
        fence.signal()
        return fence

    def signal(self) -> None:
        os.eventfd_write(self.fd, 1)

    def is_signalled(self) -> bool:
        return self.wait(0)

    def wait(self, timeout: float | None = None) -> bool:
        """True once signalled; False if ``timeout`` seconds passed first."""
        return bool(readable([self.fd], timeout))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


@dataclass
class ExecutionResult:
    status: ErrorStatus = ErrorStatus.NONE
    output_shapes: list[OutputShape] = field(default_factory=list)
    timing: Timing = NO_TIMING_INFO
    message: str = ""

    def raise_for_status(self) -> tuple[list[OutputShape], Timing]:
        if self.status is not ErrorStatus.NONE:
            raise HalError(self.status, self.message, self.output_shapes)
        return self.output_shapes, self.timing


class ExecutionCallback:
    """What an asynchronous execution notifies (IExecutionCallback)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result = ExecutionResult(ErrorStatus.GENERAL_FAILURE, message="not notified")
        #: How many times the driver notified: exactly once per execution (EXE-1).
        self.notifications = 0

    def notify(self, result: ExecutionResult) -> None:
        self.notifications += 1
        self._result = result
        self._done.set()

    def notified(self, timeout: float | None = None) -> bool:
        """True once notified; False if ``timeout`` seconds passed first."""
        return self._done.wait(timeout)

    def wait(self, timeout: float | None = None) -> ExecutionResult:
        if not self._done.wait(timeout):
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, message="execution callback never notified")
        return self._result


@dataclass
class FencedExecutionInfo:
    """IFencedExecutionCallback.getExecutionInfo (EXE-8)."""

    status: ErrorStatus
    timing_launched: Timing = NO_TIMING_INFO
    timing_fenced: Timing = NO_TIMING_INFO
    message: str = ""


class FencedExecutionCallback:
    """IFencedExecutionCallback: the outcome of a fenced execution, to be read once its fence
    is signalled (before that: GENERAL_FAILURE, "not finished")."""

    def __init__(self) -> None:
        self._info: FencedExecutionInfo | None = None

    def finish(self, info: FencedExecutionInfo) -> None:
        self._info = info

    def get_execution_info(self) -> FencedExecutionInfo:
        if self._info is None:
            return FencedExecutionInfo(ErrorStatus.GENERAL_FAILURE, message="fenced execution not finished")
        return self._info


def _micros(ns: int) -> int:
    return max(0, ns // 1000)


def check_deadline(deadline: Deadline, what: str) -> None:
    if deadline is not None and time.monotonic_ns() >= deadline:
        raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before {what}")


def check_preparation(model: Model, preference: ExecutionPreference, priority: Priority,
                      deadline: Deadline, version: Version) -> None:
    """What prepare_model checks before compiling: its arguments (VAL-1) and the deadline."""
    from nncert.hal.validation import (
        validate_execution_preference,
        validate_model,
        validate_priority,
    )

    validate_execution_preference(preference)
    validate_priority(priority)
    validate_model(model, version)
    check_deadline(deadline, "preparation")


class PreparedModel:
    """Base of prepared models: subclasses implement ``execute_synchronously``."""

    def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                              deadline: Deadline = None,
                              loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        raise NotImplementedError

    def execute(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                deadline: Deadline = None, loop_timeout: int | None = None) -> ExecutionCallback:
        """Asynchronous execution: returns at once; the callback is notified when done."""
        callback = ExecutionCallback()

        def run() -> None:
            callback.notify(self._run(request, measure, deadline, loop_timeout))

        threading.Thread(target=run, name="nncert-execute", daemon=True).start()
        return callback

    def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                       measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                       loop_timeout: int | None = None,
                       timeout_after_fence: int | None = None
                       ) -> tuple[SyncFence | None, FencedExecutionCallback]:
        """Fenced execution (EXE-1, EXE-8).

        With fences to wait for, the call returns at once with a fresh fence that a worker
        thread signals once it has waited for ``wait_for`` and run the request; the callback
        then holds the status and timings. With nothing to wait for, the request runs before
        the call returns and no fence is returned; a failure is raised directly."""
        start = time.monotonic_ns()
        callback = FencedExecutionCallback()
        if not wait_for:
            info = self._fenced_run(request, (), measure, deadline, loop_timeout, start)
            if info.status is not ErrorStatus.NONE:
                raise HalError(info.status, info.message)
            callback.finish(info)
            return None, callback
        fence = SyncFence()

        def run() -> None:
            callback.finish(self._fenced_run(request, wait_for, measure, deadline, loop_timeout, start))
            fence.signal()

        threading.Thread(target=run, name="nncert-fenced", daemon=True).start()
        return fence, callback

    def _fenced_run(self, request: Request, wait_for: Sequence[SyncFence], measure: MeasureTiming,
                    deadline: Deadline, loop_timeout: int | None, start: int) -> FencedExecutionInfo:
        for fence in wait_for:
            remaining = None if deadline is None else max(0.0, (deadline - time.monotonic_ns()) / 1e9)
            if not fence.wait(remaining):
                return FencedExecutionInfo(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                           message="a wait-for fence was not signalled in time")
        fences_done = time.monotonic_ns()
        result = self._run(request, measure, deadline, loop_timeout)
        if result.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
            # A fenced execution cannot report output shapes: its outputs must fit (EXE-5).
            return FencedExecutionInfo(ErrorStatus.INVALID_ARGUMENT,
                                       message=f"fenced execution needs sufficient output buffers: "
                                               f"{result.message}")
        if result.status is not ErrorStatus.NONE:
            return FencedExecutionInfo(result.status, message=result.message)
        if measure is not MeasureTiming.YES:
            return FencedExecutionInfo(ErrorStatus.NONE)
        end = time.monotonic_ns()
        device = result.timing.time_on_device
        return FencedExecutionInfo(ErrorStatus.NONE, Timing(device, _micros(end - start)),
                                   Timing(device, _micros(end - fences_done)))

    def configure_execution_burst(self) -> Burst:
        return Burst(self)

    def _run(self, request: Request, measure: MeasureTiming, deadline: Deadline,
             loop_timeout: int | None) -> ExecutionResult:
        try:
            shapes, timing = self.execute_synchronously(request, measure, deadline, loop_timeout)
        except HalError as e:
            return ExecutionResult(e.status, e.output_shapes, NO_TIMING_INFO, e.message)
        except Exception as e:  # a driver bug must surface as a status, not kill the caller
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, [], NO_TIMING_INFO,
                                   f"{type(e).__name__}: {e}")
        return ExecutionResult(ErrorStatus.NONE, shapes, timing)


class Burst:
    """A burst: rapid executions of one prepared model whose request memories are named by
    slot ids and cached between runs (BURST-1/2)."""

    def __init__(self, prepared: PreparedModel) -> None:
        self.prepared = prepared
        self.slots: dict[int, Memory | int] = {}

    def execute(self, request: Request, slots: Sequence[int],
                measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        """Run ``request``; ``slots[i]`` is the slot id of ``request.pools[i]``."""
        if len(slots) != len(request.pools):
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"{len(slots)} slot ids for {len(request.pools)} pools")
        for slot, pool in zip(slots, request.pools, strict=True):
            if not 0 <= slot < 2**63:  # a slot id is a non-negative int64 (VAL-1)
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"invalid memory slot {slot}")
            self.slots.setdefault(slot, pool)
        cached = Request(request.inputs, request.outputs, [self.slots[s] for s in slots])
        return self.prepared.execute_synchronously(cached, measure, deadline, loop_timeout)

    def release_memory_resource(self, slot: int) -> None:
        if slot not in self.slots:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"unknown memory slot {slot}")
        del self.slots[slot]


class Buffer:
    """A driver-managed buffer (IBuffer, MEM-4..7)."""

    def copy_to(self, destination: Memory) -> None:
        """Copy the buffer's contents into ``destination`` (whose size must match)."""
        raise NotImplementedError

    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        """Set the buffer's contents from ``source``; ``dimensions`` gives the actual shape
        where the buffer's own is not fully known (MEM-6)."""
        raise NotImplementedError


@dataclass
class FirstRun:
    """``Driver.first_run``'s answer: the ``supported_operations`` flags, what prepares the
    model (called only when every operation is claimed: the prepared model, or the
    preparation's HalError), and what runs the request on that prepared model (its output
    shapes and timing, or the execution's HalError); ``reasons``: ``decline_reasons`` when
    the driver gave them with the flags (None: ask for them)."""

    supported: list[bool]
    prepare: Callable[[], PreparedModel]
    execute: Callable[[PreparedModel], tuple[list[OutputShape], Timing]]
    reasons: list[str | None] | None = None


class Driver:
    """Base of drivers (IDevice). ``name`` is how the registry knows it."""

    name: str = "driver"
    feature_level: Version = LATEST
    device_type: DeviceType = DeviceType.OTHER

    #: Model and data cache files of a driver that implements export_compiled and
    #: import_compiled (CACHE-2).
    cache_files: tuple[int, int] = (1, 1)
    #: Where the driver keeps state (the compilation-cache token store), None: the default
    #: (nncert.drivers.caching.state_dir).
    state_dir: str | None = None

    def __init__(self, state_dir: str | None = None, **options: Any) -> None:
        if options:
            raise ValueError(f"driver {self.name!r} takes no option {', '.join(sorted(options))!r}")
        self.state_dir = state_dir

    # -- queries (DRV-1: the same answer every time) --
    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    def version_string(self) -> str:
        return f"nncert-{self.name}"

    def type(self) -> DeviceType:
        return self.device_type

    def supported_extensions(self) -> list[str]:
        return []

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        """(model cache files, data cache files); (0, 0): no compilation caching (CACHE-2)."""
        if type(self).export_compiled is Driver.export_compiled:
            return 0, 0
        return self.cache_files

    # -- compilation --
    def supported_operations(self, model: Model) -> list[bool]:
        raise NotImplementedError

    def decline_reasons(self, model: Model) -> list[str | None]:
        """Why each operation ``supported_operations`` declines is declined (None where it is
        claimed). Not a HAL call: the HAL says only yes or no, but a certification report must
        give the driver's reason for every decline, so a driver that knows it says it here."""
        return [None if ok else "" for ok in self.supported_operations(model)]

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        raise NotImplementedError

    def first_run(self, model: Model, request: Request | None = None) -> FirstRun:
        """The calls a test makes in a row: ``supported_operations(model)``, then (only when
        every operation is claimed) ``prepare_model(model)`` with the defaults, then one
        ``execute_synchronously(request)`` of that prepared model. Not a HAL call: a driver
        may answer all three at once (a hosted driver in one round trip: the service runs
        them in that order as soon as it is asked); the driver sees the same calls in the
        same order either way, and each call's outcome comes out where it would apart. So the
        run may have happened before ``execute`` is called: ``request``'s inputs must not
        change in between (its outputs may already be written)."""
        return FirstRun(self.supported_operations(model), functools.partial(self.prepare_model, model),
                        lambda prepared: prepared.execute_synchronously(request))  # type: ignore[arg-type]

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        """Checks the token's recorded hash, then import_compiled (nncert.drivers.caching)."""
        from nncert.drivers import caching
        return caching.load(self, deadline, model_cache, data_cache, token)

    # -- compilation caching (CACHE-1..7): a driver opts in with the two hooks below --
    def export_compiled(self, prepared: PreparedModel) -> tuple[bytes, bytes]:
        """A prepared model of this driver as (model cache, data cache) bytes."""
        raise NotImplementedError

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        """What export_compiled wrote, prepared again; HalError when it cannot be."""
        raise NotImplementedError

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        """What ``prepare_model`` does last: write the caches, record the token's hash (never
        fails the preparation), and return ``prepared``."""
        from nncert.drivers import caching
        caching.save(self, prepared, model_cache, data_cache, token)
        return prepared

    # -- memory domains (MEM-4, optional) --
    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> tuple[Buffer, int]:
        """A driver-managed buffer for the given roles and its token (> 0), which a request
        names in place of a memory pool (IDevice::allocate)."""
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"{self.name} does not support memory domains")

    def close(self) -> None:
        """Release the driver (a hosted driver stops its service)."""

    # -- introspection for DRV-5 (not HAL calls) --
    def held_resources(self) -> dict[str, int]:
        """What the driver holds outside the calling process, by name: the DRV-5 checks take
        it before and after preparing and releasing many models, and every figure must come
        back to its level. An in-process driver holds nothing outside the process (the suite
        measures the process itself: ``process_resources``); a hosted driver reports its
        service's descriptors, threads and memory, and how many of the prepared models,
        bursts and buffers it handed over are still alive."""
        return {}

    # -- health (a driver hosted in another process can die; DriverFault) --
    def alive(self) -> bool:
        """False once the driver's process has died or was killed for a hang: every call on
        this instance then fails with DEVICE_UNAVAILABLE until ``restart``."""
        return True

    def restart(self) -> None:
        """Start afresh after a death (a hosted driver starts a new service)."""

    def fault(self) -> DriverFault | None:
        """How the driver died (CRASH or HANG), once ``alive()`` is False."""
        return None


def process_resources(pid: int | None = None, prefix: str = "") -> dict[str, int]:
    """Open descriptors, threads and resident memory (KiB) of process ``pid`` (this one by
    default), as the kernel reports them (/proc), each name led by ``prefix``; {} where /proc
    cannot say (another system, a process that is gone)."""
    where = f"/proc/{pid or 'self'}"
    try:
        descriptors = len(os.listdir(f"{where}/fd"))
        with open(f"{where}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        threads, rss = int(status["Threads"]), int(status["VmRSS"].split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return {}
    if pid is None or pid == os.getpid():
        descriptors -= 1  # the listing's own descriptor
    return {f"{prefix}descriptors": descriptors, f"{prefix}threads": threads, f"{prefix}memory_kib": rss}


def timing_for(measure: MeasureTiming | int, start_ns: int, device_ns: int) -> Timing:
    """Timing of a successful run: device time and total driver time, in microseconds (EXE-7).
    ``measure`` may be a plain int (ValueError where it is neither 0 nor 1)."""
    if measure.__class__ is not MeasureTiming:
        measure = MeasureTiming(measure)
    if measure is not MeasureTiming.YES:
        return NO_TIMING_INFO
    total = _micros(time.monotonic_ns() - start_ns)
    return Timing(min(_micros(device_ns), total), total)


__all__ = [
    "NO_TIMING",
    "Buffer",
    "Burst",
    "Deadline",
    "Driver",
    "ExecutionCallback",
    "ExecutionResult",
    "FencedExecutionCallback",
    "FencedExecutionInfo",
    "FirstRun",
    "PreparedModel",
    "SyncFence",
    "check_deadline",
    "check_preparation",
    "process_resources",
    "timing_for",
]
