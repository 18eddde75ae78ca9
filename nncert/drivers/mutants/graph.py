"""Mutants that get a model's structure wrong where the suites' usual models are regular: one
wrong where a model output is also read by another operation
(conformance/test_operations.py::test_operation_output_consumed finds it: NNAPI lets an
operation's output be a model output and another operation's input), one wrong where a
referenced subgraph lists its inputs against the order of their operand indexes
(conformance/test_control_flow.py finds it)."""

from __future__ import annotations

import numpy as np

from nncert.drivers.base import PreparedModel
from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import Model


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


MUTANT_INFO = (
    MutantInfo(FusedOutputDropped, "ACC-6", suite="test_operations.py", args=("-k", "output_consumed")),
    MutantInfo(SubgraphsInOperandOrder, "EXE-9", suite="test_control_flow.py", args=("-k", "listed_against")),
)
