"""What the suites do with a driver: prepare (or skip if declined), execute on a given path,
and judge the outputs. One place, so every suite skips, fails and reports the same way."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

import numpy as np
import pytest

from nncert.drivers.base import (
    Deadline,
    Driver,
    FencedExecutionCallback,
    FencedExecutionInfo,
    FirstRun,
    PreparedModel,
    SyncFence,
    hang_timeout,
)
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError, ValidationError
from nncert.hal.memory import Memory
from nncert.hal.model import Model, OutputShape, Request, Timing
from nncert.hal.types import LATEST, ErrorStatus, MeasureTiming, OperandType, OperationType
from nncert.hal.validation import validate_model
from nncert.repro import standalone
from nncert.testing import triage
from nncert.testing.cases import OpCase, context_for, state_values, stepped
from nncert.testing.criteria import output_mismatches

#: The execution paths of EXE-1 and BURST-1.
PATHS = ("sync", "async", "fenced", "burst")
#: Paths ``execute`` also takes, on which a driver may take a shortcut of its own: a burst
#: whose slots already hold the request's memories (its warm path), and a fenced execution
#: with no fence to wait for (which may run inside the call).
FAST_PATHS = ("burst-warm", "fenced-no-wait")
#: The loop timeout of the warm-up run of the "burst-warm" path.
WARM_UP_LOOP_TIMEOUT_NS = 1_000_000


def execute(prepared: PreparedModel, request: Request, path: str = "sync",
            measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
            loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
    """Run ``request`` on ``path`` with the given deadline and loop timeout (EXE-9, EXE-10);
    raises HalError with the status on failure."""
    if path == "sync":
        return prepared.execute_synchronously(request, measure, deadline, loop_timeout)
    if path == "async":
        callback = prepared.execute(request, measure, deadline, loop_timeout)
        if not callback.notified(hang_timeout()):
            raise DriverFault("HANG", f"the execution callback was not notified within {hang_timeout():g} s")
        return callback.wait().raise_for_status()
    if path == "fenced":
        # An already signalled wait-for fence: the driver's real fence path, not the shortcut.
        fence, callback = prepared.execute_fenced(request, [SyncFence.signalled()], measure, deadline,
                                                  loop_timeout)
        info = fenced_info(fence, callback)
        if info.status is not ErrorStatus.NONE:
            raise HalError(info.status, info.message or "fenced execution failed")
        return [], info.timing_launched
    if path == "burst":
        burst = prepared.configure_execution_burst()
        return burst.execute(request, list(range(len(request.pools))), measure, deadline, loop_timeout)
    if path == "burst-warm":
        # A fresh burst per execution only ever takes the cold path: run the request once
        # first (its outcome aside; a 1 ms loop timeout keeps a long loop short), so that every
        # slot is cached when the run under test comes (BURST-2).
        burst = prepared.configure_execution_burst()
        slots = list(range(len(request.pools)))
        try:
            burst.execute(request, slots, MeasureTiming.NO, None, WARM_UP_LOOP_TIMEOUT_NS)
        except DriverFault:
            raise  # a crash or hang is the outcome, not a warm-up's failure
        except HalError:
            pass
        return burst.execute(request, slots, measure, deadline, loop_timeout)
    if path == "fenced-no-wait":
        info = run_fenced(prepared, request, (), measure, deadline, loop_timeout)
        if info.status is not ErrorStatus.NONE:
            raise HalError(info.status, info.message or "fenced execution failed")
        return [], info.timing_launched
    raise ValueError(f"unknown execution path {path!r} (known: {', '.join((*PATHS, *FAST_PATHS))})")


def add_model(dims: Sequence[int] = (2, 3)) -> Model:
    """x + y of two float32 inputs: the smallest model, for tests about the paths rather
    than the arithmetic (deadlines, bursts)."""
    b = ModelBuilder()
    x, y = b.operand(OperandType.TENSOR_FLOAT32, dims), b.operand(OperandType.TENSOR_FLOAT32, dims)
    out = b.operand(OperandType.TENSOR_FLOAT32, dims)
    b.operation(OperationType.ADD, [x, y, b.constant(OperandType.INT32, 0)], [out])
    return b.build([x, y], [out])


def status_of(call: Callable[[], object]) -> ErrorStatus:
    """The status of a driver call: NONE when it returns, the HalError's status when it
    fails. A DriverFault (the driver died or hung) propagates, to be classified as such."""
    try:
        call()
    except DriverFault:
        raise
    except HalError as e:
        return e.status
    return ErrorStatus.NONE


def run_fenced(prepared: PreparedModel, request: Request, wait_for: Sequence[SyncFence] = (),
               measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
               loop_timeout: int | None = None,
               timeout_after_fence: int | None = None) -> FencedExecutionInfo:
    """A fenced execution followed to its end: its status and both timings (EXE-1, EXE-8).
    A failure the call raises at once (it may, with nothing to wait for) becomes the status."""
    try:
        fence, callback = prepared.execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                                  timeout_after_fence)
    except DriverFault:
        raise
    except HalError as e:
        return FencedExecutionInfo(e.status, message=e.message)
    return fenced_info(fence, callback)


def fenced_info(fence: SyncFence | None, callback: FencedExecutionCallback) -> FencedExecutionInfo:
    """What a fenced execution's callback says once its fence is signalled (EXE-8)."""
    wait_fence(fence)
    return callback.get_execution_info()


def expect_invalid(call: Callable[[], object], what: str, requirement: str = "VAL-1") -> None:
    """Fail unless ``call`` is rejected with INVALID_ARGUMENT (VAL-1; ``requirement`` names the
    rule the test is about in the message)."""
    try:
        result = call()
    except HalError as e:
        if e.status is not ErrorStatus.INVALID_ARGUMENT:
            pytest.fail(f"{requirement}: {what} returned {e.status.name}, expected INVALID_ARGUMENT "
                        f"({e.message})")
        return
    pytest.fail(f"{requirement}: {what} accepted an invalid argument (returned {type(result).__name__})")


def rejection_problems(mutations: Iterable[tuple[str, Request]],
                       run: Callable[[Request], object]) -> list[str]:
    """What went wrong running each labelled invalid request with ``run``: anything but
    INVALID_ARGUMENT, and any byte written in its pools (VAL-1, VAL-2)."""
    from nncert.testing.mutations import pool_bytes, stray_writes

    problems = []
    for label, request in mutations:
        before = pool_bytes(request)
        try:
            status = status_of(lambda r=request: run(r))
        finally:
            stray = stray_writes(request, before)
        if status is not ErrorStatus.INVALID_ARGUMENT:
            problems.append(f"{label}: {'accepted' if status is ErrorStatus.NONE else status.name}")
        if stray:
            problems.append(f"{label}: wrote {', '.join(stray)}")
    return problems


def wait_fence(fence: SyncFence | None) -> None:
    """Wait for a fence a driver returned; one never signalled is a hang (EXE-1, MLTS-2)."""
    if fence is not None and not fence.wait(hang_timeout()):
        raise DriverFault("HANG", f"the fence returned by execute_fenced was not signalled within "
                                  f"{hang_timeout():g} s")


class Declined(pytest.skip.Exception):
    """The skip of a test whose driver declines what it needs: an operation or type in
    ``supported_operations``, an optional feature (compilation caching, memory domains), a
    newer HAL version. A certification report counts it DECLINED, with the driver's reason,
    never as silently skipped."""


def decline(reason: str) -> NoReturn:
    """Skip the current test as declined by the driver, for ``reason``."""
    raise Declined(reason, allow_module_level=True)


class CaseError(AssertionError):
    """A case that ran and broke a rule; the message names the requirement (DRV-2, EXE-4,
    ACC-*). An AssertionError, so that a test raising it fails as any assertion does.
    ``outputs``: what the driver computed, when the failure is about its values."""

    def __init__(self, message: str, outputs: list[np.ndarray] | None = None) -> None:
        super().__init__(message)
        self.outputs = outputs


def declined(driver: Driver, model: Model) -> str | None:
    """Why the driver declines ``model`` (each declined operation with the driver's reason), or
    None. A model that needs a newer HAL version than the driver's feature level is declined too:
    such a driver rightly calls it invalid, and the test is not about that (VER-1)."""
    return _too_new(driver, model) or _decline_reason(driver, model, driver.supported_operations(model))


def claim(driver: Driver, model: Model, request: Request | None = None) -> tuple[str | None, FirstRun]:
    """``declined``, and what prepares the model next and runs ``request`` on it once
    synchronously (for a model not declined): ``Driver.first_run``, which a hosted driver
    answers in one round trip. A reproducer being written (``standalone``) needs the
    driver's calls apart: it is written after the claim and before the preparation, which
    may crash."""
    reason = _too_new(driver, model)
    if reason is not None:  # the driver is not asked
        return reason, FirstRun([], functools.partial(driver.prepare_model, model),
                                lambda prepared: prepared.execute_synchronously(request))  # type: ignore[arg-type]
    # Driver.first_run itself makes the calls apart, the preparation only when asked for.
    first = driver.first_run(model, request) if standalone.ACTIVE is None else \
        Driver.first_run(driver, model, request)
    return _decline_reason(driver, model, first.supported, first.reasons), first


def _too_new(driver: Driver, model: Model) -> str | None:
    if driver.feature_level < LATEST and _needs_newer_version(model, driver.feature_level):
        return f"{driver.name} is HAL {driver.feature_level.label}: the model needs a newer version"
    return None


def _decline_reason(driver: Driver, model: Model, supported: list[bool],
                    reasons: list[str | None] | None = None) -> str | None:
    """Why ``declined`` declines, given the driver's ``supported_operations`` flags (and its
    ``decline_reasons`` when it gave them with the flags)."""
    if len(supported) != len(model.main.operations):
        raise CaseError(f"DRV-2: supported_operations returned {len(supported)} flags for "
                          f"{len(model.main.operations)} operations")
    if all(supported):
        return None
    if reasons is None:
        reasons = driver.decline_reasons(model)
    if len(reasons) != len(supported):
        reasons = [None if ok else "" for ok in supported]
    # One entry per operation type and reason: a real model declines the same thing many times.
    counts: dict[tuple[str, str], int] = {}
    for op, ok, reason in zip(model.main.operations, supported, reasons, strict=True):
        if not ok:
            key = (op.type.name, reason or "")
            counts[key] = counts.get(key, 0) + 1
    names = [name + (f" x{n}" if n > 1 else "") + (f" ({reason})" if reason else "")
             for (name, reason), n in counts.items()]
    return f"{driver.name} declines {'; '.join(names)}"


def _needs_newer_version(model: Model, level) -> bool:
    """Invalid at ``level`` and valid at the latest version: it uses something newer."""
    try:
        validate_model(model, level)
    except ValidationError:
        try:
            validate_model(model)
        except ValidationError:
            return False  # invalid at every version: a test about validation, not ours to decline
        return True
    return False


def prepare_or_skip(driver: Driver, model: Model) -> PreparedModel:
    """Prepare a model the driver claims; skip (never fail) when it declines an operation.
    A claimed model that then fails to prepare is a failure (DRV-2)."""
    reason, first = claim(driver, model)
    if reason:
        decline(reason)
    try:
        return prepare_claimed(driver, model, first.prepare)
    except CaseError as e:
        pytest.fail(str(e))


def prepare_claimed(driver: Driver, model: Model,
                    prepare: Callable[[], PreparedModel] | None = None) -> PreparedModel:
    """Prepare a model whose every operation the driver claimed (with ``prepare``, what
    ``claim`` returned for it): failing is a DRV-2 breach."""
    try:
        return driver.prepare_model(model) if prepare is None else prepare()
    except HalError as e:
        raise CaseError(f"DRV-2: claimed every operation, then prepare_model failed: {e}") from e


def own_criterion(model: Model, unspecified: bool = False) -> bool:
    """Whether an operation of ``model`` has its outputs judged by its record's ``compare``
    (random samples, boxes after suppression) rather than element-wise; with
    ``unspecified``, also one that may leave results unspecified (int32 DIV by zero)."""
    from nncert.ops import get

    return any((r := get(op.type)) is not None and
               (r.compare is not None or (unspecified and r.unspecified is not None))
               for sg in (model.main, *model.referenced) for op in sg.operations)


def check_outputs(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], model: Model,
                  relaxed: bool = False, feeds: Sequence[np.ndarray] | None = None) -> None:
    """Fail on outputs outside the tolerance; with the model's ``feeds``, the failure carries
    the N-way verdict of the peer runtimes (when triage is on). A model with an operation
    judged by its record's own criterion (random samples) has its output shapes checked
    only: the per-operation suite judges its values (``case_problems``)."""
    if own_criterion(model):
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            if np.shape(a) != np.shape(e):
                pytest.fail(f"output {i}: shape {list(np.shape(a))}, expected {list(np.shape(e))}")
        return
    problems = output_mismatches(model, expected, actual, relaxed)
    if problems:
        message = "; ".join(str(m) for m in problems)
        if feeds is not None:
            message += three_way(model, feeds, expected, actual, relaxed)
        pytest.fail(message)


def check_case(driver: Driver, case: OpCase, variation: str = "base", path: str = "sync",
               pool_kind: str = "ashmem") -> str | None:
    """Run one generated case on the driver and check it against the golden, outside pytest
    too (the MLTS random-model stress uses it). Returns why the case was not run (a newer HAL
    version, a declined operation) or None; raises CaseError when it broke a rule."""
    version = case.variation_version(variation)
    if version > driver.feature_level:
        return f"needs HAL {version.label}, driver is {driver.feature_level.label}"
    model, feeds = case.model(variation, pool_kind)
    expected = case.variation_expected(variation)
    expected_dims = [tuple(e.shape) for e in expected]
    # Built first, so that a synchronous run is asked for with the claim (Driver.first_run).
    request = build_request(model, feeds, expected_dims, pool_kind=pool_kind)
    inputs_before = _input_pool_bytes(request)
    reason, first = claim(driver, model, request if path == "sync" else None)
    if reason:
        if standalone.ACTIVE is not None and standalone.ACTIVE.declined:  # what the driver declines
            standalone.ACTIVE.before_case(driver, model, feeds, expected, variation == "relaxed",
                                          f"The driver declines this case ({reason}); the "
                                          f"reproducer runs it on the runtime anyway.", declined=True)
        return reason
    if standalone.ACTIVE is not None:  # before the driver runs it: a crash leaves the reproducer
        standalone.ACTIVE.before_case(driver, model, feeds, expected, variation == "relaxed",
                                      _criterion_note(case))
    prepared = prepare_claimed(driver, model, first.prepare)
    try:
        shapes, _ = first.execute(prepared) if path == "sync" else execute(prepared, request, path)
    except HalError as e:
        raise CaseError(f"DRV-2: claimed every operation, then {path} execution failed: {e}") from e
    if variation == "dynamic_output" or shapes:  # (a fenced run reports none; a static model's may omit them)
        got = [tuple(s.dimensions) for s in shapes]
        if got != expected_dims:
            raise CaseError(f"EXE-4: output shapes reported {got}, expected {expected_dims}")
        short = [i for i, s in enumerate(shapes) if not s.is_sufficient]
        if short:
            raise CaseError(f"EXE-4: a successful run reported output(s) {short} as insufficient")
    if _input_pool_bytes(request) != inputs_before:
        raise CaseError("MEM-2: the execution wrote into its input memory, which the driver may only read "
                        "(an operation run in place on the caller's input?)")
    actual = read_outputs(model, request, expected_dims)
    if variation == "output_consumed":  # the outputs, then ADD(output, output) of each, halved
        n, base = len(case.expected), case.model(pool_kind=pool_kind)[0]
        halved = [_halved(a, o.type) for a, o in zip(actual[n:], case.outputs, strict=True)]
        problems = case_problems(case, actual[:n], base) + \
            [f"the output as ADD(output, output) read it (halved): {p}"
             for p in case_problems(case, halved, base)]
    elif variation == "then_inverse":  # the second operation's output, against its own golden
        problems = [str(m) for m in output_mismatches(model, expected, actual)]
    else:
        problems = case_problems(case, actual, model, relaxed=variation == "relaxed")
    if problems:
        raise CaseError("; ".join(problems), actual)
    return None


def _input_pool_bytes(request: Request) -> list[bytes]:
    """The bytes of every shared-memory pool that holds an input and no output: what the
    driver reads and must leave as it is."""
    written = {a.location.pool_index for a in request.outputs}
    pools = sorted({a.location.pool_index for a in request.inputs if not a.has_no_value} - written)
    return [bytes(request.pools[p].view()) for p in pools if isinstance(request.pools[p], Memory)]


def _criterion_note(case: OpCase) -> str:
    """What a standalone reproducer's element-wise comparison misses of the case's criterion."""
    record = case.record
    if record.compare is not None:
        return (f"nncert judges {record.name}'s outputs with a criterion of its own, not element by "
                f"element: run.py compares element by element, so a difference it reports may be one "
                f"nncert accepts.")
    if record.unspecified is not None:
        return (f"Some elements of {record.name}'s outputs may take any value for some inputs (nncert "
                f"does not judge them): run.py compares every element.")
    return ""


def case_problems(case: OpCase, actual: Sequence[np.ndarray], model: Model | None = None,
                  relaxed: bool = False) -> list[str]:
    """Why a driver's outputs of ``case`` are wrong (empty: accepted): the record's own
    criterion where it has one (boxes after suppression, random samples), else ACC-1..4 per
    output type."""
    record = case.record
    if record.compare is not None:
        return record.compare(context_for(case), list(case.expected), list(actual), relaxed)
    if record.unspecified is not None:  # any value is right there: take the golden's
        masks = record.unspecified(context_for(case))
        actual = [a if m is None or np.shape(a) != np.shape(e) else
                  np.where(np.broadcast_to(m, np.shape(e)), e, a)
                  for a, e, m in zip(actual, case.expected, masks, strict=True)]
    model = model if model is not None else case.model()[0]
    return [str(m) for m in output_mismatches(model, case.expected, actual, relaxed)]


#: Executions of one prepared model in a state chain: the case, then its state fed back,
#: then a reset to the first state (a streaming caller starting a new sequence).
STATE_STEPS = 3


def run_state_chain(driver: Driver, case: OpCase, path: str = "sync") -> None:
    """A recurrent operation's case run ``STATE_STEPS`` times on one prepared model, as a
    streaming caller runs it: each execution's state outputs go back into the state inputs
    of the next, then the first state again (a new sequence); the other inputs change at
    every step. Every step is judged against the golden of exactly its inputs, so a driver
    that keeps state of its own between executions (as a variable tensor does) or reads
    stale inputs fails. Skips when the driver declines; fails as run_case does."""
    variation = "base"
    if any(ci.const for ci in case.inputs if ci.operand is not None and
           ci.arg.name in {name for name, _ in case.record.state}):
        variation = "all_tensors_as_inputs"  # a constant state cannot be fed back
    version = case.variation_version(variation)
    if version > driver.feature_level:
        decline(f"needs HAL {version.label}, driver is {driver.feature_level.label}")
    model, _ = case.model(variation)
    reason, first = claim(driver, model)
    if reason:
        decline(reason)
    try:
        prepared = prepare_claimed(driver, model, first.prepare)
    except CaseError as e:
        pytest.fail(str(e))
    first = state_values(case)
    current, actual = case, None
    for step in range(STATE_STEPS):
        if step:
            current = stepped(case, step, first if step == STATE_STEPS - 1 else state_values(case, actual))
        model, feeds = current.model(variation)
        dims = [tuple(e.shape) for e in current.expected]
        request = build_request(model, feeds, dims)
        try:
            execute(prepared, request, path)
        except HalError as e:
            pytest.fail(f"DRV-2: execution {step + 1} of the state chain failed: {e}")
        actual = read_outputs(model, request, dims)
        problems = case_problems(current, actual, model)
        if problems:
            what = ("the case's state" if step == 0 else "the first state again" if step == STATE_STEPS - 1
                    else "the state fed back")
            pytest.fail(f"execution {step + 1} of the state chain ({what}): {'; '.join(problems)}")


def three_way(model: Model, feeds: Sequence[np.ndarray], expected: Sequence[np.ndarray],
              actual: Sequence[np.ndarray] | None, relaxed: bool = False,
              agree: Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], bool] | None = None) -> str:
    """The line of the N-way verdict for a failing case (saying it was not triaged once the
    session's triage budget is spent), or "" (triage off). ``agree``: whether two sets of
    outputs agree (default: within the tolerances of ACC-1..4)."""
    if triage.ACTIVE is None:
        return ""
    verdict = triage.ACTIVE.verdict(model, feeds, expected, actual, relaxed, agree)
    return "" if verdict is None else f"\n{verdict.summary}"


def _case_agreement(case: OpCase, relaxed: bool
                    ) -> Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], bool] | None:
    """How the N-way verdict compares two sets of a case's outputs when its record judges
    them by a criterion of its own (random samples, boxes after suppression); None: by the
    tolerances. A variation's model may repeat the case's outputs (``output_consumed``):
    each repetition is judged."""
    if case.record.compare is None:
        return None
    n, ctx = len(case.expected), context_for(case)
    return lambda one, other: all(not case.record.compare(ctx, list(one[k:k + n]), list(other[k:k + n]),
                                                          relaxed) for k in range(0, len(one), n))


def _halved(value: np.ndarray, t: OperandType) -> np.ndarray:
    """Half of ADD(output, output) as read back, to compare with the output's golden:
    quantised, the stored values as they are (the copy has twice the scale); int32, an odd
    value (never twice an integer) as INT32_MIN."""
    a = np.asarray(value)
    if t.is_quant:
        return a
    if t is OperandType.TENSOR_INT32:
        return np.where(a % 2 == 0, a // 2, np.iinfo(np.int32).min).astype(a.dtype)
    return (a / 2).astype(a.dtype)


def run_case(driver: Driver, case: OpCase, variation: str = "base", path: str = "sync",
             pool_kind: str = "ashmem") -> None:
    """check_case as a test: skipped when not run, failed when a rule is broken. A failure
    carries the N-way verdict of the peer runtimes when triage is on (nncert.testing.triage)."""
    try:
        reason = check_case(driver, case, variation, path, pool_kind)
    except CaseError as e:
        model, feeds = case.model(variation)
        relaxed = variation == "relaxed"
        verdict = three_way(model, feeds, case.variation_expected(variation), e.outputs, relaxed,
                            _case_agreement(case, relaxed))
        pytest.fail(f"{e}{verdict}")
    if reason:
        decline(reason)
