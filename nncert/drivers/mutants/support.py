"""Mutants whose claims, precision or version do not hold: a claimed operation that does not
compile (DRV-2), a relaxed computation below fp16 precision (ACC-6), a dot product cut at the
MAC array's width (MLTS-1: a real model is less accurate than the CPU baseline), and a HAL 1.2
driver that takes HAL 1.3 models (VER-1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Deadline, PreparedModel, check_preparation
from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.errors import HalError
from nncert.hal.model import Model
from nncert.hal.types import (
    LATEST,
    ErrorStatus,
    ExecutionPreference,
    OperandType,
    OperationType,
    Priority,
    Version,
)
from nncert.hal.validation import validate_model
from nncert.ops import get
from nncert.ops.evaluate import evaluate


class Fp16ConvUncompiled(MutantDriver):
    """Claims every operation, but its compiler has no float16 kernel for an operation on a 4-D
    tensor (convolutions, pools, resizes in NHWC): preparing such a model fails (DRV-2)."""

    name = "fp16_conv_uncompiled"

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        sg = model.main
        for n, op in enumerate(sg.operations):
            first = sg.operands[op.inputs[0]] if op.inputs else None
            if first is not None and first.type is OperandType.TENSOR_FLOAT16 and len(first.dimensions) == 4:
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"operation {n} ({op.type.name}): no float16 "
                                                            f"kernel for 4-D tensors")
        return super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)


#: The step of RelaxedActivationTable's lookup table.
TABLE_STEP = 1 / 64


class RelaxedActivationTable(MutantDriver):
    """When the model allows fp32 to run as fp16, LOGISTIC and TANH come from a lookup table
    of 1/64 steps: off by up to 1/128, beyond the fp16 tolerance of ACC-1 (ACC-6)."""

    name = "relaxed_activation_table"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (OperationType.LOGISTIC, OperationType.TANH) or not self.relaxed:
            return results
        return [np.round(r / TABLE_STEP) * TABLE_STEP if r.dtype == np.float32 else r for r in results]

    def run(self, model: Model, inputs):
        self.relaxed = model.relax_computation_float32_to_float16
        return super().run(model, inputs)

    relaxed = False


#: The width of ShortMacTile's multiply-accumulate array.
MAC_WIDTH = 32


class ShortMacTile(MutantDriver):
    """FULLY_CONNECTED accumulates only the first 32 products of each dot product (its MAC
    array's width: the tiling of longer inputs is missing): a real model's classifier falls
    below the CPU baseline (MLTS-1). The per-operation cases with inputs wider than 32 show it
    too, as ACC-1 / ACC-2 failures."""

    name = "short_mac_tile"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not OperationType.FULLY_CONNECTED or operands[0] is None:
            return results
        weights = np.asarray(inputs[1])
        if weights.ndim != 2 or weights.shape[1] <= MAC_WIDTH:
            return results
        x = np.array(inputs[0]).reshape(-1, weights.shape[1])
        x[:, MAC_WIDTH:] = operands[0].zero_point if operands[0].type.is_quant else 0
        cut = [x.reshape(np.shape(inputs[0])), *inputs[1:]]
        return evaluate(get(op.type), operands, cut, outputs)


class Hal12TakesNewer(MutantDriver):
    """Says it is a HAL 1.2 driver, but validates with the newest version's rules: it claims
    and prepares models with HAL 1.3 and later operand types and operations (VER-1)."""

    name = "hal12_takes_newer"
    feature_level = Version.V1_2

    def supported_operations(self, model: Model) -> list[bool]:
        validate_model(model, LATEST)
        return [get(op.type) is not None for op in model.main.operations]

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        check_preparation(model, preference, priority, deadline, LATEST)
        return self.save_to_cache(self.prepared_class(model.copy(), self), model_cache, data_cache, token)


def _without_relaxed(model: Model) -> Model:
    if not model.relax_computation_float32_to_float16:
        return model
    model = model.copy()
    model.relax_computation_float32_to_float16 = False
    return model


class Hal10DropsRelaxed(MutantDriver):
    """A HAL 1.0 driver that converts every model down to 1.0 before validating it, dropping
    relaxComputationFloat32toFloat16 (a 1.1 field) on the way: it claims, prepares and runs in
    float32 a model that only HAL 1.1 defines, where it must call it invalid (VER-1)."""

    name = "hal10_drops_relaxed"
    feature_level = Version.V1_0

    def supported_operations(self, model: Model) -> list[bool]:
        return super().supported_operations(_without_relaxed(model))

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        return super().prepare_model(_without_relaxed(model), preference, priority, deadline, model_cache,
                                     data_cache, token)


def _outputs_inferred(model: Model) -> Model:
    """``model`` with each main output of unknown dimensions given its first input's (the
    shape an element-wise graph infers for it)."""
    main = model.main
    unknown = [i for i in main.output_indexes if not main.operands[i].fully_specified]
    if not unknown or not main.input_indexes:
        return model
    model = model.copy()
    dims = model.main.operands[model.main.input_indexes[0]].dimensions
    for i in unknown:
        model.main.operands[i] = dataclasses.replace(model.main.operands[i], dimensions=dims)
    return model


class Hal11InfersOutputs(MutantDriver):
    """A HAL 1.1 driver that infers the shapes of the model's outputs (from its input's, as for
    an element-wise graph) before it validates the model: a model whose output has unknown
    dimensions, which only HAL 1.2 defines, is claimed and prepared where it must be called
    invalid (VER-1)."""

    name = "hal11_infers_outputs"
    feature_level = Version.V1_1

    def supported_operations(self, model: Model) -> list[bool]:
        return super().supported_operations(_outputs_inferred(model))

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        return super().prepare_model(_outputs_inferred(model), preference, priority, deadline, model_cache,
                                     data_cache, token)


class SupportKeptByOperationTypes(MutantDriver):
    """Keeps each supported_operations answer by the model's list of operation types (the
    answer depends on them, the vendor reasoned) and gives it again for any model of the same
    types, without validating it: a mutation of a model it has answered for is claimed where it
    must be refused (VAL-1)."""

    name = "support_kept_by_operation_types"

    def supported_operations(self, model: Model) -> list[bool]:
        answers = self.__dict__.setdefault("_answers", {})
        key = tuple(op.type for op in model.main.operations)
        if key not in answers:
            answers[key] = super().supported_operations(model)
        return list(answers[key])


MUTANT_INFO = (
    MutantInfo(Fp16ConvUncompiled, "DRV-2", suite="test_operations.py",
               args=("-k", "CONV_2D and float16 and s0 and not (dynamic or internal or tensors)")),
    MutantInfo(RelaxedActivationTable, "ACC-6", suite="test_operations.py",
               args=("-k", "relaxed and (LOGISTIC or TANH)")),
    MutantInfo(ShortMacTile, "MLTS-1", suite="../mlts/test_accuracy.py", args=("-k", "digits_mlp")),
    MutantInfo(Hal12TakesNewer, "VER-1", suite="test_versions.py"),
    MutantInfo(SupportKeptByOperationTypes, "VAL-1", suite="test_validation.py",
               args=("-k", "mutated_model and ADD-float32")),
    MutantInfo(Hal10DropsRelaxed, "VER-1", suite="test_versions.py", args=("-k", "relaxed")),
    MutantInfo(Hal11InfersOutputs, "VER-1", suite="test_versions.py", args=("-k", "dynamic")),
)
