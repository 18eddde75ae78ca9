"""Memory pools backed by real shared memory (MEM-1..3).

- ``ashmem``: an anonymous memfd, the Linux analogue of Android's ashmem (whose size is also
  fixed once it is mapped).
- ``mmap_fd``: a file mapped at an offset that is not zero (nor page aligned): a memfd of
  ``size + FILE_OFFSET`` bytes, the pool starting at byte 3.
- ``hardware_buffer_blob``: a memfd of fixed size, like an AHardwareBuffer of format BLOB.

Every pool owns a file descriptor, so that a driver in another process can receive it
(SCM_RIGHTS) and map the same bytes. Whoever holds a writable descriptor can ``ftruncate``
the file, and any process touching its mapping past the new end dies of SIGBUS: so every
pool nncert makes is sealed at creation against shrinking and growing (F_SEAL_SHRINK,
F_SEAL_GROW) and against further seals (F_SEAL_SEAL: no peer can add F_SEAL_WRITE or
F_SEAL_FUTURE_WRITE to make our own later mappings fail), and a descriptor received from
another process is mapped only once it is sealed against shrinking and holds the bytes
mapped (``Memory.adopt``). Only memfds take seals: a regular file cannot, which is why
``mmap_fd`` is a memfd laid out as a file rather than an unlinked file on disk, and why a
pool that is not sealed is refused, not copied, when it would be handed to another process
(``Memory.shared_fd``): docs/service-protocol.md, "Seals".
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from typing import ClassVar

from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus

KINDS = ("ashmem", "mmap_fd", "hardware_buffer_blob")

# Linux's values, for a Python whose fcntl or os module lacks one.
F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1034)
F_SEAL_SEAL = getattr(fcntl, "F_SEAL_SEAL", 0x1)
F_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 0x2)
F_SEAL_GROW = getattr(fcntl, "F_SEAL_GROW", 0x4)
F_SEAL_WRITE = getattr(fcntl, "F_SEAL_WRITE", 0x8)
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x10)
MFD_ALLOW_SEALING = getattr(os, "MFD_ALLOW_SEALING", 0x2)
#: The seals of every pool nncert creates: its size is fixed for its whole life, and nobody
#: may add another seal.
FIXED_SIZE = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL


def sealed_memfd(name: str, size: int) -> int:
    """A new memfd of ``size`` bytes, sealed with ``FIXED_SIZE``."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, F_ADD_SEALS, FIXED_SIZE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def seals(fd: int) -> int:
    """The file's seals; 0 for a file that cannot take any (not a memfd: EINVAL)."""
    try:
        return fcntl.fcntl(fd, F_GET_SEALS)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return 0
        raise


class Memory:
    """A shared-memory pool: a descriptor plus a mapped view of ``size`` bytes."""

    kind: ClassVar[str] = ""
    _view: memoryview | None = None

    def __init__(self, fd: int, size: int, offset: int = 0) -> None:
        self.fd = fd
        self.size = size
        self.offset = offset
        # mmap offsets must be page aligned: map from the page start, slice the rest.
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        self._map = mmap.mmap(fd, size + (offset - start), mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE, offset=start) if size else None
        self._view = memoryview(self._map)[offset - start:] if self._map else memoryview(b"")

    @classmethod
    def create(cls, size: int, kind: str = "ashmem") -> Memory:
        try:
            return _KIND_CLASSES[kind].allocate(size)
        except KeyError:
            raise ValueError(f"unknown memory kind {kind!r} (known: {', '.join(KINDS)})") from None

    @classmethod
    def from_bytes(cls, data: bytes, kind: str = "ashmem") -> Memory:
        mem = cls.create(len(data), kind)
        mem.view()[:] = data
        return mem

    @classmethod
    def allocate(cls, size: int) -> Memory:
        raise NotImplementedError

    @classmethod
    def adopt(cls, kind: str, fd: int, size: int, offset: int = 0) -> Memory:
        """Map a pool received from another process (the descriptor is taken over).

        The sender keeps a writable descriptor of the same file, so the file must be sealed
        against shrinking, or the sender could truncate it under our mapping and kill this
        process with SIGBUS: a descriptor without F_SEAL_SHRINK is the sender's fault
        (``HalError`` INVALID_ARGUMENT). Checked first, as the seal is what makes the size
        check that follows hold for good; a file shorter than ``offset + size`` bytes cannot
        be mapped (ValueError, GENERAL_FAILURE under MEM-3). A pool of size 0 is never mapped,
        so neither applies to it."""
        try:
            memory_class = _KIND_CLASSES[kind]
        except KeyError:
            os.close(fd)
            raise ValueError(f"unknown memory kind {kind!r} (known: {', '.join(KINDS)})") from None
        try:
            if size:
                check_shared(fd, kind, size, offset)
            return memory_class(fd, size, offset)
        except (OSError, ValueError, OverflowError, HalError):
            os.close(fd)
            raise

    def shared_fd(self) -> int:
        """The descriptor to hand to another process. Only a pool sealed against shrinking
        may go: the receiver could otherwise truncate it and kill this process with SIGBUS
        at its next touch of the pool. A pool nncert created always is; one made elsewhere
        (a file, an unsealed memfd) is refused rather than copied, since a copy would stop
        being the memory the caller reads (a burst slot keeps it, a fenced execution writes
        it after the call returns): copy it into ``Memory.from_bytes`` yourself."""
        if self.size and not seals(self.fd) & F_SEAL_SHRINK:
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"{self.kind} pool of {self.size} bytes (fd {self.fd}) is not sealed against "
                           f"shrinking (F_SEAL_SHRINK): another process could truncate it and kill this "
                           f"one with SIGBUS; make shared pools with Memory.create or Memory.from_bytes")
        return self.fd

    def view(self) -> memoryview:
        """A writable view of the pool's bytes (shared with every other mapping)."""
        if self._view is None:
            raise ValueError(f"{self.kind} memory is closed")
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
            if self._map is not None:
                self._map.close()
            os.close(self.fd)

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, ValueError, BufferError):
            pass

    def __deepcopy__(self, memo: dict) -> Memory:
        return self  # pools are shared resources; model copies share them

    def __repr__(self) -> str:
        return f"<{self.kind} memory fd={self.fd} size={self.size}>"


def check_shared(fd: int, kind: str, size: int, offset: int = 0) -> None:
    """Whether another process's descriptor may be mapped for ``size`` bytes at ``offset``:
    sealed against shrinking (else INVALID_ARGUMENT) and at least ``offset + size`` bytes
    long (else ValueError)."""
    if not seals(fd) & F_SEAL_SHRINK:
        raise HalError(ErrorStatus.INVALID_ARGUMENT,
                       f"{kind} memory of {size} bytes refused: its descriptor is not a memfd sealed "
                       f"against shrinking (F_SEAL_SHRINK), so its sender could truncate it under the "
                       f"mapping (SIGBUS)")
    if size < 0 or offset < 0:
        raise ValueError(f"negative size {size} or offset {offset}")
    length = os.fstat(fd).st_size
    if length < offset + size:
        raise ValueError(f"the file has {length} bytes, the pool needs {offset + size}")


class AshmemMemory(Memory):
    kind = "ashmem"

    @classmethod
    def allocate(cls, size: int) -> Memory:
        return cls(sealed_memfd("nncert-ashmem", size), size)


class MmapFdMemory(Memory):
    """A file mapped at an offset that is deliberately not zero (nor page aligned). The
    file is a memfd, not an unlinked file on disk: only a memfd can be sealed (see above)."""

    kind = "mmap_fd"
    FILE_OFFSET = 3

    @classmethod
    def allocate(cls, size: int) -> Memory:
        return cls(sealed_memfd("nncert-mmap-fd", size + cls.FILE_OFFSET), size, offset=cls.FILE_OFFSET)


class HardwareBufferBlobMemory(Memory):
    kind = "hardware_buffer_blob"

    @classmethod
    def allocate(cls, size: int) -> Memory:
        return cls(sealed_memfd("nncert-ahwb-blob", size), size)


_KIND_CLASSES: dict[str, type[Memory]] = {
    c.kind: c for c in (AshmemMemory, MmapFdMemory, HardwareBufferBlobMemory)
}
