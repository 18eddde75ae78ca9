"""Run a whole HAL model with the catalogue's reference kernels (the golden path)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar

import numpy as np

from nncert.hal.errors import HalError
from nncert.hal.model import Model, Operand, Operation, Subgraph
from nncert.hal.types import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, ErrorStatus, OperandLifeTime
from nncert.ops import control_flow, get
from nncert.ops.base import ShapeError, TooLarge, Unknown, to_real
from nncert.ops.evaluate import evaluate

#: (operation index, operation, its input operands (None: omitted) and values, its output
#: operands, its results) -> results.
AfterOperation = Callable[[int, Operation, list, list, list[Operand], list[np.ndarray]], list[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class ExecutionBudget:
    """What one execution may spend (EXE-9, EXE-10): ``deadline``, an absolute
    time.monotonic_ns() value checked between operations (None: none), and ``loop_timeout``,
    the nanoseconds each WHILE loop may run (None: unbounded, which only a faulty driver uses).
    """

    deadline: int | None = None
    loop_timeout: int | None = LOOP_TIMEOUT_DEFAULT_NS

    @classmethod
    def for_request(cls, deadline: int | None, loop_timeout: int | None) -> ExecutionBudget:
        """The budget of a request, its loop timeout as ``loop_timeout_of`` gives it."""
        return cls(deadline, loop_timeout_of(loop_timeout))


def loop_timeout_of(loop_timeout: int | None) -> int:
    """A request's loop timeout in ns: None is the default (2 s), one above
    LOOP_TIMEOUT_MAXIMUM_NS is cut to it (as NNAPI's setLoopTimeout); a negative one is
    INVALID_ARGUMENT."""
    if loop_timeout is None:
        return LOOP_TIMEOUT_DEFAULT_NS
    if loop_timeout.__class__ is not int or loop_timeout < 0:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"invalid loop timeout {loop_timeout!r} ns")
    return min(loop_timeout, LOOP_TIMEOUT_MAXIMUM_NS)


#: The budget run_model applies when it is given none: the default (no deadline, 2 s loops)
#: outside an ``execution_budget`` block.
_DEFAULT_BUDGET = ExecutionBudget()
_BUDGET: ContextVar[ExecutionBudget | None] = ContextVar("nncert_execution_budget", default=None)


@contextlib.contextmanager
def execution_budget(budget: ExecutionBudget) -> Iterator[ExecutionBudget]:
    """Within the block (this thread or task only), run_model applies ``budget``: a driver
    sets it around its computation, so that hooks which call run_model (the mutants) keep it."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def current_budget() -> ExecutionBudget:
    return _BUDGET.get() or _DEFAULT_BUDGET


def run_subgraph(model: Model, subgraph: Subgraph, inputs: Sequence[np.ndarray],
                 after: AfterOperation | None = None,
                 budget: ExecutionBudget | None = None,
                 constants: Constants | None = None) -> list[np.ndarray]:
    """Execute ``subgraph`` on ``inputs`` (raw arrays, one per subgraph input) and return the
    raw output arrays. Shapes unknown in the model are taken from the actual values (EXE-4).
    ``after`` sees (and may replace) each operation's results: the mutants' hook; it sees the
    operations inside IF / WHILE subgraphs too (not the IF / WHILE itself). ``budget``
    (default: the current one) bounds the run: its deadline is checked before each
    operation, its loop timeout bounds each WHILE (EXE-9, EXE-10). ``constants``: a cache of
    the model's constant arrays (read-only), kept by a caller that runs the same model again
    (a prepared model), so that they are read from the pools once.

    Raises HalError: INVALID_ARGUMENT for an operation the catalogue rejects at run time
    (e.g. incompatible dynamic shapes), GENERAL_FAILURE for an operation it lacks,
    MISSED_DEADLINE_TRANSIENT once the deadline or a loop timeout has passed.
    """
    if budget is None:
        budget = _BUDGET.get() or _DEFAULT_BUDGET
    deadline = budget.deadline
    values: list[np.ndarray | None] = [None] * len(subgraph.operands)
    for idx, value in zip(subgraph.input_indexes, inputs, strict=True):
        values[idx] = None if value is None else np.asarray(value)
    const_idx = set()
    for idx, operand in enumerate(subgraph.operands):
        if operand.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
            values[idx] = _constant(model, subgraph, idx, operand, constants)
            const_idx.add(idx)
    for n, op in enumerate(subgraph.operations):
        if deadline is not None and time.monotonic_ns() >= deadline:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                           f"deadline passed before operation {n} ({op.type.name})")
        record = get(op.type)
        out_ops = [subgraph.operands[idx] for idx in op.outputs]
        if record is None:
            runner = control_flow.RUNNERS.get(op.type)
            if runner is None:
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"operation {n} ({op.type.name}) has no reference kernel")

            def run_branch(m: Model, sg: Subgraph, xs: Sequence[np.ndarray],
                           b: ExecutionBudget) -> list[np.ndarray]:
                return run_subgraph(m, sg, xs, after, b, constants)

            outs = runner(model, subgraph, op, values, run_branch, budget)
        else:
            in_ops: list[Operand | None] = []
            real: list[np.ndarray | None] = []
            for idx in op.inputs:
                operand = subgraph.operands[idx]
                if operand.lifetime is OperandLifeTime.NO_VALUE or values[idx] is None:
                    in_ops.append(None)
                else:
                    in_ops.append(_with_actual_shape(operand, values[idx]))
                real.append(_constant_real(subgraph, idx, operand, values[idx], constants)
                            if record.dequantize and idx in const_idx else None)
            try:
                outs = evaluate(record, in_ops, [values[i] for i in op.inputs], out_ops, real=real)
            except (ShapeError, Unknown) as e:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"operation {n} ({op.type.name}): {e}") from None
            except TooLarge as e:
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"operation {n} ({op.type.name}): {e}") from None
            if after is not None:
                outs = after(n, op, in_ops, [values[i] for i in op.inputs], out_ops, outs)
        for idx, arr, operand in zip(op.outputs, outs, out_ops, strict=True):
            declared = operand.dimensions
            if (declared and any(d and d != a for d, a in zip(declared, arr.shape, strict=False))) \
                    or (declared and len(declared) != arr.ndim):
                raise HalError(ErrorStatus.INVALID_ARGUMENT,
                               f"operation {n} ({op.type.name}) output operand {idx} is declared "
                               f"{list(declared)} but computes to {list(arr.shape)}")
            values[idx] = arr
    return [values[idx] for idx in subgraph.output_indexes]


def run_model(model: Model, inputs: Sequence[np.ndarray], after: AfterOperation | None = None,
              budget: ExecutionBudget | None = None, constants: Constants | None = None) -> list[np.ndarray]:
    """Execute the main subgraph; ``budget`` defaults to the current one (execution_budget);
    ``constants`` as for run_subgraph. NaN and inf are IEEE results of the kernels (the square
    root of a negative input, inf x 0), computed without numpy's warnings (on whatever thread
    the driver runs it)."""
    with np.errstate(all="ignore"):
        return run_subgraph(model, model.main, inputs, after, budget, constants)


#: (id of the subgraph, operand index) -> the constant's array; (id of the subgraph, operand
#: index, "real") -> its value as kernels see it (``to_real``).
Constants = dict[tuple, np.ndarray]


def _constant(model: Model, subgraph: Subgraph, idx: int, operand: Operand,
              cache: Constants | None) -> np.ndarray | None:
    if cache is None:
        return model.constant_value(operand)
    key = (id(subgraph), idx)
    value = cache.get(key)
    if value is None:
        value = model.constant_value(operand)
        value.flags.writeable = False  # shared by every execution: a kernel must not write it
        cache[key] = value
    return value


def _constant_real(subgraph: Subgraph, idx: int, operand: Operand, raw: np.ndarray | None,
                   cache: Constants | None) -> np.ndarray | None:
    """The value kernels see for a tensor constant (float64 for float and quantised ones),
    converted once per prepared model; None (convert as any input) without a cache."""
    if cache is None or raw is None or operand.type.is_scalar:
        return None
    key = (id(subgraph), idx, "real")
    value = cache.get(key)
    if value is None:
        value = np.asarray(to_real(raw, operand))
        value.flags.writeable = False  # shared by every execution, as the raw constant
        cache[key] = value
    return value


def _with_actual_shape(operand: Operand, value: np.ndarray) -> Operand:
    if operand.type.is_scalar or tuple(operand.dimensions) == tuple(value.shape):
        return operand
    return dataclasses.replace(operand, dimensions=tuple(value.shape))
