"""Burst mutants (BURST-1, BURST-2): a burst that is not its own prepared model's, one that
caches a slot's contents rather than its memory, and bursts that share one slot cache
(conformance/test_pools.py catches them); one whose warm path gets timing wrong (EXE-7,
conformance/test_execution.py), and one that keeps the output shapes of a slot set's first
run (EXE-4, conformance/test_prepared_reuse.py); one that computes relaxed models its own way
(EXE-3, conformance/test_execution.py)."""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Burst, Deadline, PreparedModel
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import OutputShape, Request, Timing
from nncert.hal.types import ErrorStatus, MeasureTiming


class OneBurstContext(MutantDriver):
    """Keeps one high-performance context per driver: every burst runs the prepared model
    whose burst was configured last (BURST-1)."""

    name = "one_burst_context"

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            self.driver.burst_owner = self
            return OneBurstContext.SharedBurst(self)

    class SharedBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            self.prepared = self.prepared.driver.burst_owner
            return super().execute(request, slots, measure, deadline, loop_timeout)

    prepared_class = Prepared


class SlotContentsCached(MutantDriver):
    """Copies an input memory's bytes into the burst the first time its slot is seen and reads
    that copy on every later run: new bytes written into the same memory are ignored
    (BURST-2). Output memories are written as they should be."""

    name = "slot_contents_cached"

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return SlotContentsCached.CopyingBurst(self)

    class CopyingBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            read_only = {a.location.pool_index for a in request.inputs} - \
                {a.location.pool_index for a in request.outputs}
            for p, (slot, pool) in enumerate(zip(slots, request.pools, strict=False)):
                if p in read_only and slot not in self.slots and isinstance(pool, Memory) and pool.size:
                    self.slots[slot] = Memory.from_bytes(bytes(pool.view()))
            return super().execute(request, slots, measure, deadline, loop_timeout)

    prepared_class = Prepared


class SlotsPerPreparedModel(MutantDriver):
    """Keeps the slot cache (slot id -> mapped memory) in the prepared model, shared by all its
    bursts while any of them is alive (emptied when the last one goes): a second live burst's
    slot 0 is the first burst's memory (BURST-1). One burst at a time is right."""

    name = "slots_per_prepared_model"

    class Prepared(MutantPreparedModel):
        def __init__(self, model, driver) -> None:
            super().__init__(model, driver)
            self.slot_cache: dict = {}
            self.live_bursts = 0

        def configure_execution_burst(self) -> Burst:
            burst = Burst(self)
            if not self.live_bursts:
                self.slot_cache.clear()
            self.live_bursts += 1
            burst.slots = self.slot_cache
            weakref.finalize(burst, SlotsPerPreparedModel._released, weakref.ref(self))
            return burst

    @staticmethod
    def _released(prepared: weakref.ref) -> None:
        owner = prepared()
        if owner is not None:
            owner.live_bursts -= 1

    prepared_class = Prepared


class WarmBurstTiming(MutantDriver):
    """A burst whose slots are all cached already takes a fast path that always reports
    timing, from counters whose device time includes the queue wait: asked for or not, and
    longer on the device than in the driver (EXE-7). A burst's first run is right."""

    name = "warm_burst_timing"
    #: Microseconds of queue wait the fast path counts as device time.
    QUEUED_US = 5

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return WarmBurstTiming.FastBurst(self)

    class FastBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            if not all(s in self.slots for s in slots):
                return super().execute(request, slots, measure, deadline, loop_timeout)
            shapes, timing = super().execute(request, slots, MeasureTiming.YES, deadline, loop_timeout)
            return shapes, Timing(timing.time_in_driver + WarmBurstTiming.QUEUED_US, timing.time_in_driver)

    prepared_class = Prepared


class BurstShapeCache(MutantDriver):
    """Plans a burst's output transfers once per set of slots: the output shapes of the first
    run over those memories are reported for every later run over them, whatever shapes the
    later runs' results have (EXE-4). The values are right."""

    name = "burst_shape_cache"

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstShapeCache.PlannedBurst(self)

    class PlannedBurst(Burst):
        def __init__(self, prepared) -> None:
            super().__init__(prepared)
            self.planned: dict[tuple[int, ...], list[OutputShape]] = {}

        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            shapes, timing = super().execute(request, slots, measure, deadline, loop_timeout)
            return self.planned.setdefault(tuple(slots), shapes), timing

    prepared_class = Prepared


def _half(x: np.ndarray | None) -> np.ndarray | None:
    return x.astype(np.float16).astype(np.float32) if x is not None and x.dtype == np.float32 else x


class RelaxedHalfOnBurst(MutantDriver):
    """A burst (the high-performance state) runs a model that allows relaxed computation on
    float16 kernels, inputs and results rounded to float16; every other path keeps float32.
    Each is a valid relaxed result, but one request gives other bits on a burst (EXE-3)."""

    name = "relaxed_half_on_burst"

    class HalfBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            prepared = self.prepared
            prepared.half = prepared.model.relax_computation_float32_to_float16  # type: ignore[attr-defined]
            try:
                return super().execute(request, slots, measure, deadline, loop_timeout)
            finally:
                prepared.half = False  # type: ignore[attr-defined]

    class Prepared(MutantPreparedModel):
        half = False

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            if not self.half:
                return super().compute(inputs)
            return [_half(o) for o in super().compute([_half(x) for x in inputs])]

        def configure_execution_burst(self) -> Burst:
            return RelaxedHalfOnBurst.HalfBurst(self)

    prepared_class = Prepared


class BurstHoldsModelWeakly(MutantDriver):
    """A burst keeps only a weak reference to its prepared model (to let the model go when the
    app releases it): a burst the caller keeps after releasing the prepared model fails every
    execution with GENERAL_FAILURE, where it must hold the model alive (BURST-1)."""

    name = "burst_holds_model_weakly"

    class WeakBurst(Burst):
        def __init__(self, prepared: PreparedModel) -> None:
            self._prepared = weakref.ref(prepared)
            self.slots = {}

        @property
        def prepared(self) -> PreparedModel:  # type: ignore[override]
            prepared = self._prepared()
            if prepared is None:
                raise HalError(ErrorStatus.GENERAL_FAILURE, "the burst's prepared model was released")
            return prepared

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstHoldsModelWeakly.WeakBurst(self)

    prepared_class = Prepared


class SlotIds32Bit(MutantDriver):
    """Keeps slot ids in 32 bits (the HIDL burst's int32 slot field, carried over): slots
    2**32 and above alias slots 0 and up, so a burst runs a request on another slot's memory
    (BURST-2). Ids out of the int64 range are still refused."""

    name = "slot_ids_32_bit"

    class NarrowBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            slots = [s & 0xFFFFFFFF if isinstance(s, int) and 0 <= s < 2**63 else s for s in slots]
            return super().execute(request, slots, measure, deadline, loop_timeout)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return SlotIds32Bit.NarrowBurst(self)

    prepared_class = Prepared


class BurstKeepsLastTiming(MutantDriver):
    """A burst keeps the timing of its last measured execution in its result message and sends
    it again with a later execution that did not ask for timing (EXE-7)."""

    name = "burst_keeps_last_timing"

    class StaleTimingBurst(Burst):
        last: Timing | None = None

        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            shapes, timing = super().execute(request, slots, measure, deadline, loop_timeout)
            if timing != Timing():
                self.last = timing
            elif self.last is not None:
                timing = self.last
            return shapes, timing

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstKeepsLastTiming.StaleTimingBurst(self)

    prepared_class = Prepared


class SlotsOfSuccessOnly(MutantDriver):
    """A burst records the memories an execution brings only when that execution succeeds:
    the slots of a failed run are forgotten, and the client's release of them is refused as
    an unknown slot (BURST-2)."""

    name = "slots_of_success_only"

    class ForgettingBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            known = set(self.slots)
            try:
                return super().execute(request, slots, measure, deadline, loop_timeout)
            except HalError:
                for slot in [s for s in self.slots if s not in known]:
                    del self.slots[slot]
                raise

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return SlotsOfSuccessOnly.ForgettingBurst(self)

    prepared_class = Prepared


class ReleasesAcrossBursts(MutantDriver):
    """Keeps a slot cache per burst, but sends each release to the prepared model, which drops
    that slot id from every one of its bursts: once one burst has released slot s, another
    burst's own release of its slot s is refused as an unknown slot (BURST-2). Runs are right:
    a burst maps a dropped slot again from the request's pools."""

    name = "releases_across_bursts"

    class SharingBurst(Burst):
        def release_memory_resource(self, slot: int) -> None:
            super().release_memory_resource(slot)
            for other in list(self.prepared.bursts):  # type: ignore[attr-defined]
                if other is not self:
                    other.slots.pop(slot, None)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            if not hasattr(self, "bursts"):
                self.bursts: weakref.WeakSet[Burst] = weakref.WeakSet()
            burst = ReleasesAcrossBursts.SharingBurst(self)
            self.bursts.add(burst)
            return burst

    prepared_class = Prepared


class EvictsIdleSlots(MutantDriver):
    """Evicts from a burst's slot cache every slot that the last ``IDLE_RUNS`` executions left
    out (an LRU bounded by age, to save mappings), where a slot must stay until the client
    releases it: the client's later release of an evicted slot is refused as an unknown slot
    (BURST-2). Runs are right: an evicted slot is mapped again from the request's pools."""

    name = "evicts_idle_slots"
    IDLE_RUNS = 3

    class EvictingBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            idle = getattr(self, "idle", {})
            self.idle = {s: 0 if s in slots else idle.get(s, 0) + 1 for s in {*self.slots, *slots}}
            for slot, runs in list(self.idle.items()):
                if runs >= EvictsIdleSlots.IDLE_RUNS:
                    self.slots.pop(slot, None)
                    del self.idle[slot]
            return super().execute(request, slots, measure, deadline, loop_timeout)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return EvictsIdleSlots.EvictingBurst(self)

    prepared_class = Prepared


class SlotDimensionsCached(MutantDriver):
    """Plans a burst's input transfers once per set of slots: the request dimensions of the
    first run over those slots are kept, and a later run over them that gives an input of
    unknown dimensions another shape of the same element count ((3, 2) after (2, 3)) is read
    in the first shape (BURST-2, EXE-4). A new element count, or new slots, plan afresh."""

    name = "slot_dimensions_cached"

    class PlanningBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            plans = getattr(self, "plans", {})
            self.plans = plans
            planned = plans.setdefault(tuple(slots), [tuple(a.dimensions) for a in request.inputs])
            if len(planned) == len(request.inputs):
                inputs = [dataclasses.replace(a, dimensions=old)
                          if a.dimensions and len(old) == len(a.dimensions)
                          and math.prod(old) == math.prod(a.dimensions) else a
                          for a, old in zip(request.inputs, planned, strict=True)]
                request = Request(inputs, request.outputs, request.pools)
            return super().execute(request, slots, measure, deadline, loop_timeout)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return SlotDimensionsCached.PlanningBurst(self)

    prepared_class = Prepared


class WarmBurstUnmarksInsufficient(MutantDriver):
    """A burst whose slots all hold their memories already answers on a fast result message
    that has no per-output flags: OUTPUT_INSUFFICIENT_SIZE comes with every output shape marked
    sufficient, so the client cannot tell which buffer to grow (EXE-5). A cold burst run, and
    every other path, mark them."""

    name = "warm_burst_unmarks_insufficient"

    class WarmBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            warm = all(s in self.slots for s in slots)
            try:
                return super().execute(request, slots, measure, deadline, loop_timeout)
            except HalError as e:
                if not warm or e.status is not ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                    raise
                shapes = [dataclasses.replace(shape, is_sufficient=True) for shape in e.output_shapes]
                raise HalError(e.status, e.message, output_shapes=shapes) from None

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return WarmBurstUnmarksInsufficient.WarmBurst(self)

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(OneBurstContext, "BURST-1", suite="test_pools.py", args=("-k", "bursts_of_two")),
    MutantInfo(SlotContentsCached, "BURST-2", suite="test_pools.py", args=("-k", "burst_slot")),
    MutantInfo(SlotsPerPreparedModel, "BURST-1", suite="test_pools.py", args=("-k", "two_bursts_of_one")),
    MutantInfo(WarmBurstTiming, "EXE-7", suite="test_execution.py", args=("-k", "timing and burst-warm")),
    MutantInfo(BurstShapeCache, "EXE-4", suite="test_prepared_reuse.py", args=("-k", "one-burst")),
    MutantInfo(BurstKeepsLastTiming, "EXE-7", suite="test_execution.py", args=("-k", "timing_follows")),
    MutantInfo(SlotIds32Bit, "BURST-2", suite="test_pools.py", args=("-k", "64_bit")),
    MutantInfo(BurstHoldsModelWeakly, "BURST-1", suite="test_pools.py", args=("-k", "outlives")),
    MutantInfo(RelaxedHalfOnBurst, "EXE-3", suite="test_execution.py", args=("-k", "relaxed_model_gives")),
    MutantInfo(SlotsOfSuccessOnly, "BURST-2", suite="test_pools.py", args=("-k", "slots_of_a_failed")),
    MutantInfo(ReleasesAcrossBursts, "BURST-2", suite="test_pools.py", args=("-k", "two_bursts_of_one")),
    MutantInfo(EvictsIdleSlots, "BURST-2", suite="test_execution.py", args=("-k", "slots_are_cached")),
    MutantInfo(SlotDimensionsCached, "BURST-2", suite="test_pools.py", args=("-k", "takes_each_requests")),
    MutantInfo(WarmBurstUnmarksInsufficient, "EXE-5", suite="test_pools.py",
               args=("-k", "marks_each_output and burst-warm")),
)
