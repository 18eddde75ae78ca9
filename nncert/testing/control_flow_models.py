"""Small IF / WHILE models shared by the control-flow, QoS and mutant suites (EXE-9, EXE-10).

Each builder returns a HAL model; the ``*_golden`` functions give its expected outputs. The
loops count in TENSOR_INT32[1] and compare with LESS, so that any driver with ADD, SUB,
LESS and CONCATENATION can run them.
"""

from __future__ import annotations

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model
from nncert.hal.types import OperandType, OperationType

T = OperandType
Op = OperationType
ONE = (1,)


def _add(b: ModelBuilder, op: OperationType, x: int, y: int, type_: OperandType = T.TENSOR_INT32,
         dims: tuple[int, ...] = ONE) -> int:
    out = b.operand(type_, dims)
    b.operation(op, [x, y, b.constant(T.INT32, 0)], [out])
    return out


def if_model(dims: tuple[int, ...] = (2, 3), listed_against_indexes: bool = False) -> Model:
    """IF(c, then: a + b, else: a - b) over TENSOR_FLOAT32 ``dims``; inputs c, a, b.
    ``listed_against_indexes``: each branch makes operand b before a, so that it lists its
    inputs (a, b) against the order of their operand indexes."""
    def branch(op: OperationType) -> tuple[ModelBuilder, list[int], list[int]]:
        s = ModelBuilder()
        a, b = s.operand(T.TENSOR_FLOAT32, dims), s.operand(T.TENSOR_FLOAT32, dims)
        if listed_against_indexes:
            a, b = b, a
        return s, [a, b], [_add(s, op, a, b, T.TENSOR_FLOAT32, dims)]

    m = ModelBuilder()
    c = m.operand(T.TENSOR_BOOL8, ONE)
    a, b = m.operand(T.TENSOR_FLOAT32, dims), m.operand(T.TENSOR_FLOAT32, dims)
    out = m.operand(T.TENSOR_FLOAT32, dims)
    m.operation(Op.IF, [c, m.subgraph(*branch(Op.ADD)), m.subgraph(*branch(Op.SUB)), a, b], [out])
    return m.build([c, a, b], [out])


def if_golden(c: bool, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b if c else a - b


def dynamic_if_model() -> Model:
    """IF(c, then: CONCATENATION(x, x), else: x + x) on TENSOR_FLOAT32[3]: the output's
    length (6 or 3) depends on the branch; the output operand's dimension is unknown, so the
    driver reports it (EXE-4)."""
    def branch(concat: bool) -> tuple[ModelBuilder, list[int], list[int]]:
        s = ModelBuilder()
        x = s.operand(T.TENSOR_FLOAT32, (0,))
        if concat:
            y = s.operand(T.TENSOR_FLOAT32, (0,))
            s.operation(Op.CONCATENATION, [x, x, s.constant(T.INT32, 0)], [y])
        else:
            y = _add(s, Op.ADD, x, x, T.TENSOR_FLOAT32, (0,))
        return s, [x], [y]

    m = ModelBuilder()
    c, x = m.operand(T.TENSOR_BOOL8, ONE), m.operand(T.TENSOR_FLOAT32, (3,))
    out = m.operand(T.TENSOR_FLOAT32, (0,))
    m.operation(Op.IF, [c, m.subgraph(*branch(True)), m.subgraph(*branch(False)), x], [out])
    return m.build([c, x], [out])


def dynamic_if_golden(c: bool, x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, x]) if c else x + x


def _counter_condition(infinite: bool = False) -> tuple[ModelBuilder, list[int], list[int]]:
    """cond(total, i, bound) = i < bound; or, ``infinite``, i < i + 1 (true for ever)."""
    s = ModelBuilder()
    total, i, bound = (s.operand(T.TENSOR_INT32, ONE) for _ in range(3))
    right = _add(s, Op.ADD, i, s.constant(T.TENSOR_INT32, [1])) if infinite else bound
    keep_going = s.operand(T.TENSOR_BOOL8, ONE)
    s.operation(Op.LESS, [i, right], [keep_going])
    return s, [total, i, bound], [keep_going]


def _counter_body(nested_if: bool = False) -> tuple[ModelBuilder, list[int], list[int]]:
    """body(total, i, bound) = (total + i, i + 1); with ``nested_if``, the new total is
    IF(i < bound / 2... computed as 2 * i < bound, then: total + i, else: total - i)."""
    s = ModelBuilder()
    total, i, bound = (s.operand(T.TENSOR_INT32, ONE) for _ in range(3))
    if nested_if:
        twice = _add(s, Op.ADD, i, i)
        first_half = s.operand(T.TENSOR_BOOL8, ONE)
        s.operation(Op.LESS, [twice, bound], [first_half])
        new_total = s.operand(T.TENSOR_INT32, ONE)
        branches = []
        for op in (Op.ADD, Op.SUB):
            t = ModelBuilder()
            x, y = t.operand(T.TENSOR_INT32, ONE), t.operand(T.TENSOR_INT32, ONE)
            branches.append(s.subgraph(t, [x, y], [_add(t, op, x, y)]))
        s.operation(Op.IF, [first_half, *branches, total, i], [new_total])
    else:
        new_total = _add(s, Op.ADD, total, i)
    return s, [total, i, bound], [new_total, _add(s, Op.ADD, i, s.constant(T.TENSOR_INT32, [1]))]


def counting_while_model(nested_if: bool = False, infinite: bool = False) -> Model:
    """WHILE over (total: input-output, i: state-only, bound: input-only), starting from
    inputs total0, i0 and bound: while i < bound: total += i; i += 1. Output: total.
    ``nested_if`` adds i in the first half of the count and subtracts it in the second;
    ``infinite`` never stops (its condition is i < i + 1)."""
    m = ModelBuilder()
    total, i, bound = (m.operand(T.TENSOR_INT32, ONE) for _ in range(3))
    out = m.operand(T.TENSOR_INT32, ONE)
    m.operation(Op.WHILE, [m.subgraph(*_counter_condition(infinite)), m.subgraph(*_counter_body(nested_if)),
                           total, i, bound], [out])
    return m.build([total, i, bound], [out])


def counting_while_golden(total: int, i: int, bound: int, nested_if: bool = False) -> np.ndarray:
    while i < bound:
        total += (i if 2 * i < bound else -i) if nested_if else i
        i += 1
    return np.array([total], np.int32)


def counting_feeds(total: int, i: int, bound: int) -> list[np.ndarray]:
    return [np.array([v], np.int32) for v in (total, i, bound)]


def doubling_while_model() -> Model:
    """WHILE over (x: TENSOR_FLOAT32 of unknown length, n: TENSOR_INT32[1]): while n < 4:
    x = CONCATENATION(x, x); n += 1. The output's length is len(x) * 2 ** (4 - n): it
    changes every iteration and is known only once the loop ends (EXE-4)."""
    c = ModelBuilder()
    cx, cn = c.operand(T.TENSOR_FLOAT32, (0,)), c.operand(T.TENSOR_INT32, ONE)
    keep_going = c.operand(T.TENSOR_BOOL8, ONE)
    c.operation(Op.LESS, [cn, c.constant(T.TENSOR_INT32, [4])], [keep_going])
    b = ModelBuilder()
    bx, bn = b.operand(T.TENSOR_FLOAT32, (0,)), b.operand(T.TENSOR_INT32, ONE)
    doubled = b.operand(T.TENSOR_FLOAT32, (0,))
    b.operation(Op.CONCATENATION, [bx, bx, b.constant(T.INT32, 0)], [doubled])
    m = ModelBuilder()
    x, n = m.operand(T.TENSOR_FLOAT32, (0,)), m.operand(T.TENSOR_INT32, ONE)
    out_x, out_n = m.operand(T.TENSOR_FLOAT32, (0,)), m.operand(T.TENSOR_INT32, ONE)
    next_n = _add(b, Op.ADD, bn, b.constant(T.TENSOR_INT32, [1]))
    m.operation(Op.WHILE, [m.subgraph(c, [cx, cn], [keep_going]), m.subgraph(b, [bx, bn], [doubled, next_n]),
                           x, n], [out_x, out_n])
    return m.build([x, n], [out_x, out_n])


def doubling_while_golden(x: np.ndarray, n: int) -> list[np.ndarray]:
    while n < 4:
        x, n = np.concatenate([x, x]), n + 1
    return [x, np.array([n], np.int32)]


def fibonacci_while_model() -> Model:
    """WHILE over (a, b: input-output, i: state-only, n: input-only), all TENSOR_INT32[1]:
    while i < n: (a, b) = (b, a + b); i += 1. Outputs: a, b. Each new value reads the other's
    old one, so a driver that updates loop-carried values in place, one after another, gets
    b = 2 * b' (the new a added to itself) from the first turn on."""
    c = ModelBuilder()
    ca, cb, ci, cn = (c.operand(T.TENSOR_INT32, ONE) for _ in range(4))
    keep_going = c.operand(T.TENSOR_BOOL8, ONE)
    c.operation(Op.LESS, [ci, cn], [keep_going])
    b = ModelBuilder()
    ba, bb, bi, bn = (b.operand(T.TENSOR_INT32, ONE) for _ in range(4))
    total = _add(b, Op.ADD, ba, bb)
    new_a = _add(b, Op.ADD, bb, b.constant(T.TENSOR_INT32, [0]))  # b itself: an input cannot be an output
    next_i = _add(b, Op.ADD, bi, b.constant(T.TENSOR_INT32, [1]))
    m = ModelBuilder()
    a, b_, i, n = (m.operand(T.TENSOR_INT32, ONE) for _ in range(4))
    out_a, out_b = m.operand(T.TENSOR_INT32, ONE), m.operand(T.TENSOR_INT32, ONE)
    cond = m.subgraph(c, [ca, cb, ci, cn], [keep_going])
    body = m.subgraph(b, [ba, bb, bi, bn], [new_a, total, next_i])
    m.operation(Op.WHILE, [cond, body, a, b_, i, n], [out_a, out_b])
    return m.build([a, b_, i, n], [out_a, out_b])


def fibonacci_while_golden(a: int, b: int, i: int, n: int) -> list[np.ndarray]:
    while i < n:
        a, b, i = b, a + b, i + 1
    return [np.array([a], np.int32), np.array([b], np.int32)]
