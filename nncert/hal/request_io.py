"""Reading a request's inputs from its memory pools and writing its outputs (driver side).

Any in-process driver uses these, so that row-major layout (EXE-2), shapes given in the
request (EXE-6) and OUTPUT_INSUFFICIENT_SIZE (EXE-5) are handled the same way everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import Model, OutputShape, Request, RequestArgument, dtype_of
from nncert.hal.types import ErrorStatus

if TYPE_CHECKING:
    from nncert.drivers.memory_domain import Binding


def _bind(model: Model, request: Request) -> Binding | None:
    """The request's driver-managed buffers, every use of a token checked (MEM-4); None when
    every pool is shared memory."""
    for pool in request.pools:
        if not isinstance(pool, Memory):
            from nncert.drivers.memory_domain import bind_request  # drivers build on hal: import late
            return bind_request(model, request)
    return None


def _pool_view(request: Request, arg: RequestArgument, what: str, i: int) -> memoryview:
    pool = request.pools[arg.location.pool_index]
    if not isinstance(pool, Memory):
        raise HalError(ErrorStatus.GENERAL_FAILURE,
                       f"request {what} {i}: driver-managed buffers are not supported")
    return pool.view()


def read_inputs(model: Model, request: Request, copy: bool = True) -> list[np.ndarray | None]:
    """The request's inputs as arrays (None for has_no_value). Assumes validate_request passed.

    ``copy=False`` gives views of the pools instead, for a caller that copies them into its
    runtime at once: they must not outlive the call (a pool cannot close while viewed)."""
    binding = _bind(model, request)
    plan: list[tuple[memoryview, int, np.dtype, tuple[int, ...], int] | np.ndarray | None] = []
    for i, (idx, arg) in enumerate(zip(model.main.input_indexes, request.inputs, strict=True)):
        if arg.has_no_value:
            plan.append(None)
            continue
        if binding is not None and i in binding.inputs:
            plan.append(binding.read_input(i, arg.dimensions, copy))
            continue
        operand = model.main.operands[idx]
        dims = tuple(arg.dimensions) or operand.dimensions
        if not operand.type.is_scalar and (not dims or 0 in dims):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"request input {i}: shape not fully specified")
        dtype = dtype_of(operand.type)
        n = math.prod(dims) if dims else 1
        if arg.location.length != n * dtype.itemsize:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"request input {i}: {arg.location.length} "
                                                         f"bytes for {n} elements of {operand.type.name}")
        view = _pool_view(request, arg, "input", i)
        plan.append((view, arg.location.offset, dtype, () if operand.type.is_scalar else dims, n))
    # Every check is done: no error can now leave a view of a pool behind.
    values: list[np.ndarray | None] = []
    for item in plan:
        if item is None or isinstance(item, np.ndarray):
            values.append(item)
            continue
        view, offset, dtype, dims, n = item
        if dtype == np.bool_:  # any non-zero byte is true (TENSOR_BOOL8): canonical 0 / 1 for kernels
            arr = np.frombuffer(view, np.uint8, n, offset) != 0
        else:
            arr = np.frombuffer(view, dtype, n, offset)
            if copy:
                arr = arr.copy()
        values.append(arr.reshape(dims))
    return values


def check_output_space(model: Model, request: Request, shapes: Sequence[Sequence[int] | None]) -> None:
    """OUTPUT_INSUFFICIENT_SIZE (EXE-5), as ``write_outputs`` raises it, before the outputs
    exist: for a driver that knows the output shapes ahead (None: not known; reported with the
    model's dimensions, 0 where unknown, and taken as sufficient) and must not run into a
    buffer too small for them. A request with driver-managed buffers is left to
    ``write_outputs``, which judges those (MEM-6)."""
    if _bind(model, request) is not None:
        return
    found = []
    for idx, arg, dims in zip(model.main.output_indexes, request.outputs, shapes, strict=True):
        operand = model.main.operands[idx]
        if dims is None:
            found.append(OutputShape(tuple(operand.dimensions), True))
            continue
        nbytes = math.prod(int(d) for d in dims) * dtype_of(operand.type).itemsize
        found.append(OutputShape(tuple(int(d) for d in dims), nbytes <= arg.location.length))
    if not all(s.is_sufficient for s in found):
        small = [i for i, s in enumerate(found) if not s.is_sufficient]
        raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"output buffers too small: {small}", found)


def write_outputs(model: Model, request: Request, outputs: Sequence[np.ndarray]) -> list[OutputShape]:
    """Copy outputs into the request's buffers and return their shapes; raises
    OUTPUT_INSUFFICIENT_SIZE (with every output's shape) if any buffer is too small (EXE-5)."""
    binding = _bind(model, request)
    buffered = binding.outputs if binding is not None else {}
    shapes = []
    for i, (arg, value) in enumerate(zip(request.outputs, outputs, strict=True)):
        # A driver-managed buffer takes any shape it fits (MEM-6): Binding.check_outputs judges.
        shapes.append(OutputShape(value.shape, i in buffered or value.nbytes <= arg.location.length))
    if binding is not None:
        binding.check_outputs(outputs)
    if not all(s.is_sufficient for s in shapes):
        small = [i for i, s in enumerate(shapes) if not s.is_sufficient]
        if binding is not None:
            binding.fail()
        raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"output buffers too small: {small}", shapes)
    for i, (arg, value) in enumerate(zip(request.outputs, outputs, strict=True)):
        if i in buffered:
            binding.write_output(i, value)  # type: ignore[union-attr]
            continue
        value = np.ascontiguousarray(value)
        view = _pool_view(request, arg, "output", i)
        # One copy, straight into the pool.
        np.frombuffer(view, np.uint8, value.nbytes, arg.location.offset)[:] = value.reshape(-1).view(np.uint8)
    return shapes
