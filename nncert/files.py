"""Files nncert writes: never through a symlink planted in their place, never into a directory
that belongs to someone else (docs/security.md).

nncert runs as root in CI and on shared build machines. A directory another local user owns or
may write into lets that user choose what a name in it points at; a write that followed such a
link would overwrite whatever the running user may write. So every file nncert creates is
opened with ``O_NOFOLLOW`` inside a directory checked to be the running user's own, and files
replaced whole are written under a fresh temporary name and renamed into place (a rename
replaces a link; it never writes through one).

- ``own_dir``: a directory for nncert's output, made if missing; refused if it is a symlink or
  is owned by another user.
- ``private_dir``: the same, mode 0700, and refused if other users may write into it: for
  nncert's own state (caches, locks, measured figures).
- ``write_atomic``, ``open_append``, ``open_private``: the three ways nncert writes a file;
  ``check_file`` for a file another library opens (sqlite).
- ``share_bytecode``, ``bytecode_for_children``: where Python may write bytecode for nncert's
  children when the environment forbids writing it beside the sources (a private directory).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

_NEW = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(OSError):
    """A path nncert will not write through; the message is one line naming it and why."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unsafe path"


def check_dir(path: str | os.PathLike, private: bool = False) -> Path:
    """``path`` if it is a real directory of this user's (and, with ``private``, one no other
    user may write into); ``UnsafePathError`` naming what is wrong otherwise."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise UnsafePathError(f"{path}: no such directory") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink: nncert writes only into a directory of its own, "
                              f"not through a link")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}): "
                              f"nncert does not write into other users' directories")
    if private and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
                              f"nncert keeps its state only in a directory no one else can change")
    return path


def own_dir(path: str | os.PathLike, mode: int = 0o777, private: bool = False) -> Path:
    """The directory ``path`` (made, with missing parents, if need be) once ``check_dir``
    accepts it."""
    path = Path(path)
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a file or a dangling link in its place: check_dir names it
    except OSError as e:
        raise UnsafePathError(f"{path}: cannot create the directory: {e.strerror or e}") from None
    return check_dir(path, private=private)


def private_dir(path: str | os.PathLike) -> Path:
    """A directory for nncert's own state: made 0700, refused if another user owns it or may
    write into it."""
    return own_dir(path, mode=0o700, private=True)


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` whole with ``data``: written under a fresh name beside it and renamed
    over it, so a reader sees the old or the new file, never half of one, and a symlink at
    ``path`` is replaced rather than followed. ``sync=False`` skips the fsync, for files that
    can be made again (a fuzz corpus: thousands of them)."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_EXCL | _NEW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.rename(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _a_link(path: str | os.PathLike) -> UnsafePathError:
    return UnsafePathError(f"{path} is a symlink: nncert does not write through a link")


def _check_file(path: str | os.PathLike, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise _a_link(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        # (a hard link planted there would be another file under our name)
        raise UnsafePathError(f"{path} is not a regular file of this user's with a single link "
                              f"(uid {st.st_uid}, {st.st_nlink} link(s)): nncert does not write to it")


def check_file(path: str | os.PathLike) -> None:
    """Nothing when ``path`` is missing or a regular file of this user's with one name;
    ``UnsafePathError`` otherwise. For files another library opens (sqlite's database, its
    ``-wal`` and ``-shm``), checked before it does, in a ``private_dir``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    _check_file(path, st)


def _open_own(path: str | os.PathLike, flags: int, mode: int) -> int:
    """``os.open`` with ``O_CREAT | O_NOFOLLOW``, refused as ``check_file`` refuses."""
    try:
        fd = os.open(path, flags | _NEW, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _a_link(path) from None
        raise
    try:
        _check_file(path, os.fstat(fd))
    except UnsafePathError:
        os.close(fd)
        raise
    return fd


def open_append(path: str | os.PathLike, mode: int = 0o644) -> int:
    """A descriptor appending to ``path`` (created if missing), never through a symlink."""
    return _open_own(path, os.O_WRONLY | os.O_APPEND, mode)


def open_private(path: str | os.PathLike, flags: int = os.O_RDWR) -> int:
    """A descriptor on one of nncert's own state files (created 0600 if missing), never
    through a symlink."""
    return _open_own(path, flags, 0o600)


def share_bytecode(prefix: str | os.PathLike) -> bool:
    """With PYTHONDONTWRITEBYTECODE set (as on many CI machines), every Python process nncert
    starts compiles nncert and the suites from source again, about 1 s of CPU each, and a
    certification or a test session starts hundreds (suites, isolated and service children,
    the support probe's). This lets the children started from now on share one bytecode cache
    under ``prefix`` (a private directory: whoever can write into it chooses the code they run)
    and leaves the sources' directories untouched. False (nothing changed) unless the variable
    is set and no cache prefix is set already."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return False
    private_dir(prefix)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    return True


@contextlib.contextmanager
def bytecode_for_children() -> Iterator[None]:
    """``share_bytecode`` in a temporary directory for the duration (removed with it, the
    environment restored)."""
    setting = os.environ.get("PYTHONDONTWRITEBYTECODE")
    with tempfile.TemporaryDirectory(prefix="nncert-pyc-") as d:
        if not share_bytecode(Path(d) / "pycache"):
            yield
            return
        try:
            yield
        finally:
            os.environ.pop("PYTHONPYCACHEPREFIX", None)
            os.environ["PYTHONDONTWRITEBYTECODE"] = setting or "1"


__all__ = ["UnsafePathError", "bytecode_for_children", "check_dir", "check_file", "open_append",
           "open_private", "own_dir", "private_dir", "share_bytecode", "write_atomic"]
