"""Control flow: IF and WHILE, the two operations that take other subgraphs as arguments
(HAL 1.3, EXE-9).

They have no ``OpRecord``: an OpRecord describes a kernel over tensors, and the generic
per-operation samplers, random graphs and exporters iterate records() to build one-operation
models, which cannot hold referenced subgraphs. This module is their one declaration
instead: the signature that ``nncert ops`` lists and the validator quotes, and the
semantics the interpreter runs (``run_if`` / ``run_while``), as NNAPI's OperationTypes.h
defines them:

- IF(condition, then, else, x_1..x_n) -> y_1..y_m: the TENSOR_BOOL8[1] condition selects
  the subgraph to run on x; its outputs are the IF's.
- WHILE(cond, body, io_1..io_m, state_1..state_k, in_1..in_n) -> io_1..io_m: while
  cond(io, state, in) is true, (io, state) = body(io, state, in); the outputs are the final
  input-output values. A loop still running after the execution's loop timeout fails with
  MISSED_DEADLINE_TRANSIENT (the status the NNAPI runtime's CPU executor returns).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus, OperandLifeTime, OperandType, OperationType, Version

if TYPE_CHECKING:
    from nncert.hal.model import Model, Operation, Subgraph
    from nncert.ops.interpreter import ExecutionBudget

#: run_subgraph(model, subgraph, inputs, budget) -> outputs: how a runner executes a branch.
RunSubgraph = Callable[["Model", "Subgraph", Sequence[np.ndarray], "ExecutionBudget"], list[np.ndarray]]


@dataclass(frozen=True)
class ControlFlowOp:
    """The declaration of a control-flow operation."""

    type: OperationType
    version: Version
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    doc: str

    @property
    def name(self) -> str:
        return self.type.name

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.inputs)}) -> {', '.join(self.outputs)}"


IF = ControlFlowOp(
    OperationType.IF, Version.V1_3,
    ("condition: TENSOR_BOOL8[1]", "then: SUBGRAPH", "else: SUBGRAPH", "x_1..x_n"),
    ("y_1..y_m",),
    "Runs the then or the else subgraph (n inputs, m outputs each) as the condition says.")
WHILE = ControlFlowOp(
    OperationType.WHILE, Version.V1_3,
    ("cond: SUBGRAPH", "body: SUBGRAPH", "io_1..io_m", "state_1..state_k", "in_1..in_n"),
    ("io_1..io_m",),
    "While cond(io, state, in) gives true, (io, state) = body(io, state, in); bounded by the "
    "loop timeout.")

CONTROL_FLOW: dict[OperationType, ControlFlowOp] = {IF.type: IF, WHILE.type: WHILE}


def get(op: OperationType) -> ControlFlowOp | None:
    """The declaration of ``op`` if it is a control-flow operation, else None."""
    return CONTROL_FLOW.get(op)


def referenced_subgraph(model: Model, subgraph: Subgraph, idx: int) -> Subgraph:
    """The referenced subgraph that SUBGRAPH operand ``idx`` of ``subgraph`` names."""
    operand = subgraph.operands[idx]
    if operand.type != OperandType.SUBGRAPH or operand.lifetime != OperandLifeTime.SUBGRAPH:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"operand {idx} is not a SUBGRAPH operand")
    return model.referenced[operand.location.offset]


def runnable(model: Model, op: Operation, has_kernel: Callable[[OperationType], bool]) -> bool:
    """Whether ``op`` can run: it has a kernel, or it is IF / WHILE and every operation of the
    model's referenced subgraphs has a kernel or is IF / WHILE (conservative: a subgraph the
    operation does not reach counts too)."""
    if has_kernel(op.type):
        return True
    return op.type in CONTROL_FLOW and all(
        has_kernel(inner.type) or inner.type in CONTROL_FLOW
        for sg in model.referenced for inner in sg.operations)


def _condition(value: np.ndarray | None, what: str) -> bool:
    if value is None:  # a model input given no value: NNAPI's CpuExecutor fails the IF
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{what} has no value")
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{what} has {flat.size} elements, not 1")
    return bool(flat[0])


def run_if(model: Model, subgraph: Subgraph, op: Operation, values: list, run: RunSubgraph,
           budget: ExecutionBudget) -> list[np.ndarray]:
    """IF: run the branch the condition selects on inputs 3.. and return its outputs."""
    branch = op.inputs[1] if _condition(values[op.inputs[0]], "the IF condition") else op.inputs[2]
    return run(model, referenced_subgraph(model, subgraph, branch),
               [values[i] for i in op.inputs[3:]], budget)


def run_while(model: Model, subgraph: Subgraph, op: Operation, values: list, run: RunSubgraph,
              budget: ExecutionBudget) -> list[np.ndarray]:
    """WHILE: iterate the body while the condition holds, within the loop timeout (EXE-9)."""
    cond = referenced_subgraph(model, subgraph, op.inputs[0])
    body = referenced_subgraph(model, subgraph, op.inputs[1])
    carried = [values[i] for i in op.inputs[2:]]
    n_fed_back = len(body.output_indexes)  # m + k: input-output and state-only operands
    limit = budget.loop_timeout
    give_up = None if limit is None else time.monotonic_ns() + limit
    while _condition(run(model, cond, carried, budget)[0], "the WHILE condition model's output"):
        if give_up is not None and time.monotonic_ns() >= give_up:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                           f"WHILE loop still running after its loop timeout of {limit / 1e6:g} ms")
        carried[:n_fed_back] = run(model, body, carried, budget)
    return carried[:len(op.outputs)]


RUNNERS = {OperationType.IF: run_if, OperationType.WHILE: run_while}
