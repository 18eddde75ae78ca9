"""Memory pools backed by real shared memory (MEM-1..3).

- ``ashmem``: an anonymous memfd, the Linux analogue of Android's ashmem.
- ``mmap_fd``: a regular (unlinked) file, mapped at a non-zero offset.
- ``hardware_buffer_blob``: a memfd sealed against resizing, like an AHardwareBuffer
  of format BLOB: its size is fixed for its whole life.

Every pool owns a file descriptor, so that a driver in another process can receive
it (SCM_RIGHTS) and map the same bytes.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
from typing import ClassVar

KINDS = ("ashmem", "mmap_fd", "hardware_buffer_blob")


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
        """Map a pool received from another process (the descriptor is taken over)."""
        try:
            memory_class = _KIND_CLASSES[kind]
        except KeyError:
            os.close(fd)
            raise ValueError(f"unknown memory kind {kind!r} (known: {', '.join(KINDS)})") from None
        try:
            return memory_class(fd, size, offset)
        except (OSError, ValueError, OverflowError):
            os.close(fd)
            raise

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


class AshmemMemory(Memory):
    kind = "ashmem"

    @classmethod
    def allocate(cls, size: int) -> Memory:
        fd = os.memfd_create("nncert-ashmem", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return cls(fd, size)


class MmapFdMemory(Memory):
    """A file mapped at an offset that is deliberately not zero (nor page aligned)."""

    kind = "mmap_fd"
    FILE_OFFSET = 3

    @classmethod
    def allocate(cls, size: int) -> Memory:
        fd, path = tempfile.mkstemp(prefix="nncert-mmap-")
        os.unlink(path)
        os.ftruncate(fd, size + cls.FILE_OFFSET)
        return cls(fd, size, offset=cls.FILE_OFFSET)


class HardwareBufferBlobMemory(Memory):
    kind = "hardware_buffer_blob"

    @classmethod
    def allocate(cls, size: int) -> Memory:
        fd = os.memfd_create("nncert-ahwb-blob", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        return cls(fd, size)


_KIND_CLASSES: dict[str, type[Memory]] = {
    c.kind: c for c in (AshmemMemory, MmapFdMemory, HardwareBufferBlobMemory)
}
