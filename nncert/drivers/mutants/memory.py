"""Memory-domain mutants (MEM-4..7): test_memory_domains.py must catch them."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator, Sequence

from nncert.drivers.base import Burst, Deadline, FencedExecutionCallback, SyncFence
from nncert.drivers.memory_domain import DeviceBuffer, MemoryDomain, Snapshot, lookup
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.drivers.reference import ReferenceDriver
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import (
    BufferDesc,
    BufferRole,
    DataLocation,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
    dtype_of,
)
from nncert.hal.types import ErrorStatus, MeasureTiming


class IgnoresRoles(MutantDriver):
    """Accepts a driver-managed buffer in any role: an input-only buffer as an output, a
    buffer allocated for another prepared model, an input or output it was not allocated for."""

    name = "ignores_roles"
    memory_domain = MemoryDomain(ReferenceDriver.memory_domain.model_of, check_roles=False)


class _BufferDomain(MemoryDomain):
    """The reference's memory domain, whose buffers are of ``buffer_class``."""

    def __init__(self, buffer_class: type[DeviceBuffer]) -> None:
        super().__init__(ReferenceDriver.memory_domain.model_of)
        self.buffer_class = buffer_class

    def allocate(self, desc: BufferDesc, prepared_models, input_roles: Sequence[BufferRole],
                 output_roles: Sequence[BufferRole]) -> tuple[DeviceBuffer, int]:
        buffer, token = super().allocate(desc, prepared_models, input_roles, output_roles)
        buffer.__class__ = self.buffer_class
        return buffer, token


class _HostMirrorBuffer(DeviceBuffer):
    host: bytes | None = None

    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        super().copy_from(source, dimensions)
        self.host = self.snapshot().data

    def copy_to(self, destination: Memory) -> None:
        if self.host is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"buffer {self.token} is not initialised")
        if destination.size != len(self.host):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"copy_to: {destination.size} bytes for "
                                                         f"{len(self.host)}")
        destination.view()[:] = self.host


class StaleHostCopy(MutantDriver):
    """copy_to answers from a host-side mirror that only copy_from updates: what an execution
    wrote into the buffer never reaches copy_to (MEM-5)."""

    name = "stale_host_copy"
    memory_domain = _BufferDomain(_HostMirrorBuffer)


class _ByteCountBuffer(DeviceBuffer):
    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        given = tuple(dimensions)
        if (given and not self.type.is_scalar and len(given) == len(self.dimensions) and 0 not in given
                and isinstance(source, Memory)
                and math.prod(given) * self.dtype.itemsize == source.size):
            # The byte count fits: the buffer keeps (or takes) a shape without a look at the dims.
            if all(self.dimensions):
                given = ()
            else:
                self.store(bytes(source.view()), given)
                return
        super().copy_from(source, given)


class ByteCountOnly(MutantDriver):
    """copy_from checks that the dimensions it is given have the buffer's rank and describe as
    many bytes as the memory holds, not that they agree with the buffer's: (1, 2, 4, 4) goes
    into a (1, 4, 4, 2) buffer (MEM-5)."""

    name = "byte_count_only"
    memory_domain = _BufferDomain(_ByteCountBuffer)


class _FirstShapeBuffer(DeviceBuffer):
    def store(self, data: bytes, shape: tuple[int, ...]) -> None:
        super().store(data, shape)
        if not self.type.is_scalar:
            self.dimensions = tuple(shape)  # the first actual shape becomes the buffer's for good


class FirstShapeBuffer(MutantDriver):
    """A buffer of unknown dimensions takes the shape of the first value stored in it for good:
    a later output of another shape fails (MEM-6)."""

    name = "first_shape_buffer"
    memory_domain = _BufferDomain(_FirstShapeBuffer)


class BurstBufferSnapshot(MutantDriver):
    """A burst copies a driver-managed buffer that serves as an input into its own memory the
    first time it sees the buffer's slot, and runs every later request on that slot from the
    copy: a copy_from into the buffer in between never reaches the burst (MEM-5). The other
    paths read the buffer as they should."""

    name = "burst_buffer_snapshot"

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstBufferSnapshot.SnapshotBurst(self)

    class SnapshotBurst(Burst):
        def __init__(self, prepared) -> None:
            super().__init__(prepared)
            self.copies: dict[int, Memory] = {}

        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            written = {a.location.pool_index for a in request.outputs}
            inputs, pools = list(request.inputs), list(request.pools)
            for p, (slot, pool) in enumerate(zip(slots, request.pools, strict=False)):
                if not isinstance(pool, int) or p in written:
                    continue
                if slot not in self.copies:  # the first run reads the buffer, and keeps a copy
                    snapshot = lookup(pool).snapshot()
                    if snapshot is not None:
                        self.copies[slot] = Memory.from_bytes(snapshot.data)
                    continue
                copy = self.copies[slot]
                pools[p] = copy
                inputs = [RequestArgument(False, DataLocation(p, 0, copy.size), a.dimensions)
                          if not a.has_no_value and a.location.pool_index == p else a for a in inputs]
            return super().execute(Request(inputs, request.outputs, pools), slots, measure, deadline,
                                   loop_timeout)

    prepared_class = Prepared


class _BusyBuffer(DeviceBuffer):
    #: Seconds a store keeps the buffer busy (a DMA into device memory).
    STORE_S = 0.005
    busy = False

    def store(self, data: bytes, shape: tuple[int, ...]) -> None:
        self._enter()
        try:
            time.sleep(self.STORE_S)
            super().store(data, shape)
        finally:
            self.busy = False

    def snapshot(self):
        self._enter()
        try:
            return super().snapshot()
        finally:
            self.busy = False

    def _enter(self) -> None:
        # A driver's CHECK: it assumes nobody touches a buffer that is being written.
        assert not self.busy, f"buffer {self.token} accessed while busy"
        self.busy = True


class BusyBuffer(MutantDriver):
    """Asserts that nobody reads or writes a buffer while it is being written: a concurrent
    access kills the driver (MEM-7)."""

    name = "busy_buffer"
    memory_domain = _BufferDomain(_BusyBuffer)


class AnyPreparedModel(MutantDriver):
    """allocate takes the model of any prepared model that has one where drivers keep it
    (``.model``), not only of its own: a buffer gets roles on another driver's prepared model
    (MEM-4, VAL-2). A bare object without a model is refused."""

    name = "any_prepared_model"
    memory_domain = MemoryDomain(lambda prepared: getattr(prepared, "model", None))


class _ShapeFromContentsBuffer(DeviceBuffer):
    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        held = self.snapshot()
        if not tuple(dimensions) and held is not None and not self.type.is_scalar:
            dimensions = held.shape  # the shape of what it holds stands in for the missing one
        super().copy_from(source, dimensions)


class ShapeFromContents(MutantDriver):
    """copy_from without dimensions into a buffer of unknown dimensions takes the shape of what
    the buffer holds now, where it must be refused: the buffer's own dimensions are unknown
    (MEM-6). Into an empty such buffer it is refused."""

    name = "shape_from_contents"
    memory_domain = _BufferDomain(_ShapeFromContentsBuffer)


class _KeptOnFailureBuffer(DeviceBuffer):
    def invalidate(self) -> None:
        pass  # the device never hears that the run failed: the old contents stay valid


class KeepsFailedOutputs(MutantDriver):
    """An execution that fails leaves its output buffers initialised, holding what they held
    before, where they must become uninitialised: a later copy_to or input use reads stale
    data as though the run had not happened (MEM-4)."""

    name = "keeps_failed_outputs"
    memory_domain = _BufferDomain(_KeptOnFailureBuffer)


class BufferInputElementCount(MutantDriver):
    """A buffer input's request dimensions are checked against its contents by element count
    only: a buffer holding a (1, 4, 4, 2) value runs as (1, 2, 4, 4), its bytes reshaped, where
    the request must be refused (MEM-6: a buffer is fixed-size as an input)."""

    name = "buffer_input_element_count"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            inputs = []
            for arg in request.inputs:
                p = arg.location.pool_index
                pool = request.pools[p] if 0 <= p < len(request.pools) else None
                held = _held(pool) if arg.dimensions and isinstance(pool, int) else None
                if held is not None and tuple(arg.dimensions) != held.shape \
                        and math.prod(arg.dimensions) == math.prod(held.shape):
                    arg = RequestArgument(arg.has_no_value, arg.location, ())  # the element count fits
                inputs.append(arg)
            return super().execute_synchronously(Request(inputs, request.outputs, request.pools), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


def _held(token):
    try:
        return lookup(token).snapshot()
    except HalError:
        return None


_RUNNING = threading.local()  # .model: the model of the execution running on this thread


class _PerModelBuffer(DeviceBuffer):
    """Keeps what each prepared model's executions write in that model's own device memory;
    copy_from and copy_to use the host copy, which an execution's result also reaches."""

    def _per_model(self) -> dict[int, Snapshot]:
        return self.__dict__.setdefault("per_model", {})

    def store(self, data: bytes, shape: tuple[int, ...]) -> None:
        model = getattr(_RUNNING, "model", None)
        if model is None:  # copy_from: the host copy, and every model's copy is out of date
            self._per_model().clear()
            self.__dict__["copied"] = Snapshot(data, shape)
        else:
            self._per_model()[id(model)] = Snapshot(data, shape)
        super().store(data, shape)

    def snapshot(self) -> Snapshot | None:
        model = getattr(_RUNNING, "model", None)
        if model is None or not self._per_model():
            return super().snapshot()
        return self._per_model().get(id(model), self.__dict__.get("copied"))


class ContentsPerModel(MutantDriver):
    """A buffer allocated for several prepared models keeps what each one's executions wrote
    in that model's own device memory: another prepared model reading the buffer gets the last
    copy_from (or nothing), not the other model's result. One prepared model is right (MEM-5)."""

    name = "contents_per_model"
    memory_domain = _BufferDomain(_PerModelBuffer)

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            _RUNNING.model = self.model
            try:
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            finally:
                _RUNNING.model = None

    prepared_class = Prepared


class _EmptyDynamicBuffer(DeviceBuffer):
    def copy_to(self, destination: Memory) -> None:
        if self.snapshot() is None and not all(self.dimensions):
            return  # no shape yet, so no size to check the memory against: nothing to copy
        super().copy_to(destination)


class EmptyDynamicCopyTo(MutantDriver):
    """copy_to from a buffer of unknown dimensions that nothing was written to succeeds and
    copies nothing, where an uninitialised buffer must fail it with GENERAL_FAILURE (MEM-5):
    the size check that catches the case for a buffer of fixed dimensions needs a shape."""

    name = "empty_dynamic_copy_to"
    memory_domain = _BufferDomain(_EmptyDynamicBuffer)


class _HoldingDomain(MemoryDomain):
    """The reference's memory domain, whose table of buffers holds each one for good."""

    def __init__(self) -> None:
        super().__init__(ReferenceDriver.memory_domain.model_of)
        self.held: list[DeviceBuffer] = []

    def allocate(self, desc: BufferDesc, prepared_models, input_roles: Sequence[BufferRole],
                 output_roles: Sequence[BufferRole]) -> tuple[DeviceBuffer, int]:
        buffer, token = super().allocate(desc, prepared_models, input_roles, output_roles)
        self.held.append(buffer)
        return buffer, token


class ReleasedTokensLive(MutantDriver):
    """Its table of buffers keeps every buffer it allocated (freed at the driver's end): once
    the client has released a buffer, a request naming its token still reads and writes it,
    where the token must name nothing (MEM-4)."""

    name = "released_tokens_live"
    memory_domain = _HoldingDomain()


@contextlib.contextmanager
def _roles_unchecked(request: Request) -> Iterator[None]:
    """For the duration of a call, the buffers ``request`` names accept any role (a path that
    skips the role check)."""
    buffers = []
    for pool in request.pools:
        if not isinstance(pool, Memory):
            try:
                buffers.append(lookup(pool))
            except HalError:
                pass  # an unknown token is still refused
    checked = [b.check_roles for b in buffers]
    for b in buffers:
        b.check_roles = False
    try:
        yield
    finally:
        for b, c in zip(buffers, checked, strict=True):
            b.check_roles = c


class _ClearingBuffer(DeviceBuffer):
    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        if self.snapshot() is None and all(self.dimensions):
            # the DMA engine clears the buffer before the size check that refuses the copy
            size = math.prod(self.dimensions) * dtype_of(self.type).itemsize
            self.store(bytes(size), tuple(self.dimensions))
        super().copy_from(source, dimensions)


class RefusedCopyInitialises(MutantDriver):
    """copy_from clears an uninitialised buffer of fixed dimensions before it checks the
    source's size: a copy_from it refuses (INVALID_ARGUMENT, as it must) leaves the buffer
    initialised, holding zeros, where a refused call must change nothing and copy_to must
    still fail (MEM-5)."""

    name = "refused_copy_initialises"
    memory_domain = _BufferDomain(_ClearingBuffer)


class FastFenceSkipsRoles(MutantDriver):
    """A fenced execution with nothing to wait for runs inside the call on a fast path that
    never checks the roles of the buffers its request names: a buffer allocated as an input
    serves as an output, one of another prepared model as either (MEM-4). Every other path
    checks them."""

    name = "fast_fence_skips_roles"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                           measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                           loop_timeout: int | None = None, timeout_after_fence: int | None = None
                           ) -> tuple[SyncFence | None, FencedExecutionCallback]:
            if wait_for:
                return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                              timeout_after_fence)
            with _roles_unchecked(request):
                return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                              timeout_after_fence)

    prepared_class = Prepared


class FastFenceReadsUninitialised(MutantDriver):
    """A fenced execution with nothing to wait for runs inside the call on a fast path that
    takes an uninitialised buffer input (one of fixed dimensions) for zeros, where reading it
    must fail (MEM-4); the zeros stay in the buffer. Every other path refuses it."""

    name = "fast_fence_reads_uninitialised"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                           measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                           loop_timeout: int | None = None, timeout_after_fence: int | None = None
                           ) -> tuple[SyncFence | None, FencedExecutionCallback]:
            if not wait_for:
                for arg in request.inputs:
                    pool = None if arg.has_no_value else request.pools[arg.location.pool_index]
                    if pool is None or isinstance(pool, Memory):
                        continue
                    try:
                        buffer = lookup(pool)
                    except HalError:
                        continue  # an unknown token is still refused
                    if buffer.snapshot() is None and all(buffer.dimensions):
                        size = math.prod(buffer.dimensions) * dtype_of(buffer.type).itemsize
                        buffer.store(bytes(size), tuple(buffer.dimensions))
            return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                          timeout_after_fence)

    prepared_class = Prepared


class WarmBurstSkipsRoles(MutantDriver):
    """A burst whose slots all hold their memories already takes a warm path that never checks
    the roles of the buffers the request names (it checked them when the slots were new, for
    whatever request brought them): a warm run with a buffer in a role it was not allocated
    for goes through (MEM-4)."""

    name = "warm_burst_skips_roles"

    class WarmBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if not all(s in self.slots for s in slots):
                return super().execute(request, slots, measure, deadline, loop_timeout)
            with _roles_unchecked(request):
                return super().execute(request, slots, measure, deadline, loop_timeout)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return WarmBurstSkipsRoles.WarmBurst(self)

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(IgnoresRoles, "MEM-4", suite="test_memory_domains.py"),
    MutantInfo(StaleHostCopy, "MEM-5", suite="test_memory_domains.py", args=("-k", "copies_and_executions")),
    MutantInfo(FirstShapeBuffer, "MEM-6", suite="test_memory_domains.py", args=("-k", "dynamic_buffer")),
    MutantInfo(ByteCountOnly, "MEM-5", suite="test_memory_domains.py", args=("-k", "copy_from_bad_dim")),
    MutantInfo(BusyBuffer, "MEM-7", suite="test_memory_domains.py", args=("-k", "concurrent")),
    MutantInfo(BurstBufferSnapshot, "MEM-5", suite="test_memory_domains.py", args=("-k", "burst_reads_each")),
    MutantInfo(AnyPreparedModel, "MEM-4", suite="test_memory_domains.py", args=("-k", "bad_prepared_model")),
    MutantInfo(ShapeFromContents, "MEM-6", suite="test_memory_domains.py",
               args=("-k", "copy_from_bad_dimensions_dynamic")),
    MutantInfo(BufferInputElementCount, "MEM-6", suite="test_memory_domains.py",
               args=("-k", "against_the_buffers_contents")),
    MutantInfo(KeepsFailedOutputs, "MEM-4", suite="test_memory_domains.py",
               args=("-k", "execution_bad_dimensions")),
    MutantInfo(ContentsPerModel, "MEM-5", suite="test_memory_domains.py", args=("-k", "carries_a_result")),
    MutantInfo(EmptyDynamicCopyTo, "MEM-5", suite="test_memory_domains.py",
               args=("-k", "copy_to_uninitialised")),
    MutantInfo(ReleasedTokensLive, "MEM-4", suite="test_memory_domains.py", args=("-k", "released_buffer")),
    MutantInfo(RefusedCopyInitialises, "MEM-5", suite="test_memory_domains.py",
               args=("-k", "copy_from_bad_size and not dynamic")),
    MutantInfo(FastFenceReadsUninitialised, "MEM-4", suite="test_memory_domains.py",
               args=("-k", "uninitialised_then and fenced-no-wait")),
    MutantInfo(FastFenceSkipsRoles, "MEM-4", suite="test_memory_domains.py",
               args=("-k", "wrong_role and fenced-no-wait")),
    MutantInfo(WarmBurstSkipsRoles, "MEM-4", suite="test_memory_domains.py",
               args=("-k", "wrong_role and burst-warm")),
)
