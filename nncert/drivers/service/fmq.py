"""A fast message queue (BURST-3): a single-producer / single-consumer ring buffer in shared
memory, signalled with eventfds, as the HAL's FMQ carries burst requests and results.

Layout of the shared memory (a memfd, little endian; both ends are on one machine, and the
indexes are read and written natively, so that machine must be little endian)::

    0   u64  head: bytes consumed so far (written by the consumer only)
    8   u64  tail: bytes produced so far (written by the producer only)
    16  u32  capacity of the data area in bytes
    20  u32  layout version (1)
    64  ...  data area: messages as u32 length + payload, wrapping around the end

The producer copies a whole message in, then publishes the new tail (one aligned 8-byte
store; x86-64 keeps stores in order, a weakly ordered CPU would need release/acquire
barriers here, so the consumer never sees a half-written message) and signals the ``data`` eventfd;
the consumer copies it out, publishes the new head and signals the ``space`` eventfd. A
waiting side also watches "abort" descriptors (the peer's death, the queue's release), so it
never blocks past the death of the other end (BURST-4), and gives up at its deadline.

The peer writes the same memory, so nothing read from it is trusted: the memfd is sealed
against shrinking (``Memory.create``; a received one is refused without the seal), so it
cannot vanish under the mapping (SIGBUS); every access is modulo the capacity read once at
creation; and indexes that no working peer publishes (more bytes published than the ring
holds, fewer than the producer ever publishes, a head past the tail) are a
``CorruptMessageError``, not a wait that never ends.
"""

from __future__ import annotations

import os
import struct
import time

from nncert.drivers.base import readable
from nncert.drivers.service.spin import idle_core
from nncert.hal.memory import Memory

DATA_OFFSET = 64
LAYOUT_VERSION = 1
_LEN = struct.Struct("<I")
#: Indexes are unsigned 64-bit counters: a tail this far is no working producer's.
_INDEX_END = 1 << 64


class QueueAborted(Exception):  # noqa: N818 - an event, not a bug
    """One of the abort descriptors became readable while waiting."""

    def __init__(self, fd: int) -> None:
        super().__init__(f"abort descriptor {fd} signalled")
        self.fd = fd


class QueueTimeout(Exception):  # noqa: N818 - an event, not a bug
    """The deadline passed while waiting for data or space."""


class CorruptMessageError(ValueError):
    """A message header claims more bytes than the queue holds, or the indexes say what no
    working peer publishes (a malformed write by the peer). On the consumer's side
    everything queued was discarded, so the queue is usable again."""


class MessageQueue:
    """One direction of a burst: the shared ring plus its two eventfds."""

    def __init__(self, memory: Memory, data_fd: int, space_fd: int) -> None:
        if memory.size < DATA_OFFSET:
            raise ValueError(f"not a message queue ({memory.size} bytes)")
        view = memory.view()
        capacity, version = struct.unpack_from("<II", view, 16)
        if version != LAYOUT_VERSION or DATA_OFFSET + capacity > memory.size or capacity < 64:
            raise ValueError(f"not a message queue (layout {version}, capacity {capacity}, "
                             f"{memory.size} bytes)")
        self.memory = memory
        self.capacity = capacity
        self._index = view[:16].cast("Q")
        self._data = view[DATA_OFFSET:DATA_OFFSET + capacity]
        self.data_fd = data_fd
        self.space_fd = space_fd
        self._latency = 0.0  # moving average of how long read() waited for a message

    @classmethod
    def create(cls, capacity: int = 1 << 16) -> MessageQueue:
        memory = Memory.create(DATA_OFFSET + capacity, "ashmem")
        struct.pack_into("<QQII", memory.view(), 0, 0, 0, capacity, LAYOUT_VERSION)
        flags = os.EFD_CLOEXEC | os.EFD_NONBLOCK
        return cls(memory, os.eventfd(0, flags), os.eventfd(0, flags))

    def fds(self) -> list[int]:
        """What the other end needs: the shared memory, the data and the space eventfds."""
        return [self.memory.fd, self.data_fd, self.space_fd]

    # -- producer --
    def fits(self, payload: bytes) -> bool:
        """Whether ``payload`` can ever be written (a message larger than the ring cannot)."""
        return _LEN.size + len(payload) <= self.capacity

    def write(self, payload: bytes, deadline: float | None = None, abort: tuple[int, ...] = ()) -> None:
        """Append one message; waits for space until ``deadline`` (time.monotonic())."""
        need = _LEN.size + len(payload)
        if not self.fits(payload):
            raise ValueError(f"message of {len(payload)} bytes exceeds the queue ({self.capacity} bytes)")
        while True:
            head, tail = self._indexes()
            if self.capacity - (tail - head) >= need:
                break
            self._wait(self.space_fd, deadline, abort)
        if tail + need >= _INDEX_END:
            raise CorruptMessageError(f"corrupt queue: tail {tail} at the end of the index range")
        self._copy_in(tail, _LEN.pack(len(payload)))
        self._copy_in(tail + _LEN.size, payload)
        self._index[1] = tail + need  # publish
        os.eventfd_write(self.data_fd, 1)

    def _copy_in(self, position: int, data: bytes) -> None:
        start = position % self.capacity
        first = min(len(data), self.capacity - start)
        self._data[start:start + first] = data[:first]
        if first < len(data):
            self._data[:len(data) - first] = data[first:]

    # -- consumer --
    def read(self, deadline: float | None = None, abort: tuple[int, ...] = (), spin: float = 0.0) -> bytes:
        """Take the next message; waits for one until ``deadline`` (time.monotonic()).

        Up to ``spin`` seconds the ring is polled before sleeping on the eventfd: a burst
        expects its answer (or its next request) within microseconds, and waking a sleeping
        process costs tens to hundreds of them. Polling only pays while messages do come
        within the window, and only while a core is idle: on a busy machine polling would steal
        the core the other side needs."""
        start = time.monotonic()
        spin_until = start + spin if spin and self._latency < spin and idle_core(start) else 0.0
        while True:
            head, tail = self._indexes(consumer=True)
            if tail - head >= _LEN.size:
                break
            if spin_until and time.monotonic() < spin_until:
                os.sched_yield()
                continue
            self._wait(self.data_fd, deadline, abort)
        self._latency += 0.2 * (time.monotonic() - start - self._latency)
        (length,) = _LEN.unpack(self._copy_out(head, _LEN.size))
        if length > tail - head - _LEN.size:
            self._index[0] = tail  # drop it all: the next message starts afresh (VAL-1)
            os.eventfd_write(self.space_fd, 1)
            raise CorruptMessageError(f"corrupt queue: message of {length} bytes, {tail - head} available")
        payload = self._copy_out(head + _LEN.size, length)
        self._index[0] = head + _LEN.size + length  # release the space
        os.eventfd_write(self.space_fd, 1)
        return payload

    def _indexes(self, consumer: bool = False) -> tuple[int, int]:
        """(head, tail), if a working pair of ends could have published them: 0 or at least
        a length's bytes published (the producer publishes whole messages), at most the
        capacity. Otherwise CorruptMessageError; the consumer first drops what is published,
        as for a corrupt length, so that its side of the ring is consistent again."""
        head, tail = self._index[0], self._index[1]
        used = tail - head
        if used == 0 or _LEN.size <= used <= self.capacity:
            return head, tail
        if consumer:
            self._index[0] = tail
            os.eventfd_write(self.space_fd, 1)
        raise CorruptMessageError(f"corrupt queue: head {head}, tail {tail}, capacity {self.capacity}")

    def _copy_out(self, position: int, n: int) -> bytes:
        start = position % self.capacity
        first = min(n, self.capacity - start)
        data = bytes(self._data[start:start + first])
        return data + bytes(self._data[:n - first]) if first < n else data

    @staticmethod
    def _wait(fd: int, deadline: float | None, abort: tuple[int, ...]) -> None:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise QueueTimeout("deadline passed")
        ready = readable([fd, *abort], timeout)
        if not ready:
            raise QueueTimeout("deadline passed")
        for a in abort:
            if a in ready:
                raise QueueAborted(a)
        try:
            os.eventfd_read(fd)  # clear; the loop re-checks the indexes
        except BlockingIOError:
            pass

    def close(self) -> None:
        self._index.release()
        self._data.release()
        self.memory.close()
        for fd in (self.data_fd, self.space_fd):
            try:
                os.close(fd)
            except OSError:
                pass
