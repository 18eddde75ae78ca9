"""Hostile mutants: drivers that attack the shared memory of the process they are hosted for.

A driver hosted out of process (``service:mutant:NAME``) holds descriptors of the harness's
memory: the request pools and the burst rings. Truncating one makes the harness's next touch
of its mapping a SIGBUS, the very death hosting a driver out of process is meant to contain;
growing one or adding seals to it would change memory the harness relies on. The pools and
rings nncert creates are sealed against all of it (nncert/hal/memory.py), so each attack
below is refused by the kernel (EPERM) and shows as the mutant's own GENERAL_FAILURE; a ring
the mutant scribbles over shows as the service's CRASH (tests/test_hostile_memory.py).
"""

from __future__ import annotations

import fcntl
import gc
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from nncert.drivers.base import Burst, Deadline
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.memory import F_ADD_SEALS, F_SEAL_FUTURE_WRITE, Memory
from nncert.hal.model import OutputShape, Request, Timing
from nncert.hal.types import ErrorStatus, MeasureTiming


def _attack(pools: Sequence[Memory | int], mutant: str,
            attacks: Sequence[tuple[str, Callable[[Memory], object]]]) -> None:
    """Every attack on every shared-memory pool; any refusal (the pool's seals) fails the
    execution, naming it."""
    refused = []
    for pool in pools:
        if isinstance(pool, Memory) and pool.size:
            for what, attack in attacks:
                try:
                    attack(pool)
                except OSError as e:
                    refused.append(f"{what} {pool.kind} fd {pool.fd}: {e.strerror}")
    if refused:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"mutant:{mutant}: refused: {'; '.join(refused)}")


class TruncatesPools(MutantDriver):
    """Truncates every request pool it was given to 0 bytes, after executing.

    The results are written first: the harness reads them from a file that is gone."""

    name = "truncates_pools"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            result = super().execute_synchronously(request, measure, deadline, loop_timeout)
            _attack(request.pools, "truncates_pools", [("truncating", lambda pool: os.ftruncate(pool.fd, 0))])
            return result

    prepared_class = Prepared


class GrowsPools(MutantDriver):
    """Seals every request pool it was given against writes and grows it, after executing.

    F_SEAL_FUTURE_WRITE: nothing could map the pool for writing again (a later call through
    the service, a second mapping in the harness); 1 GiB more: memory the harness sized would
    no longer be its size."""

    name = "grows_pools"
    GROWTH = 1 << 30

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            result = super().execute_synchronously(request, measure, deadline, loop_timeout)
            _attack(request.pools, "grows_pools", [("sealing against writes", _seal_future_writes),
                                                   ("growing", _grow)])
            return result

    prepared_class = Prepared


def _seal_future_writes(pool: Memory) -> None:
    fcntl.fcntl(pool.fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE)


def _grow(pool: Memory) -> None:
    os.ftruncate(pool.fd, os.fstat(pool.fd).st_size + GrowsPools.GROWTH)


class CorruptsRing(MutantDriver):
    """Hosted, corrupts its burst's result ring at the first execution (how=length|indexes|truncate).

    From the service's side, after the result is computed; the corruption is then kept the
    only thing on the ring: a message length larger than the ring (``how=length``, the
    default), a tail that publishes part of a length (``how=indexes``: a client that trusts
    the indexes waits for the rest until its deadline), or the ring truncated to nothing
    (``how=truncate``). In process a burst has no ring: it runs as the reference driver."""

    name = "corrupts_ring"
    HOWS = ("length", "indexes", "truncate")
    #: Seconds the burst holds on to its corruption: the client is expected to kill the
    #: service within them (CRASH, or HANG at its deadline).
    HOLD_S = 60.0

    def __init__(self, how: str = "length", **options: str) -> None:
        super().__init__(**options)
        if how not in self.HOWS:
            raise ValueError(f"how={how!r} is not one of {', '.join(self.HOWS)}")
        self.how = how

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return CorruptsRing.CorruptingBurst(self)

    prepared_class = Prepared

    class CorruptingBurst(Burst):
        done = False

        def execute(self, request: Request, slots: Sequence[int],
                    measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            result = super().execute(request, slots, measure, deadline, loop_timeout)
            ring = None if self.done else _result_ring(self)
            if ring is not None:
                self.done = True
                self.prepared.driver.corrupt(ring)
            return result

    def corrupt(self, ring: Any) -> None:
        """Scribble over the service's end of a result ring (an fmq.MessageQueue)."""
        head, tail = ring._index[0], ring._index[1]
        if self.how == "truncate":
            try:
                os.ftruncate(ring.memory.fd, 0)
            except OSError as e:
                message = f"mutant:corrupts_ring: truncating the result ring was refused: {e.strerror}"
                raise HalError(ErrorStatus.GENERAL_FAILURE, message) from None
        elif self.how == "length":
            ring._copy_in(tail, (ring.capacity + 1).to_bytes(4, "little"))
            ring._index[1] = tail + 4
        else:
            ring._index[1] = head + 2
        print(f"mutant:corrupts_ring: corrupted the result ring ({self.how})", file=sys.stderr, flush=True)
        os.eventfd_write(ring.data_fd, 1)  # wake the client to it
        time.sleep(self.HOLD_S)


def _result_ring(burst: Burst) -> Any:
    """The result queue of the service's worker that runs ``burst`` (None in process): a
    driver in the service's process can reach anything in it, as native code could."""
    for referrer in gc.get_referrers(burst):
        owners = gc.get_referrers(referrer) if isinstance(referrer, dict) else [referrer]
        for owner in owners:
            if type(owner).__name__ == "BurstWorker" and getattr(owner, "burst", None) is burst:
                return owner.results
    return None


# Attacks on the harness's shared memory: hosted, they would kill the harness (SIGBUS) were its
# memory not sealed; sealed, the attack fails, or the service is a CRASH.
MUTANT_INFO = (
    MutantInfo(TruncatesPools, "MLTS-2", "CRASH"),
    MutantInfo(GrowsPools, "MLTS-2", "CRASH"),
    MutantInfo(CorruptsRing, "BURST-3", "CRASH"),
)
