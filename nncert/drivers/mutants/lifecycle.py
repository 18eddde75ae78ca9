"""Mutants that get the driver's lifecycle wrong (DRV-1, DRV-5, DRV-6): answers that change
once the device has done work, resources a released model leaves behind, initialisation
left to the first execution. conformance/test_lifecycle.py must catch each.

The leaks are bounded or rare enough for a whole conformance run to survive them (its fenced
waits use select(), which fails once a descriptor number passes 1023): a leak that breaks
the suites by accident proves nothing about them."""

from __future__ import annotations

import collections
import dataclasses
import os
import time
import weakref
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Buffer, Burst, Deadline, ExecutionResult, PreparedModel
from nncert.drivers.caching import export_model
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import (
    BufferDesc,
    BufferRole,
    Capabilities,
    Model,
    OutputShape,
    PerformanceInfo,
    Request,
    Timing,
)
from nncert.hal.types import ErrorStatus, MeasureTiming, OperandType


class LazyCapabilities(MutantDriver):
    """Initialises the device at the first preparation, and only then reports its measured
    performance: before it, capabilities() gives the defaults (1.0) for TENSOR_FLOAT32,
    afterwards the measured figure (0.5). Every answer after the first preparation is the
    same, so back-to-back queries agree (DRV-1)."""

    name = "lazy_capabilities"

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.measured = False

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        if not self.measured:
            return caps
        per_type = dict(caps.operand_performance)
        per_type[OperandType.TENSOR_FLOAT32] = PerformanceInfo(0.5, 0.5)
        return dataclasses.replace(caps, operand_performance=per_type)

    def compiled(self, model: Model, prepared: PreparedModel) -> PreparedModel:
        self.measured = True
        return prepared


class BurstStateCapabilities(MutantDriver):
    """While a burst of one of its prepared models is alive (the device held in its
    high-performance state, BURST-1), capabilities() reports TENSOR_FLOAT32 twice as fast
    (0.5); before any burst and after the last one is released, the usual figures (DRV-1)."""

    name = "burst_state_capabilities"

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.bursts: weakref.WeakSet[Burst] = weakref.WeakSet()

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        if not self.bursts:
            return caps
        per_type = dict(caps.operand_performance)
        per_type[OperandType.TENSOR_FLOAT32] = PerformanceInfo(0.5, 0.5)
        return dataclasses.replace(caps, operand_performance=per_type)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            burst = super().configure_execution_burst()
            self.driver.bursts.add(burst)
            return burst

    prepared_class = Prepared


class KeepsPreparedModels(MutantDriver):
    """Keeps the last ``CAPACITY`` models it prepared in a compilation cache that evicts only
    when full: a released prepared model (and its constants) lives on in the driver (DRV-5)."""

    name = "keeps_prepared_models"
    CAPACITY = 256

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.kept: collections.deque[PreparedModel] = collections.deque(maxlen=self.CAPACITY)

    def compiled(self, model: Model, prepared: PreparedModel) -> PreparedModel:
        self.kept.append(prepared)
        return prepared


class LeaksBufferDescriptor(MutantDriver):
    """Backs each driver-managed buffer (memory domains, MEM-4) with device memory of its own,
    a memfd whose descriptor nothing closes when the buffer is released: one descriptor lost
    per allocation (DRV-5)."""

    name = "leaks_buffer_fd"

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]
                 ) -> tuple[Buffer, int]:
        buffer, token = super().allocate(desc, prepared_models, input_roles, output_roles)
        buffer.device_memory = os.memfd_create("nncert-device-buffer", os.MFD_CLOEXEC)  # type: ignore[attr-defined]
        return buffer, token


class LazyFirstExecution(MutantDriver):
    """Compiles its kernels at the first execution of each prepared model (a JIT): that
    execution takes ``DELAY_S`` longer, every later one is as fast as the reference's (DRV-6)."""

    name = "lazy_first_execution"
    DELAY_S = 0.1

    class Prepared(MutantPreparedModel):
        compiled = False

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            if not self.compiled:
                time.sleep(LazyFirstExecution.DELAY_S)
                self.compiled = True
            return super().compute(inputs)

    prepared_class = Prepared


class LazyAsyncWorkers(MutantDriver):
    """Starts its pool of workers for asynchronous and fenced executions at the first such
    execution of the driver: that one takes ``DELAY_S`` longer (DRV-6). Synchronous
    executions never wait, so a first-execution check on that path alone passes it."""

    name = "lazy_async_workers"
    DELAY_S = 0.1

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.workers_started = False

    class Prepared(MutantPreparedModel):
        # The base class's asynchronous and fenced paths both run through _run.
        def _run(self, request: Request, measure: MeasureTiming, deadline: Deadline,
                 loop_timeout: int | None) -> ExecutionResult:
            driver = self.driver
            if not driver.workers_started:  # type: ignore[attr-defined]
                time.sleep(LazyAsyncWorkers.DELAY_S)
                driver.workers_started = True  # type: ignore[attr-defined]
            return super()._run(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class UnmeasuredPower(MutantDriver):
    """Measures execution times but not power: every power_usage it reports is 0.0, which
    NNAPI's capability validation rejects (each figure must be above 0). Its answers are
    the same every time (DRV-1's stability holds)."""

    name = "unmeasured_power"

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        unmeasured = PerformanceInfo(caps.if_performance.exec_time, 0.0)
        return dataclasses.replace(caps, if_performance=unmeasured, while_performance=unmeasured)


class KeepsCacheHandles(MutantDriver):
    """Duplicates the cache descriptors it prepares from (to read the cache lazily, as a
    multi-stage compiler does, CACHE-7) and keeps the duplicates of its last ``CAPACITY``
    loads open for good, whether or not the models prepared from them are still alive: a
    released model leaves its cache files open in the driver (DRV-5)."""

    name = "keeps_cache_handles"
    CAPACITY = 32

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.kept: collections.deque[list[int]] = collections.deque()

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        prepared = super().prepare_model_from_cache(deadline, model_cache, data_cache, token)
        self.kept.append([os.dup(fd) for fd in (*model_cache, *data_cache)])
        if len(self.kept) > self.CAPACITY:
            for fd in self.kept.popleft():
                os.close(fd)
        return prepared


class LeaksFailedJobs(MutantDriver):
    """Opens a descriptor for each job (its completion event) and closes it at the end of the
    job, but the early return that reports OUTPUT_INSUFFICIENT_SIZE skips the cleanup: one
    descriptor lost per execution failing so, up to ``BOUND`` (DRV-5). Successful and other
    failed executions lose nothing."""

    name = "leaks_failed_jobs"
    BOUND = 256

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.lost: list[int] = []

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            event = os.memfd_create("nncert-job-event", os.MFD_CLOEXEC)  # type: ignore[attr-defined]
            try:
                result = super().execute_synchronously(request, measure, deadline, loop_timeout)
            except HalError as e:
                lost = self.driver.lost  # type: ignore[attr-defined]
                if e.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and len(lost) < LeaksFailedJobs.BOUND:
                    lost.append(event)
                    raise
                os.close(event)
                raise
            os.close(event)
            return result

    prepared_class = Prepared


class SharedCompiledModel(MutantDriver):
    """Compiles each model once: prepared models of the same model (the same bytes) share one
    compiled object, which the release of any of them frees. The others then fail every
    execution with GENERAL_FAILURE (DRV-4, DRV-5: each prepared model lives until its own
    release). Prepared models of different models are right."""

    name = "shared_compiled_model"

    def __init__(self, state_dir: str | None = None, **options: str) -> None:
        super().__init__(state_dir, **options)
        self.freed: set[bytes] = set()

    def compiled(self, model: Model, prepared: PreparedModel) -> PreparedModel:
        key = b"".join(export_model(model))
        prepared.key = key  # type: ignore[attr-defined]
        self.freed.discard(key)  # compiled afresh
        weakref.finalize(prepared, self.freed.add, key)
        return prepared

    class Prepared(MutantPreparedModel):
        key = b""

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if self.key in self.driver.freed:  # type: ignore[attr-defined]
                raise HalError(ErrorStatus.GENERAL_FAILURE, "the compiled model was freed")
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class UnknownDeviceType(MutantDriver):
    """Answers getType with 0, DeviceType::UNKNOWN, the runtime's placeholder for a device it
    has not asked yet, instead of OTHER, CPU, GPU or ACCELERATOR (DRV-1)."""

    name = "unknown_device_type"

    def type(self) -> int:  # type: ignore[override]
        return 0


class EmptyVersionString(MutantDriver):
    """Answers getVersionString with an empty string (the build left its version unset), where
    the VTS expects one that is not empty (DRV-1)."""

    name = "empty_version_string"

    def version_string(self) -> str:
        return ""


class ResetByFailedPreparation(MutantDriver):
    """A preparation that fails resets the device, and the version string it reports from then
    on says so (" (reset)"): before any failure, and after successful work, every query is
    stable (DRV-1)."""

    name = "reset_by_failed_preparation"
    _reset = False

    def version_string(self) -> str:
        return super().version_string() + (" (reset)" if self._reset else "")

    def prepare_model(self, model: Model, *args, **kwargs) -> PreparedModel:  # type: ignore[override]
        try:
            return super().prepare_model(model, *args, **kwargs)
        except HalError:
            self._reset = True
            raise


class CachingOffAfterFailedLoad(MutantDriver):
    """Turns compilation caching off once a preparation from cache fails (a token it does not
    know, a tampered cache): number_of_cache_files_needed answers (0, 0) from then on, where
    its answer must never change (DRV-1)."""

    name = "caching_off_after_failed_load"
    _off = False

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        return (0, 0) if self._off else super().number_of_cache_files_needed()

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        try:
            return super().prepare_model_from_cache(deadline, model_cache, data_cache, token)
        except HalError:
            self._off = True
            raise


MUTANT_INFO = (
    MutantInfo(LazyCapabilities, "DRV-1", suite="test_lifecycle.py"),
    MutantInfo(BurstStateCapabilities, "DRV-1", suite="test_lifecycle.py", args=("-k", "across_work")),
    MutantInfo(UnmeasuredPower, "DRV-1", suite="test_lifecycle.py", args=("-k", "capabilities")),
    MutantInfo(KeepsPreparedModels, "DRV-5", suite="test_lifecycle.py"),
    MutantInfo(LeaksBufferDescriptor, "DRV-5", suite="test_lifecycle.py"),
    MutantInfo(LazyFirstExecution, "DRV-6", suite="test_lifecycle.py"),
    MutantInfo(LazyAsyncWorkers, "DRV-6", suite="test_lifecycle.py", args=("-k", "first_execution")),
    MutantInfo(LeaksFailedJobs, "DRV-5", suite="test_lifecycle.py", args=("-k", "failed_calls")),
    MutantInfo(KeepsCacheHandles, "DRV-5", suite="test_lifecycle.py", args=("-k", "released_models")),
    MutantInfo(SharedCompiledModel, "DRV-5", suite="test_execution.py", args=("-k", "outlive_each_other")),
    MutantInfo(UnknownDeviceType, "DRV-1", suite="test_lifecycle.py", args=("-k", "device_type")),
    MutantInfo(EmptyVersionString, "DRV-1", suite="test_lifecycle.py", args=("-k", "device_type")),
    MutantInfo(ResetByFailedPreparation, "DRV-1", suite="test_lifecycle.py", args=("-k", "across_work")),
    MutantInfo(CachingOffAfterFailedLoad, "DRV-1", suite="test_lifecycle.py", args=("-k", "across_work")),
)
