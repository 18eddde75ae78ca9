"""Memory domains: driver-managed buffers named by tokens (MEM-4..7, VAL-2).

The cases of the VTS's memory-domain tests: allocation (every bad argument is refused; as
the VTS, INVALID_ARGUMENT or GENERAL_FAILURE), copies in and out of a buffer with every memory
kind, and executions on every path that name a buffer by its token. Memory domains are
optional (MEM-4): on a driver whose ``allocate`` fails with GENERAL_FAILURE for a valid
allocation, every test skips with its reason.

Models: one RELU per input/output pair, float32 and quant8 (asymmetric, zero point 3, so that
RELU changes values), and ADD (whose third input is a scalar) for ranks and scalar roles.
"""

from __future__ import annotations

import gc
import threading
from functools import partial

import numpy as np
import pytest

from nncert.drivers.base import PreparedModel, hang_timeout
from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.memory import KINDS, Memory
from nncert.hal.model import BufferDesc, BufferRole, DataLocation, Request, RequestArgument, dtype_of
from nncert.hal.types import ErrorStatus, OperandType, OperationType
from nncert.testing.harness import FAST_PATHS, PATHS, decline, execute, prepare_or_skip, status_of

T = OperandType
OK = ErrorStatus.NONE
INVALID = ErrorStatus.INVALID_ARGUMENT
FAILURE = ErrorStatus.GENERAL_FAILURE

DIMS = (1, 4, 4, 2)
#: DIMS rearranged: as many elements, as many bytes, the same rank, and a shape that is not DIMS.
_EQUAL_SIZE = (1, 2, 4, 4)
#: name -> (type, scale, zero point, the type a conflicting role has)
OPERANDS = {
    "float32": (T.TENSOR_FLOAT32, 0.0, 0, T.TENSOR_FLOAT16),
    "quant8": (T.TENSOR_QUANT8_ASYMM, 0.5, 3, T.TENSOR_QUANT8_ASYMM_SIGNED),
}
TYPES = list(OPERANDS)
#: The paths every use of a buffer is checked on (its roles, whether it holds a value): every
#: path, the shortcuts a driver may take (a warm burst, a fenced execution with nothing to wait
#: for) among them.
ROLE_PATHS = [*PATHS, *FAST_PATHS]
#: Fenced executions cannot report output shapes: the VTS leaves them out of dynamic cases.
SHAPE_PATHS = [p for p in PATHS if p != "fenced"]


# -- models and buffers ---------------------------------------------------------------------

def _relu_model(name: str, dims=DIMS, pairs: int = 1, type_=None, scale=None, zero_point=None):
    """``pairs`` independent RELUs: input i -> output i."""
    t, s, z, _ = OPERANDS[name]
    t, s, z = type_ or t, s if scale is None else scale, z if zero_point is None else zero_point
    b = ModelBuilder()
    ins, outs = [], []
    for _ in range(pairs):
        ins.append(b.operand(t, dims, s, z))
        outs.append(b.operand(t, dims, s, z))
        b.operation(OperationType.RELU, [ins[-1]], [outs[-1]])
    return b.build(ins, outs)


def _add_model(name: str, dims=DIMS):
    """ADD(x, y, activation) with the activation a model input: input 2 is an INT32 scalar."""
    t, s, z, _ = OPERANDS[name]
    b = ModelBuilder()
    x, y, out = b.operand(t, dims, s, z), b.operand(t, dims, s, z), b.operand(t, dims, s, z)
    act = b.operand(T.INT32)
    b.operation(OperationType.ADD, [x, y, act], [out])
    return b.build([x, y, act], [out])


def _prepare(driver, model) -> PreparedModel:
    return prepare_or_skip(driver, model)


@pytest.fixture(scope="module")
def domains(driver):
    """Skip every test here on a driver without memory domains (they are optional, MEM-4)."""
    prepared = _prepare(driver, _relu_model("float32"))
    try:
        driver.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
    except DriverFault:
        raise
    except HalError as e:
        if e.status is FAILURE:
            decline(f"{driver.name}: no memory domains: {e.message}")
        raise
    return driver


def _allocate(driver, prepared, inputs=(0,), outputs=(0,), dims=()):
    return driver.allocate(BufferDesc(tuple(dims)), [prepared], [BufferRole(0, i) for i in inputs],
                           [BufferRole(0, o) for o in outputs])


def _refused(driver, what, prepared_models, inputs=(), outputs=(), dims=()):
    """The allocation must fail with INVALID_ARGUMENT or GENERAL_FAILURE (as in the VTS)."""
    with pytest.raises(HalError) as info:
        driver.allocate(BufferDesc(tuple(dims)), list(prepared_models), list(inputs), list(outputs))
    if isinstance(info.value, DriverFault) or info.value.status not in (INVALID, FAILURE):
        pytest.fail(f"MEM-4: allocate with {what}: {info.value}, expected INVALID_ARGUMENT")


def _refused_each_way(driver, what, prepared_models, role=None, dims=()):
    role = role or BufferRole(0, 0)
    _refused(driver, f"{what} (input role)", prepared_models, inputs=[role], dims=dims)
    _refused(driver, f"{what} (output role)", prepared_models, outputs=[role], dims=dims)


def _conflicting(driver, what, a, b):
    """Roles of two prepared models whose operands conflict, in every direction (VTS)."""
    both = [a, b]
    _refused(driver, f"{what} (two inputs)", both, inputs=[BufferRole(0, 0), BufferRole(1, 0)])
    _refused(driver, f"{what} (input and output)", both, inputs=[BufferRole(0, 0)],
             outputs=[BufferRole(1, 0)])
    _refused(driver, f"{what} (two outputs)", both, outputs=[BufferRole(0, 0), BufferRole(1, 0)])


def _nbytes(name: str, dims=DIMS) -> int:
    return int(np.prod(dims)) * dtype_of(OPERANDS[name][0]).itemsize


def _data(name: str, dims=DIMS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = OPERANDS[name][0]
    if t is T.TENSOR_FLOAT32:
        return rng.uniform(-2, 2, dims).astype(np.float32)
    return rng.integers(0, 256, dims).astype(np.uint8)


def _relu(name: str, x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.asarray(OPERANDS[name][2], x.dtype))


def _memory(data: np.ndarray | int, kind: str = "ashmem") -> Memory:
    if isinstance(data, np.ndarray):
        return Memory.from_bytes(data.tobytes(), kind)
    return Memory.create(data, kind)


def _read(memory: Memory, name: str, dims=DIMS) -> np.ndarray:
    return np.frombuffer(bytes(memory.view()), dtype_of(OPERANDS[name][0])).reshape(dims)


def _initialise(buffer, name: str, data: np.ndarray | None = None, dims=()):
    data = _data(name) if data is None else data
    buffer.copy_from(_memory(data), dims)
    return data


# -- requests -------------------------------------------------------------------------------

def _shared(pool: int, length: int, dims=()) -> RequestArgument:
    return RequestArgument(False, DataLocation(pool, 0, length), tuple(dims))


def _device(pool: int, dims=()) -> RequestArgument:
    return RequestArgument(False, DataLocation(pool, 0, 0), tuple(dims))


def _status(prepared, request, path) -> tuple[ErrorStatus, str]:
    try:
        execute(prepared, request, path)
    except DriverFault:
        raise
    except HalError as e:
        return e.status, e.message
    return OK, ""


def _expect(prepared, request, path, expected: ErrorStatus, what: str, req: str = "MEM-4") -> None:
    got, message = _status(prepared, request, path)
    if got is not expected:
        pytest.fail(f"{req}: {what} on the {path} path: {got.name} ({message}), expected {expected.name}")


# -- allocate (MEM-4) ------------------------------------------------------------------------

@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_empty_roles(domains, name):
    _refused(domains, "no prepared model and no role", [])
    _refused(domains, "a prepared model but no role", [_prepare(domains, _relu_model(name))])


@pytest.mark.req("MEM-4", "VAL-2")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_bad_prepared_model(domains, name):
    """A prepared model this driver never made (the VTS's InvalidPreparedModel), bare or holding
    a valid model as another driver's prepared model does."""
    _refused_each_way(domains, "a foreign prepared model", [PreparedModel()])
    _refused_each_way(domains, "another driver's prepared model of a valid model",
                      [_OtherDriversPrepared(_relu_model(name))])


class _OtherDriversPrepared(PreparedModel):
    """A prepared model of some other driver: it keeps its model where drivers usually do."""

    def __init__(self, model) -> None:
        self.model = model


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_bad_indexes(domains, name):
    prepared = _prepare(domains, _relu_model(name))
    _refused_each_way(domains, "model index out of range", [prepared], BufferRole(1, 0))
    _refused_each_way(domains, "io index out of range", [prepared], BufferRole(0, 1))


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_bad_probability(domains, name):
    prepared = _prepare(domains, _relu_model(name))
    for probability in (10.0, 0.0, -0.5):
        _refused_each_way(domains, f"probability {probability}", [prepared], BufferRole(0, 0, probability))


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_same_role_twice(domains, name):
    prepared = _prepare(domains, _relu_model(name))
    twice = [BufferRole(0, 0), BufferRole(0, 0)]
    _refused(domains, "an input role twice", [prepared], inputs=twice)
    _refused(domains, "an output role twice", [prepared], outputs=twice)
    # Two model indexes naming the same prepared model: still the same role.
    aliased = [BufferRole(0, 0), BufferRole(1, 0)]
    _refused(domains, "an input role twice through two model indexes", [prepared, prepared], inputs=aliased)
    _refused(domains, "an output role twice through two model indexes", [prepared, prepared], outputs=aliased)


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_conflicting_operands(domains, name):
    other_type = OPERANDS[name][3]
    prepared = _prepare(domains, _relu_model(name))
    _conflicting(domains, "operand types", prepared, _prepare(domains, _relu_model(name, type_=other_type)))
    if OPERANDS[name][0].is_quant:
        _conflicting(domains, "scales", prepared, _prepare(domains, _relu_model(name, scale=1.0)))
        _conflicting(domains, "zero points", prepared, _prepare(domains, _relu_model(name, zero_point=10)))
    _conflicting(domains, "ranks", _prepare(domains, _add_model(name)),
                 _prepare(domains, _add_model(name, DIMS[:-1])))
    _conflicting(domains, "dimensions", prepared, _prepare(domains, _relu_model(name, (4, *DIMS[1:]))))


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_conflicts_with_descriptor(domains, name):
    prepared = _prepare(domains, _relu_model(name))
    _refused_each_way(domains, "a descriptor of another rank", [prepared], dims=DIMS[:-1])
    _refused_each_way(domains, "descriptor dimensions that conflict", [prepared], dims=(4, *DIMS[1:]))
    # The activation of ADD is a scalar: a descriptor cannot give it dimensions.
    _refused(domains, "dimensions for a scalar role", [_prepare(domains, _add_model(name))],
             inputs=[BufferRole(0, 2)], dims=(1,))


@pytest.mark.req("MEM-4", "MEM-6")
@pytest.mark.parametrize("name", TYPES)
def test_allocate_valid(domains, name):
    prepared = _prepare(domains, _relu_model(name))
    dynamic = _prepare(domains, _relu_model(name, (0, *DIMS[1:])))
    for what, models, inputs, outputs, dims in (
            ("input and output roles", [prepared], [0], [0], ()),
            ("an input role", [prepared], [0], [], ()),
            ("an output role", [prepared], [], [0], ()),
            ("the descriptor's full dimensions", [prepared], [0], [0], DIMS),
            ("partly known descriptor dimensions", [prepared], [0], [0], (0, *DIMS[1:])),
            ("a dynamic operand", [dynamic], [0], [0], ()),
            ("a dynamic operand and full descriptor dimensions", [dynamic], [0], [0], DIMS)):
        try:
            _, token = domains.allocate(BufferDesc(tuple(dims)), models, [BufferRole(0, i) for i in inputs],
                                        [BufferRole(0, o) for o in outputs])
        except HalError as e:
            pytest.fail(f"MEM-4: a valid allocation ({what}) failed: {e}")
        assert isinstance(token, int) and token > 0, f"MEM-4: allocate ({what}) gave token {token!r}"
    # The roles of two prepared models of one operand.
    other = _prepare(domains, _relu_model(name))
    _, token = domains.allocate(BufferDesc(), [prepared, other], [BufferRole(0, 0)], [BufferRole(1, 0)])
    assert token > 0
    # The scalar input of ADD.
    _, token = domains.allocate(BufferDesc(), [_prepare(domains, _add_model(name))], [BufferRole(0, 2)], [])
    assert token > 0


# -- copy_to / copy_from (MEM-5, MEM-6) -------------------------------------------------------

def _expect_copy(call, expected: ErrorStatus, what: str, req: str = "MEM-5") -> None:
    got = status_of(call)
    if got is not expected:
        pytest.fail(f"{req}: {what}: {got.name}, expected {expected.name}")


@pytest.mark.req("MEM-5")
@pytest.mark.parametrize("name", TYPES)
def test_copy_from_bad_size(domains, name):
    """INVALID_ARGUMENT, and the refused copy changes nothing: an uninitialised buffer stays
    uninitialised (copy_to fails), an initialised one keeps its contents."""
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name)))
    size = _nbytes(name)
    for bad in (size // 2, size * 2):
        _expect_copy(partial(buffer.copy_from, _memory(bad)), INVALID,
                     f"copy_from a {bad}-byte memory into a {size}-byte buffer")
    _expect_copy(partial(buffer.copy_to, _memory(size)), FAILURE,
                 "copy_to from a buffer whose only copy_from was refused (still uninitialised)")
    data = _initialise(buffer, name)
    for bad in (size // 2, size * 2):
        _expect_copy(partial(buffer.copy_from, _memory(bad)), INVALID,
                     f"copy_from a {bad}-byte memory into an initialised {size}-byte buffer")
    out = _memory(size)
    buffer.copy_to(out)
    if not np.array_equal(_read(out, name), data):
        pytest.fail("MEM-5: a refused copy_from changed what the buffer held")


@pytest.mark.req("MEM-5", "MEM-6")
@pytest.mark.parametrize("name", TYPES)
def test_copy_from_bad_size_dynamic(domains, name):
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name, (0, *DIMS[1:]))))
    size = _nbytes(name)
    for bad in (size // 2, size * 2):
        _expect_copy(partial(buffer.copy_from, _memory(bad), DIMS), INVALID,
                     f"copy_from a {bad}-byte memory with dimensions {DIMS}", "MEM-6")
    good = _memory(size)
    _expect_copy(lambda: buffer.copy_from(good, DIMS), OK, f"copy_from with dimensions {DIMS}", "MEM-6")
    bad_dims = (2, *DIMS[1:])
    _expect_copy(lambda: buffer.copy_from(good, bad_dims), INVALID,
                 f"copy_from {size} bytes with dimensions {bad_dims}", "MEM-6")


@pytest.mark.req("MEM-5", "MEM-6")
@pytest.mark.parametrize("name", TYPES)
def test_copy_from_bad_dimensions(domains, name):
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name)))
    memory = _memory(_nbytes(name))
    # ... the last: as many elements, in another shape (a driver that checks the byte count only).
    for bad in (DIMS[:-1], (2, *DIMS[1:]), (0, *DIMS[1:]), _EQUAL_SIZE):
        _expect_copy(lambda b=bad: buffer.copy_from(memory, b), INVALID, f"copy_from with dimensions {bad}")
    _expect_copy(lambda: buffer.copy_from(memory, ()), OK, "copy_from without dimensions")
    _expect_copy(lambda: buffer.copy_from(memory, DIMS), OK, f"copy_from with dimensions {DIMS}")


@pytest.mark.req("MEM-5", "MEM-6")
@pytest.mark.parametrize("name", TYPES)
def test_copy_from_bad_dimensions_dynamic(domains, name):
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name, (0, *DIMS[1:]))))
    memory = _memory(_nbytes(name))
    for bad in (DIMS[:-1], (2, *DIMS[1:-1], 4), (1, *DIMS[1:-1], 0), (), _EQUAL_SIZE):
        _expect_copy(lambda b=bad: buffer.copy_from(memory, b), INVALID, f"copy_from with dimensions {bad} "
                     f"into a buffer of unknown dimensions", "MEM-6")
    _expect_copy(lambda: buffer.copy_from(memory, DIMS), OK, f"copy_from with dimensions {DIMS}", "MEM-6")
    # Initialised, the buffer's dimensions are still unknown: a copy must give them again.
    _expect_copy(lambda: buffer.copy_from(memory, ()), INVALID,
                 f"copy_from without dimensions into a buffer of unknown dimensions that holds a {DIMS}",
                 "MEM-6")


@pytest.mark.req("MEM-5", "MEM-6")
@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed", "dynamic"])
@pytest.mark.parametrize("name", TYPES)
def test_copy_to_uninitialised(domains, name, dynamic):
    """copy_to from a buffer nothing was written to fails, of fixed dimensions or of unknown
    ones (which have no size to check a memory against until something is written)."""
    dims = (0, *DIMS[1:]) if dynamic else DIMS
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name, dims)))
    _expect_copy(partial(buffer.copy_to, _memory(_nbytes(name))), FAILURE,
                 f"copy_to from an uninitialised buffer of dimensions {list(dims)}")


@pytest.mark.req("MEM-5", "MEM-6")
@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed", "dynamic"])
@pytest.mark.parametrize("name", TYPES)
def test_copy_to_bad_size(domains, name, dynamic):
    dims = (0, *DIMS[1:]) if dynamic else DIMS
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name, dims)))
    _initialise(buffer, name, dims=DIMS)
    size = _nbytes(name)
    for bad in (size // 2, size * 2):
        _expect_copy(partial(buffer.copy_to, _memory(bad)), INVALID,
                     f"copy_to a {bad}-byte memory from a {size}-byte buffer")
    _expect_copy(lambda: buffer.copy_to(_memory(size)), OK, "copy_to a memory of the buffer's size")


@pytest.mark.req("MEM-5", "MEM-3")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", TYPES)
def test_copy_round_trip(domains, name, kind):
    """copy_from then copy_to, each with a memory of ``kind``: the bytes come back unchanged."""
    buffer, _ = _allocate(domains, _prepare(domains, _relu_model(name)))
    data = _data(name, seed=3)
    _expect_copy(lambda: buffer.copy_from(_memory(data, kind)), OK, f"copy_from a {kind} memory")
    out = _memory(data.nbytes, kind)
    _expect_copy(lambda: buffer.copy_to(out), OK, f"copy_to a {kind} memory")
    if not np.array_equal(_read(out, name), data):
        pytest.fail(f"MEM-5: copy_from then copy_to through {kind} memories changed the contents")


@pytest.mark.req("MEM-5")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", TYPES)
def test_copies_and_executions_see_each_other(domains, name, kind):
    """copy_from takes a copy (later changes to the memory do not reach the buffer), copy_to
    gives what the last execution wrote, an execution reads what the last copy_from gave, and
    a memory written by copy_to is the caller's own."""
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    first = _data(name, seed=11)
    source = _memory(first, kind)
    _expect_copy(lambda: buffer.copy_from(source), OK, f"copy_from a {kind} memory")
    source.view()[:] = _data(name, seed=12).tobytes()
    out = _memory(first.nbytes, kind)
    _expect_copy(lambda: buffer.copy_to(out), OK, f"copy_to a {kind} memory")
    if not np.array_equal(_read(out, name), first):
        pytest.fail(f"MEM-5: a change to a {kind} memory after copy_from reached the buffer")
    x = _data(name, seed=13)
    _expect(prepared, _out_buffer(prepared, token, name, x), "sync", OK, "output to a buffer", "MEM-5")
    out.view()[:] = bytes(len(out.view()))
    _expect_copy(lambda: buffer.copy_to(out), OK, "copy_to after an execution wrote the buffer")
    if not np.array_equal(_read(out, name), _relu(name, x)):
        pytest.fail(f"MEM-5: copy_to into a {kind} memory after an execution wrote the buffer gave "
                    f"other contents than the execution's result")
    out.view()[:] = bytes(len(out.view()))  # the caller's memory: the buffer keeps its contents
    y = _data(name, seed=14)
    _expect_copy(lambda: buffer.copy_from(_memory(y, kind)), OK, f"copy_from a {kind} memory")
    result = _memory(_nbytes(name))
    _expect(prepared, _in_buffer(prepared, token, name, result), "sync", OK, "input from a buffer", "MEM-5")
    if not np.array_equal(_read(result, name), _relu(name, y)):
        pytest.fail(f"MEM-5: an execution reading the buffer after copy_from a {kind} memory did not see "
                    f"the copied contents")


@pytest.mark.req("MEM-4", "MEM-5")
@pytest.mark.parametrize("path", PATHS)
def test_buffer_carries_a_result_from_one_prepared_model_to_another(domains, path):
    """A buffer allocated for two prepared models of different models, an output of the first
    and an input of the second (what memory domains are for: a result kept on the device
    between two models): the second reads what the first wrote, on every path (a driver that
    keeps a buffer's contents per prepared model gives the second nothing, or a stale copy)."""
    name = "float32"
    writer, reader_model = _prepare(domains, _relu_model(name)), _relu_model(name, pairs=2)
    reader = _prepare(domains, reader_model)
    buffer, token = domains.allocate(BufferDesc(), [writer, reader], [BufferRole(1, 0)], [BufferRole(0, 0)])
    _initialise(buffer, name, _data(name, seed=20))  # a stale value for a wrong driver to find
    x = _data(name, seed=21)
    _expect(writer, _out_buffer(writer, token, name, x), path, OK, "the first model's output to a buffer",
            "MEM-5")
    result = _memory(_nbytes(name))
    second = _data(name, seed=22)
    request = Request([_device(2), _shared(1, _nbytes(name))],
                      [_shared(0, _nbytes(name)), _shared(3, _nbytes(name))],
                      [result, _memory(second), token, _memory(_nbytes(name))])
    _expect(reader, request, path, OK, "the second model's input from that buffer", "MEM-5")
    if not np.array_equal(_read(result, name), _relu(name, x)):
        pytest.fail(f"MEM-5: on the {path} path, the second prepared model reading a buffer did not see "
                    f"what the first one's execution wrote to it")


@pytest.mark.req("MEM-5", "BURST-2")
def test_burst_reads_each_copy_into_its_buffer(domains):
    """One burst, the same request each run, its input a buffer given new contents by
    copy_from before every run: a burst may cache the buffer's slot, not its contents, so each
    run computes on the last copy (a burst that keeps what the buffer held when its slot was
    first seen does not)."""
    name = "float32"
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    burst = prepared.configure_execution_burst()
    result = _memory(_nbytes(name))
    request = _in_buffer(prepared, token, name, result)
    for run in range(3):
        x = _data(name, seed=20 + run)
        _expect_copy(lambda x=x: buffer.copy_from(_memory(x)), OK, "copy_from before a burst run")
        try:
            burst.execute(request, [0, 1])
        except HalError as e:
            pytest.fail(f"MEM-5: burst run {run} with its input from a buffer failed: {e}")
        if not np.array_equal(_read(result, name), _relu(name, x)):
            pytest.fail(f"MEM-5: burst run {run} did not compute on the buffer's contents after the last "
                        f"copy_from (stale contents cached with its slot?)")


# -- executions (MEM-4, MEM-6) -----------------------------------------------------------------

def _in_buffer(prepared, token, name, output=None) -> Request:
    """Input 0 from the buffer, output 0 to shared memory."""
    return Request([_device(1)], [_shared(0, _nbytes(name))], [output or _memory(_nbytes(name)), token])


def _out_buffer(prepared, token, name, data=None) -> Request:
    """Input 0 from shared memory, output 0 to the buffer."""
    source = _memory(_data(name) if data is None else data)
    return Request([_shared(0, _nbytes(name))], [_device(1)], [source, token])


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_bad_token(domains, name, path):
    prepared = _prepare(domains, _relu_model(name))
    for token in (0, 100):
        _expect(prepared, _in_buffer(prepared, token, name), path, INVALID, f"input from token {token}")
        _expect(prepared, _out_buffer(prepared, token, name), path, INVALID, f"output to token {token}")


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", PATHS)
def test_execution_token_of_a_released_buffer(domains, path):
    """Once the client has released a buffer, its token names nothing: a request that uses it
    as an input or an output is refused (a driver whose table of buffers keeps them alive runs
    it)."""
    name = "float32"
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    _initialise(buffer, name)
    del buffer
    gc.collect()
    _expect(prepared, _in_buffer(prepared, token, name), path, INVALID, "input from a released buffer")
    _expect(prepared, _out_buffer(prepared, token, name), path, INVALID, "output to a released buffer")


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", ROLE_PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_buffer_of_another_prepared_model(domains, name, path):
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    _initialise(buffer, name)
    other = _prepare(domains, _relu_model(name))
    _expect(other, _in_buffer(other, token, name), path, INVALID,
            "input from a buffer allocated for another prepared model")
    _expect(other, _out_buffer(other, token, name), path, INVALID,
            "output to a buffer allocated for another prepared model")


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_bad_io_index(domains, name, path):
    prepared = _prepare(domains, _relu_model(name, pairs=2))
    buffer, token = _allocate(domains, prepared, inputs=(0,), outputs=())
    _initialise(buffer, name)
    n = _nbytes(name)
    pools = [_memory(_data(name)), _memory(n), _memory(n), token]
    request = Request([_shared(0, n), _device(3)], [_shared(1, n), _shared(2, n)], pools)
    _expect(prepared, request, path, INVALID, "input 1 from a buffer allocated for input 0 only")
    request = Request([_shared(0, n), _shared(1, n)], [_shared(2, n), _device(3)], pools)
    _expect(prepared, request, path, INVALID, "output 1 to a buffer allocated for input 0 only")


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", ROLE_PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_wrong_role(domains, name, path):
    prepared = _prepare(domains, _relu_model(name))
    _, input_token = _allocate(domains, prepared, inputs=(0,), outputs=())
    output_buffer, output_token = _allocate(domains, prepared, inputs=(), outputs=(0,))
    _expect(prepared, _out_buffer(prepared, input_token, name), path, INVALID,
            "output to a buffer allocated as an input")
    _initialise(output_buffer, name)
    _expect(prepared, _in_buffer(prepared, output_token, name), path, INVALID,
            "input from a buffer allocated as an output")


@pytest.mark.req("MEM-4", "MEM-5")
@pytest.mark.parametrize("path", ROLE_PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_uninitialised_then_initialised(domains, name, path):
    """An uninitialised buffer cannot be read; written as an output, it holds the result."""
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    _expect(prepared, _in_buffer(prepared, token, name), path, FAILURE, "input from an uninitialised buffer")
    x = _data(name, seed=1)
    _expect(prepared, _out_buffer(prepared, token, name, x), path, OK, "output to a buffer")
    out = _memory(_nbytes(name))
    _expect(prepared, _in_buffer(prepared, token, name, out), path, OK,
            "input from a buffer an execution wrote")
    if not np.array_equal(_read(out, name), _relu(name, x)):
        pytest.fail(f"MEM-4: {path}: RELU through a buffer (written as output, read as input) gave "
                    f"wrong values")
    copied = _memory(_nbytes(name))
    buffer.copy_to(copied)
    if not np.array_equal(_read(copied, name), _relu(name, x)):
        pytest.fail("MEM-5: copy_to after an execution wrote the buffer gave wrong values")


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_same_buffer_in_several_roles(domains, name, path):
    prepared = _prepare(domains, _relu_model(name, pairs=2))
    buffer, token = _allocate(domains, prepared, inputs=(0, 1), outputs=(0, 1))
    x = _initialise(buffer, name)
    n = _nbytes(name)
    pools = [_memory(n), _memory(n), token]
    request = Request([_device(2), _shared(0, n)], [_device(2), _shared(1, n)], pools)
    _expect(prepared, request, path, INVALID, "one buffer as input 0 and output 0 of one request")
    request = Request([_shared(0, n), _shared(1, n)], [_device(2), _device(2)], pools)
    _expect(prepared, request, path, INVALID, "one buffer as both outputs of one request")
    _initialise(buffer, name, x)
    request = Request([_device(2), _device(2)], [_shared(0, n), _shared(1, n)], pools)
    _expect(prepared, request, path, OK, "one buffer as both inputs of one request")
    for i in (0, 1):
        if not np.array_equal(_read(pools[i], name), _relu(name, x)):
            pytest.fail(f"MEM-4: {path}: output {i} of a buffer read as both inputs is wrong")


@pytest.mark.req("MEM-4")
@pytest.mark.parametrize("path", PATHS)
def test_execution_buffer_argument_with_a_location(domains, path):
    """A buffer argument names the whole buffer: offset and length must be 0."""
    name = "float32"
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    _initialise(buffer, name)
    request = _in_buffer(prepared, token, name)
    request.inputs[0].location.length = _nbytes(name)
    _expect(prepared, request, path, INVALID, "a buffer input with a non-zero length")
    request = _in_buffer(prepared, token, name)
    request.inputs[0].location.offset = 4
    _expect(prepared, request, path, INVALID, "a buffer input with a non-zero offset")


@pytest.mark.req("MEM-4", "MEM-6")
@pytest.mark.parametrize("path", SHAPE_PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_bad_dimensions(domains, name, path):
    """A model of unknown batch, a buffer of known dimensions (the VTS's InvalidDimensions)."""
    prepared = _prepare(domains, _relu_model(name, (0, *DIMS[1:])))
    buffer, token = _allocate(domains, prepared, dims=DIMS)
    _initialise(buffer, name)
    bad = (2, *DIMS[1:])
    n = 2 * _nbytes(name)
    shared = _memory(_data(name, bad))
    request = Request([_device(1, bad)], [_shared(0, n, bad)], [_memory(n), token])
    _expect(prepared, request, path, INVALID, f"a buffer input given dimensions {bad}")
    request = Request([_shared(0, n, bad)], [_device(1, bad)], [shared, token])
    _expect(prepared, request, path, INVALID, f"a buffer output given dimensions {bad}")
    request = Request([_shared(0, n, bad)], [_device(1)], [shared, token])
    _expect(prepared, request, path, FAILURE,
            f"a {list(bad)} result into a buffer of dimensions {list(DIMS)}")
    # The failed run leaves its output buffer uninitialised, whatever it held before (MEM-4).
    _expect_copy(partial(buffer.copy_to, _memory(_nbytes(name))), FAILURE,
                 f"copy_to from a buffer whose {path} execution as an output failed", "MEM-4")


@pytest.mark.req("MEM-4", "MEM-6")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_execution_input_dimensions_against_the_buffers_contents(domains, name, path):
    """A model and a buffer of unknown dimensions, the buffer holding a DIMS value: as an input
    it is fixed-size (MEM-6), so a request that gives it other dimensions of as many elements
    is invalid (a driver that checks the element count only reshapes the contents), and one
    that gives DIMS runs."""
    model = _relu_model(name, (0, 0, 0, 0))
    prepared = _prepare(domains, model)
    buffer, token = _allocate(domains, prepared)
    data = _initialise(buffer, name, dims=DIMS)
    n = _nbytes(name)
    request = Request([_device(1, _EQUAL_SIZE)], [_shared(0, n, _EQUAL_SIZE)], [_memory(n), token])
    _expect(prepared, request, path, INVALID,
            f"a buffer input holding a {list(DIMS)} value given dimensions {list(_EQUAL_SIZE)}", "MEM-6")
    output = _memory(n)
    request = Request([_device(1, DIMS)], [_shared(0, n, DIMS)], [output, token])
    _expect(prepared, request, path, OK, f"a buffer input holding a {list(DIMS)} value given them", "MEM-6")
    assert np.array_equal(_read(output, name), _relu(name, data)), \
        f"MEM-6: the {path} run of a buffer input given its own dimensions computed wrong values"


@pytest.mark.req("MEM-6", "EXE-4")
@pytest.mark.parametrize("path", SHAPE_PATHS)
@pytest.mark.parametrize("name", TYPES)
def test_dynamic_buffer_takes_each_output_shape(domains, name, path):
    """A buffer of unknown batch is dynamic as an output: each run may give it another shape,
    which an input use and copy_to then see (MEM-6)."""
    prepared = _prepare(domains, _relu_model(name, (0, *DIMS[1:])))
    buffer, token = _allocate(domains, prepared)
    for batch in (2, 5, 1):
        dims = (batch, *DIMS[1:])
        x = _data(name, dims, seed=batch)
        n = x.nbytes
        request = Request([_shared(0, n, dims)], [_device(1)], [_memory(x), token])
        try:
            shapes, _ = execute(prepared, request, path)
        except HalError as e:
            pytest.fail(f"MEM-6: {path}: a {list(dims)} result into a buffer of unknown batch failed: {e}")
        if shapes and tuple(shapes[0].dimensions) != dims:
            pytest.fail(f"MEM-6: {path}: output shape {shapes[0].dimensions} reported, expected {dims}")
        copied = _memory(n)
        _expect_copy(partial(buffer.copy_to, copied), OK, f"copy_to after a {list(dims)} result", "MEM-6")
        if not np.array_equal(_read(copied, name, dims), _relu(name, x)):
            pytest.fail(f"MEM-6: {path}: the buffer does not hold the {list(dims)} result")
        out = _memory(n)
        request = Request([_device(1)], [_shared(0, n, dims)], [out, token])
        shapes, _ = execute(prepared, request, path)
        if shapes and tuple(shapes[0].dimensions) != dims:
            pytest.fail(f"MEM-6: {path}: reading a {list(dims)} buffer gave output shape "
                        f"{shapes[0].dimensions}")
        if not np.array_equal(_read(out, name, dims), _relu(name, x)):
            pytest.fail(f"MEM-6: {path}: RELU of a {list(dims)} buffer gave wrong values")


@pytest.mark.req("MEM-7")
def test_concurrent_reads_and_writes(domains):
    """Readers and writers of one buffer at once: every call returns (contents are undefined)."""
    name = "float32"
    prepared = _prepare(domains, _relu_model(name))
    buffer, token = _allocate(domains, prepared)
    _initialise(buffer, name)
    errors: list[str] = []

    def work(write: bool, seed: int) -> None:
        for _ in range(10):
            if write:
                request = _out_buffer(prepared, token, name, _data(name, seed=seed))
            else:
                request = _in_buffer(prepared, token, name)
            try:
                execute(prepared, request, "sync")
            except DriverFault as e:
                errors.append(str(e))
                return
            except HalError as e:
                if e.status is not FAILURE:  # a read racing a failed write may find no contents
                    errors.append(str(e))
            except Exception as e:  # anything but a status: the driver died (an assertion, a fault)
                errors.append(f"{type(e).__name__}: {e}")
                return

    threads = [threading.Thread(target=work, args=(i % 2 == 0, i), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(hang_timeout())
    if any(t.is_alive() for t in threads):
        pytest.fail("MEM-7: concurrent executions on one buffer did not all return")
    if errors:
        pytest.fail(f"MEM-7: concurrent executions on one buffer failed: {errors[0]}")


@pytest.mark.req("MEM-4", "VAL-2")
@pytest.mark.parametrize("path", PATHS)
def test_token_of_another_client(domains, path):
    """A token is good only for the client that allocated it: another client of the same
    service, with its own prepared model of the same model, is refused."""
    attach = getattr(domains, "attach_spec", None)
    if attach is None:
        pytest.skip(f"{domains.name} is not a service: there is no second client to hand a token to")
    from nncert.drivers import load_driver

    name = "float32"
    model = _relu_model(name)
    buffer, token = _allocate(domains, _prepare(domains, model))
    _initialise(buffer, name)
    other = load_driver(attach)
    try:
        theirs = _prepare(other, model)
        _expect(theirs, _in_buffer(theirs, token, name), path, INVALID, "another client's token as input",
                "VAL-2")
        _expect(theirs, _out_buffer(theirs, token, name), path, INVALID, "another client's token as output",
                "VAL-2")
    finally:
        other.close()
