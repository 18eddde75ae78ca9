"""A mutant that is right on every single-operation model and wrong where a model output is
also read by another operation: conformance/test_operations.py::test_operation_output_consumed
finds it (NNAPI lets an operation's output be a model output and another operation's input)."""

from __future__ import annotations

import numpy as np

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


MUTANT_INFO = (
    MutantInfo(FusedOutputDropped, "ACC-6", suite="test_operations.py", args=("-k", "output_consumed")),
)
