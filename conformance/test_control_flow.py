"""Control flow (EXE-9): IF and WHILE with referenced subgraphs, on every execution path;
invalid control-flow models rejected (VAL-1); a WHILE that never ends stopped by the loop
timeout with MISSED_DEADLINE_*, never a hang.

A driver that declines IF / WHILE is skipped (getSupportedOperations may decline them), but a
driver that claims them must run them right.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import DataLocation, Model, Operand, Operation
from nncert.hal.types import (
    LOOP_TIMEOUT_DEFAULT_NS,
    LOOP_TIMEOUT_MAXIMUM_NS,
    ErrorStatus,
    OperandType,
    OperationType,
)
from nncert.testing.control_flow_models import (
    counting_feeds,
    counting_while_golden,
    counting_while_model,
    doubling_while_golden,
    doubling_while_model,
    dynamic_if_golden,
    dynamic_if_model,
    fibonacci_while_golden,
    fibonacci_while_model,
    if_golden,
    if_model,
)
from nncert.testing.harness import (
    FAST_PATHS,
    PATHS,
    add_model,
    check_outputs,
    execute,
    expect_invalid,
    prepare_or_skip,
    status_of,
)

MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
#: A 1 ms loop timeout: a loop that never ends must be stopped within this much (seconds),
#: allowing for the IPC of a hosted driver and a busy machine.
SHORT_LOOP_TIMEOUT_NS = 1_000_000
STOPPED_WITHIN_S = 1.0


def _run(driver, model: Model, feeds, path: str, output_dims=None, **budget):
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, feeds, output_dims)
    shapes, _ = execute(prepared, request, path, **budget)
    dims = [tuple(s.dimensions) for s in shapes] if shapes else output_dims
    return shapes, read_outputs(model, request, dims or [model.main.operands[i].dimensions
                                                        for i in model.main.output_indexes])


@pytest.mark.req("EXE-9", "EXE-3")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("condition", [True, False], ids=["then", "else"])
def test_if_runs_the_selected_branch(driver, path, condition):
    model = if_model()
    rng = np.random.default_rng(int(condition))
    a, b = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    _, actual = _run(driver, model, [np.array([condition]), a, b], path)
    check_outputs([if_golden(condition, a, b)], actual, model)


@pytest.mark.req("EXE-9")
@pytest.mark.parametrize("condition", [True, False], ids=["then", "else"])
def test_if_branch_inputs_listed_against_their_indexes(driver, condition):
    """Branches that list their inputs (a, b) against the order of their operand indexes: the
    IF's k-th data input is the branch's k-th listed input, so the else branch still computes
    a - b (a driver that passes them in operand order computes b - a)."""
    model = if_model(listed_against_indexes=True)
    rng = np.random.default_rng(2 + int(condition))
    a, b = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    _, actual = _run(driver, model, [np.array([condition]), a, b], "sync")
    try:
        check_outputs([if_golden(condition, a, b)], actual, model)
    except pytest.fail.Exception as e:
        pytest.fail(f"EXE-9: an IF whose branches list their inputs against their operand indexes: {e}")


@pytest.mark.req("EXE-9", "EXE-3")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("start", "bound"), [(0, 10), (3, 4), (5, 5), (7, 2)],
                         ids=["ten-turns", "one-turn", "no-turn", "bound-below-start"])
def test_while_counts_to_its_bound(driver, path, start, bound):
    """total = sum(start..bound-1): the loop-carried (input-output and state-only) operands are
    fed back, the input-only one is not; a false first condition returns the inputs."""
    model = counting_while_model()
    _, actual = _run(driver, model, counting_feeds(100, start, bound), path)
    check_outputs([counting_while_golden(100, start, bound)], actual, model)


@pytest.mark.req("EXE-9")
@pytest.mark.parametrize("path", PATHS)
def test_if_nested_in_while(driver, path):
    model = counting_while_model(nested_if=True)
    _, actual = _run(driver, model, counting_feeds(0, 0, 9), path)
    check_outputs([counting_while_golden(0, 0, 9, nested_if=True)], actual, model)


@pytest.mark.req("EXE-9", "EXE-4")
@pytest.mark.parametrize("condition", [True, False], ids=["then", "else"])
def test_if_output_shape_follows_the_branch(driver, condition):
    model = dynamic_if_model()
    x = np.array([1.0, -2.0, 0.5], np.float32)
    expected = dynamic_if_golden(condition, x)
    shapes, actual = _run(driver, model, [np.array([condition]), x], "sync", [(6,)])
    assert [tuple(s.dimensions) for s in shapes] == [expected.shape], \
        f"EXE-4: reported {[s.dimensions for s in shapes]}, expected {[expected.shape]}"
    check_outputs([expected], [actual[0][:expected.size]], model)


@pytest.mark.req("EXE-9", "EXE-4")
@pytest.mark.parametrize("n", [0, 2, 4])
def test_while_output_shape_changes_every_turn(driver, n):
    """The loop-carried tensor doubles each turn: its final length is known only at the end."""
    model = doubling_while_model()
    x = np.arange(3, dtype=np.float32)
    expected = doubling_while_golden(x, n)
    shapes, actual = _run(driver, model, [x, np.array([n], np.int32)], "sync", [e.shape for e in expected])
    assert [tuple(s.dimensions) for s in shapes] == [e.shape for e in expected], \
        f"EXE-4: reported {[s.dimensions for s in shapes]}, expected {[e.shape for e in expected]}"
    check_outputs(expected, actual, model)


# --- invalid models (VAL-1)


def _bad_condition_type(m: Model) -> None:
    m.main.operands[m.main.operations[0].inputs[0]].type = OperandType.TENSOR_INT32


def _bad_condition_shape(m: Model) -> None:
    m.main.operands[m.main.operations[0].inputs[0]].dimensions = (2,)


def _missing_branch_input(m: Model) -> None:
    m.main.operations[0].inputs.pop()


def _branch_type_mismatch(m: Model) -> None:
    """The IF's first data input is no longer of the branches' input type."""
    m.main.operands[m.main.operations[0].inputs[3]].type = OperandType.TENSOR_INT32


def _dangling_subgraph(m: Model) -> None:
    m.main.operands[m.main.operations[0].inputs[1]].location.offset = len(m.referenced)


def _not_a_subgraph(m: Model) -> None:
    """The then branch names a tensor operand instead of a SUBGRAPH."""
    m.main.operations[0].inputs[1] = m.main.operations[0].inputs[3]


def _while_input_count(m: Model) -> None:
    """The input-only operand is left out: the subgraphs take one input more than given."""
    m.main.operations[0].inputs.pop()


def _condition_is_body(m: Model) -> None:
    """Condition and body swapped: the condition model gives two outputs."""
    ins = m.main.operations[0].inputs
    ins[0], ins[1] = ins[1], ins[0]


def _subgraph_cycle(m: Model) -> None:
    """The body runs a WHILE of the same condition and body: it references itself."""
    body = m.referenced[1]
    refs = [m.main.operands[i] for i in m.main.operations[0].inputs[:2]]
    first = len(body.operands)
    body.operands += [Operand(r.type, lifetime=r.lifetime, location=DataLocation(0, r.location.offset))
                      for r in refs]
    body.operands.append(Operand(OperandType.TENSOR_INT32, (1,)))
    body.operations.append(Operation(OperationType.WHILE, [first, first + 1, *body.input_indexes],
                                     [first + 2]))


INVALID = [
    ("if", _bad_condition_type), ("if", _bad_condition_shape), ("if", _missing_branch_input),
    ("if", _branch_type_mismatch), ("if", _dangling_subgraph), ("if", _not_a_subgraph),
    ("while", _while_input_count), ("while", _condition_is_body), ("while", _subgraph_cycle),
]


@pytest.mark.req("VAL-1", "EXE-9")
@pytest.mark.parametrize(("kind", "mutate"), INVALID, ids=[f"{k}-{f.__name__[1:]}" for k, f in INVALID])
def test_invalid_control_flow_model_is_rejected(driver, kind, mutate):
    model = if_model() if kind == "if" else counting_while_model()
    mutate(model)
    for what, call in (("supported_operations", driver.supported_operations),
                       ("prepare_model", driver.prepare_model)):
        try:
            result = call(model)
        except HalError as e:
            assert e.status is ErrorStatus.INVALID_ARGUMENT, \
                f"VAL-1: {what} returned {e.status.name}, expected INVALID_ARGUMENT ({e.message})"
        else:
            pytest.fail(f"VAL-1: {what} accepted an invalid {kind.upper()} model "
                        f"(returned {type(result).__name__})")


# --- the loop timeout


def _expect_missed(driver, loop_timeout: int | None, path: str, within_s: float) -> None:
    model = counting_while_model(infinite=True)
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, counting_feeds(0, 0, 1))
    started = time.monotonic()
    status = status_of(lambda: execute(prepared, request, path, loop_timeout=loop_timeout))
    elapsed = time.monotonic() - started
    assert status in MISSED, \
        f"EXE-9: a WHILE past its loop timeout gave {status.name}, expected MISSED_DEADLINE_*"
    assert elapsed < within_s, f"EXE-9: the loop was stopped after {elapsed:.2f} s, not within {within_s} s"


#: A loop timeout that a loop of a few turns cannot exceed, and how long after its preparation
#: the model first runs such a loop under it.
FEW_TURNS_LOOP_TIMEOUT_NS = 400_000_000  # far above three turns' time on a loaded machine
PREPARED_AGE_S = 0.5


@pytest.mark.req("EXE-9")
def test_loop_timeout_counts_from_each_execution(driver):
    """The loop timeout bounds a loop from the start of the execution that runs it: a prepared
    model older than its loop timeout still runs a three-turn WHILE under a 400 ms one, on
    every path (a driver that arms the timer when it prepares the model fails every loop once
    the model is that old)."""
    model = counting_while_model()
    prepared = prepare_or_skip(driver, model)
    time.sleep(PREPARED_AGE_S)
    for path in PATHS:
        request = build_request(model, counting_feeds(100, 0, 3))
        try:
            execute(prepared, request, path, loop_timeout=FEW_TURNS_LOOP_TIMEOUT_NS)
        except HalError as e:
            pytest.fail(f"EXE-9: a {path} run of a three-turn WHILE under a "
                        f"{FEW_TURNS_LOOP_TIMEOUT_NS // 10**6} ms loop timeout, {PREPARED_AGE_S} s after "
                        f"preparation, failed: {e}")
        check_outputs([counting_while_golden(100, 0, 3)], read_outputs(model, request, [(1,)]), model)


@pytest.mark.req("EXE-9")
@pytest.mark.parametrize("path", PATHS)
def test_if_condition_of_any_nonzero_byte_is_true(driver, path):
    """A TENSOR_BOOL8 value is false when its byte is 0 and true otherwise: an IF whose
    condition byte is 2 runs its then branch (a driver testing the byte for 1 runs else)."""
    model = if_model()
    rng = np.random.default_rng(15)
    a, b = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    request = build_request(model, [np.array([True]), a, b])
    loc = request.inputs[0].location
    request.pools[loc.pool_index].view()[loc.offset] = 2
    try:
        execute(prepare_or_skip(driver, model), request, path)
    except HalError as e:
        pytest.fail(f"EXE-9: a {path} run of IF with condition byte 2 failed: {e}")
    try:
        check_outputs([if_golden(True, a, b)], read_outputs(model, request, [(2, 3)]), model)
    except pytest.fail.Exception as e:
        pytest.fail(f"EXE-9: IF with condition byte 2 (true) on {path}: {e}")


@pytest.mark.req("EXE-9")
@pytest.mark.parametrize("path", PATHS)
def test_while_updates_its_values_together(driver, path):
    """A WHILE body's outputs all come from the values the turn started with: (a, b) -> (b,
    a + b) from (2, 3), six turns, ends at (34, 55) (a driver that updates its loop-carried
    values in place, one after the other, adds the new a to b)."""
    model = fibonacci_while_model()
    feeds = [np.array([v], np.int32) for v in (2, 3, 0, 6)]
    try:
        _, got = _run(driver, model, feeds, path)
    except HalError as e:
        pytest.fail(f"EXE-9: a {path} run of the Fibonacci WHILE failed: {e}")
    check_outputs(fibonacci_while_golden(2, 3, 0, 6), got, model)


@pytest.mark.req("EXE-9")
@pytest.mark.parametrize("path", [*PATHS, *FAST_PATHS])
def test_loop_timeout_of_a_model_without_loops(driver, path):
    """A loop timeout bounds WHILE loops and nothing else: given to a model with no control
    flow (ADD), as NNAPI lets any execution set one, 0 and the maximum alike, the execution
    runs and gives the right outputs."""
    model = add_model((2, 3))
    prepared = prepare_or_skip(driver, model)
    rng = np.random.default_rng(9)
    feeds = [rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2)]
    for loop_timeout in (0, LOOP_TIMEOUT_MAXIMUM_NS):
        request = build_request(model, feeds)
        try:
            execute(prepared, request, path, loop_timeout=loop_timeout)
        except HalError as e:
            pytest.fail(f"EXE-9: a {path} execution of ADD (no loop) with a loop timeout of "
                        f"{loop_timeout} ns failed: {e}")
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [(2, 3)]), model)


@pytest.mark.req("EXE-9", "EXE-10")
@pytest.mark.parametrize("path", [*PATHS, *FAST_PATHS])
def test_endless_while_stops_at_the_loop_timeout(driver, path):
    """An endless WHILE with a 1 ms loop timeout fails with MISSED_DEADLINE_* at once."""
    _expect_missed(driver, SHORT_LOOP_TIMEOUT_NS, path, STOPPED_WITHIN_S)


@pytest.mark.req("EXE-9", "VAL-1")
@pytest.mark.parametrize("path", PATHS)
def test_negative_loop_timeout_is_invalid(driver, path):
    """A negative loop timeout is no duration: INVALID_ARGUMENT, not the default (None is how a
    caller asks for the default)."""
    model = counting_while_model()
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, counting_feeds(0, 0, 3))
    expect_invalid(lambda: execute(prepared, request, path, loop_timeout=-2),
                   f"a {path} execution with a loop timeout of -2 ns", "VAL-1")


@pytest.mark.req("EXE-9", "EXE-10")
@pytest.mark.parametrize("path", PATHS)
def test_endless_while_stops_at_a_zero_loop_timeout(driver, path):
    """A loop timeout of 0 is a timeout of 0, not "unset": the loop fails at once rather than
    after the default 2 s."""
    _expect_missed(driver, 0, path, STOPPED_WITHIN_S)


@pytest.mark.req("EXE-9", "EXE-10")
def test_endless_while_stops_at_the_default_loop_timeout(driver):
    """No loop timeout given: the default of 2 s applies (LOOP_TIMEOUT_DEFAULT_NS)."""
    _expect_missed(driver, None, "sync", LOOP_TIMEOUT_DEFAULT_NS / 1e9 + STOPPED_WITHIN_S)


@pytest.mark.req("EXE-9")
def test_a_loop_timeout_binds_only_its_own_execution(driver):
    """A loop timeout belongs to the execution it was given to: after one prepared model has
    stopped a long WHILE at a loop timeout of 0 on every path, its three-turn WHILE without a
    loop timeout (the default, 2 s) must still finish, on every path and on one burst run both
    times (a driver, or a burst, that keeps the last loop timeout it saw stops every later loop
    at once). How the stopped runs ended is test_endless_while_stops_at_a_zero_loop_timeout's
    to judge, not this test's."""
    model = counting_while_model()
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()  # "one-burst": the same burst both times

    def run(path, request, loop_timeout=None):
        if path == "one-burst":  # new memories, so new slots: 0.. the first time, then the next ones
            first = 0 if loop_timeout is not None else len(request.pools)
            return burst.execute(request, list(range(first, first + len(request.pools))),
                                 loop_timeout=loop_timeout)
        return execute(prepared, request, path, loop_timeout=loop_timeout)

    paths = (*PATHS, *FAST_PATHS, "one-burst")
    for path in paths:
        request = build_request(model, counting_feeds(0, 0, 2**31 - 1))
        status_of(lambda path=path, request=request: run(path, request, loop_timeout=0))
    for path in paths:
        request = build_request(model, counting_feeds(100, 0, 3))
        try:
            run(path, request)
        except HalError as e:
            pytest.fail(f"EXE-9: a {path} run of a three-turn WHILE with the default loop timeout, "
                        f"after runs with a loop timeout of 0, failed: {e}")
        check_outputs([counting_while_golden(100, 0, 3)], read_outputs(model, request, [(1,)]), model)


@pytest.mark.req("EXE-9", "VAL-1")
def test_the_maximum_loop_timeout_is_valid(driver):
    """LOOP_TIMEOUT_MAXIMUM_NS itself is a valid loop timeout: a three-turn WHILE runs under it
    on every path (a driver that bounds it with >= where > is meant rejects it)."""
    model = counting_while_model()
    prepared = prepare_or_skip(driver, model)
    for path in (*PATHS, *FAST_PATHS):
        request = build_request(model, counting_feeds(100, 0, 3))
        try:
            execute(prepared, request, path, loop_timeout=LOOP_TIMEOUT_MAXIMUM_NS)
        except HalError as e:
            pytest.fail(f"EXE-9: a {path} run of a three-turn WHILE with the maximum loop timeout "
                        f"({LOOP_TIMEOUT_MAXIMUM_NS} ns) failed: {e}")
        check_outputs([counting_while_golden(100, 0, 3)], read_outputs(model, request, [(1,)]), model)
