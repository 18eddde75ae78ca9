"""Request memory and constants: where the driver reads and writes (EXE-2, EXE-5, MEM-1..3),
and the memories of a burst (BURST-1, BURST-2).

A request's data is row-major, first dimension slowest, with no padding at the end of a row
(EXE-2), at the offset its argument names in its pool (MEM-2): these tests pack every input
and output of a request back to back in ONE pool, between guard bytes, so that a driver that
pads rows, transposes, ignores an offset or writes past an output's length changes a value
or a guard byte. Constants live in operandValues (CONSTANT_COPY) and in pools
(CONSTANT_REFERENCE, MEM-1), several to a pool at their offsets; every pool kind of MEM-3
carries them. Shapes are odd and asymmetric so that no row is 16 bytes long and no
transposition goes unseen.
"""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.memory import KINDS, Memory
from nncert.hal.model import DataLocation, Model, Request, RequestArgument, dtype_of
from nncert.hal.types import ErrorStatus, OperandLifeTime, OperandType, OperationType
from nncert.ops.interpreter import run_model
from nncert.testing.harness import PATHS, check_outputs, execute, prepare_or_skip
from nncert.testing.mutations import pool_bytes, stray_writes

T = OperandType
L = OperandLifeTime
#: Bytes before, between and after the request's arguments, which nobody may write.
GUARD = 8
GUARD_BYTE = 0xA5
#: name -> (type, scale, zero point, dimensions): odd, asymmetric shapes of every itemsize.
TYPES = {
    "float32": (T.TENSOR_FLOAT32, 0.0, 0, (3, 5, 7)),
    "float16": (T.TENSOR_FLOAT16, 0.0, 0, (2, 3, 5)),
    "quant8": (T.TENSOR_QUANT8_ASYMM, 0.5, 100, (3, 7)),
    "int32": (T.TENSOR_INT32, 0.0, 0, (5, 3)),
}
#: Fenced executions report no output shapes: the tests that need them leave it out.
SHAPE_PATHS = [p for p in PATHS if p != "fenced"]


def _two_output_model(name: str, dims=None, reverse: bool = False) -> Model:
    """out0 = x + y, out1 = x + x: two inputs and two outputs of one type; ``reverse``: listed
    as inputs (y, x) and outputs (out1, out0), against the order of their operand indexes."""
    t, scale, zero_point, shape = TYPES[name]
    dims = shape if dims is None else dims
    b = ModelBuilder()
    act = b.constant(T.INT32, 0)
    x, y = b.operand(t, dims, scale, zero_point), b.operand(t, dims, scale, zero_point)
    out0, out1 = b.operand(t, dims, scale * 2, zero_point), b.operand(t, dims, scale * 2, zero_point)
    b.operation(OperationType.ADD, [x, y, act], [out0])
    b.operation(OperationType.ADD, [x, x, act], [out1])
    if reverse:
        return b.build([y, x], [out1, out0])
    return b.build([x, y], [out0, out1])


def _feeds(name: str, seed: int, dims=None) -> list[np.ndarray]:
    t, _, _, shape = TYPES[name]
    dims = shape if dims is None else dims
    rng = np.random.default_rng(seed)
    if t.is_float:
        return [rng.uniform(-2, 2, dims).astype(dtype_of(t)) for _ in range(2)]
    if t is T.TENSOR_INT32:
        return [rng.integers(-1000, 1000, dims).astype(np.int32) for _ in range(2)]
    return [rng.integers(0, 256, dims).astype(np.uint8) for _ in range(2)]


def _packed_request(model: Model, feeds: list[np.ndarray], kind: str = "ashmem"
                    ) -> tuple[Request, list[tuple[int, int]]]:
    """Inputs then outputs back to back in one pool of ``kind``, a guard before, between the
    inputs and the outputs, and after; returns the request and the guards' (offset, length)."""
    sg = model.main
    sizes = [f.nbytes for f in feeds]
    sizes += [int(np.prod(sg.operands[i].dimensions)) * dtype_of(sg.operands[i].type).itemsize
              for i in sg.output_indexes]
    guards, locations, at = [], [], 0
    for n, size in enumerate(sizes):
        if n in (0, len(feeds)):
            guards.append((at, GUARD))
            at += GUARD
        locations.append(DataLocation(0, at, size))
        at += size
    guards.append((at, GUARD))
    pool = Memory.create(at + GUARD, kind)
    view = pool.view()
    view[:] = bytes([GUARD_BYTE]) * len(view)
    for loc, feed in zip(locations, feeds, strict=False):
        view[loc.offset:loc.offset + loc.length] = feed.tobytes()
    args = [RequestArgument(False, loc, ()) for loc in locations]
    return Request(args[:len(feeds)], args[len(feeds):], [pool]), guards


def _check_packed(model: Model, request: Request, guards, feeds: list[np.ndarray], what: str) -> None:
    view = request.pools[0].view()
    for offset, length in guards:
        if bytes(view[offset:offset + length]) != bytes([GUARD_BYTE]) * length:
            pytest.fail(f"EXE-2: {what}: the driver wrote bytes [{offset}, {offset + length}) that lie "
                        f"outside every output (rows padded, or an output written past its length)")
    for i, (arg, feed) in enumerate(zip(request.inputs, feeds, strict=True)):
        loc = arg.location
        if bytes(view[loc.offset:loc.offset + loc.length]) != feed.tobytes():
            pytest.fail(f"EXE-2: {what}: the driver changed input {i} in its pool")
    expected = run_model(model, feeds)
    actual = read_outputs(model, request, [e.shape for e in expected])
    try:
        check_outputs(expected, actual, model)
    except pytest.fail.Exception as e:
        pytest.fail(f"EXE-2, MEM-2: {what}: outputs read row-major from their offsets are wrong "
                    f"(padded or transposed rows, or an offset ignored): {e}")


@pytest.mark.req("EXE-2", "MEM-2", "MEM-3")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", TYPES)
def test_request_data_is_row_major_and_packed(driver, name, kind):
    """Every argument at its own offset of one shared pool, rows unpadded, nothing written
    outside the outputs."""
    model = _two_output_model(name)
    prepared = prepare_or_skip(driver, model)
    feeds = _feeds(name, 1)
    request, guards = _packed_request(model, feeds, kind)
    execute(prepared, request)
    _check_packed(model, request, guards, feeds, f"{name} in one {kind} pool")


@pytest.mark.req("EXE-2", "MEM-2")
@pytest.mark.parametrize("path", PATHS)
def test_row_major_and_packed_on_every_path(driver, path):
    name = "float32"
    model = _two_output_model(name)
    prepared = prepare_or_skip(driver, model)
    for seed in (2, 3):
        feeds = _feeds(name, seed)
        request, guards = _packed_request(model, feeds)
        execute(prepared, request, path)
        _check_packed(model, request, guards, feeds, f"{path} execution, seed {seed}")


#: Padding after each argument of a padded request (the HAL 1.3 DataLocation.padding): room the
#: driver may read past an input and write past an output, e.g. to whole vector widths.
PADDING = 16


@pytest.mark.req("MEM-2", "VAL-1")
@pytest.mark.parametrize("path", PATHS)
def test_arguments_with_padding(driver, path):
    """A request whose every argument has PADDING bytes of padding after its data (valid from
    HAL 1.3: offset + length + padding within the pool) runs, gives the right outputs, and
    writes nothing outside its outputs and their padding."""
    name = "float32"
    model = _two_output_model(name)
    prepared = prepare_or_skip(driver, model)
    feeds = _feeds(name, 8)
    request = build_request(model, feeds, guard=PADDING)
    for arg in (*request.inputs, *request.outputs):
        arg.location = dataclasses.replace(arg.location, padding=PADDING)
    before = pool_bytes(request)
    try:
        execute(prepared, request, path)
    except HalError as e:
        pytest.fail(f"VAL-1: a {path} execution whose arguments have {PADDING} bytes of padding failed: {e}")
    room = [RequestArgument(False, dataclasses.replace(a.location, length=a.location.length + PADDING))
            for a in request.outputs]
    stray = stray_writes(request, before, room)
    if stray:
        pytest.fail(f"MEM-2: a {path} execution with padded arguments wrote {', '.join(stray)}, outside its "
                    f"outputs and their padding")
    expected = run_model(model, feeds)
    check_outputs(expected, read_outputs(model, request, [e.shape for e in expected]), model)


@pytest.mark.req("MEM-2", "EXE-2")
@pytest.mark.parametrize("path", PATHS)
def test_an_input_no_operation_reads(driver, path):
    """A model whose inputs are (x, u, y) where no operation reads u (valid: NNAPI lets an
    input go unused): request input 2 is still y, whatever a converter that prunes u does with
    the positions after it; out = x + y, and u is read by nobody."""
    name = "float32"
    t, scale, zero_point, dims = TYPES[name]
    b = ModelBuilder()
    x, u, y, out = (b.operand(t, dims, scale, zero_point) for _ in range(4))
    b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    model = b.build([x, u, y], [out])
    prepared = prepare_or_skip(driver, model)
    feeds = [*_feeds(name, 6), _feeds(name, 7)[0]]
    feeds[1], feeds[2] = feeds[2], feeds[1]  # x, u, y: three different values
    request, guards = _packed_request(model, feeds)
    execute(prepared, request, path)
    _check_packed(model, request, guards, feeds, f"{path} execution, inputs (x, unused u, y)")
    check_outputs([feeds[0] + feeds[2]], read_outputs(model, request, [dims]), model)


@pytest.mark.req("MEM-2", "EXE-2")
@pytest.mark.parametrize("path", PATHS)
def test_arguments_follow_the_listed_order(driver, path):
    """A model that lists its inputs as (y, x) and its outputs as (out1, out0), against the
    order of their operand indexes: request input i is the model's i-th listed input, output i
    its i-th listed output, whatever their operand indexes (a driver that binds arguments to
    the inputs and outputs in operand order swaps them)."""
    name = "float32"
    model = _two_output_model(name, reverse=True)
    prepared = prepare_or_skip(driver, model)
    feeds = _feeds(name, 5)
    request, guards = _packed_request(model, feeds)
    execute(prepared, request, path)
    _check_packed(model, request, guards, feeds,
                  f"{path} execution, inputs listed (y, x), outputs (out1, out0)")


@pytest.mark.req("MEM-2", "EXE-2")
@pytest.mark.parametrize("path", PATHS)
def test_a_memory_listed_twice_in_the_pools(driver, path):
    """The packed request with its one memory listed twice in its pools (nothing says a
    request's pools are distinct memories), the arguments spread over both entries: every
    argument still lies at its offset of that one memory (a driver that maps each memory once
    and gives a repeated one a private copy loses the outputs placed through it)."""
    name = "float32"
    model = _two_output_model(name)
    prepared = prepare_or_skip(driver, model)
    feeds = _feeds(name, 6)
    packed, guards = _packed_request(model, feeds)

    def spread(args, first):
        return [RequestArgument(a.has_no_value, DataLocation((first + n) % 2, a.location.offset,
                                                             a.location.length), a.dimensions)
                for n, a in enumerate(args)]

    pool = packed.pools[0]
    request = Request(spread(packed.inputs, 0), spread(packed.outputs, 1), [pool, pool])
    execute(prepared, request, path)
    _check_packed(model, request, guards, feeds, f"{path} execution, one memory listed twice in the pools")


# -- constants (MEM-1, MEM-3) ------------------------------------------------------------------

CONST_DIMS = (4, 9)  # 144 float32 bytes: more than CONSTANT_COPY takes


def _constants_model(kind: str) -> Model:
    """x + big0 + big1 + small0 + small1 + big2: three CONSTANT_REFERENCE tensors in one pool of
    ``kind`` at offsets 0, 144 and 288, two CONSTANT_COPY vectors at non-zero offsets of
    operandValues (after the activation scalar)."""
    rng = np.random.default_rng(4)
    b = ModelBuilder(kind)
    act = b.constant(T.INT32, 0)
    x = cur = b.operand(T.TENSOR_FLOAT32, CONST_DIMS)
    values = [rng.uniform(-2, 2, CONST_DIMS), rng.uniform(-2, 2, CONST_DIMS),
              rng.uniform(-2, 2, CONST_DIMS[-1:]), rng.uniform(-2, 2, CONST_DIMS[-1:]),
              rng.uniform(-2, 2, CONST_DIMS)]
    for value in values:
        value = value.astype(np.float32)
        nxt = b.operand(T.TENSOR_FLOAT32, CONST_DIMS)
        b.operation(OperationType.ADD, [cur, b.constant(T.TENSOR_FLOAT32, value), act], [nxt])
        cur = nxt
    return b.build([x], [cur])


@pytest.mark.req("MEM-1", "MEM-3")
@pytest.mark.parametrize("kind", KINDS)
def test_constants_at_their_offsets(driver, kind):
    model = _constants_model(kind)
    copies = [o for o in model.main.operands if o.lifetime is L.CONSTANT_COPY and o.location.offset]
    refs = [o for o in model.main.operands if o.lifetime is L.CONSTANT_REFERENCE]
    assert len(copies) >= 2 and len({o.location.offset for o in refs}) == 3, "laid out as documented"
    prepared = prepare_or_skip(driver, model)
    for seed in (5, 6):  # a second run: constants read once and kept must still be right
        x = np.random.default_rng(seed).uniform(-2, 2, CONST_DIMS).astype(np.float32)
        request = build_request(model, [x], pool_kind=kind)
        execute(prepared, request)
        expected = run_model(model, [x])
        try:
            check_outputs(expected, read_outputs(model, request, [CONST_DIMS]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"MEM-1: constants in operandValues and a {kind} pool, run {seed - 4}: {e}")


@pytest.mark.req("MEM-1", "MEM-3")
@pytest.mark.parametrize("kind", KINDS)
def test_constants_in_a_second_pool(driver, kind):
    """The constants model with its last two pool constants moved into a second pool of
    ``kind``, the first of them at offset 0: NNAPI lets a model's constants live in several
    pools, and a driver reading every CONSTANT_REFERENCE from pool 0 (where the first
    constant also starts at 0) passes test_constants_at_their_offsets."""
    model = _constants_model(kind)
    refs = [o for o in model.main.operands if o.lifetime is L.CONSTANT_REFERENCE]
    moved = refs[1:]
    second = Memory.create(sum(o.location.length for o in moved), kind)
    offset = 0
    for o in moved:
        data = model.constant_bytes(o)
        second.view()[offset:offset + len(data)] = data
        o.location = DataLocation(1, offset, len(data))
        offset += len(data)
    model.pools.append(second)
    prepared = prepare_or_skip(driver, model)
    x = np.random.default_rng(7).uniform(-2, 2, CONST_DIMS).astype(np.float32)
    request = build_request(model, [x], pool_kind=kind)
    execute(prepared, request)
    try:
        check_outputs(run_model(model, [x]), read_outputs(model, request, [CONST_DIMS]), model)
    except pytest.fail.Exception as e:
        pytest.fail(f"MEM-1: constants in two {kind} pools, two of them in the second: {e}")


# -- output buffers too small (EXE-5) -----------------------------------------------------------

@pytest.mark.req("EXE-5")
@pytest.mark.parametrize("path", [*SHAPE_PATHS, "burst-warm"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["known", "unknown"])
@pytest.mark.parametrize("small", [(0,), (1,), (0, 1)], ids=["output0", "output1", "both"])
def test_insufficient_size_marks_each_output(driver, small, dynamic, path):
    """Two outputs of different sizes, one buffer (or both) an element short:
    OUTPUT_INSUFFICIENT_SIZE, every short output marked and no other, every shape reported in
    full where the model knows it (and in full or 0 per dimension where it does not); on a warm
    burst (every slot cached) as on the others."""
    b = ModelBuilder()
    dims0, dims1 = (3, 5), (2, 7)
    x0, y0 = b.operand(T.TENSOR_FLOAT32, dims0), b.operand(T.TENSOR_FLOAT32, dims0)
    x1 = b.operand(T.TENSOR_FLOAT32, dims1)
    unknown = (0, 0) if dynamic else None
    out0, out1 = b.operand(T.TENSOR_FLOAT32, unknown or dims0), b.operand(T.TENSOR_FLOAT32, unknown or dims1)
    act = b.constant(T.INT32, 0)
    b.operation(OperationType.ADD, [x0, y0, act], [out0])
    b.operation(OperationType.MUL, [x1, x1, act], [out1])
    model = b.build([x0, y0, x1], [out0, out1])
    prepared = prepare_or_skip(driver, model)
    rng = np.random.default_rng(7)
    feeds = [rng.uniform(-2, 2, d).astype(np.float32) for d in (dims0, dims0, dims1)]
    request = build_request(model, feeds, [dims0, dims1], output_shrink=dict.fromkeys(small, 4))
    with pytest.raises(HalError) as info:
        execute(prepared, request, path)
    err = info.value
    assert err.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, \
        f"EXE-5: output(s) {list(small)} one element short gave {err.status.name}, expected " \
        f"OUTPUT_INSUFFICIENT_SIZE"
    assert len(err.output_shapes) == 2, f"EXE-5: {len(err.output_shapes)} output shapes for 2 outputs"
    for i, (shape, want) in enumerate(zip(err.output_shapes, (dims0, dims1), strict=True)):
        assert shape.is_sufficient is (i not in small), \
            f"EXE-5: output {i} marked {'sufficient' if shape.is_sufficient else 'insufficient'}; " \
            f"output(s) {list(small)} and no other are too small"
        got = tuple(shape.dimensions)
        ok = got == want if not dynamic else \
            len(got) == len(want) and all(g in (0, w) for g, w in zip(got, want, strict=True))
        assert ok, f"EXE-5: output {i} shape {list(got)} reported, expected {list(want)}" + \
            (" (0 where unknown)" if dynamic else " (the model gives it in full)")


@pytest.mark.req("EXE-5")
@pytest.mark.parametrize("path", [*SHAPE_PATHS, "one-burst"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["known", "unknown"])
def test_retry_after_insufficient_size_runs_its_own_request(driver, dynamic, path):
    """The client's retry after OUTPUT_INSUFFICIENT_SIZE, on the same prepared model with
    buffers of the reported sizes, is a request of its own: here with other inputs, it must
    give their results and shapes (a driver that keeps the results of the run that failed for
    its retry writes those). "one-burst": the failed run and the retry on the same burst."""
    b = ModelBuilder()
    dims = (3, 5)
    x, y = b.operand(T.TENSOR_FLOAT32, dims), b.operand(T.TENSOR_FLOAT32, dims)
    out = b.operand(T.TENSOR_FLOAT32, (0, 0) if dynamic else dims)
    b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    model = b.build([x, y], [out])
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst() if path == "one-burst" else None
    slots = iter(range(100))

    def run(request):
        if burst is None:
            return execute(prepared, request, path)
        return burst.execute(request, [next(slots) for _ in request.pools])  # new memories, new slots

    rng = np.random.default_rng(11)
    first, retry = ([rng.uniform(-2, 2, dims).astype(np.float32) for _ in range(2)] for _ in range(2))
    with pytest.raises(HalError) as info:
        run(build_request(model, first, [dims], output_shrink={0: 4}))
    assert info.value.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, \
        f"EXE-5: an output one element short gave {info.value.status.name}"
    request = build_request(model, retry, [dims])
    try:
        shapes, _ = run(request)
    except HalError as e:
        pytest.fail(f"EXE-5: the {path} retry with sufficient buffers failed: {e}")
    assert tuple(shapes[0].dimensions) == dims and shapes[0].is_sufficient, \
        f"EXE-5: the {path} retry reported output shape {shapes[0]}, expected {list(dims)}"
    check_outputs([retry[0] + retry[1]], read_outputs(model, request, [dims]), model)


# -- bursts (BURST-1, BURST-2) -------------------------------------------------------------------

def _binary_model(op: OperationType, dims=(2, 3)) -> Model:
    b = ModelBuilder()
    x, y, out = (b.operand(T.TENSOR_FLOAT32, dims) for _ in range(3))
    b.operation(op, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


@pytest.mark.req("BURST-1", "DRV-4")
def test_bursts_of_two_prepared_models(driver):
    """A burst belongs to its own prepared model: the bursts of two prepared models, used in
    turns, each run their own model, and one burst outlives the other."""
    models = {"ADD": _binary_model(OperationType.ADD), "MUL": _binary_model(OperationType.MUL)}
    prepared = {name: prepare_or_skip(driver, m) for name, m in models.items()}
    bursts = {name: p.configure_execution_burst() for name, p in prepared.items()}
    rng = np.random.default_rng(8)
    for turn, name in enumerate(("ADD", "MUL", "ADD", "MUL", "ADD")):
        if turn == 4:
            del bursts["MUL"]
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(models[name], [x, y])
        bursts[name].execute(request, [2 * turn, 2 * turn + 1])
        try:
            check_outputs(run_model(models[name], [x, y]), read_outputs(models[name], request, [(2, 3)]),
                          models[name])
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-1: turn {turn}: the burst of the {name} model: {e}")


@pytest.mark.req("BURST-1", "BURST-2")
def test_two_bursts_of_one_prepared_model(driver):
    """Two bursts of ONE prepared model, alive at once, name their own memories by the same
    slot ids: a slot id means a memory of its burst only, so each run in turn, on either burst
    (new input bytes in its memories each time), reads its own inputs and writes its own
    outputs (a driver whose slot cache belongs to the prepared model gives the second burst the
    first one's memories); and each burst then releases its own slots, the first burst's
    releases leaving the second's slots of the same ids known."""
    model = _binary_model(OperationType.ADD)
    prepared = prepare_or_skip(driver, model)
    bursts = [prepared.configure_execution_burst() for _ in range(2)]
    requests: list[Request] = []  # each burst's memories, new input bytes in them each turn
    rng = np.random.default_rng(10)
    for turn in range(4):
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(model, [x, y])
        if turn < 2:
            requests.append(request)
        else:
            requests[turn % 2].pools[0].view()[:] = request.pools[0].view()
            request = requests[turn % 2]
        bursts[turn % 2].execute(request, list(range(len(request.pools))))
        try:
            check_outputs([x + y], read_outputs(model, request, [(2, 3)]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-1: turn {turn}, burst {turn % 2} of one prepared model (the other burst's "
                        f"slots of the same ids name other memories): {e}")
    for b, burst in enumerate(bursts):  # each burst releases its own slots, the same ids
        for slot in range(len(requests[b].pools)):
            try:
                burst.release_memory_resource(slot)
            except HalError as e:
                pytest.fail(f"BURST-2: burst {b} releasing its slot {slot} (the other burst "
                            f"{'released' if b else 'keeps'} its own slot {slot}) failed: {e}")


@pytest.mark.req("BURST-1", "EXE-3")
def test_burst_runs_between_other_executions_of_its_prepared_model(driver):
    """A burst stays usable while its prepared model also runs on the other paths: one burst,
    run between a sync, an async and a fenced execution of the same prepared model, gives
    each of its requests' results, and so does every other execution (a driver whose other
    paths reset the device context a burst holds fails the burst's next run)."""
    model = _binary_model(OperationType.ADD)
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    rng = np.random.default_rng(14)
    for turn, path in enumerate(("burst", "sync", "burst", "async", "burst", "fenced", "burst")):
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(model, [x, y])
        try:
            if path == "burst":
                burst.execute(request, [2 * turn, 2 * turn + 1])
            else:
                execute(prepared, request, path)
        except HalError as e:
            pytest.fail(f"BURST-1: turn {turn}, a {path} execution of a prepared model whose burst runs "
                        f"between the other paths failed: {e}")
        try:
            check_outputs([x + y], read_outputs(model, request, [(2, 3)]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-1: turn {turn}, the {path} execution (the burst runs between the other "
                        f"paths): {e}")


@pytest.mark.req("BURST-2")
def test_burst_keeps_the_slots_of_a_failed_execution(driver):
    """The memories a burst execution brings are the burst's to cache whatever the execution's
    outcome: after a run that fails with OUTPUT_INSUFFICIENT_SIZE, its slots are known (the
    client releases them, and a later run may name them with their memories), so releasing
    each succeeds and new memories on those slots then run (a burst that records slots only
    for runs that succeed refuses the release as an unknown slot)."""
    model = _binary_model(OperationType.ADD)
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    rng = np.random.default_rng(15)
    x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    request = build_request(model, [x, y], output_shrink={0: 4})
    slots = [7 + n for n in range(len(request.pools))]
    with pytest.raises(HalError) as info:
        burst.execute(request, slots)
    assert info.value.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, \
        f"EXE-5: an output one element short gave {info.value.status.name}"
    for slot in slots:
        try:
            burst.release_memory_resource(slot)
        except HalError as e:
            pytest.fail(f"BURST-2: releasing slot {slot}, brought by a burst execution that failed, "
                        f"was refused: {e}")
    request = build_request(model, [x, y])
    burst.execute(request, slots)
    check_outputs([x + y], read_outputs(model, request, [(2, 3)]), model)


@pytest.mark.req("BURST-2")
def test_burst_slot_ids_are_64_bit(driver):
    """Slot ids are 64-bit: 2**32 and 2**32 + 1 are slots of their own, not slots 0 and 1
    again (a driver that keeps them in 32 bits runs the second request on the first's
    memories)."""
    model = _binary_model(OperationType.ADD)
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    rng = np.random.default_rng(13)
    for slots in ([0, 1], [2**32, 2**32 + 1], [2**63 - 2, 2**63 - 1]):
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(model, [x, y])
        burst.execute(request, slots)
        try:
            check_outputs([x + y], read_outputs(model, request, [(2, 3)]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-2: new memories on slots {slots} (slots 0 and 1 hold others): {e}")


@pytest.mark.req("BURST-1", "DRV-5")
def test_burst_outlives_the_callers_prepared_model(driver):
    """The caller lets go of the prepared model and keeps only its burst: the burst holds the
    prepared model (as an NNAPI burst holds a strong reference), so it runs on."""
    model = _binary_model(OperationType.MUL)
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    del prepared
    gc.collect()
    rng = np.random.default_rng(12)
    for turn in range(2):
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(model, [x, y])
        try:
            burst.execute(request, [2 * turn, 2 * turn + 1])  # new memories, new slots
            check_outputs([x * y], read_outputs(model, request, [(2, 3)]), model)
        except (HalError, pytest.fail.Exception) as e:
            pytest.fail(f"BURST-1: run {turn} on a burst whose prepared model the caller released: {e}")


@pytest.mark.req("BURST-2", "EXE-4")
def test_burst_slot_takes_each_requests_dimensions(driver):
    """A slot caches a memory, not a request: an input of unknown dimensions given (2, 3), then
    (3, 2), then (1, 6) over the same memories and slots (the same bytes' count each time) is
    read in each request's own shape; the output shape and values follow (EXE-4)."""
    b = ModelBuilder()
    x, out = b.operand(T.TENSOR_FLOAT32, (0, 0)), b.operand(T.TENSOR_FLOAT32, (0, 0))
    b.operation(OperationType.ADD, [x, x, b.constant(T.INT32, 0)], [out])
    model = b.build([x], [out])
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    rng = np.random.default_rng(12)
    request = None
    for shape in ((2, 3), (3, 2), (1, 6)):
        value = rng.uniform(-2, 2, shape).astype(np.float32)
        fresh = build_request(model, [value], [shape])
        if request is None:
            request = fresh
        else:
            request.pools[0].view()[:] = fresh.pools[0].view()
            request.inputs[0].dimensions = fresh.inputs[0].dimensions
        shapes, _ = burst.execute(request, list(range(len(request.pools))))
        got = [tuple(s.dimensions) for s in shapes]
        if got != [shape]:
            pytest.fail(f"EXE-4: a burst run with the input given dimensions {list(shape)} on the slots of "
                        f"earlier runs reported output shapes {got}")
        try:
            check_outputs([value + value], read_outputs(model, request, [shape]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-2: input dimensions {list(shape)} on the slots of earlier runs: {e}")


@pytest.mark.req("BURST-2")
@pytest.mark.parametrize("kind", KINDS)
def test_burst_slot_reads_new_contents_of_its_memory(driver, kind):
    """A slot names a memory, not its contents: the same input and output memories on the same
    slots, with new input bytes each run, give each run's own result (BURST-2)."""
    model = _binary_model(OperationType.ADD, (3, 5))
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    rng = np.random.default_rng(9)
    request = None
    for run in range(3):
        x, y = (rng.uniform(-2, 2, (3, 5)).astype(np.float32) for _ in range(2))
        fresh = build_request(model, [x, y], pool_kind=kind)
        if request is None:
            request = fresh
        else:
            request.pools[0].view()[:] = fresh.pools[0].view()
        burst.execute(request, [0, 1])
        try:
            check_outputs([x + y], read_outputs(model, request, [(3, 5)]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-2: run {run} on the same {kind} memories: {e}")
