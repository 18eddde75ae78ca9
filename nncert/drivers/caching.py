"""Compilation caching for every driver (CACHE-1..7), the way a HAL driver does it.

A driver opts in by implementing two hooks of ``Driver``:

- ``export_compiled(prepared) -> (model_cache, data_cache)``: its compiled form as bytes;
  the model cache is security-sensitive (compiled code, CACHE-4), the data cache holds
  constants (CACHE-3);
- ``import_compiled(model_cache, data_cache) -> PreparedModel``: the prepared model back,
  raising HalError (GENERAL_FAILURE) on anything it cannot parse or validate.

Then ``number_of_cache_files_needed`` answers ``Driver.cache_files`` (1, 1), the driver's
``prepare_model`` saves through ``save_to_cache`` and ``prepare_model_from_cache`` loads.

Saving: the driver serialises into its own copy, hashes that copy (sha256), drops any entry
of the token, writes the files from offset 0 and, only once every write succeeded, records
token -> hash. Loading: each file is read once, with ``os.pread`` from offset 0, into memory;
that copy is hashed, compared with the recorded hash, and parsed (CACHE-5: what is checked
is what is used). A missing token, a mismatch, an unreadable or unparsable cache:
GENERAL_FAILURE, never a crash (CACHE-4, CACHE-6).

The token -> hash store is an sqlite database (``TokenStore``) in the driver's state
directory, shared by every process and instance of the driver (WAL, busy timeout) and
emptied when the driver's version string changes (CACHE-4: reset on driver update). The
state directory: the driver option ``state_dir``, else ``$NNCERT_STATE_DIR``, else
``$XDG_STATE_HOME/nncert`` or ``~/.local/state/nncert``; one subdirectory per driver name.
The state directory, the driver's subdirectory and ``prepare_with_cache``'s cache directory
are made 0700 and refused when another user owns them or may write into them; cache files are
created 0600 and never opened through a symlink (nncert.files): cache tokens are predictable,
so a directory someone else controls could otherwise point them at any file.

``prepare_with_cache`` is the application side (the NNAPI runtime's part of CACHE-1).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nncert import files
from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus

if TYPE_CHECKING:
    from nncert.drivers.base import Deadline, Driver, PreparedModel
    from nncert.hal.model import Model

#: BYTE_SIZE_OF_CACHE_TOKEN (CACHE-1).
TOKEN_SIZE = 32
#: The frame of a model cache: magic, format version, payload length (little endian). The
#: length prefix makes the payload's end explicit: bytes after it are not a parse error, so
#: that only the hash check rejects a cache with bytes appended (CACHE-4).
FRAME = struct.Struct("<4sHQ")
MAGIC = b"NNCC"
FORMAT_VERSION = 1
#: Seconds a process waits for another's write to the token store.
STORE_TIMEOUT_S = 30.0


def digest(data: bytes) -> bytes:
    """The cryptographic hash the store keeps for a model cache."""
    return hashlib.sha256(data).digest()


def frame(payload: bytes) -> bytes:
    return FRAME.pack(MAGIC, FORMAT_VERSION, len(payload)) + payload


def unframe(data: bytes) -> bytes:
    """The payload of a framed cache (what follows it is ignored); HalError if not framed."""
    if len(data) < FRAME.size:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cache of {len(data)} bytes is too short")
    magic, version, length = FRAME.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"not a cache of this format ({magic!r}, {version})")
    if FRAME.size + length > len(data):
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cache payload of {length} bytes is truncated")
    return data[FRAME.size:FRAME.size + length]


# -- files -----------------------------------------------------------------------------------

def read_file(fd: int) -> bytes:
    """The whole file behind ``fd`` from offset 0, whatever the fd's own offset (pread)."""
    chunks, at = [], 0
    try:
        while True:
            chunk = os.pread(fd, 1 << 20, at)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            at += len(chunk)
    except (OSError, OverflowError, TypeError) as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot read cache file (fd {fd}): {e}") from None


def write_file(fd: int, data: bytes) -> None:
    """Make the file behind ``fd`` hold exactly ``data`` (OSError when it cannot)."""
    view = memoryview(data)
    at = 0
    while at < len(view):
        at += os.pwrite(fd, view[at:], at)
    os.ftruncate(fd, len(data))


def bad_arguments(driver: Driver, model_cache: Sequence[int], data_cache: Sequence[int],
                  token: bytes | None) -> str | None:
    """Why these caching arguments cannot be used, or None (CACHE-1, CACHE-2)."""
    want = driver.number_of_cache_files_needed()
    if want == (0, 0):
        return f"{driver.name} does not support compilation caching"
    if (len(model_cache), len(data_cache)) != tuple(want):
        return (f"{len(model_cache)} model and {len(data_cache)} data cache files given, "
                f"{driver.name} needs {want[0]} and {want[1]}")
    if not isinstance(token, bytes | bytearray) or len(token) != TOKEN_SIZE:
        return f"the cache token must be {TOKEN_SIZE} bytes"
    return None


# -- the token -> hash store -------------------------------------------------------------------

def state_dir(option: str | os.PathLike | None = None) -> Path:
    """Where drivers keep their state (see the module's docstring)."""
    if option:
        return Path(option)
    if os.environ.get("NNCERT_STATE_DIR"):
        return Path(os.environ["NNCERT_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "nncert"


#: Connections a forked process inherited: never used nor closed there (sqlite forbids both,
#: and closing one would be collected, and closed, by its garbage collection).
_INHERITED: list[sqlite3.Connection] = []


class TokenStore:
    """token -> hash of the model cache, in an sqlite database that several threads and
    processes share (CACHE-4, CACHE-7). Opened for one driver version: entries recorded by
    another version are dropped first.

    A store sqlite finds corrupt (or not a database at all) is moved aside to
    ``<name>.corrupt`` and begun afresh: it holds only the hashes of caches, so what is lost
    is cache hits, never a check (a token with no entry is refused). A process connects
    again when the file was replaced under it (another process set it aside, someone removed
    it) and after a fork. What still fails is a ``HalError`` (GENERAL_FAILURE) naming the file."""

    def __init__(self, path: Path, version: str) -> None:
        files.private_dir(path.parent)
        self.path = path
        self.version = version
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._pid = 0
        self._inode = (0, 0)
        with self._lock:
            self._open(check=False)

    def _companions(self) -> list[Path]:
        """The files sqlite keeps beside the database."""
        return [self.path.with_name(self.path.name + s) for s in ("-wal", "-shm", "-journal")]

    def _connect(self, check: bool) -> None:
        for name in (self.path, *self._companions()):
            files.check_file(name)  # sqlite opens them following links: none may be one
        os.close(files.open_private(self.path))  # created 0600; sqlite gives its -wal, -shm the same mode
        st = os.stat(self.path)
        db = sqlite3.connect(self.path, timeout=STORE_TIMEOUT_S, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            if check and db.execute("PRAGMA quick_check").fetchone() != ("ok",):
                raise sqlite3.DatabaseError("database disk image is malformed (quick_check)")
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
                db.execute("CREATE TABLE IF NOT EXISTS entries (token BLOB PRIMARY KEY, hash BLOB)")
                row = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
                if row is None or row[0] != self.version:
                    db.execute("DELETE FROM entries")
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (self.version,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except BaseException:
            db.close()
            raise
        self._db, self._pid, self._inode = db, os.getpid(), (st.st_dev, st.st_ino)

    def _open(self, check: bool) -> None:
        """Connect; a corrupt store is set aside and begun afresh (the class's docstring)."""
        try:
            self._connect(check)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError):  # locked, unreadable: not the file's content
                raise
            os.replace(self.path, self.path.with_name(self.path.name + ".corrupt"))
            for name in self._companions():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
            self._connect(check=False)

    def _replaced(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self._inode

    def _run(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                if self._db is not None and self._pid != os.getpid():
                    _INHERITED.append(self._db)
                    self._db = None
                if self._db is not None and self._replaced():
                    self._db.close()
                    self._db = None
                if self._db is None:
                    self._open(check=False)
                assert self._db is not None
                try:
                    return self._db.execute(sql, args).fetchall()
                except sqlite3.DatabaseError as e:
                    if isinstance(e, sqlite3.OperationalError):
                        raise
                self._db.close()  # corrupt under us: connect again, checking the file this time
                self._db = None  # (a failed connect is tried afresh on the next call)
                self._open(check=True)
                return self._db.execute(sql, args).fetchall()
            except (OSError, sqlite3.Error) as e:  # an UnsafePathError too
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"the cache store {self.path}: {e}") from None

    def get(self, token: bytes) -> bytes | None:
        rows = self._run("SELECT hash FROM entries WHERE token = ?", (bytes(token),))
        return bytes(rows[0][0]) if rows else None

    def put(self, token: bytes, hash_: bytes) -> None:
        self._run("INSERT OR REPLACE INTO entries VALUES (?, ?)", (bytes(token), hash_))

    def drop(self, token: bytes) -> None:
        self._run("DELETE FROM entries WHERE token = ?", (bytes(token),))

    def __len__(self) -> int:
        return int(self._run("SELECT COUNT(*) FROM entries")[0][0])

    def close(self) -> None:
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None


_STORES_LOCK = threading.Lock()


def token_store(driver: Driver) -> TokenStore:
    """The driver instance's store, opened on first use."""
    with _STORES_LOCK:
        store = getattr(driver, "_token_store", None)
        if store is None:
            name = re.sub(r"[^A-Za-z0-9._-]", "_", driver.name)
            root = state_dir(getattr(driver, "state_dir", None))
            path = root / name / "compilation-cache.sqlite"
            try:
                files.private_dir(root)  # whoever may rename entries in it could swap the subdirectory
                store = TokenStore(path, driver.version_string())
            except (OSError, sqlite3.Error) as e:  # an UnsafePathError too: GENERAL_FAILURE, with why
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"cannot open the cache store {path}: {e}") from None
            driver._token_store = store  # type: ignore[attr-defined]
        return store


# -- the driver side ---------------------------------------------------------------------------

def save(driver: Driver, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
         token: bytes | None) -> None:
    """After a compilation: write the caches and record the token (CACHE-1, CACHE-5).

    Never fails the preparation: with unusable arguments nothing is cached; when a write
    fails the token is left with no entry, so that nothing half-written validates."""
    if not model_cache and not data_cache and token is None:
        return  # no caching info
    if bad_arguments(driver, model_cache, data_cache, token) is not None:
        return
    assert token is not None
    try:
        model_bytes, data_bytes = driver.export_compiled(prepared)
        store = token_store(driver)
    except Exception:
        return  # a model the driver cannot cache is still prepared
    hash_ = digest(model_bytes)  # of our own copy, before it is written (CACHE-5)
    try:
        store.drop(token)
        for fd in model_cache:
            write_file(fd, model_bytes)
        for fd in data_cache:
            write_file(fd, data_bytes)
        store.put(token, hash_)
    except (OSError, ValueError, TypeError, OverflowError, sqlite3.Error, HalError):
        return


def load(driver: Driver, deadline: Deadline, model_cache: Sequence[int], data_cache: Sequence[int],
         token: bytes) -> PreparedModel:
    """prepareModelFromCache (CACHE-1, CACHE-4..6)."""
    from nncert.drivers.base import check_deadline

    reason = bad_arguments(driver, model_cache, data_cache, token)
    if reason is not None:
        status = ErrorStatus.GENERAL_FAILURE if driver.number_of_cache_files_needed() == (0, 0) \
            else ErrorStatus.INVALID_ARGUMENT
        raise HalError(status, reason)
    check_deadline(deadline, "preparation from cache")
    model_bytes = [read_file(fd) for fd in model_cache]  # read once: the copy we check and use
    data_bytes = [read_file(fd) for fd in data_cache]
    expected = token_store(driver).get(bytes(token))
    if expected is None:
        raise HalError(ErrorStatus.GENERAL_FAILURE, "no cache was saved under this token")
    if any(digest(m) != expected for m in model_bytes):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "the model cache does not match its token's hash")
    return import_checked(driver, model_bytes[0] if model_bytes else b"",
                          data_bytes[0] if data_bytes else b"")


def import_checked(driver: Driver, model_bytes: bytes, data_bytes: bytes) -> PreparedModel:
    """The driver's import_compiled, any failure of it as GENERAL_FAILURE (CACHE-6)."""
    try:
        return driver.import_compiled(model_bytes, data_bytes)
    except HalError as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot prepare from cache: {e.message}") from None
    except Exception as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE,
                       f"cannot prepare from cache: {type(e).__name__}: {e}") from None


# -- a HAL model as a cache (the reference and compiled drivers) -------------------------------

def export_model(model: Model, extra: bytes = b"") -> tuple[bytes, bytes]:
    """A model cache holding ``model``'s structure (and ``extra``: a runtime's compiled form),
    and a data cache holding its constants."""
    from nncert.hal.codec import pack_model

    structure, data = pack_model(model)
    return frame(struct.pack("<Q", len(structure)) + structure + extra), data


def import_model(model_bytes: bytes, data_bytes: bytes, version) -> tuple[Model, bytes]:
    """The validated model of a cache ``export_model`` wrote, and its ``extra`` bytes."""
    from nncert.hal.codec import CodecError, unpack_model
    from nncert.hal.validation import validate_model

    payload = unframe(model_bytes)
    if len(payload) < 8:
        raise HalError(ErrorStatus.GENERAL_FAILURE, "model cache payload too short")
    (n,) = struct.unpack_from("<Q", payload)
    if 8 + n > len(payload):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "model cache structure is truncated")
    try:
        model = unpack_model(payload[8:8 + n], data_bytes)
    except CodecError as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"unreadable cache: {e}") from None
    try:
        validate_model(model, version)
    except HalError as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"the cached model is invalid: {e.message}") from None
    return model, payload[8 + n:]


# -- the application side (CACHE-1) ------------------------------------------------------------

@dataclass
class CacheOutcome:
    """How ``prepare_with_cache`` got its prepared model."""

    prepared: PreparedModel
    #: "hit" (prepared from cache), "miss" (compiled, cache written), "refused" (the driver
    #: refused the cache: compiled again and cache rewritten) or "off" (the driver does not cache).
    kind: str
    reason: str = ""

    def describe(self) -> str:
        return f"{self.kind} ({self.reason})" if self.kind == "refused" else self.kind


def cache_token(model: Model, driver: Driver) -> bytes:
    """A token unique to the model and the driver's version, as the runtime makes it."""
    from nncert.hal.codec import pack_model

    structure, data = pack_model(model)
    h = hashlib.sha256()
    for part in (driver.version_string().encode(), structure, data):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.digest()


def prepare_with_cache(driver: Driver, model: Model, cache_dir: str | os.PathLike,
                       token: bytes | None = None,
                       prepare: Callable[..., PreparedModel] | None = None) -> CacheOutcome:
    """The NNAPI runtime's caching: files ``<token>-model<i>`` / ``<token>-data<i>`` in
    ``cache_dir`` (a ``files.private_dir``), opened (or created 0600) read-write, never through
    a symlink (``UnsafePathError``); present files are offered to
    ``prepare_model_from_cache`` (a hit); on a miss or a refusal the model is compiled with
    the files, which the driver then (re)writes."""
    token = cache_token(model, driver) if token is None else token
    prepare = prepare or driver.prepare_model
    n_model, n_data = driver.number_of_cache_files_needed()
    if (n_model, n_data) == (0, 0):
        return CacheOutcome(prepare(model), "off")
    directory = files.private_dir(cache_dir)
    names = [f"{token.hex()}-model{i}" for i in range(n_model)] + \
        [f"{token.hex()}-data{i}" for i in range(n_data)]
    existed = all(os.path.lexists(directory / n) for n in names)
    fds: list[int] = []
    try:
        for n in names:
            fds.append(files.open_private(directory / n))
        model_fds, data_fds = fds[:n_model], fds[n_model:]
        reason = ""
        if existed:
            try:
                return CacheOutcome(driver.prepare_model_from_cache(None, model_fds, data_fds, token), "hit")
            except HalError as e:
                reason = f"{e.status.name}: {e.message}"
        prepared = prepare(model, model_cache=model_fds, data_cache=data_fds, token=token)
        return CacheOutcome(prepared, "refused" if existed else "miss", reason)
    finally:
        for fd in fds:
            os.close(fd)


__all__ = ["TOKEN_SIZE", "CacheOutcome", "TokenStore", "cache_token", "digest", "load", "prepare_with_cache",
           "read_file", "save", "state_dir", "token_store", "write_file"]
