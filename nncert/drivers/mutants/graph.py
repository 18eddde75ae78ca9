"""Mutants that get a model's structure wrong where the suites' usual models are regular: one
wrong where a model output is also read by another operation
(conformance/test_operations.py::test_operation_output_consumed finds it: NNAPI lets an
operation's output be a model output and another operation's input), one wrong where a
referenced subgraph lists its inputs against the order of their operand indexes
and one that updates a WHILE's loop-carried values in place (conformance/test_control_flow.py
finds them), and one that sorts operations listed out of
execution order where it must reject them (conformance/test_validation.py finds it)."""

from __future__ import annotations

import numpy as np

from nncert.drivers.base import PreparedModel
from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import Model
from nncert.hal.types import OperandLifeTime, OperationType
from nncert.ops.control_flow import referenced_subgraph
from nncert.ops.interpreter import run_subgraph


class FusedOutputDropped(MutantDriver):
    """Fuses an operation into the next one that reads its output and never writes the
    intermediate: a model output that another operation also reads comes back as zeros
    (the reader gets the right value)."""

    name = "fused_output_dropped"

    def mutate_output(self, model: Model, i: int, value: np.ndarray) -> np.ndarray:
        index = model.main.output_indexes[i]
        if any(index in op.inputs for op in model.main.operations):
            return np.zeros_like(value)
        return value


class SubgraphsInOperandOrder(MutantDriver):
    """Lowers each referenced subgraph (IF branch, WHILE condition or body) to a function whose
    parameters and results come in the order of their operand indexes, not in the order the
    subgraph lists them: right for every subgraph built input by input, wrong for one that
    lists a later operand first (EXE-9)."""

    name = "subgraphs_in_operand_order"

    def compiled(self, model: Model, prepared: PreparedModel) -> PreparedModel:
        for subgraph in prepared.model.referenced:  # type: ignore[attr-defined]
            subgraph.input_indexes = sorted(subgraph.input_indexes)
            subgraph.output_indexes = sorted(subgraph.output_indexes)
        return prepared


def _execution_order(model: Model) -> list[int]:
    """The indexes of ``model``'s operations in an order that writes every operand before an
    operation reads it (any left in a cycle go last, in their listed order)."""
    sg = model.main
    written = {i for i, o in enumerate(sg.operands)
               if o.lifetime not in (OperandLifeTime.TEMPORARY_VARIABLE, OperandLifeTime.SUBGRAPH_OUTPUT)}
    pending, order = list(range(len(sg.operations))), []
    while pending:
        ready = next((n for n in pending if all(i in written for i in sg.operations[n].inputs)), None)
        if ready is None:
            return order + pending
        pending.remove(ready)
        order.append(ready)
        written.update(sg.operations[ready].outputs)
    return order


class SortsOperations(MutantDriver):
    """Schedules the operations itself: a model that lists them out of execution order (an
    operation reading an operand before the operation that writes it) is sorted and run,
    where it must be rejected with INVALID_ARGUMENT (VAL-1)."""

    name = "sorts_operations"

    @staticmethod
    def _sorted(model: Model) -> tuple[Model, list[int]]:
        order = _execution_order(model)
        copy = model.copy()
        copy.main.operations[:] = [copy.main.operations[n] for n in order]
        return copy, order

    def supported_operations(self, model: Model) -> list[bool]:
        copy, order = self._sorted(model)
        flags = super().supported_operations(copy)
        listed = [False] * len(flags)
        for position, n in enumerate(order):
            listed[n] = flags[position]
        return listed

    def prepare_model(self, model: Model, *args, **kwargs) -> PreparedModel:
        return super().prepare_model(self._sorted(model)[0], *args, **kwargs)


class WhileInPlace(MutantDriver):
    """Lowers a WHILE of the main subgraph with its loop-carried values in place: each turn
    writes the body's outputs one after the other into the values' storage, so an output
    computed after another reads that other's new value ((a, b) -> (b, a + b) gives
    (b, 2 * b)). Right for every body whose later outputs do not read an earlier-written value
    (a counter and a total) (EXE-9). The reference runs first, so that deadlines and loop
    timeouts hold as they do there."""

    name = "while_in_place"
    MAX_TURNS = 10_000

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        outputs = super().run(model, inputs)
        main = model.main
        whiles = [op for op in main.operations if op.type is OperationType.WHILE]
        if len(main.operations) != 1 or not whiles or list(whiles[0].outputs) != list(main.output_indexes) \
                or any(i not in main.input_indexes for i in whiles[0].inputs[2:]):
            return outputs
        op = whiles[0]
        cond, body = (referenced_subgraph(model, main, i) for i in op.inputs[:2])
        values = [inputs[main.input_indexes.index(i)] for i in op.inputs[2:]]
        for _ in range(self.MAX_TURNS):
            if not bool(np.asarray(run_subgraph(model, cond, values)[0]).reshape(-1)[0]):
                break
            for j in range(len(body.output_indexes)):  # one output at a time, in place
                values[j] = run_subgraph(model, body, values)[j]
        return [np.asarray(v) for v in values[:len(op.outputs)]]


MUTANT_INFO = (
    MutantInfo(FusedOutputDropped, "ACC-6", suite="test_operations.py", args=("-k", "output_consumed")),
    MutantInfo(SubgraphsInOperandOrder, "EXE-9", suite="test_control_flow.py", args=("-k", "listed_against")),
    MutantInfo(SortsOperations, "VAL-1", suite="test_validation.py", args=("-k", "execution_order")),
    MutantInfo(WhileInPlace, "EXE-9", suite="test_control_flow.py", args=("-k", "together and sync")),
)
