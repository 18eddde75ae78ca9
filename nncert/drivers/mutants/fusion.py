"""Mutants of a compiler's graph rewrites, right for every model of one operation and wrong
where two operations meet: one that runs an ADD in place over a model output it reads
(conformance/test_operations.py::test_operation_output_consumed finds it: that model output
is read by ADD(output, output)), and one that fuses a RELU6 into the operation before it with
RELU's clamp (test_operation_activation_split finds it: the saturating edge cases, their
fused activation written as an operation of its own), and one that folds inverse pairs (CAST
there and back, QUANTIZE then DEQUANTIZE, DEQUANTIZE then QUANTIZE: test_operation_then_inverse
finds it, as it does a quantised ADD of zero or MUL by one folded into a copy)."""

from __future__ import annotations

import numpy as np

from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import Model
from nncert.hal.types import OperationType
from nncert.ops import get
from nncert.ops.evaluate import evaluate
from nncert.ops.interpreter import run_model

Op = OperationType


class AddInPlaceOverOutput(MutantDriver):
    """Runs an ADD in place over its first input when that input is a model output of the same
    shape and type (the buffer is "free" once the producer wrote it): the model output comes
    back holding the ADD's result. Right while the ADD leaves its input's value unchanged
    (ADD(output, 0), as test_operation_output_consumed read outputs before)."""

    name = "add_in_place_over_output"

    def run(self, model: Model, inputs: list) -> list:
        outputs = set(model.main.output_indexes)
        main = {id(op) for op in model.main.operations}

        def after(n, op, operands, values, out_operands, results):
            if op.type is not Op.ADD or id(op) not in main or op.inputs[0] not in outputs:
                return results
            target, got = values[0], np.asarray(results[0])
            if isinstance(target, np.ndarray) and target.flags.writeable and operands[0].type is \
                    out_operands[0].type and target.shape == got.shape and target.dtype == got.dtype:
                target[...] = got
            return results

        return run_model(model, inputs, after)


class FusedRelu6AsRelu(MutantDriver):
    """Fuses a RELU6 into the operation before it (a convolution, FULLY_CONNECTED, an
    element-wise arithmetic operation or a pooling) whose result only the RELU6 reads, and
    fuses it as a RELU: no clamp at 6. Right where the activation is the operation's own fused
    one (the per-operation suite's), wrong for the same pair written as two operations."""

    name = "fused_relu6_as_relu"
    _FUSES = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D,
              Op.TRANSPOSE_CONV_2D, Op.FULLY_CONNECTED, Op.ADD,
              Op.SUB, Op.MUL, Op.DIV, Op.AVERAGE_POOL_2D,
              Op.MAX_POOL_2D, Op.L2_POOL_2D)

    def run(self, model: Model, inputs: list) -> list:
        main = model.main
        writer = {idx: op.type for op in main.operations for idx in op.outputs}
        readers: dict[int, int] = {}
        for op in main.operations:
            for idx in set(op.inputs):
                readers[idx] = readers.get(idx, 0) + 1
        fused = {id(op) for op in main.operations if op.type is Op.RELU6 and
                 writer.get(op.inputs[0]) in self._FUSES and readers[op.inputs[0]] == 1 and
                 op.inputs[0] not in main.output_indexes}

        def after(n, op, operands, values, out_operands, results):
            if id(op) not in fused:
                return results
            return evaluate(get(Op.RELU), operands, values, out_operands)

        return run_model(model, inputs, after)


class InversePairsFolded(MutantDriver):
    """Folds a CAST of a CAST back to the first one's input type, and a DEQUANTIZE of a
    QUANTIZE, into the identity (the first operation's input passes through: no truncation,
    no rounding), and a QUANTIZE of a DEQUANTIZE back to the same 8-bit type into a copy of the
    stored values (whatever the scales). Right for every model of one operation."""

    name = "inverse_pairs_folded"
    _PAIRS = frozenset({(Op.CAST, Op.CAST), (Op.QUANTIZE, Op.DEQUANTIZE), (Op.DEQUANTIZE, Op.QUANTIZE)})

    def run(self, model: Model, inputs: list) -> list:
        main = model.main
        writer = {idx: op for op in main.operations for idx in op.outputs}
        seen: dict[int, np.ndarray] = {}  # id of a first operation -> its input's value

        def after(n, op, operands, values, out_operands, results):
            if id(writer.get(op.outputs[0])) == id(op):
                seen[id(op)] = np.array(values[0], copy=True)
            first = writer.get(op.inputs[0])
            if first is None or (first.type, op.type) not in self._PAIRS or id(first) not in seen:
                return results
            src = main.operands[first.inputs[0]]
            x = seen[id(first)]
            if src.type is not out_operands[0].type or x.shape != np.shape(results[0]):
                return results
            return [x.astype(np.asarray(results[0]).dtype)]

        return run_model(model, inputs, after)


class QuantIdentitiesFolded(MutantDriver):
    """Folds a quantised ADD of a constant whose real values are all zero, or MUL by one whose
    real values are all one, into a copy of the other input's stored values, whatever the
    output's scale and zero point (an algebraic simplification that forgets the
    requantisation)."""

    name = "quant_identities_folded"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.ADD, Op.MUL) or not outputs[0].type.is_quant:
            return results
        unit = 0.0 if op.type is Op.ADD else 1.0
        for c, x in ((1, 0), (0, 1)):
            o = operands[c]
            real = (np.asarray(inputs[c], np.float64) - o.zero_point) * o.scale
            if real.size <= np.size(inputs[x]) and np.all(real == unit) and \
                    np.shape(inputs[x]) == np.shape(results[0]) and operands[x].type is outputs[0].type:
                return [np.asarray(inputs[x]).copy()]
        return results


MUTANT_INFO = (
    MutantInfo(AddInPlaceOverOutput, "ACC-6", suite="test_operations.py",
               args=("-k", "output_consumed and (ADD or MUL) and float32")),
    MutantInfo(FusedRelu6AsRelu, "ACC-6", suite="test_operations.py",
               args=("-k", "activation_split and relu6 and float32")),
    MutantInfo(InversePairsFolded, "ACC-6", suite="test_operations.py", args=("-k", "then_inverse")),
    MutantInfo(QuantIdentitiesFolded, "ACC-6", suite="test_operations.py",
               args=("-k", "then_inverse and (ADD or MUL)")),
)
