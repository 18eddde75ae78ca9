"""A mutant that reads a model's constants from the wrong place only where a model's layout
is unusual: every CONSTANT_REFERENCE operand from the model's first pool, whatever its pool
index (conformance/test_pools.py::test_constants_in_a_second_pool finds it: the usual models
keep all their pool constants in one pool)."""

from __future__ import annotations

import dataclasses

import numpy as np

from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import Model
from nncert.hal.types import OperandLifeTime
from nncert.ops.interpreter import run_model


class ConstantsFromFirstPool(MutantDriver):
    """Maps only the model's first pool: each CONSTANT_REFERENCE operand is read at its offset
    and length in pool 0 (where that range lies inside it), its pool index ignored."""

    name = "constants_from_first_pool"

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        if len(model.pools) < 2:
            return super().run(model, inputs)
        size = len(model.pools[0].view())
        m = model.copy()
        for sg in (m.main, *m.referenced):
            sg.operands = [dataclasses.replace(o, location=dataclasses.replace(o.location, pool_index=0))
                           if o.lifetime is OperandLifeTime.CONSTANT_REFERENCE and
                           o.location.offset + o.location.length <= size else o for o in sg.operands]
        return run_model(m, inputs, self.mutate_operation)


MUTANT_INFO = (
    MutantInfo(ConstantsFromFirstPool, "MEM-1", suite="test_pools.py", args=("-k", "second_pool")),
)
