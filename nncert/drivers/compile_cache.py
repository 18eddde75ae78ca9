"""Compiled artefacts kept on disk by content, across processes and runs.

A compiler driver (IREE, TVM, OpenVINO) spends most of a per-operation test compiling: the
runtime's own compiler turns the exported model into an artefact (an IREE ``.vmfb``, a TVM
shared library, an OpenVINO exported compiled model), and the suites compile thousands of
small models. The artefact depends on nothing but the exported model's bytes, the driver's
options and the runtime's release, so it is kept under a key made of those three
(``CompileCache.key``): a second run of a suite loads every model it compiled before, and the
supported-operations probe and the test that follows it share one compilation.

Where: ``$NNCERT_CACHE_DIR/compiled/<driver>`` (default ``~/.cache/nncert``), or the
directory a driver's ``cache=PATH`` option names; ``cache=off`` keeps nothing. The
directory is the running user's own, mode 0700 (nncert.files.private_dir): an artefact
holds machine code that the runtime maps and runs, so no one else may plant one. Each entry
is written whole under a temporary name and renamed into place (concurrent runs never see
half an entry) and carries the sha256 of its payload, checked on every read: a corrupted or
truncated entry is removed and compiled again (counted in ``stats``), never loaded. The
cache is bounded (``NNCERT_COMPILE_CACHE_MB``, default 2048): past the bound the entries
used longest ago are removed. A process about to compile entries ahead claims them first
(``claim``: a file per key beside the entries), so that processes told the same work share it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from nncert import files

MAGIC = b"NNCA1\n"
#: Megabytes the cache may hold (the environment variable overrides).
DEFAULT_LIMIT_MB = 2048
#: Entries written between two checks of the bound.
TRIM_EVERY = 64


def default_root() -> Path:
    return Path(os.environ.get("NNCERT_CACHE_DIR") or Path.home() / ".cache" / "nncert") / "compiled"


class CompileCache:
    """The artefacts of one driver configuration (``version``: the driver's version string,
    which names the runtime release and the options that change what is compiled)."""

    def __init__(self, driver_name: str, version: str, directory: str | os.PathLike | None = None,
                 limit_bytes: int | None = None) -> None:
        self.directory = files.private_dir(Path(directory) if directory else default_root() / driver_name)
        self.version = version
        if limit_bytes is None:
            limit_bytes = int(os.environ.get("NNCERT_COMPILE_CACHE_MB", DEFAULT_LIMIT_MB)) * 2**20
        self.limit_bytes = limit_bytes
        self.stats = {"hits": 0, "misses": 0, "corrupt": 0}
        self._lock = threading.Lock()
        self._written = 0

    def key(self, content: bytes) -> str:
        h = hashlib.blake2b(digest_size=24)
        h.update(self.version.encode())
        h.update(b"\0")
        h.update(content)
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.art"

    def get(self, key: str) -> bytes | None:
        """The artefact stored under ``key``, or None (missing, or corrupt and removed)."""
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # missing, or a link where an entry should be: compiled again
            return None
        try:
            data = b""
            while chunk := os.read(fd, 1 << 20):
                data += chunk
            os.utime(fd)  # used now: the bound removes the entries used longest ago
        finally:
            os.close(fd)
        head = len(MAGIC) + 32
        if len(data) < head or not data.startswith(MAGIC) or \
                hashlib.sha256(data[head:]).digest() != data[len(MAGIC):head]:
            with self._lock:
                self.stats["corrupt"] += 1
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        return data[head:]

    def put(self, key: str, artefact: bytes) -> None:
        entry = MAGIC + hashlib.sha256(artefact).digest() + artefact
        try:
            files.write_atomic(self._path(key), entry, mode=0o600, sync=False)
        except OSError:  # a full disk loses the entry, not the compilation
            return
        with self._lock:
            self._written += 1
            trim = self._written % TRIM_EVERY == 1
        if trim:
            self.trim()

    def has(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (not read: ``get`` may still find it corrupt)."""
        return os.path.isfile(self._path(key))

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> bytes:
        """The artefact stored under ``key`` (``key(content)``): from disk, else ``build()``
        (then stored)."""
        artefact = self.get(key)
        with self._lock:
            self.stats["hits" if artefact is not None else "misses"] += 1
        if artefact is None:
            artefact = build()
            self.put(key, artefact)
        return artefact

    def claim(self, keys: Iterable[str]) -> list[str]:
        """Those of ``keys`` this process may build now, each marked by a claim file made
        atomically: another process about to build the same (a pytest-xdist worker compiling
        ahead the same tests) leaves them to this one. A claim whose process has ended, or
        older than ``CLAIM_S``, is taken over. ``release`` removes them."""
        mine = []
        for key in keys:
            path = self.directory / f"{key}.claim"
            for _ in range(2):
                try:
                    fd = os.open(path, _CLAIM_FLAGS, 0o600)
                except FileExistsError:
                    if _claim_held(path):
                        break
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                    continue
                except OSError:
                    break
                with os.fdopen(fd, "w") as f:
                    f.write(str(os.getpid()))
                mine.append(key)
                break
        return mine

    def release(self, keys: Iterable[str]) -> None:
        for key in keys:
            with contextlib.suppress(OSError):
                os.unlink(self.directory / f"{key}.claim")

    def trim(self) -> None:
        """Remove the entries used longest ago until the cache is within its bound."""
        entries = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".art") and entry.is_file(follow_symlinks=False):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                entries.append((st.st_atime, st.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.limit_bytes:
                break
            try:
                os.unlink(path)
            except OSError:
                pass
            total -= size


#: Seconds after which a claim (``CompileCache.claim``) is another process's no longer.
CLAIM_S = 900.0
_CLAIM_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _claim_held(path: Path) -> bool:
    """Whether the claim file ``path`` is held: its process lives and it is recent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if time.time() - os.fstat(fd).st_mtime > CLAIM_S:
            return False
        pid = int(os.read(fd, 32) or b"0")
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's (this directory is private: not expected)
        pass
    return True


def from_option(value: str, driver_name: str, version: str) -> CompileCache | None:
    """The cache a driver's ``cache`` option asks for: ``on`` (the default directory),
    ``off`` (none) or a directory path. ValueError for an empty value."""
    if value == "off":
        return None
    if not value:
        raise ValueError(f"{driver_name} option cache='': allowed values are on, off or a directory")
    return CompileCache(driver_name, version, None if value == "on" else value)


__all__ = ["CompileCache", "default_root", "from_option"]
