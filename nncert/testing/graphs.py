"""Random graphs (ACC-5, docs/requirements.md): valid multi-operation models generated from
the catalogue records alone, with their golden outputs, and the spec files that replay them.

Generation knows no operation by name. It picks a record, signature and type variant, lets
the record's own sampler draw the case (``sample_case``), and steers the sampler towards
tensors the graph already has: ``SampleContext.dims`` is answered with an existing
tensor's dimensions, and an input whose sampled operand matches an existing tensor (type,
dimensions, quantisation where the record leaves it free, the argument's value domain)
consumes that tensor. Quantised operands so keep the producer's scale and zero point, and
the record's shape rules, checks and kernels decide validity as they do for single cases.

Each accepted operation is evaluated on the golden values of its inputs, so the graph's
golden outputs are the reference kernels' results, op by op, as the reference driver
computes them. An operation is rejected (and another drawn) when it fails its record's
checks, or when an output would hold inf/NaN, a float above ``FLOAT_BOUND`` or an integer
above ``INT_BOUND``: a generated graph never computes a non-finite intermediate.

Operations whose output is a discontinuous function of float inputs (FLOOR, comparisons,
ARGMAX, a float-to-integer CAST, ...) consume only *exact* tensors: model inputs,
constants, or results of exact operations on exact tensors. A driver's result within
tolerance upstream would otherwise flip a comparison downstream, a difference that the
criteria cannot tell from a fault.

A correct driver must be able to meet the criteria of every graph, and ACC-2 lets it round
each requantised result one step away from the reference's; a later operation can amplify
that step. (A HARD_SWISH result half a step between two int8 values, rounded up in float32
and down in float64, then a SUB of the HARD_SWISH's input from it into a scale 190 times
finer: one step became 188 where the graph criterion allows 12.) So every tensor carries an
error bound (``Node.error``): how far a conforming driver's value may be from the golden. It
is 0 for inputs, constants and the results of exact operations on them; a requantised
result adds one step of its own to what its inputs' bounds move it by. The move is measured,
not derived per operation: the reference kernel runs again on the inputs moved by their
bounds (all up, all down, and element by element each way, in every combination over up to
three moved inputs) and the largest change of each result is taken, clamped to the output
type. An operation is drawn again when

- one step of its inexact inputs moves a quantised result by more than the atol the criteria
  grant the operation alone (``GRAPH_CRITERIA[record.criterion]``: 1 step for strict copies
  and selections, 2 for medium arithmetic, 10 for relaxed operations and convolutions), or an
  integer or boolean result at all: an output scale far finer than the uncertainty its
  inputs carry would amplify what ACC-2 allows the producers beyond what the CTS accepts
  from this operation itself; or
- the bound of a quantised result exceeds the graph criterion's atol (12 steps), or that of a
  float result (a DEQUANTIZE or CAST of an inexact quantised tensor) exceeds, element by
  element, atol + rtol |e| or, relative to max(1, |e|), the criterion's bias or the square
  root of its mse.

Quantised bias and mse are not bounded so: one step off in every element of every operation
would exceed them after two operations, and conforming drivers differ at near halves only.
tests/test_graphs.py runs a driver that rounds near halves the other way over 800 quantised
graphs, all within the criteria (the generator before this rule failed 24). The moves use a
fixed pattern, not the graph's draws, and each operation draws from its own fork: a graph in
which no operation meets the rule is drawn exactly as before.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from nncert.datafiles import integer, number, read_json
from nncert.files import write_atomic
from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model, Operand, SymmPerChannelQuantParams, dtype_of
from nncert.hal.types import FusedActivationFunc, OperandType, OperationType, Version
from nncert.ops import get, records
from nncert.ops.base import (
    Arg,
    Draw,
    OpRecord,
    SampleContext,
    SampledInput,
    ShapeError,
    Signature,
    Unknown,
    Variant,
)
from nncert.testing.cases import RANDOM_GRAPH, kernel_value, sample_case
from nncert.testing.criteria import GRAPH_CRITERIA, GraphCriterion, type_class

T = OperandType

FLOAT_BOUND = 1e3
INT_BOUND = 1 << 20


@dataclass(frozen=True)
class Kind:
    """A graph size of the CTS matrix: at most ``ops`` operations, dimensions in
    [1, ``dim_hi``], judged by ``criterion`` (None: the single operation's own class)."""

    name: str
    ops: int
    dim_hi: int
    criterion: str | None
    max_elements: int = 2048


KINDS = {k.name: k for k in (Kind("single", 1, 1000, None), Kind("small", 5, 1000, "small_graph"),
                             Kind("large", 40, 10, "large_graph"))}

#: Graph data types: the CTS's four, and the quantised ones it leaves out.
TYPES = {t.short: t for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8,
                              T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)}
CTS_TYPES = ("float32", "float16", "int32", "bool8")


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: a single operation at one HAL version (any of its type
    variants there), or a graph size with a data type and a rank."""

    kind: str
    operation: str = ""
    version: str = ""
    type: str = ""
    rank: int = 0

    @property
    def label(self) -> str:
        if self.kind == "single":
            return f"single-{self.operation}-{self.version}"
        return f"{self.kind}-{self.type}-rank{self.rank}"

    @staticmethod
    def parse(label: str) -> Cell:
        """The cell a ``label`` names (``single-ADD-1.2``, ``small-float32-rank3``)."""
        parts = label.split("-")
        try:
            if parts[0] == "single" and len(parts) == 3:
                cell = Cell("single", operation=parts[1], version=parts[2])
            elif parts[0] in ("small", "large") and len(parts) == 3 and parts[2].startswith("rank"):
                cell = Cell(parts[0], type=parts[1], rank=int(parts[2][4:]))
            else:
                raise ValueError
            cell.candidates()
        except (ValueError, KeyError, IndexError):
            raise ValueError(f"{label!r} names no cell (single-OPERATION-VERSION, "
                             f"small|large-TYPE-rankN)") from None
        return cell

    def candidates(self) -> tuple[tuple[OpRecord, Signature, Variant], ...]:
        return _candidates(self)


def matrix(quantised: bool = True) -> list[Cell]:
    """The CTS random-graph matrix on this catalogue: every operation at every HAL version
    it has, then small and large graphs for each data type at ranks 1-4 (the quantised
    types too unless ``quantised`` is False)."""
    cells = [Cell("single", operation=r.name, version=v.label) for r in records() if not r.graphs
             for v in r.versions]
    types = [t for t in TYPES if quantised or t in CTS_TYPES]
    cells += [Cell(kind, type=t, rank=rank)
              for kind in ("small", "large") for t in types for rank in range(1, 5)]
    return cells


@cache
def _candidates(cell: Cell) -> tuple[tuple[OpRecord, Signature, Variant], ...]:
    if cell.kind == "single":
        record = get(OperationType[cell.operation])
        if record is None or record.graphs:
            raise KeyError(cell.operation)
        found = tuple((record, sig, var) for sig in record.signatures for var in record.variants
                      if var.version.label == cell.version)
    else:
        if cell.kind not in KINDS or not 1 <= cell.rank <= 4:
            raise KeyError(cell.kind)
        want = TYPES[cell.type]
        found = tuple((r, sig, var) for r in records() if not r.graphs for sig in r.signatures
                      for var in r.variants if var.primary is want)
    if not found:
        raise KeyError(cell.label)
    return found


# ---------------------------------------------------------------------------------------
# The graph


@dataclass
class Node:
    """One operand: a model input, a constant, an omitted optional input or an operation's
    result. ``value`` is its golden (raw, stored type); None only for omitted inputs and
    for intermediate results of a graph read back from a spec file."""

    operand: Operand
    role: str  # input | const | internal | omitted
    value: np.ndarray | None = None
    exact: bool = True
    #: How far a conforming driver's value may be from ``value`` (generation only): in steps
    #: for a quantised operand, in real units for a float one (see ``_Builder._uncertainty``).
    error: float = 0.0


@dataclass
class Op:
    type: OperationType
    inputs: list[int]
    outputs: list[int]


@dataclass
class Graph:
    cell: Cell
    nodes: list[Node] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    version: Version = Version.V1_0

    @property
    def criterion_class(self) -> str:
        kind = KINDS[self.cell.kind]
        if kind.criterion:
            return kind.criterion
        return get(self.ops[0].type).criterion if self.ops else "strict"

    def criterion(self, type_: OperandType) -> GraphCriterion:
        return GRAPH_CRITERIA[self.criterion_class][type_class(type_)]

    @property
    def inputs(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.role == "input"]

    @property
    def expected(self) -> list[np.ndarray]:
        return [self.nodes[i].value for i in self.outputs]

    def model(self) -> tuple[Model, list[np.ndarray]]:
        """The graph as a HAL model (operands in node order) and its input values."""
        b = ModelBuilder()
        for n in self.nodes:
            o = n.operand
            if n.role == "omitted":
                b.no_value(o.type)
            elif n.role == "const":
                b.constant(o.type, n.value, o.scale, o.zero_point, o.channel_quant)
            else:
                b.operand(o.type, o.dimensions, o.scale, o.zero_point, o.channel_quant)
        for op in self.ops:
            b.operation(op.type, op.inputs, op.outputs)
        ins = self.inputs
        return b.build(ins, self.outputs), [self.nodes[i].value for i in ins]

    def describe(self) -> str:
        """One line per operation: ``#3 ADD(n0, n5) -> n6``."""
        lines = []
        for k, op in enumerate(self.ops):
            args = ", ".join(f"n{i}" for i in op.inputs)
            lines.append(f"#{k} {op.type.name}({args}) -> {', '.join(f'n{i}' for i in op.outputs)}")
        return "\n".join(lines)

    # -- reduction -------------------------------------------------------------------

    def restrict(self, outputs: Sequence[int], cut: Sequence[int] = ()) -> Graph:
        """The part of the graph that computes ``outputs``, with the nodes in ``cut``
        turned into model inputs fed with their golden values (their producers dropped
        unless still needed). Nodes are renumbered."""
        cut_set = set(cut)
        producer = {o: k for k, op in enumerate(self.ops) for o in op.outputs}
        needed_ops: set[int] = set()
        stack = [o for o in outputs if o not in cut_set]
        seen: set[int] = set()
        while stack:
            nid = stack.pop()
            if nid in seen or nid in cut_set or nid not in producer:
                continue
            seen.add(nid)
            k = producer[nid]
            if k not in needed_ops:
                needed_ops.add(k)
                stack.extend(self.ops[k].inputs)
        ops = [op for k, op in enumerate(self.ops) if k in needed_ops]
        used = sorted({i for op in ops for i in op.inputs + op.outputs} | set(outputs))
        renumber = {old: new for new, old in enumerate(used)}
        nodes = []
        for old in used:
            n = self.nodes[old]
            if old in cut_set:
                if n.value is None:
                    raise ValueError(f"node {old} has no golden value to feed")
                n = dataclasses.replace(n, role="input")
            nodes.append(n)
        new_ops = [Op(op.type, [renumber[i] for i in op.inputs], [renumber[i] for i in op.outputs])
                   for op in ops]
        g = Graph(self.cell, nodes, new_ops, [renumber[o] for o in outputs], self.version)
        g.version = _graph_version(g)
        return g

    def cuttable(self) -> list[int]:
        """Intermediate results (consumed by an operation) that a cut could feed instead."""
        consumed = {i for op in self.ops for i in op.inputs}
        return [i for i, n in enumerate(self.nodes) if n.role == "internal" and i in consumed
                and n.value is not None]


def _graph_version(g: Graph) -> Version:
    from nncert.ops.evaluate import bind, instance_version

    version = Version.V1_0
    for op in g.ops:
        record = get(op.type)
        ins = [None if g.nodes[i].role == "omitted" else g.nodes[i].operand for i in op.inputs]
        vals = [None if g.nodes[i].role in ("omitted", "input", "internal") else g.nodes[i].value
                for i in op.inputs]
        outs = [g.nodes[i].operand for i in op.outputs]
        try:
            known = [kernel_value(record, o, v) for o, v in zip(ins, vals, strict=True)]
            ctx = bind(record, ins, known, outs)
            version = max(version, instance_version(ctx))
        except (ShapeError, Unknown, KeyError, ValueError, IndexError, TypeError):
            # A graph read from a spec file may be invalid (validation refuses it when it runs):
            # its version is then the record's newest.
            version = max(version, max(record.versions))
    return version


# ---------------------------------------------------------------------------------------
# Generation


def _sensitive(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    """Whether the operation's output jumps under tiny changes of float inputs."""
    if record.discrete:
        return True
    outs = [a.resolve(var_.types) for a in sig.outputs]
    ins = [a.resolve(var_.types) for a in sig.inputs]
    return any(not (t.is_float or t.is_quant) for t in outs) and \
        any(t.is_tensor and (t.is_float or t.is_quant) for t in ins)


def _in_domain(domain: str | None, operand: Operand, value: np.ndarray) -> bool:
    """Whether a tensor may feed an argument with ``domain``, with a margin: a driver's
    value of it differs from the golden within tolerance."""
    if domain is None or value.size == 0:
        return True
    t = operand.type
    if t is T.TENSOR_INT32:
        v = value.astype(np.int64)
        return bool({"positive": (v >= 1).all(), "nonzero": (v != 0).all(),
                     "unit": (np.abs(v) < 1).all()}.get(domain, False))
    if t.is_quant:
        from nncert.ops.base import dequantize
        v = dequantize(value, operand)
        step = operand.scale if operand.channel_quant is None else max(operand.channel_quant.scales)
        margin = 3 * step
    else:
        v = value.astype(np.float64)
        margin = 0.0
    if domain == "positive":
        return bool((v >= 0.1 + margin).all())
    if domain == "nonzero":
        return bool((np.abs(v) >= 0.25 + margin).all())
    if domain == "unit":
        return bool((np.abs(v) <= 0.95 - margin).all())
    return False


def _within_bounds(o: Operand, value: np.ndarray) -> bool:
    if o.type.is_float:
        v = value.astype(np.float64)
        return bool(np.isfinite(v).all() and (np.abs(v) <= FLOAT_BOUND).all())
    if o.type is T.TENSOR_INT32:
        return bool((np.abs(value.astype(np.int64)) <= INT_BOUND).all())
    return True


def _exact_output(record: OpRecord, sig: Signature, var_: Variant, arg: Arg,
                  inputs_exact: bool) -> bool:
    """Whether an operation's output (of ``arg``) is computed exactly by any conforming
    driver: copies, selections and integer arithmetic on exact inputs. A quantised output
    is exact only when it keeps its input's scale (no requantisation)."""
    if not inputs_exact:
        return False
    out_t = arg.resolve(var_.types)
    types = [a.resolve(var_.types) for a in sig.inputs] + [out_t]
    integer_only = all(not (t.is_float or t.is_quant) for t in types if t.is_tensor)
    if not (record.criterion == "strict" or integer_only):
        return False
    return not out_t.is_quant or arg.quant.kind == "same"


def _max_gain(record: OpRecord) -> float:
    """The most output steps one step of an inexact quantised input may move the
    operation's exact result by (module docstring): the quantised atol the criteria grant
    the operation alone (1 strict, 2 medium, 10 relaxed and conv)."""
    return GRAPH_CRITERIA[record.criterion]["quant8"].atol


#: A fixed pattern of signs for moving every element of an input independently (drawn from
#: its own generator, so that the graph's draws are the same whatever it finds).
_SIGN_SEED = 0x5EED


@functools.lru_cache(maxsize=512)
def _alternating(shape: tuple[int, ...]) -> np.ndarray:
    signs = np.where(np.random.default_rng(_SIGN_SEED).random(shape) < 0.5, -1.0, 1.0)
    signs.flags.writeable = False  # shared by every caller of this shape
    return signs


def _moved_input(operand: Operand, value: np.ndarray, amount: float, sign: int) -> np.ndarray:
    """``value`` moved by ``amount`` (whole steps of a quantised operand, real units of a
    float one): up (sign 1), down (-1) or each element either way (0), within the type."""
    v = np.asarray(value)
    signs = _alternating(v.shape) if sign == 0 else float(sign)
    if operand.type.is_quant:
        lo, hi = operand.type.quant_range
        moved = v.astype(np.int64) + np.asarray(signs * math.floor(amount + 1e-9)).astype(np.int64)
        return np.clip(moved, lo, hi).astype(v.dtype)
    return (v.astype(np.float64) + signs * amount).astype(v.dtype)


def _results(record: OpRecord, operands: list[Operand | None], raw: list[Any],
             outputs: list[Operand]) -> list[np.ndarray]:
    """The operation's results before rounding to the output types: quantised ones in
    output steps (clamped to the type's range), the others in their own units."""
    from nncert.ops.evaluate import evaluate_real

    found = []
    for r, o in zip(evaluate_real(record, operands, raw, outputs), outputs, strict=True):
        r = np.asarray(r, dtype=np.float64)
        if o.type.is_quant and record.dequantize and o.channel_quant is None:
            lo, hi = o.type.quant_range
            r = np.clip(r / o.scale + o.zero_point, lo, hi)
        found.append(r)
    return found


def _sensitivity(record: OpRecord, operands: list[Operand | None], raw: list[Any],
                 outputs: list[Operand], amounts: list[float],
                 base: list[np.ndarray] | None = None) -> list[np.ndarray] | None:
    """How far each element of each result moves, at most, when every input ``i`` with
    ``amounts[i] > 0`` is moved by that amount (``_moved_input``): up, down or element by
    element each way, in every combination over up to three moved inputs (else the three
    patterns for all of them alike). In output steps for quantised results, own units for
    the others; None when a moved input makes the operation fail or a result non-finite.
    ``base``: the results on ``raw`` (``_results``), when the caller has them."""
    moved = [i for i, a in enumerate(amounts) if a > 0]
    if base is None:
        base = _results(record, operands, raw, outputs)
    worst = [np.zeros(b.shape) for b in base]
    combos = itertools.product((1, -1, 0), repeat=len(moved)) if len(moved) <= 3 else \
        ((sign,) * len(moved) for sign in (1, -1, 0))
    inputs: dict[tuple[int, int], np.ndarray] = {}  # each input moved each way, once
    for combo in combos:
        values = list(raw)
        for i, sign in zip(moved, combo, strict=True):
            if (i, sign) not in inputs:
                inputs[i, sign] = _moved_input(operands[i], raw[i], amounts[i], sign)
            values[i] = inputs[i, sign]
        try:
            with np.errstate(all="ignore"):
                got = _results(record, operands, values, outputs)
        except (ShapeError, Unknown, ValueError, ArithmeticError, TypeError, IndexError):
            return None
        for k, (g, b) in enumerate(zip(got, base, strict=True)):
            if g.shape != b.shape:
                return None
            with np.errstate(all="ignore"):
                d = np.abs(g - b)
            if not np.isfinite(d).all():
                return None
            worst[k] = np.maximum(worst[k], d)
    return worst


class _Builder:
    """Grows one graph: the steer and connect hooks the samplers see, and acceptance."""

    def __init__(self, draw: Draw, cell: Cell) -> None:
        self.draw = draw
        self.cell = cell
        self.kind = KINDS[cell.kind]
        self.graph = Graph(cell)
        self.consumers: list[int] = []
        self._pools: dict[OperandType, list[int]] = {}
        self._domain_ok: dict[tuple[int, str | None], bool] = {}
        self.sensitive = False
        self.primary: OperandType = T.TENSOR_FLOAT32

    # Tensors an operation could consume, most recent first (unconsumed results first); kept
    # until the graph changes (a node added, a node consumed), as is whether a node's value
    # may feed an argument of a domain (nodes never change).
    def _pool(self, type_: OperandType) -> list[int]:
        ids = self._pools.get(type_)
        if ids is None:
            nodes = self.graph.nodes
            ids = [i for i, n in enumerate(nodes) if n.role == "internal" and n.operand.type is type_]
            ids.sort(key=lambda i: (self.consumers[i] > 0, -i))
            self._pools[type_] = ids
        return ids

    def _in_domain(self, domain: str | None, i: int) -> bool:
        key = (i, domain)
        ok = self._domain_ok.get(key)
        if ok is None:
            n = self.graph.nodes[i]
            ok = self._domain_ok[key] = _in_domain(domain, n.operand, n.value)
        return ok

    def steer(self, s: SampleContext, rank: int | None, lo: int, hi: int) -> tuple[int, ...] | None:
        if not self.draw.bool(0.8):
            return None
        nodes = self.graph.nodes
        fits: list[int] = []  # the first 4 are all the draw below looks at
        for i in self._pool(self.primary):
            o = nodes[i].operand
            dims = o.dimensions
            if (rank is None or len(dims) == rank) and s.ranks[0] <= len(dims) <= s.ranks[1] \
                    and all(lo <= d <= hi for d in dims) and math.prod(dims) <= s.max_elements:
                fits.append(i)
                if len(fits) == 4:
                    break
        if not fits:
            return None
        return nodes[fits[self.draw.int(0, len(fits) - 1)]].operand.dimensions

    def connect(self, a: Arg, operand: Operand, item: SampledInput) -> tuple[Operand, np.ndarray, int] | None:
        if item.scale is not None or item.zero_point is not None or item.channel_dim is not None:
            return None
        fits: list[int] = []  # the first 3 are all the draw below looks at
        for i in self._pool(operand.type):
            n = self.graph.nodes[i]
            o = n.operand
            if o.dimensions != operand.dimensions or o.channel_quant is not None:
                continue
            if o.type.is_quant and a.quant.kind != "free" and \
                    (o.scale, o.zero_point) != (operand.scale, operand.zero_point):
                continue
            if self.sensitive and (o.type.is_float or o.type.is_quant) and not n.exact:
                continue
            if not self._in_domain(a.domain, i):
                continue
            fits.append(i)
            if len(fits) == 3:
                break
        if not fits or not self.draw.bool(0.9):
            return None
        i = fits[self.draw.int(0, len(fits) - 1)]
        return self.graph.nodes[i].operand, self.graph.nodes[i].value, i

    def add(self, draw: Draw) -> bool:
        """Draw one operation into the graph; False if rejected."""
        self.draw = draw
        record, sig, var_ = draw.choice(self.cell.candidates())
        nchw = draw.bool() if record.layout else None
        act = None
        if record.activation:
            out_t = sig.outputs[0].resolve(var_.types)
            act = draw.choice(tuple(FusedActivationFunc)) if out_t is not T.TENSOR_INT32 else 0
        self.primary = var_.primary
        self.sensitive = _sensitive(record, sig, var_)
        ranks = (self.cell.rank, self.cell.rank) if self.cell.rank else (1, 4)
        try:
            with np.errstate(all="ignore"):
                case = sample_case(record, sig, var_, nchw, act, draw=draw,
                                   max_elements=self.kind.max_elements, values=RANDOM_GRAPH,
                                   dim_hi=self.kind.dim_hi, ranks=ranks, steer=self.steer,
                                   connect=self.connect, must_connect=bool(self.graph.ops))
        except (ShapeError, Unknown, ValueError):
            # Parameters the record rejects, or a sampler pushed past the sizes it was
            # written for by a steered dimension: draw another operation.
            return False
        if not all(_within_bounds(o, e) for o, e in zip(case.outputs, case.expected, strict=True)):
            return False
        if not self.graph.ops and self.cell.kind != "single" and not any(
                o.type is self.primary and o.rank == self.cell.rank for o in case.outputs):
            return False  # the first result must be one the next operations can consume
        g = self.graph
        errors = self._uncertainty(record, sig, var_, case)
        if errors is None:
            return False  # a conforming driver could miss the criteria (module docstring)
        ids = []
        inputs_exact = True
        for ci in case.inputs:
            if ci.operand is None:
                ids.append(self._node(Node(Operand(ci.arg.resolve(var_.types)), "omitted")))
            elif ci.source is not None:
                ids.append(ci.source)
                self.consumers[ci.source] += 1
                self._pools.clear()
                inputs_exact &= g.nodes[ci.source].exact
            else:
                const = ci.operand.type.is_scalar or ci.const or draw.bool(0.5)
                ids.append(self._node(Node(ci.operand, "const" if const else "input", ci.value)))
        outs = [self._node(Node(o, "internal", e, _exact_output(record, sig, var_, a, inputs_exact), err))
                for a, o, e, err in zip(sig.output_args(len(case.outputs)), case.outputs, case.expected,
                                        errors, strict=True)]
        g.ops.append(Op(record.type, ids, outs))
        g.version = max(g.version, case.version)
        return True

    def _uncertainty(self, record: OpRecord, sig: Signature, var_: Variant, case: Any) -> list[float] | None:
        """The error bound of each result of ``case`` (``Node.error``), or None when the
        operation must be drawn again because a conforming driver could miss the criteria
        on it (module docstring): one step of its inexact quantised inputs moves a
        quantised result by more than ``_max_gain`` steps or an integer or boolean result
        at all, or the bound of a result exceeds the graph's criterion for its type."""
        g = self.graph
        args = sig.output_args(len(case.outputs))
        # ACC-2: a conforming driver may round each requantised result one step the other way.
        own = [1.0 if o.type.is_quant and not _exact_output(record, sig, var_, a, True) else 0.0
               for a, o in zip(args, case.outputs, strict=True)]
        errors = [0.0 if ci.source is None else g.nodes[ci.source].error for ci in case.inputs]
        if not any(errors):
            return own
        operands = [ci.operand for ci in case.inputs]
        raw = [ci.value for ci in case.inputs]
        one_step = [min(e, 1.0) if o is not None and o.type.is_quant else e
                    for o, e in zip(operands, errors, strict=True)]
        base = _results(record, operands, raw, case.outputs)
        gain = _sensitivity(record, operands, raw, case.outputs, one_step, base)
        if gain is None:
            return None
        for o, d in zip(case.outputs, gain, strict=True):
            limit = _max_gain(record) if o.type.is_quant else 0.0 if not o.type.is_float else math.inf
            if d.size and float(d.max()) > limit + 1e-6:
                return None
        moved = gain if errors == one_step else \
            _sensitivity(record, operands, raw, case.outputs, errors, base)
        if moved is None:
            return None
        criteria = GRAPH_CRITERIA[self.kind.criterion or record.criterion]
        bounds = []
        for o, d, e, extra in zip(case.outputs, moved, case.expected, own, strict=True):
            c = criteria[type_class(o.type)]
            worst = (float(d.max()) if d.size else 0.0) + extra
            if o.type.is_float:
                # Every element may be off by its bound: each within atol + rtol |e|, and
                # the bias and mse of the relative differences within theirs.
                e = np.abs(np.asarray(e, dtype=np.float64))
                if (d > c.atol + c.rtol * e).any() or \
                        (d / np.maximum(1.0, e) > min(c.bias, math.sqrt(c.mse))).any():
                    return None
            elif o.type.is_quant and worst > c.atol + 1e-6:
                return None
            bounds.append(worst)
        return bounds

    def _node(self, node: Node) -> int:
        self.graph.nodes.append(node)
        self.consumers.append(0)
        self._pools.clear()
        return len(self.graph.nodes) - 1


def generate(draw: Draw, cell: Cell) -> Graph:
    """A valid graph for ``cell``: ``Kind.ops`` operations most of the time, fewer in a
    fraction of draws, with its golden outputs. Raises ShapeError when no operation fits."""
    kind = KINDS[cell.kind]
    n_ops = kind.ops if kind.ops == 1 or draw.int(0, 3) else draw.int(1, kind.ops)
    b = _Builder(draw, cell)
    tries = 0
    # Every operation after the first must consume an earlier result (a connected graph).
    while len(b.graph.ops) < n_ops and tries < 40 * n_ops + 200:
        tries += 1
        b.add(draw.fork())
    if not b.graph.ops:
        raise ShapeError(f"{cell.label}: no operation could be drawn in {tries} tries")
    g = b.graph
    g.outputs = [i for op in g.ops for i in op.outputs if b.consumers[i] == 0]
    return g


def seeded(cell: Cell, seed: int, index: int = 0) -> Graph:
    """Graph ``index`` of ``cell`` in a run seeded ``seed``: a pure function of the three.
    Its numpy generator is keyed by their hash alone (no global random state, clock,
    hypothesis or earlier draw), so that one test id rerun alone, in another order or in
    another process draws the same graphs as inside the whole suite."""
    key = f"{cell.label}/{seed}/{index}".encode()
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
    return generate(Draw(rng), cell)


# ---------------------------------------------------------------------------------------
# Spec files


SPEC_FORMAT = "nncert-graph-spec/1"


class SpecError(ValueError):
    """A spec file that cannot be read: the message names the file and what is wrong."""


def _array_json(value: np.ndarray | None) -> Any:
    return None if value is None else np.asarray(value).tolist()


def to_spec(graph: Graph, **extra: Any) -> dict:
    """A JSON-ready description of ``graph``: operands, operations, inputs and constants,
    expected outputs and criteria, plus ``extra`` fields (seed, results, verdict...)."""
    nodes = []
    for n in graph.nodes:
        o = n.operand
        item: dict[str, Any] = {"type": o.type.name, "dims": list(o.dimensions), "role": n.role}
        if o.type.is_quant:
            item["scale"] = o.scale
            item["zero_point"] = o.zero_point
        elif o.scale:
            item["scale"] = o.scale
        if o.channel_quant is not None:
            item["channel_quant"] = {"scales": list(o.channel_quant.scales),
                                     "channel_dim": o.channel_quant.channel_dim}
        if n.role in ("input", "const"):
            item["value"] = _array_json(n.value)
        nodes.append(item)
    crit = graph.criterion_class
    spec = {
        "format": SPEC_FORMAT,
        "cell": graph.cell.label,
        "criteria": {"class": crit, **{k: dataclasses.asdict(v) for k, v in GRAPH_CRITERIA[crit].items()}},
        "operands": nodes,
        "operations": [{"type": op.type.name, "inputs": op.inputs, "outputs": op.outputs}
                       for op in graph.ops],
        "outputs": graph.outputs,
        "expected": [_array_json(e) for e in graph.expected],
    }
    spec.update(extra)
    return json.loads(json.dumps(spec, default=_json_default))


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def save_spec(path, graph: Graph, **extra: Any) -> None:
    write_atomic(path, json.dumps(to_spec(graph, **extra), indent=1) + "\n")


def load_spec(path) -> tuple[Graph, dict]:
    """The graph a spec file describes (with its expected outputs) and the whole document.
    Raises SpecError with a one-line reason on anything malformed: the file is read by
    ``nncert.datafiles`` (bounded nesting and integers, UTF-8), every field is type-checked,
    and no operand may claim more than ``MAX_SPEC_ELEMENTS`` elements, so that a crafted file
    is refused before anything is allocated for it."""
    # Tensor values may hold NaN and infinities (an expected output, the criteria's limits).
    doc = read_json(path, SpecError, allow_nonfinite=True)
    try:
        return _graph_of(doc), doc
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


#: The most elements one operand of a spec file may have (64 MiB of float32); generated graphs
#: stay below 2,048.
MAX_SPEC_ELEMENTS = 1 << 24
#: A dimension is a HAL uint32; no operation has a rank near 16.
_MAX_DIM = (1 << 32) - 1
_MAX_RANK = 16
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _graph_of(doc: Any) -> Graph:
    def need(cond: bool, what: str) -> None:
        if not cond:
            raise SpecError(what)

    need(isinstance(doc, dict), "the top level must be an object")
    need(doc.get("format") == SPEC_FORMAT, f"format must be {SPEC_FORMAT!r}, got {doc.get('format')!r:.60}")
    for key in ("cell", "operands", "operations", "outputs", "expected"):
        need(key in doc, f"missing field {key!r}")
    need(isinstance(doc["cell"], str), "cell must be a string")
    try:
        cell = Cell.parse(doc["cell"])
    except ValueError as e:
        raise SpecError(str(e)) from None
    verdict = doc.get("verdict")
    need(verdict is None or (isinstance(verdict, dict) and isinstance(verdict.get("summary", ""), str)),
         "verdict must be an object whose summary is a string")
    nodes = []
    need(isinstance(doc["operands"], list) and doc["operands"], "operands must be a non-empty list")
    for i, item in enumerate(doc["operands"]):
        nodes.append(_node(item, f"operands[{i}]"))
    n = len(nodes)

    def indexes(value: Any) -> bool:
        return isinstance(value, list) and all(type(i) is int and 0 <= i < n for i in value)

    ops = []
    need(isinstance(doc["operations"], list) and doc["operations"], "operations must be a non-empty list")
    for k, item in enumerate(doc["operations"]):
        where = f"operations[{k}]"
        need(isinstance(item, dict), f"{where} must be an object")
        op_type = _member(OperationType, item.get("type"), f"{where}.type", "an operation type")
        need(get(op_type) is not None, f"{where}.type: {op_type.name} is not in the operation catalogue")
        for key in ("inputs", "outputs"):
            need(indexes(item.get(key)), f"{where}.{key} must list operand indexes below {n}")
        ops.append(Op(op_type, list(item["inputs"]), list(item["outputs"])))
    outputs = doc["outputs"]
    need(outputs and indexes(outputs), f"outputs must list operand indexes below {n}")
    expected = doc["expected"]
    need(isinstance(expected, list) and len(expected) == len(outputs),
         f"expected must hold one array per output ({len(outputs)})")
    for i, value in zip(outputs, expected, strict=True):
        nodes[i].value = _array(value, nodes[i].operand, f"expected for operand {i}")
    g = Graph(cell, nodes, ops, list(outputs))
    g.version = _graph_version(g)
    return g


def _node(item: Any, where: str) -> Node:
    """One operand of a spec file, every field checked."""
    if not isinstance(item, dict):
        raise SpecError(f"{where} must be an object")
    t = _member(T, item.get("type"), f"{where}.type", "an operand type")
    role = item.get("role")
    if role not in ("input", "const", "internal", "omitted"):
        raise SpecError(f"{where}.role must be input, const, internal or omitted, got {role!r:.60}")
    dims = item.get("dims", [])
    if not isinstance(dims, list) or len(dims) > _MAX_RANK:
        raise SpecError(f"{where}.dims must be a list of at most {_MAX_RANK} dimensions")
    for d in dims:
        integer(d, f"{where}.dims", SpecError, 1, _MAX_DIM)
    if (t.is_scalar or role == "omitted") != (not dims):
        raise SpecError(f"{where}.dims: a tensor's dimensions must all be given, and a scalar or "
                        f"omitted operand has none")
    if math.prod(dims) > MAX_SPEC_ELEMENTS:
        raise SpecError(f"{where}.dims {dims} make {math.prod(dims):,} elements, more than a spec "
                        f"file may hold ({MAX_SPEC_ELEMENTS:,})")
    scale = number(item.get("scale", 0.0), f"{where}.scale", SpecError)
    zero_point = integer(item.get("zero_point", 0), f"{where}.zero_point", SpecError, *_INT32)
    channel = None
    cq = item.get("channel_quant")
    if cq is not None:
        if not isinstance(cq, dict) or not isinstance(cq.get("scales"), list):
            raise SpecError(f"{where}.channel_quant needs scales and channel_dim")
        channel = SymmPerChannelQuantParams(
            tuple(number(s, f"{where}.channel_quant.scales", SpecError) for s in cq["scales"]),
            integer(cq.get("channel_dim"), f"{where}.channel_quant.channel_dim", SpecError, 0, _MAX_RANK - 1))
    operand = Operand(t, tuple(dims), scale, zero_point, channel_quant=channel)
    value = None
    if role in ("input", "const"):
        if "value" not in item:
            raise SpecError(f"{where} ({role}) has no value")
        value = _array(item["value"], operand, where)
    return Node(operand, role, value)


def _member(enum: Any, name: Any, where: str, what: str) -> Any:
    try:
        return enum[name]
    except (KeyError, TypeError):
        raise SpecError(f"{where}: {name!r} is not {what}") from None


def _array(value: Any, operand: Operand, where: str) -> np.ndarray:
    try:
        # Numbers and booleans only: numpy would parse strings ("nan") and take None as NaN.
        kind = np.asarray(value).dtype.kind
        if kind not in "biuf":
            raise TypeError("its elements must be numbers (or booleans) in nested lists of one shape")
        arr = np.asarray(value, dtype=dtype_of(operand.type))
    except (TypeError, ValueError, OverflowError) as e:
        raise SpecError(f"{where}: not an array of {operand.type.name}: {e}") from None
    want = tuple(operand.dimensions)
    if operand.type.is_scalar:
        if arr.ndim != 0:
            raise SpecError(f"{where}: a scalar expected")
    elif tuple(arr.shape) != want and want:
        raise SpecError(f"{where}: shape {list(arr.shape)} does not match dims {list(want)}")
    return arr
