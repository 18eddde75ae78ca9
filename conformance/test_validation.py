"""VTS validation: invalid models and requests get INVALID_ARGUMENT (VAL-1).

Every mutation kind of the notes on VAL-1 (docs/requirements.md) is applied to a valid
single-operation model of every catalogue operation; ``supported_operations`` and
``prepare_model`` must both reject the result with INVALID_ARGUMENT.

Parameter values (VAL-1, the CTS's expected-failure cases): every constant parameter of the
same models set to each value its operation's rules reject (``parameter_mutations``: a stride
of 0, an axis out of range, a negative padding, a beta that is not positive, NaN); the driver
may refuse it at supported_operations, prepare_model or execution, but never run it.

Requests (VAL-1, VAL-2): every request mutation (``request_mutations``: an argument removed
or one too many, a location outside its pool or naming no pool, a length that is not the operand's, dimensions
that conflict with the model's or have another rank, a required input given no value, a pool
that is empty or too short) is applied to every input and output, on every execution path,
and must get INVALID_ARGUMENT without a byte of the caller's pools written. The requests carry
guard bytes around every argument (so every argument is also unaligned, which is valid):
valid requests must run right and write nothing but their outputs, and a short output buffer
must not be overrun. A representative set of models runs in CI; every operation under -m slow.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.model import Model, dtype_of
from nncert.hal.types import ErrorStatus, MeasureTiming, OperandType, OperationType
from nncert.ops import records
from nncert.testing.cases import sample_case
from nncert.testing.harness import (
    PATHS,
    check_outputs,
    execute,
    expect_invalid,
    prepare_or_skip,
    rejection_problems,
    run_fenced,
    status_of,
)
from nncert.testing.mutations import (
    GUARD,
    KINDS,
    bad_preferences,
    bad_priorities,
    model_mutations,
    parameter_mutations,
    pool_bytes,
    request_mutations,
    stray_writes,
)

T = OperandType


def _valid_keys() -> list:
    """One valid case per operation and distinct primary type (first signature, seed 0)."""
    keys = []
    for r in records():
        seen = set()
        for var_ in r.variants:
            if var_.primary in seen:
                continue
            seen.add(var_.primary)
            keys.append((r, r.signatures[0], var_, False if r.layout else None,
                         0 if r.activation else None, 0))
    return keys


@functools.cache
def _case(key):
    return sample_case(*key)


def _kind(label: str) -> str:
    return next(k for k in KINDS if label.startswith(k))


#: A test's kind -> the mutation kinds it runs (``_kind``: remove_operation takes in the
#: removed operation inputs and outputs).
_GROUPS = {kind: [k for k in KINDS if _kind(k) == kind] for kind in KINDS}


def _mutations(model, kind: str):
    """The mutations of ``model`` that the test of ``kind`` runs, in model_mutations' order (each
    made by its own generator: all of them for every test was most of the suite's CPU)."""
    for k in _GROUPS[kind]:
        yield from model_mutations(model, k)


def _model_params():
    """One test per valid model and mutation kind; each runs every instance of the kind."""
    params = []
    for key in _valid_keys():
        model, _ = _case(key).model()
        kinds = [kind for kind in KINDS if _GROUPS[kind] and next(_mutations(model, kind), None)]
        params += [pytest.param(key, kind, id=f"{key[0].name}-{key[2].label}-{kind}") for kind in kinds]
    return params


#: (driver, valid model) pairs whose valid model a test has already asked the driver about.
_ASKED: set = set()


@pytest.mark.req("VAL-1", "DRV-2")
@pytest.mark.parametrize("key,kind", _model_params())
def test_mutated_model_is_rejected(driver, key, kind):
    """The valid model is asked about first (by the first test of it this driver runs): what a
    driver remembers of it (an answer kept by the model's operation types, say) must not carry
    over to a mutation of it."""
    model, _ = _case(key).model()
    if (id(driver), key) not in _ASKED:
        try:
            driver.supported_operations(model)
        except DriverFault:
            raise
        except HalError as e:
            pytest.fail(f"VAL-1: supported_operations refused the valid model: {e}")
        _ASKED.add((id(driver), key))
    for label, mutated in _mutations(model, kind):
        expect_invalid(lambda m=mutated: driver.supported_operations(m), f"supported_operations ({label})")
        expect_invalid(lambda m=mutated: driver.prepare_model(m), f"prepare_model ({label})")


# --- parameter values (VAL-1; the CTS's expected-failure cases)


def _parameter_params() -> list:
    return [pytest.param(key, id=f"{key[0].name}-{key[2].label}") for key in _valid_keys()
            if next(parameter_mutations(_case(key).model()[0]), None) is not None]


def _ran(driver, model: Model, feeds, expected) -> bool:
    """Whether the driver ran ``model`` to the end as if it were valid: it claimed every
    operation, prepared it and executed it without an error."""
    try:
        if not all(driver.supported_operations(model)):
            return False
        request = build_request(model, feeds, [tuple(e.shape) for e in expected])
        driver.prepare_model(model).execute_synchronously(request)
    except DriverFault:
        raise
    except HalError:
        return False
    return True


@pytest.mark.req("VAL-1")
@pytest.mark.parametrize("key", _parameter_params())
def test_invalid_parameter_value_never_runs(driver, key):
    """Each constant parameter set to a value the operation's rules reject (a stride of 0, an
    axis out of range, a negative padding, a beta that is not positive: mutations.parameter_
    mutations): the driver may refuse it at supported_operations, prepare_model or execution,
    as NNAPI allows, but never run it as though it were valid."""
    case = _case(key)
    model, feeds = case.model()
    ran = [label for label, m in parameter_mutations(model) if _ran(driver, m, feeds, case.expected)]
    _report("VAL-1", "an invalid parameter value ran as though valid", ran)


# --- requests (VAL-1, VAL-2)

#: The paths a request is tried on: those of EXE-1 and BURST-1, and a fenced execution with
#: no fence to wait for, which a driver may run inline on a path of its own.
REQUEST_PATHS = (*PATHS, "fenced_unfenced")


def _two_outputs() -> tuple[Model, list[np.ndarray], list[np.ndarray]]:
    """x + y and x * y: two outputs sharing a pool, so that one written past its end lands in
    the guard before the other."""
    b = ModelBuilder()
    dims = (2, 3)
    x, y = b.operand(T.TENSOR_FLOAT32, dims), b.operand(T.TENSOR_FLOAT32, dims)
    act = b.constant(T.INT32, 0)
    total, product = b.operand(T.TENSOR_FLOAT32, dims), b.operand(T.TENSOR_FLOAT32, dims)
    b.operation(OperationType.ADD, [x, y, act], [total])
    b.operation(OperationType.MUL, [x, y, act], [product])
    rng = np.random.default_rng(7)
    feeds = [rng.uniform(-2, 2, dims).astype(np.float32) for _ in range(2)]
    return b.build([x, y], [total, product]), feeds, [feeds[0] + feeds[1], feeds[0] * feeds[1]]


#: The models CI runs the request tests on: two outputs in one pool (float32, 24-byte
#: arguments), a 4-D input (CONV_2D), 1-byte elements in and out (SELECT on bool8 and signed
#: quant8), 2-byte elements with three rank-1 inputs (CONCATENATION float16), and a change of
#: element size (QUANTIZE). Every other catalogue operation runs under -m slow.
REPRESENTATIVE = {"CONV_2D-float32", "SELECT-quant8_asymm_signed", "CONCATENATION-float16",
                  "QUANTIZE-float32-U=quant8_asymm"}


def _request_params() -> list:
    params = [pytest.param("two_outputs", id="two_outputs")]
    for k in _valid_keys():
        name = f"{k[0].name}-{k[2].label}"
        params.append(pytest.param(k, id=name, marks=() if name in REPRESENTATIVE else pytest.mark.slow))
    return params


def _request_model(key) -> tuple[Model, list[np.ndarray], list[np.ndarray]]:
    """A valid model, its input values and its golden outputs."""
    if key == "two_outputs":
        return _two_outputs()
    case = _case(key)
    model, feeds = case.model()
    return model, feeds, case.expected


def _run(prepared, request, path: str) -> None:
    """Execute on ``path``; raises HalError with the status on failure."""
    if path != "fenced_unfenced":
        execute(prepared, request, path, MeasureTiming.YES)
        return
    info = run_fenced(prepared, request, (), MeasureTiming.YES)
    if info.status is not ErrorStatus.NONE:
        raise HalError(info.status, info.message or "fenced execution failed")


def _report(requirement: str, what: str, problems: list[str]) -> None:
    if problems:
        shown = "; ".join(problems[:6]) + (f"; ... ({len(problems)} in all)" if len(problems) > 6 else "")
        pytest.fail(f"{requirement}: {what}: {shown}")


@pytest.mark.req("VAL-1", "VAL-2")
@pytest.mark.parametrize("path", REQUEST_PATHS)
@pytest.mark.parametrize("key", _request_params())
def test_mutated_request_is_rejected(driver, key, path):
    """Every request mutation gets INVALID_ARGUMENT, and no byte of any pool is written. The
    valid request runs first, on the same path and over the same pools as the mutations: what
    a driver keeps from a successful run over these memories (a mapping, a validation it
    remembers) must not let an invalid request through."""
    model, feeds, _ = _request_model(key)
    prepared = prepare_or_skip(driver, model)
    valid = build_request(model, feeds, guard=GUARD)
    try:
        _run(prepared, valid, path)
    except HalError as e:
        pytest.fail(f"VAL-1: the valid request failed on {path}: {e}")
    problems = rejection_problems(request_mutations(valid, model), lambda r: _run(prepared, r, path))
    _report("VAL-1", f"{path} execution of invalid requests (expected INVALID_ARGUMENT, nothing written)",
            problems)


@pytest.mark.req("VAL-2", "EXE-2")
@pytest.mark.parametrize("path", REQUEST_PATHS)
@pytest.mark.parametrize("key", _request_params())
def test_guarded_request_runs(driver, key, path):
    """A valid request whose arguments sit unaligned between guard bytes gives the right
    outputs and writes nothing else: neither the guards nor the inputs."""
    model, feeds, expected = _request_model(key)
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, feeds, guard=GUARD)
    before = pool_bytes(request)
    try:
        _run(prepared, request, path)
    except HalError as e:
        pytest.fail(f"VAL-2: a valid request with unaligned arguments failed on {path}: {e}")
    _report("VAL-2", f"{path} execution wrote outside its outputs",
            stray_writes(request, before, request.outputs))
    check_outputs(expected, read_outputs(model, request, [e.shape for e in expected]), model)


@pytest.mark.req("VAL-2", "EXE-5")
@pytest.mark.parametrize("path", REQUEST_PATHS)
@pytest.mark.parametrize("key", _request_params())
def test_short_output_request_is_not_overrun(driver, key, path):
    """An output buffer one element short (shorter by less, for a single element) fails the run
    (OUTPUT_INSUFFICIENT_SIZE; INVALID_ARGUMENT on a fenced path, which cannot report shapes)
    and nothing is written past any buffer."""
    model, feeds, _ = _request_model(key)
    prepared = prepare_or_skip(driver, model)
    sg = model.main
    allowed = (ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,) + \
        ((ErrorStatus.INVALID_ARGUMENT,) if path.startswith("fenced") else ())
    problems = []
    for i, idx in enumerate(sg.output_indexes):
        size = sg.operands[idx].byte_size()
        if size < 2:
            continue  # no shorter buffer has a length (a zero length is invalid)
        short = {i: min(dtype_of(sg.operands[idx].type).itemsize, size - 1)}
        request = build_request(model, feeds, guard=GUARD, output_shrink=short)
        before = pool_bytes(request)
        try:
            status = status_of(lambda r=request: _run(prepared, r, path))
        finally:
            stray = stray_writes(request, before, request.outputs)
        if status not in allowed:
            problems.append(f"output {i} one element short: {status.name}, expected "
                            f"{' or '.join(s.name for s in allowed)}")
        if stray:
            problems.append(f"output {i} one element short: wrote {', '.join(stray)}")
    _report("VAL-2", f"{path} execution with a short output buffer", problems)


def _constants_model() -> tuple[Model, list[np.ndarray], list[np.ndarray]]:
    """(x + c) * d with c and d tensor constants, one carried in the model's values and one
    in a memory pool (MEM-1)."""
    rng = np.random.default_rng(11)
    small, large = (2, 3), (8, 8)
    b = ModelBuilder()
    act = b.constant(T.INT32, 0)
    outs, feeds, expected = [], [], []
    for dims in (small, large):
        x = b.operand(T.TENSOR_FLOAT32, dims)
        c, d = (rng.uniform(-2, 2, dims).astype(np.float32) for _ in range(2))
        total, out = b.operand(T.TENSOR_FLOAT32, dims), b.operand(T.TENSOR_FLOAT32, dims)
        b.operation(OperationType.ADD, [x, b.constant(T.TENSOR_FLOAT32, c), act], [total])
        b.operation(OperationType.MUL, [total, b.constant(T.TENSOR_FLOAT32, d), act], [out])
        feeds.append(rng.uniform(-2, 2, dims).astype(np.float32))
        outs.append((x, out))
        expected.append((feeds[-1] + c) * d)
    return b.build([x for x, _ in outs], [o for _, o in outs]), feeds, expected


@pytest.mark.req("VAL-1", "EXE-3")
@pytest.mark.parametrize("path", REQUEST_PATHS)
def test_failed_first_execution_leaves_the_model_intact(driver, path):
    """The first execution of a new prepared model is an invalid request (an input removed); it
    must get INVALID_ARGUMENT and change nothing: the valid request then gives the right
    outputs on every path (work a driver defers to the first execution, such as uploading the
    constants, must not be marked done by one that failed)."""
    model, feeds, expected = _constants_model()
    prepared = prepare_or_skip(driver, model)
    valid = build_request(model, feeds)
    invalid = dataclasses.replace(valid, inputs=valid.inputs[:-1])
    status = status_of(lambda: _run(prepared, invalid, path))
    assert status is ErrorStatus.INVALID_ARGUMENT, \
        f"VAL-1: a first {path} execution missing an input gave {status.name}, expected INVALID_ARGUMENT"
    for after in dict.fromkeys((path, *PATHS)):
        request = build_request(model, feeds)
        try:
            _run(prepared, request, after)
        except HalError as e:
            pytest.fail(f"EXE-3: after a failed first {path} execution, a valid {after} execution "
                        f"failed: {e}")
        try:
            check_outputs(expected, read_outputs(model, request, [e.shape for e in expected]), model)
        except pytest.fail.Exception as e:
            pytest.fail(f"EXE-3: after a failed first {path} execution, the {after} execution: {e}")


@pytest.mark.req("VAL-1")
@pytest.mark.parametrize("preference", bad_preferences())
def test_bad_execution_preference_is_rejected(driver, preference):
    """INVALID_ARGUMENT, and nothing of the refused call stays: the same model with the default
    preference then prepares (a driver that stores the bad value before checking it fails)."""
    key = _valid_keys()[0]
    model, _ = _case(key).model()
    expect_invalid(lambda: driver.prepare_model(model, preference=preference), f"preference {preference}")
    prepare_or_skip(driver, model)


@pytest.mark.req("VAL-1", "EXE-10")
@pytest.mark.parametrize("priority", bad_priorities())
def test_bad_priority_is_rejected(driver, priority):
    """INVALID_ARGUMENT, and nothing of the refused call stays: the same model with the default
    priority then prepares."""
    key = _valid_keys()[0]
    model, _ = _case(key).model()
    expect_invalid(lambda: driver.prepare_model(model, priority=priority), f"priority {priority}")
    prepare_or_skip(driver, model)


@pytest.mark.req("VAL-1")
def test_cycle_of_three_adds_is_rejected(driver):
    """The VTS CycleTest: ADD -> ADD -> ADD feeding back into the first."""
    b = ModelBuilder()
    dims = (2, 2)
    x = b.operand(T.TENSOR_FLOAT32, dims)
    act = b.constant(T.INT32, 0)
    a, c, d = (b.operand(T.TENSOR_FLOAT32, dims) for _ in range(3))
    b.operation(OperationType.ADD, [x, d], [a])
    b.operation(OperationType.ADD, [a, x], [c])
    b.operation(OperationType.ADD, [c, x], [d])
    for op in b.operations:
        op.inputs.append(act)
    out = b.operand(T.TENSOR_FLOAT32, dims)
    b.operation(OperationType.ADD, [d, x, act], [out])
    model = b.build([x], [out])
    expect_invalid(lambda: driver.supported_operations(model), "supported_operations (cycle)")
    expect_invalid(lambda: driver.prepare_model(model), "prepare_model (cycle)")


@pytest.mark.req("VAL-1")
def test_operations_out_of_execution_order_are_rejected(driver):
    """A model lists its operations in execution order (the VTS: an operation may not read an
    operand before the operation that writes it): an ADD chain with a reader moved before its
    writer, or a writer after its reader, is invalid, for supported_operations and for
    prepare_model (a driver that sorts the operations itself accepts it). The operations of
    the catalogue's single-operation models have no order to break, so the chain is here."""
    b = ModelBuilder()
    dims = (2, 2)
    x = b.operand(T.TENSOR_FLOAT32, dims)
    act = b.constant(T.INT32, 0)
    a, c, out = (b.operand(T.TENSOR_FLOAT32, dims) for _ in range(3))
    b.operation(OperationType.ADD, [x, x, act], [a])
    b.operation(OperationType.ADD, [a, x, act], [c])
    b.operation(OperationType.ADD, [c, a, act], [out])
    model = b.build([x], [out])
    mutations = list(model_mutations(model, "execution_order"))
    assert mutations, "the chain must have operations to move"
    for label, bad in mutations:
        expect_invalid(lambda bad=bad: driver.supported_operations(bad), f"supported_operations ({label})")
        expect_invalid(lambda bad=bad: driver.prepare_model(bad), f"prepare_model ({label})")
