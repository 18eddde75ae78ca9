"""Memory domains through the driver service (MEM-4..7, VAL-2; docs/service-protocol.md).

The service side: ``BufferOps`` gives ``Session`` the calls ``allocate``, ``buffer_copy_to``
and ``buffer_copy_from``, and ``check_tokens``, which refuses a request naming a token its
client did not allocate: a token is only good for the client that holds its buffer (VAL-2,
MEM-4 "a token from another process must not work"). The client side: ``allocate`` and
``RemoteBuffer``, a proxy that releases the service's buffer when dropped (DRV-5), which
also ends its token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nncert.drivers.base import Buffer, Driver, PreparedModel
from nncert.drivers.service import wire
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import BufferDesc, BufferRole
from nncert.hal.types import ErrorStatus

if TYPE_CHECKING:
    from nncert.drivers.service import Connection
    from nncert.drivers.service.server import Client, Reply


class BufferEntry:
    """A client's handle on a buffer of the hosted driver, and the buffer's token."""

    def __init__(self, buffer: Buffer, token: int) -> None:
        self.buffer = buffer
        self.token = token


def owned_tokens(client: Client) -> set[int]:
    with client.lock:
        return {h.token for h in client.handles.values() if isinstance(h, BufferEntry)}


def _roles(v: Any, what: str) -> list[BufferRole]:
    if not isinstance(v, list):
        raise wire.ProtocolError(f"{what} is not a list")
    roles = []
    for role in v:
        if not (isinstance(role, list) and len(role) == 3 and all(type(x) is int for x in role[:2])
                and type(role[2]) in (int, float)):
            raise wire.ProtocolError(f"{what}: {role!r} is not [model index, io index, probability]")
        roles.append(BufferRole(role[0], role[1], float(role[2])))
    return roles


def _close(pool: Memory | int) -> None:
    if isinstance(pool, Memory):
        pool.close()


class BufferOps:
    """The service's memory-domain calls, mixed into ``server.Session``."""

    driver: Driver

    def get(self, handle: Any, kind: type) -> Any:
        raise NotImplementedError

    def add(self, obj: Any) -> int:
        raise NotImplementedError

    @property
    def owner(self) -> Client:
        raise NotImplementedError

    def check_tokens(self, pools: Sequence[Memory | int]) -> None:
        """INVALID_ARGUMENT for a token this client did not allocate (VAL-2)."""
        tokens = [p for p in pools if not isinstance(p, Memory)]
        if not tokens:
            return
        owned = owned_tokens(self.owner)
        for token in tokens:
            if token not in owned:
                raise HalError(ErrorStatus.INVALID_ARGUMENT,
                               f"buffer token {token} was not allocated by this client")

    def op_allocate(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        models = [self.get(h, PreparedModel) for h in wire.iter_ints(body["models"], "models")]
        dims = tuple(wire.iter_ints(body["dimensions"], "dimensions"))
        buffer, token = self.driver.allocate(BufferDesc(dims), models, _roles(body["inputs"], "inputs"),
                                             _roles(body["outputs"], "outputs"))
        handle = self.add(BufferEntry(buffer, int(token)))
        return {"status": 0, "handle": handle, "token": int(token)}, b"", []

    def op_buffer_copy_to(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        entry = self.get(body["handle"], BufferEntry)
        memory = wire.decode_pool(body["memory"], fdr)
        try:
            entry.buffer.copy_to(memory)
        finally:
            _close(memory)
        return {"status": 0}, b"", []

    def op_buffer_copy_from(self, body: dict, blob: bytes, fdr: wire.FdReader) -> Reply:
        entry = self.get(body["handle"], BufferEntry)
        memory = wire.decode_pool(body["memory"], fdr)
        try:
            entry.buffer.copy_from(memory, tuple(wire.iter_ints(body["dimensions"], "dimensions")))
        finally:
            _close(memory)
        return {"status": 0}, b"", []


class RemoteBuffer(Buffer):
    """A buffer living in the service (a handle); released when dropped (DRV-5)."""

    def __init__(self, conn: Connection, handle: int, token: int) -> None:
        self.conn = conn
        self.handle = handle
        self.token = token

    def copy_to(self, destination: Memory) -> None:
        fds: list[int] = []
        body = {"handle": self.handle, "memory": wire.encode_pool(destination, fds)}
        self.conn.call("buffer_copy_to", body, fds=fds)

    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        fds: list[int] = []
        body = {"handle": self.handle, "memory": wire.encode_pool(source, fds),
                "dimensions": [int(d) for d in dimensions]}
        self.conn.call("buffer_copy_from", body, fds=fds)

    def release(self) -> None:
        if self.handle:
            self.conn.release(self.handle)
            self.handle = 0

    def __del__(self) -> None:
        self.release()


def allocate(conn: Connection, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
             input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]
             ) -> tuple[RemoteBuffer, int]:
    """``Driver.allocate`` through the service. A prepared model that is not one of this
    connection's goes as handle 0, which the service refuses (INVALID_ARGUMENT)."""
    from nncert.drivers.service import RemotePreparedModel

    handles = [p.handle if isinstance(p, RemotePreparedModel) and p.conn is conn else 0
               for p in prepared_models]
    body = {"dimensions": [int(d) for d in desc.dimensions], "models": handles,
            "inputs": [[r.model_index, r.io_index, r.probability] for r in input_roles],
            "outputs": [[r.model_index, r.io_index, r.probability] for r in output_roles]}
    reply, _, _ = conn.call("allocate", body)
    token = int(reply["token"])
    return RemoteBuffer(conn, int(reply["handle"]), token), token


__all__ = ["BufferEntry", "BufferOps", "RemoteBuffer", "allocate", "owned_tokens"]
