"""A mutant that keeps a recurrent operation's state itself, as a TFLite variable tensor does.
conformance/test_operations.py::test_operation_state must catch it; every single execution
(the per-operation tests) is right."""

from __future__ import annotations

import numpy as np

from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import Model
from nncert.ops import get
from nncert.ops.base import match
from nncert.ops.evaluate import evaluate
from nncert.ops.interpreter import run_model


class RetainsState(MutantDriver):
    """Keeps each recurrent operation's state outputs inside the prepared model and, from the
    second execution on, reads them instead of the state inputs the request gives. Right on
    the first execution and while the caller feeds every state back unchanged; wrong as soon
    as it starts a new sequence (gives the first state again)."""

    name = "retains_state"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._kept: dict[tuple[int, int], list[np.ndarray]] = {}

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        def keep(n, op, operands, values, outputs, results):
            record = get(op.type)
            if record is None or not record.state:
                return results
            m = match(record, [None if o is None else o.type for o in operands],
                      [o.type for o in outputs])
            pairs = record.state_pairs(m.signature)
            if not pairs:
                return results
            key = (id(model), n)
            if key in self._kept:
                values = list(values)
                for (name, _), kept in zip(pairs, self._kept[key], strict=True):
                    values[m.positions[name][0]] = kept
                results = evaluate(record, operands, values, outputs, m)
            self._kept[key] = [np.array(results[k]) for _, k in pairs]
            return results

        return run_model(model, inputs, keep)


MUTANT_INFO = (
    MutantInfo(RetainsState, "ACC-6", suite="test_operations.py",
               args=("-k", "test_operation_state and sync and not async")),
)
