"""Memory domains (MEM-4..7): driver-managed buffers that a request names by a token.

Any in-process driver can offer them with a ``MemoryDomain``: ``allocate`` validates the
descriptor and roles the way the VTS expects (INVALID_ARGUMENT for every bad argument) and
returns a ``DeviceBuffer`` and its token. Executions find buffers by token through
``hal.request_io.read_inputs`` / ``write_outputs``, which call ``bind_request``: every use of a
token is checked against the roles given at allocation (MEM-4) before anything runs.

- A buffer's roles are keyed by the *model* of each prepared model (held weakly: the domain
  keeps no prepared model alive, DRV-5), so a token of another driver, or one used with another
  prepared model, fails.
- Tokens are random 31-bit integers, unique in the process: a token of another driver or
  another process names nothing here by accident. The registry holds buffers weakly: dropping a
  buffer invalidates its token.
- Contents are immutable ``bytes`` swapped under a per-buffer lock (MEM-7): concurrent reads
  see a whole old or a whole new value, concurrent writes leave one of them, and no call ever
  waits on another for longer than a reference swap.
"""

from __future__ import annotations

import math
import secrets
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nncert.drivers.base import Buffer, PreparedModel
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import BufferDesc, BufferRole, Model, Operand, Request, dtype_of
from nncert.hal.types import ErrorStatus

INPUT, OUTPUT = "input", "output"

_REGISTRY: weakref.WeakValueDictionary[int, DeviceBuffer] = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()


def _invalid(message: str) -> HalError:
    return HalError(ErrorStatus.INVALID_ARGUMENT, message)


def combine_dimensions(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The dimensions both ``a`` and ``b`` describe (0 or an empty list: unknown), or None
    when they conflict (another rank, or another known size)."""
    a, b = tuple(a), tuple(b)
    if not a:
        return b
    if not b:
        return a
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b, strict=True):
        if x and y and x != y:
            return None
        out.append(x or y)
    return tuple(out)


def _fully_known(type_scalar: bool, dims: Sequence[int]) -> bool:
    return type_scalar or (bool(dims) and all(d > 0 for d in dims))


@dataclass(frozen=True)
class Snapshot:
    """A device buffer's contents: the bytes and the shape they were written with."""

    data: bytes
    shape: tuple[int, ...]


class DeviceBuffer(Buffer):
    """A buffer of one operand type whose contents live in the driver (IBuffer)."""

    def __init__(self, operand: Operand, dimensions: tuple[int, ...], check_roles: bool = True) -> None:
        self.type = operand.type
        self.scale = operand.scale
        self.zero_point = operand.zero_point
        self.dtype = dtype_of(operand.type)
        #: The dimensions fixed at allocation (0 or an empty tuple where unknown, MEM-6).
        self.dimensions = dimensions
        self.check_roles = check_roles
        self.token = 0
        self._roles: dict[int, tuple[weakref.ref[Model], set[tuple[str, int]]]] = {}
        self._lock = threading.Lock()
        self._value: Snapshot | None = None

    # -- roles (MEM-4) --
    def _add_role(self, model: Model, kind: str, io_index: int) -> None:
        entry = self._roles.setdefault(id(model), (weakref.ref(model), set()))
        entry[1].add((kind, io_index))

    def has_role(self, model: Model, kind: str, io_index: int) -> bool:
        entry = self._roles.get(id(model))
        return entry is not None and entry[0]() is model and (kind, io_index) in entry[1]

    # -- contents --
    @property
    def initialized(self) -> bool:
        return self._value is not None

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._value

    def store(self, data: bytes, shape: tuple[int, ...]) -> None:
        with self._lock:
            self._value = Snapshot(data, shape)

    def invalidate(self) -> None:
        with self._lock:
            self._value = None

    def shape_fits(self, shape: Sequence[int]) -> bool:
        """Whether an actual shape agrees with the dimensions fixed at allocation."""
        if self.type.is_scalar:
            return not tuple(shape)
        combined = combine_dimensions(self.dimensions, shape)
        return combined is not None and len(combined) == len(tuple(shape))

    def copy_to(self, destination: Memory) -> None:
        if not isinstance(destination, Memory):
            raise _invalid(f"copy_to needs a shared memory, not {type(destination).__name__}")
        value = self.snapshot()
        if value is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"buffer {self.token} is not initialised")
        if destination.size != len(value.data):
            raise _invalid(f"copy_to: the memory has {destination.size} bytes, buffer {self.token} "
                           f"holds {len(value.data)} ({self.type.name}{list(value.shape)})")
        try:
            destination.view()[:] = value.data
        except ValueError as e:  # a closed memory
            raise _invalid(f"copy_to: {e}") from None

    def copy_from(self, source: Memory, dimensions: Sequence[int] = ()) -> None:
        if not isinstance(source, Memory):
            raise _invalid(f"copy_from needs a shared memory, not {type(source).__name__}")
        given = tuple(dimensions)
        if not all(isinstance(d, int) and d >= 0 for d in given):
            raise _invalid(f"copy_from: dimensions {list(given)} are not integers >= 0")
        if self.type.is_scalar:
            if given:
                raise _invalid(f"copy_from: a {self.type.name} scalar buffer takes no dimensions, "
                               f"got {list(given)}")
            shape: tuple[int, ...] = ()
        elif given:
            combined = combine_dimensions(self.dimensions, given)
            if 0 in given or combined is None or len(combined) != len(given):
                raise _invalid(f"copy_from: dimensions {list(given)} do not fully fit the buffer's "
                               f"{list(self.dimensions)}")
            shape = combined
        else:
            if not _fully_known(False, self.dimensions):
                raise _invalid(f"copy_from: the buffer's dimensions {list(self.dimensions)} are not fully "
                               f"known; give the actual ones (MEM-6)")
            shape = self.dimensions
        expected = math.prod(shape) * self.dtype.itemsize
        if source.size != expected:
            raise _invalid(f"copy_from: the memory has {source.size} bytes, a {self.type.name}{list(shape)} "
                           f"is {expected}")
        try:
            data = bytes(source.view()[:expected])
        except ValueError as e:
            raise _invalid(f"copy_from: {e}") from None
        self.store(data, shape)

    def __repr__(self) -> str:
        return f"<DeviceBuffer token={self.token} {self.type.name}{list(self.dimensions)}>"


def _register(buffer: DeviceBuffer) -> int:
    with _REGISTRY_LOCK:
        while True:
            token = secrets.randbelow(2**31 - 1) + 1
            if token not in _REGISTRY:
                _REGISTRY[token] = buffer
                buffer.token = token
                return token


def lookup(token: int) -> DeviceBuffer:
    """The live buffer a token names; INVALID_ARGUMENT for any other token (MEM-4)."""
    buffer = _REGISTRY.get(token) if isinstance(token, int) else None
    if buffer is None:
        raise _invalid(f"no driver-managed buffer has token {token!r}")
    return buffer


class MemoryDomain:
    """``Driver.allocate`` for an in-process driver. ``model_of`` returns the model a prepared
    model of this driver runs, or None for a prepared model that is not this driver's."""

    def __init__(self, model_of: Callable[[PreparedModel], Model | None], check_roles: bool = True) -> None:
        self.model_of = model_of
        self.check_roles = check_roles

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]
                 ) -> tuple[DeviceBuffer, int]:
        if not isinstance(desc, BufferDesc):
            raise _invalid(f"the descriptor is a {type(desc).__name__}, not a BufferDesc")
        desc_dims = tuple(desc.dimensions)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in desc_dims):
            raise _invalid(f"descriptor dimensions {list(desc_dims)} are not integers >= 0")
        roles = [(INPUT, r) for r in input_roles] + [(OUTPUT, r) for r in output_roles]
        if not roles:
            raise _invalid("allocate needs at least one input or output role")
        if not prepared_models:
            raise _invalid("allocate needs at least one prepared model")
        models = []
        for n, prepared in enumerate(prepared_models):
            model = self.model_of(prepared) if isinstance(prepared, PreparedModel) else None
            if model is None:
                raise _invalid(f"prepared model {n} is not one of this driver's")
            models.append(model)
        seen: set[tuple[int, str, int]] = set()
        template: Operand | None = None
        dims = desc_dims
        resolved = []
        for kind, role in roles:
            if not isinstance(role, BufferRole):
                raise _invalid(f"{kind} role {role!r} is not a BufferRole")
            m, io, p = role.model_index, role.io_index, role.probability
            if not isinstance(m, int) or not 0 <= m < len(models):
                raise _invalid(f"{kind} role {role}: model index out of range "
                               f"({len(models)} prepared models)")
            sg = models[m].main
            indexes = sg.input_indexes if kind == INPUT else sg.output_indexes
            if not isinstance(io, int) or not 0 <= io < len(indexes):
                raise _invalid(f"{kind} role {role}: the model has {len(indexes)} {kind}s")
            if not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
                raise _invalid(f"{kind} role {role}: probability must lie in (0, 1]")
            key = (id(models[m]), kind, io)
            if key in seen:
                raise _invalid(f"{kind} {io} of prepared model {m} is given twice")
            seen.add(key)
            operand = sg.operands[indexes[io]]
            if template is None:
                template = operand
            elif (operand.type, operand.scale, operand.zero_point, operand.channel_quant) != \
                    (template.type, template.scale, template.zero_point, template.channel_quant):
                raise _invalid(f"{kind} role {role}: operand {operand.describe()} conflicts with "
                               f"{template.describe()} of another role")
            if operand.type.is_scalar:
                if dims:
                    raise _invalid(f"{kind} role {role}: a {operand.type.name} scalar cannot have "
                                   f"dimensions {list(dims)}")
            else:
                combined = combine_dimensions(dims, operand.dimensions)
                if combined is None:
                    raise _invalid(f"{kind} role {role}: dimensions {list(operand.dimensions)} conflict "
                                   f"with {list(dims)}")
                dims = combined
            resolved.append((models[m], kind, io))
        assert template is not None
        try:
            dtype_of(template.type)
        except ValueError:
            raise HalError(ErrorStatus.GENERAL_FAILURE,
                           f"buffers of {template.type!r} are not supported") from None
        buffer = DeviceBuffer(template, dims, self.check_roles)
        for model, kind, io in resolved:
            buffer._add_role(model, kind, io)
        return buffer, _register(buffer)


@dataclass
class Binding:
    """The driver-managed buffers of one request: request input/output position -> buffer."""

    inputs: dict[int, DeviceBuffer]
    outputs: dict[int, DeviceBuffer]

    def read_input(self, i: int, dims: Sequence[int], copy: bool) -> np.ndarray:
        """Input ``i``'s value; GENERAL_FAILURE for an uninitialised buffer (MEM-4)."""
        buffer = self.inputs[i]
        value = buffer.snapshot()
        if value is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE,
                           f"request input {i}: buffer {buffer.token} is not initialised")
        if dims and combine_dimensions(value.shape, dims) != value.shape:
            raise _invalid(f"request input {i}: dimensions {list(dims)} conflict with buffer "
                           f"{buffer.token}'s {list(value.shape)}")
        arr = np.frombuffer(value.data, buffer.dtype).reshape(value.shape)
        return arr.copy() if copy else arr

    def check_outputs(self, outputs: Sequence[np.ndarray]) -> None:
        """A buffer output must take the shape it was given (MEM-6); otherwise the run fails
        with GENERAL_FAILURE and every buffer output of the request is left uninitialised."""
        for i, buffer in self.outputs.items():
            value = outputs[i]
            if value.dtype != buffer.dtype or not buffer.shape_fits(value.shape):
                self.fail()
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"request output {i}: a {value.dtype}{list(value.shape)} result does not fit "
                               f"buffer {buffer.token} ({buffer.type.name}{list(buffer.dimensions)})")

    def write_output(self, i: int, value: np.ndarray) -> None:
        self.outputs[i].store(np.ascontiguousarray(value).tobytes(), tuple(int(d) for d in value.shape))

    def fail(self) -> None:
        for buffer in self.outputs.values():
            buffer.invalidate()


def has_tokens(request: Request) -> bool:
    return any(not isinstance(pool, Memory) for pool in request.pools)


def bind_request(model: Model, request: Request) -> Binding:
    """Check every use of a token in ``request`` (already through validate_request) against
    ``model``: INVALID_ARGUMENT for an unknown token, a role not given at allocation, a location
    other than all-zero, dimensions that conflict with the buffer's, or a buffer that is written
    while also read or written elsewhere in the request (MEM-4)."""
    buffers: dict[int, DeviceBuffer] = {}
    for p, pool in enumerate(request.pools):
        if not isinstance(pool, Memory):
            buffers[p] = lookup(pool)
    binding = Binding({}, {})
    uses: dict[int, list[str]] = {}
    sg = model.main
    for kind, args, table in ((INPUT, request.inputs, binding.inputs),
                              (OUTPUT, request.outputs, binding.outputs)):
        for i, arg in enumerate(args):
            buffer = buffers.get(arg.location.pool_index)
            if arg.has_no_value or buffer is None:
                continue
            where = f"request {kind} {i}"
            loc = arg.location
            if loc.offset or loc.length or loc.padding:
                raise _invalid(f"{where}: a buffer argument needs offset, length and padding 0, has "
                               f"{loc.offset}, {loc.length}, {loc.padding}")
            if buffer.check_roles and not buffer.has_role(model, kind, i):
                raise _invalid(f"{where}: buffer {buffer.token} was not allocated for {kind} {i} of this "
                               f"prepared model")
            operand = sg.operands[(sg.input_indexes if kind == INPUT else sg.output_indexes)[i]]
            dims = tuple(arg.dimensions)
            if dims and (operand.type.is_scalar or not buffer.shape_fits(dims)):
                raise _invalid(f"{where}: dimensions {list(dims)} conflict with buffer {buffer.token}'s "
                               f"{list(buffer.dimensions)}")
            uses.setdefault(id(buffer), []).append(kind)
            table[i] = buffer
    for kinds in uses.values():
        if OUTPUT in kinds and len(kinds) > 1:
            raise _invalid("a buffer written as an output cannot serve as another input or output of "
                           "the same request")
    return binding


__all__ = ["Binding", "DeviceBuffer", "MemoryDomain", "bind_request", "combine_dimensions", "has_tokens",
           "lookup"]
