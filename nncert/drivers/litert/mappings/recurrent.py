"""LiteRT mappings of the recurrent family: RNN, UNIDIRECTIONAL_SEQUENCE_RNN,
BIDIRECTIONAL_SEQUENCE_RNN and SVDF, each on the TFLite builtin of the same name.

TFLite keeps these operators' state in *variable* tensors, which the kernel reads and
overwrites in place and which are not operator outputs; NNAPI passes the state in as an
ordinary input and gives the new state back as an output. So:

- the state input is copied (``Graph.variable_copy``, a SLICE: never an operator LiteRT
  may run in place, whose variable output it leaves without a buffer) into a fresh variable
  tensor that only the operator reads: the HAL operand itself is never written, whoever
  else reads it;
- the state outputs are computed from the operator's outputs, never read back from the
  variable (no operator output depends on the in-place write, so a delegate or the
  scheduler may read it before the operator runs): an RNN's new state is its output, a
  sequence's last state is its output at the last step (forward) or the first (backward),
  SLICEd out;
- SVDF: TFLite shifts its memory before it pushes the new activation, NNAPI after, so
  the variable gets the state shifted one slot towards the newest (PAD in front of a SLICE
  per filter), and the state output (the memory shifted towards the oldest, newest slot
  zero) is CONCATENATION of the input state's slots 1..memory_size-2, the new activations
  (FULLY_CONNECTED of the input and weights_feature) and zeros.

LiteRT's BIDIRECTIONAL_SEQUENCE_RNN kernel (float path) reads its auxiliary input wrong in
two layouts, both found by the conformance suite: time-major with cross-linking, it steps
through aux_input with the *input's* row length (out of bounds when aux rows are shorter:
values of 1e31 came out); batch-major with parallel linking, its backward cell reads the
input instead of aux_input. So cross-linking with aux rows of another length runs
batch-major, and parallel linking runs time-major (its backward cell still steps with the
input's row length, so a parallel-linked aux_input of another row length is declined), with
TRANSPOSEs around the operator where the model's layout differs.

The activation codes (NONE, RELU, RELU1, RELU6) are TFLite's fused-activation codes and go
into the options. Float16 variants are declined by the exporter as a whole (no float16
tensors).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import Node
from nncert.hal.types import OperationType as Op


def _variable(n: Node, name: str) -> int:
    """A fresh variable tensor holding input ``name``'s value, for the operator to consume."""
    return n.g.variable_copy(n.t(name))


def _slice_into(n: Node, src: int, begin: list[int], size: list[int], out: int) -> None:
    """SLICE of ``src`` reshaped into ``out`` (whose shape drops the sliced unit dimension)."""
    g = n.g
    piece = g.like(src, size)
    g.op("SLICE", [src, g.const(begin), g.const(size)], [piece])
    g.op("RESHAPE", [piece, g.const(list(g.shapes[out]))], [out])


def _rnn(n: Node) -> None:
    g = n.g
    out = n.out(1)
    g.op("RNN", [n.t("input"), n.t("weights"), n.t("recurrent_weights"), n.t("bias"),
                 _variable(n, "hidden_state")], [out], "RNN",
         fusedActivationFunction=int(n.scalar("act")))
    g.op("RESHAPE", [out, g.const(list(g.shapes[out]))], [n.out(0)])


def _last_state(n: Node, seq: int, time_major: bool, at: int, first: int, units: int, out: int) -> None:
    """The state after the step at time ``at``: that step's output, units [first, first+units)."""
    a, b, _ = n.g.shapes[seq]
    if time_major:
        _slice_into(n, seq, [at, 0, first], [1, b, units], out)
    else:
        _slice_into(n, seq, [0, at, first], [a, 1, units], out)


def _uni(n: Node) -> None:
    g = n.g
    major = bool(n.scalar("time_major"))
    out = n.out(0)
    g.op("UNIDIRECTIONAL_SEQUENCE_RNN", [n.t("input"), n.t("weights"), n.t("recurrent_weights"),
                                         n.t("bias"), _variable(n, "hidden_state")], [out],
         "SequenceRNN", timeMajor=major, fusedActivationFunction=int(n.scalar("act")))
    if len(n.outputs) == 2:
        time = n.in_shape("input")[0 if major else 1]
        _last_state(n, out, major, time - 1, 0, n.in_shape("weights")[0], n.out(1))


def _bidi(n: Node) -> None:
    """BIDIRECTIONAL_SEQUENCE_RNN, run in the layout where LiteRT's kernel reads its inputs
    right (see the module doc), with TRANSPOSEs around it where that is not the model's."""
    g = n.g
    major, merge = bool(n.scalar("time_major")), bool(n.scalar("merge_outputs"))
    size = n.in_shape("input")[2]
    aux_size = n.in_shape("aux_input")[2] if n.has("aux_input") else size
    run_major = major
    if n.has("aux_input") and not n.has("fw_aux_weights"):  # parallel linking
        if aux_size != size:
            raise Unmappable("LiteRT's BIDIRECTIONAL_SEQUENCE_RNN steps through a parallel-linked "
                             f"aux_input with the input's row length ({size}), not its own ({aux_size})")
        run_major = True
    elif n.has("fw_aux_weights") and aux_size != size:  # cross-linking, aux rows of another size
        run_major = False

    def seq(name: str) -> int:
        t = n.t(name)
        return t if run_major == major else g.transpose(t, (1, 0, 2))

    ins = [seq("input")]
    for side in ("fw_", "bw_"):
        ins += [n.t(f"{side}weights"), n.t(f"{side}recurrent_weights"), n.t(f"{side}bias"),
                _variable(n, f"{side}hidden_state")]
    ins += [seq("aux_input") if n.has("aux_input") else -1,
            *(n.t(name) if n.has(name) else -1 for name in ("fw_aux_weights", "bw_aux_weights"))]
    count = 1 if merge else 2
    finals = [n.out(k) for k in range(count)]
    # LiteRT's Prepare gives the separate backward output the batch-major shape even when
    # time-major (the data is time-major): each output is RESHAPEd to its real shape first.
    shapes = [tuple(g.shapes[f][p] for p in ((0, 1, 2) if run_major == major else (1, 0, 2))) for f in finals]
    raw = [g.like(f, shape) for f, shape in zip(finals, shapes, strict=True)]
    g.op("BIDIRECTIONAL_SEQUENCE_RNN", ins, raw, "BidirectionalSequenceRNN", timeMajor=run_major,
         fusedActivationFunction=int(n.scalar("act")), mergeOutputs=merge)
    outs = [g.unary("RESHAPE", t, shape, extra=[g.const(list(shape))])
            for t, shape in zip(raw, shapes, strict=True)]
    for t, final in zip(outs, finals, strict=True):
        if run_major == major:
            g.op("RESHAPE", [t, g.const(list(g.shapes[final]))], [final])
        else:
            g.op("TRANSPOSE", [t, g.const([1, 0, 2])], [final])
    if len(n.outputs) > count:
        fw, bw = n.in_shape("fw_weights")[0], n.in_shape("bw_weights")[0]
        time = n.in_shape("input")[0 if major else 1]
        _last_state(n, outs[0], run_major, time - 1, 0, fw, n.out(count))
        # the backward cell's last step is at time 0 (merged: its units follow the forward's)
        _last_state(n, outs[-1], run_major, 0, fw if merge else 0, bw, n.out(count + 1))


def _svdf(n: Node) -> None:
    g = n.g
    batch = n.in_shape("input")[0]
    filters, memory = n.in_shape("weights_time")
    rank = int(n.scalar("rank"))
    state = n.t("state_in")
    shape = [batch, filters, memory]
    per_filter = g.unary("RESHAPE", state, shape, extra=[g.const(shape)])
    if memory > 1:
        older = g.like(per_filter, [batch, filters, memory - 1])
        g.op("SLICE", [per_filter, g.const([0, 0, 0]), g.const([batch, filters, memory - 1])], [older])
        shifted = g.unary("PAD", older, [batch, filters, memory], extra=[g.const([[0, 0], [0, 0], [1, 0]])])
        var = g.variable_copy(shifted, [batch, filters * memory])
    else:
        var = g.variable_copy(state, [batch, filters])
    bias = n.t("bias") if n.has("bias") else -1
    g.op("SVDF", [n.t("input"), n.t("weights_feature"), n.t("weights_time"), bias, var], [n.out(1)],
         "SVDF", rank=rank, fusedActivationFunction=int(n.scalar("act")))
    # The state output: slots 1..memory-2 of the input state, the new activations, zeros.
    new = g.like(state, [batch, filters])
    g.op("FULLY_CONNECTED", [n.t("input"), n.t("weights_feature"), -1], [new], "FullyConnected",
         fusedActivationFunction=0, keepNumDims=False)
    zeros = g.const(np.zeros((batch, filters, 1), np.float32), np.float32)
    if memory == 1:
        g.op("RESHAPE", [zeros, g.const([batch, filters])], [n.out(0)])
        return
    parts = []
    if memory > 2:
        kept = g.like(per_filter, [batch, filters, memory - 2])
        g.op("SLICE", [per_filter, g.const([0, 0, 1]), g.const([batch, filters, memory - 2])], [kept])
        parts.append(kept)
    parts += [g.unary("RESHAPE", new, [batch, filters, 1], extra=[g.const([batch, filters, 1])]), zeros]
    joined = g.like(per_filter)
    g.op("CONCATENATION", parts, [joined], "Concatenation", axis=2, fusedActivationFunction=0)
    g.op("RESHAPE", [joined, g.const([batch, filters * memory])], [n.out(0)])


MAPPINGS: dict[Op, Callable[[Node], None]] = {
    Op.RNN: _rnn,
    Op.UNIDIRECTIONAL_SEQUENCE_RNN: _uni,
    Op.BIDIRECTIONAL_SEQUENCE_RNN: _bidi,
    Op.SVDF: _svdf,
}
