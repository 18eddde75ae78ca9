"""Base of drivers that compile a HAL model into another runtime's format (LiteRT, ONNX
Runtime): everything but the exporter and the runtime call is done here, once.

A subclass implements these hooks:

- ``operation_problem(model, index)``: why operation ``index`` of ``model`` cannot be
  expressed in the runtime's format (its type, a parameter), or None;
- ``translate(model)``: the model in the runtime's format (bytes: a .tflite flatbuffer, an
  ONNX protobuf), for a model that passed validation, whose tensors all have known dimensions
  and which has no float16 operand (see below). It raises ``Unmappable`` for what the
  exporter cannot express;
- ``load(content, model)``: an ``Executable`` of translated bytes, letting the runtime's own
  error out for what it refuses.

(Or ``compile(model)`` alone, which by default is ``load(translate(model), model)``; a
driver that overrides only ``compile`` caches the HAL model and compiles again on import.)

A runtime that compiles ahead of time (IREE, TVM, OpenVINO) implements ``build(content,
model)`` (the translated bytes to its compiled artefact) and ``load_built(artefact, model)``
instead of ``load``; the base then keeps the artefacts on disk by content
(``compile_cache``, nncert.drivers.compile_cache), shared by the supported-operations probe,
every prepared model and every later run, and the model cache holds the artefact. One whose
compiler is faster on several models at once implements ``build_together`` too, and then
compiles ahead what the tests it is told of (``expect``) will need (docs/drivers.md).

The base then gives:

- ``supported_operations`` decided per operation, type and parameter: the static rules,
  then a probe that compiles the operation alone (export plus the runtime's preparation,
  where kernels check their types) and runs it once on sample data, in a child process with
  a deadline, so that an operation the runtime dies or hangs on is declined with what
  happened (DRV-2); cached by the operation's signature and parameters;
- float16 as float32 (``widen_float16``): float16 operands are computed in float32 and the
  results rounded to float16 at the output, a documented strategy (docs/drivers.md) that
  ACC-1's float16 tolerance covers;
- dynamic shapes (EXE-4): a model with unknown dimensions is compiled again for each new set
  of actual input shapes, the shapes filled in by the catalogue's rules (an IF / WHILE output
  whose shape the taken branch or the loop decides stays unknown: the runtime gives it);
- shapes that follow from input values (a PAD whose paddings the request gives): worked out
  by the catalogue's rules before the runtime runs, and answered as the reference answers
  them (a contradicted or too large shape, OUTPUT_INSUFFICIENT_SIZE with the shapes), so that
  no value makes the runtime allocate what the caller's buffer cannot take;
- lookup indices the request gives (GATHER, EMBEDDING_LOOKUP) checked against the rows they
  pick from before the runtime runs, INVALID_ARGUMENT as the reference answers: ONNX Gather takes
  -1 for the last row and OpenVINO's Gather gives zeros past either end;
- omitted inputs: a request that gives a model input no value (an optional operation input,
  such as an LSTM's peephole weights) runs a variant of the model compiled with that
  operand omitted (NO_VALUE), once per omission pattern; the probe compiles and runs each
  valid pattern too, so what is claimed runs whatever a request omits;
- the loop timeout and the deadline, for an executable that can stop its WHILE loops
  (``Executable.run_until``);
- one execution at a time per compiled model (runtimes' interpreters are not reentrant);
- capabilities measured on reference workloads (``nncert.drivers.measure``);
- standalone reproducers (``nncert.repro.standalone``): ``standalone_runner`` hands over the
  runtime's own model file and the few lines of its public Python API that run it with the
  driver's options, so that a finding runs without nncert;
- compilation caching (CACHE-1..7, ``nncert.drivers.caching``): the model cache holds the
  HAL model and, for a model of known shapes, the translated bytes, so that preparing from
  cache loads them into the runtime without exporting again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from nncert.drivers import probe_verdicts
from nncert.drivers.base import Deadline, Driver, PreparedModel, check_deadline, check_preparation, timing_for
from nncert.drivers.probe import omittable_inputs, probe_operations
from nncert.hal.errors import HalError, ValidationError
from nncert.hal.model import Capabilities, Model, OutputShape, Request, Subgraph, Timing, dtype_of
from nncert.hal.request_io import check_output_space, read_inputs, write_outputs
from nncert.hal.transform import (
    CONSTANT,
    ShapeUnknown,
    fully_specified,
    isolate_operation,
    omit_inputs,
    specialize_shapes,
    specialize_subgraph,
    widen_float16,
)
from nncert.hal.types import ErrorStatus, ExecutionPreference, MeasureTiming, OperationType, Priority
from nncert.hal.types import OperandType as T
from nncert.hal.validation import validate_measure, validate_model, validate_request
from nncert.ops import get
from nncert.ops.base import MAX_OUTPUT_ELEMENTS
from nncert.ops.interpreter import loop_timeout_of


class Unmappable(Exception):  # noqa: N818 - carries the reason an exporter gives
    """What an exporter cannot express in its runtime's format."""


class RefusedTogether(Exception):  # noqa: N818 - says which, not that something failed
    """``build_together`` names the models the runtime refused (positions): the others are
    tried together again."""

    def __init__(self, refused: list[int]) -> None:
        super().__init__(f"models {refused} refused")
        self.refused = refused


class Executable(Protocol):
    """A compiled model. One whose WHILE loops can be stopped from outside also has
    ``run_until(inputs, stop_at)``: ``run`` that stops every loop still running at
    time.monotonic_ns() ``stop_at`` and then raises HalError MISSED_DEADLINE_TRANSIENT (the
    base calls it with the earlier of the deadline and the loop timeout, EXE-9, EXE-10)."""

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Arrays in model-input order (the operands' dtypes, float16 widened to float32)
        to arrays in model-output order. The outputs may be views of the runtime's own
        buffers, valid until the next run: the base copies them out before that."""


@dataclass
class StandaloneRunner:
    """The runtime's part of a standalone reproducer (nncert.repro.standalone), which writes
    ``files`` beside a script whose shared part loads the inputs and judges the outputs.

    ``code`` is Python source defining ``run(inputs)``: arrays in model-input order (the dtypes
    the driver feeds) to arrays in model-output order, with numpy and the runtime's public
    Python API only, the runtime imported inside ``run`` and the model read from ``HERE /
    <file>`` (``HERE``: the script's directory; ``CASE``: its case.json, as a dict)."""

    files: dict[str, bytes]
    code: str
    #: pip requirements of the script besides numpy ("onnxruntime==1.23.2")
    packages: list[str]
    #: the driver's options as the script passes them to the runtime, for the README
    options: dict[str, Any] = field(default_factory=dict)


def installed_version(distribution: str) -> str:
    """The installed version of a distribution, "?" when its metadata cannot be read."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "?"


#: Compiled variants kept per prepared model with dynamic shapes.
SHAPE_CACHE = 8
#: Model inputs of at most this many elements are read as values by the run-time shape check
#: (a PAD's paddings, a RESHAPE's shape, a TILE's multiples); a larger one is data, not a shape.
SHAPE_VALUE_ELEMENTS = 64
#: Probe results a driver keeps before it starts afresh.
PROBE_CACHE = 20000
#: Models whose per-operation plans (``CompiledDriver._plans``) a driver remembers.
PLANNED_MODELS = 8


class CompiledPreparedModel(PreparedModel):
    def __init__(self, driver: CompiledDriver, model: Model, wide: Model,
                 content: bytes | None = None) -> None:
        self.driver = driver
        self.model = model  # the caller's types: requests are read and written with these
        self.wide = wide  # float16 widened: what the runtime computes
        self._in_types = [dtype_of(wide.main.operands[i].type) for i in wide.main.input_indexes]
        self._out_types = [dtype_of(model.main.operands[i].type) for i in model.main.output_indexes]
        self._lock = threading.Lock()
        self._static: Executable | None = None
        #: The runtime's form of a model of known shapes, where the driver translates (what
        #: the model cache keeps: the built artefact where the driver builds one, else the
        #: translated bytes).
        self.content: bytes | None = content
        self._by_shape: OrderedDict[tuple, Executable] = OrderedDict()
        #: Whether a shape follows from a model input's value: checked before each run
        self._value_shaped = value_shaped(self.wide)
        #: The lookups whose indices the request gives: checked before each run
        self._index_guards = index_guards(self.wide)
        if content is not None:
            self._static = driver.load_form(content, self.wide)
        elif fully_specified(self.wide):
            if driver.translates():
                self.content = driver.runtime_form(self.wide)
                self._static = driver.load_form(self.content, self.wide)
            else:
                self._static = driver.compile(self.wide)

    def _executable(self, feeds: Sequence[np.ndarray], omitted: tuple[int, ...] = ()) -> Executable:
        """The compiled model for these input shapes and omitted inputs (positions): the one of
        the prepared model, else a variant compiled once and kept (``SHAPE_CACHE``)."""
        if self._static is not None and not omitted:
            return self._static
        shapes = tuple(tuple(a.shape) for a in feeds)
        key = (omitted, shapes) if omitted else shapes
        exe = self._by_shape.get(key)
        if exe is None:
            wide = self._omitting(omitted) if omitted else self.wide
            try:
                concrete = wide if fully_specified(wide) else specialize_shapes(wide, shapes)
            except ShapeUnknown as e:
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"{self.driver.name}: {e}") from None
            except ValueError as e:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, str(e)) from None
            exe = self.driver.compile(concrete)
            self._by_shape[key] = exe
            if len(self._by_shape) > SHAPE_CACHE:
                self._by_shape.popitem(last=False)
        self._by_shape.move_to_end(key)
        return exe

    def _omitting(self, omitted: tuple[int, ...]) -> Model:
        """The widened model with inputs ``omitted`` given no value (``omit_inputs``), which
        the runtime compiles as a model whose operations have those optional inputs omitted.
        Raises INVALID_ARGUMENT where the reference rejects the omission when it runs: the
        operations' own rules refuse the combination (an LSTM's input-gate weights without
        its input-gate bias), or an IF / WHILE would pass the omitted input to a subgraph."""
        sg = self.model.main
        for p in omitted:
            idx = sg.input_indexes[p]
            for op in sg.operations:
                if idx in op.inputs and op.type in (OperationType.IF, OperationType.WHILE):
                    raise HalError(ErrorStatus.INVALID_ARGUMENT,
                                   f"request input {p} has no value and {op.type.name} passes it to a "
                                   f"subgraph: {self.driver.name} passes only tensors with values")
        try:
            validate_model(omit_inputs(self.model, omitted))
        except ValidationError as e:
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"request inputs {list(omitted)} have no value, which the model's operations "
                           f"do not take: {e}") from None
        return omit_inputs(self.wide, omitted)

    def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                              deadline: Deadline = None,
                              loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        validate_measure(measure)
        validate_request(request, self.model)
        check_deadline(deadline, "execution")
        loop_ns = loop_timeout_of(loop_timeout)
        # Views of the pools, copied once, straight into the runtime (no error may keep them).
        inputs = read_inputs(self.model, request, copy=False)
        # Inputs given no value (optional operation inputs, validate_request checked): a
        # variant of the model in which they are omitted operands.
        omitted = tuple(p for p, a in enumerate(inputs) if a is None)
        failure: HalError | None = None
        try:
            feeds = [a if a.dtype == t else a.astype(t)
                     for a, t in zip(inputs, self._in_types, strict=True) if a is not None]
            if self._value_shaped and not omitted:
                self._check_shapes(request, feeds)
            if self._index_guards:
                self._check_indices(inputs)
            with self._lock:
                exe = self._executable(feeds, omitted)
                device_start = time.monotonic_ns()
                run_until = getattr(exe, "run_until", None)
                try:
                    if run_until is None:
                        outs = exe.run(feeds)
                    else:  # the loop timeout counted from here: no loop runs longer
                        stop_at = device_start + loop_ns
                        outs = run_until(feeds, stop_at if deadline is None else min(stop_at, deadline))
                except HalError:
                    raise
                except Exception as e:
                    raise HalError(ErrorStatus.GENERAL_FAILURE, f"{self.driver.name} execution "
                                   f"failed: {type(e).__name__}: {e}") from None
                device_ns = time.monotonic_ns() - device_start
                # Still under the lock: the outputs may be views of the runtime's buffers.
                shapes = self._write(request, outs)
        except HalError as e:
            failure = e
        except Exception as e:
            failure = HalError(ErrorStatus.GENERAL_FAILURE, f"{self.driver.name} cannot compile for "
                                                            f"these input shapes: {type(e).__name__}: {e}")
        finally:
            inputs = feeds = outs = None
        if failure is not None:
            failure.__context__ = failure.__cause__ = None
            failure.__traceback__ = None
            raise failure
        return shapes, timing_for(measure, start, device_ns)

    def _check_indices(self, inputs: list[np.ndarray | None]) -> None:
        """INVALID_ARGUMENT, as the reference answers it, for a lookup index the request gives
        outside the rows it picks from. The runtimes' own operators do not all refuse one: ONNX
        Gather takes -1 for the last row, OpenVINO's Gather gives zeros past either end."""
        for n, name, position, table, axis in self._index_guards:
            indices = inputs[position]
            if indices is None or not indices.size:
                continue
            rows = inputs[table[1]].shape[axis] if table[0] == "input" else table[1]
            low, high = int(indices.min()), int(indices.max())
            if low < 0 or high >= rows:
                raise HalError(ErrorStatus.INVALID_ARGUMENT,
                               f"operation {n} ({name}): index {low if low < 0 else high} is outside "
                               f"0..{rows - 1}, the rows it picks from")

    def _check_shapes(self, request: Request, feeds: list[np.ndarray]) -> None:
        """Before the runtime runs a model whose shapes follow from input values (a PAD whose
        paddings are a model input): the shapes these values give, by the catalogue's rules,
        answered as the reference answers them, operation by operation: INVALID_ARGUMENT for
        values the operation rejects, GENERAL_FAILURE for a result beyond what the reference
        computes (MAX_OUTPUT_ELEMENTS), INVALID_ARGUMENT for a shape that contradicts the
        model's; then OUTPUT_INSUFFICIENT_SIZE with the shapes for an output buffer too small
        for them (EXE-5). The runtime never gets values that ask it for more (ONNX Runtime
        set out to allocate a PAD output of 1.7e9 rows for a 24-byte buffer)."""
        sg = self.wide.main
        shapes = run_time_shapes(self.wide, feeds)
        if shapes is None:
            return  # a shape only the run decides (an IF's branch): the runtime's to give
        for n, op in enumerate(sg.operations):
            for k, idx in enumerate(op.outputs):
                got = shapes.get(idx)
                if got is None:
                    continue
                elements = 1
                for d in got:
                    elements *= d
                if elements > MAX_OUTPUT_ELEMENTS:
                    raise HalError(ErrorStatus.GENERAL_FAILURE,
                                   f"operation {n} ({op.type.name}): output {k} would have shape "
                                   f"{list(got)}: {elements:,} elements, more than the "
                                   f"{MAX_OUTPUT_ELEMENTS:,} {self.driver.name} computes where a shape "
                                   f"follows from input values")
                declared = sg.operands[idx].dimensions
                if declared and (len(declared) != len(got) or any(
                        d and d != a for d, a in zip(declared, got, strict=True))):
                    raise HalError(ErrorStatus.INVALID_ARGUMENT,
                                   f"operation {n} ({op.type.name}) output operand {idx} is declared "
                                   f"{list(declared)} but computes to {list(got)}")
        check_output_space(self.model, request, [shapes.get(i) for i in sg.output_indexes])

    def _write(self, request: Request, outs: list[np.ndarray]) -> list[OutputShape]:
        typed = []
        for a, t in zip(outs, self._out_types, strict=True):
            a = np.asarray(a)
            if a.dtype != t:
                with np.errstate(over="ignore"):  # float32 beyond float16's range rounds to inf
                    a = a.astype(t)
            typed.append(a)
        outs = typed
        if any(a.nbytes > arg.location.length for a, arg in zip(outs, request.outputs, strict=True)):
            # The error (OUTPUT_INSUFFICIENT_SIZE) outlives the call: it must hold no view
            # of a runtime buffer (LiteRT refuses to run while one exists).
            outs = [np.array(a) for a in outs]
        return write_outputs(self.model, request, outs)


class CompiledDriver(Driver):
    """A driver whose prepared models are another runtime's compiled models."""

    #: The runtime this driver compiles for, in words (version strings, reports).
    runtime: str = ""

    def __init__(self, state_dir: str | None = None) -> None:
        super().__init__(state_dir=state_dir)
        self._probes: dict[bytes, str | None] = {}
        self._planned: OrderedDict[bytes, list[str | _Probe | None]] = OrderedDict()
        self._probe_lock = threading.Lock()
        self._probe_child = None  # nncert.drivers.probe.ProbeChild, started by the first probe
        #: What ``expect`` was told this process will prepare, and how far the compile-ahead
        #: has got in it; the cache keys it could not compile together (compiled alone).
        self._ahead: list[Callable[[], Model]] = []
        self._ahead_at = self._ahead_pid = 0
        self._ahead_failed: set[str] = set()

    # -- hooks --
    def operation_problem(self, model: Model, index: int) -> str | None:
        """Why operation ``index`` of ``model`` (float16 already widened) cannot be mapped."""
        raise NotImplementedError

    def translate(self, model: Model) -> bytes:
        raise NotImplementedError

    def load(self, content: bytes, model: Model) -> Executable:
        raise NotImplementedError

    def build(self, content: bytes, model: Model) -> bytes:
        """The runtime's compiled artefact of translated bytes (an IREE .vmfb, a TVM library):
        a driver whose runtime compiles ahead of time implements ``build`` and ``load_built``
        instead of ``load``, and the base keeps the artefacts in ``compile_cache``."""
        raise NotImplementedError

    def load_built(self, artefact: bytes, model: Model) -> Executable:
        raise NotImplementedError

    def build_together(self, contents: list[bytes]) -> list[bytes]:
        """``build`` of several translated models at once, for a runtime that compiles them
        faster together than one by one (IREE: one module, a function each): their artefacts,
        in order, each loadable by ``load_built`` alone. Raises if the runtime refuses any.
        A driver that implements it gets the compile-ahead (``expect``)."""
        raise NotImplementedError

    def build_variant(self, model: Model) -> str:
        """What else than the translated bytes and the options decides ``build``'s artefact
        for ``model`` (OpenVINO: the precision hint a relaxed model gets), for the compile
        cache's key; "" when nothing does."""
        return ""

    #: Where ``build``'s artefacts are kept by content (nncert.drivers.compile_cache), or None.
    compile_cache = None

    #: Seconds the support probe gives the runtime to compile and run one operation (for each
    #: way of omitting its optional inputs) before it counts as a hang and is declined.
    probe_timeout: float = 120.0
    #: Whether the probe's child may be a fork of this process (started in milliseconds)
    #: rather than a fresh interpreter that rebuilds the driver (``recipe``): only for a
    #: runtime that still works in a fork of a process that has run it (IREE, TVM and
    #: OpenVINO hang there).
    probe_fork: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> CompiledDriver:
        self = super().__new__(cls)
        #: How a fresh interpreter makes this driver again: its class and arguments.
        self.recipe = (cls.__module__, cls.__qualname__, args, kwargs)
        return self

    def translates(self) -> bool:
        """Whether the driver implements translate / load (and so caches its runtime's form)."""
        return type(self).translate is not CompiledDriver.translate

    def builds(self) -> bool:
        """Whether the driver implements build / load_built."""
        return type(self).build is not CompiledDriver.build

    def runtime_form(self, model: Model) -> bytes:
        """What a prepared model of ``model`` keeps and the model cache holds: the built
        artefact (from the compile cache when it has one), else the translated bytes."""
        content = self.translate(model)
        if not self.builds():
            return content
        if self.compile_cache is None:
            return self.build(content, model)
        key = self._cache_key(model, content)
        if self._ahead_pending() and not self.compile_cache.has(key):
            with self._probe_lock:  # one user of the probe child at a time
                self._compile_ahead({key: content})
        return self.compile_cache.get_or_build(key, lambda: self.build(content, model))

    def _cache_key(self, model: Model, content: bytes) -> str:
        """The compile cache's key of ``model``, whose ``translate`` gave ``content``."""
        variant = self.build_variant(model)
        return self.compile_cache.key(f"{variant}\0".encode() + content if variant else content)

    # -- the compile-ahead --
    #: Models the compile-ahead compiles together, at most.
    AHEAD_BATCH = 32

    def expect(self, models: Sequence[Callable[[], Model]]) -> None:
        """The models this process is about to prepare, in order (functions that make them: a
        suite's tests, once collected). A driver that compiles faster several models at once
        (``build_together``, with a compile cache) then compiles, whenever it must compile,
        what the next of them need with it (``_compile_ahead``); the others ignore it."""
        if self.compile_cache is not None and type(self).build_together is not CompiledDriver.build_together:
            self._ahead, self._ahead_at, self._ahead_pid = list(models), 0, os.getpid()

    def _ahead_pending(self) -> bool:
        """Whether models told by ``expect`` are left, in the process that was told (a forked
        probe child, which holds a copy, compiles only what it is asked to)."""
        return self._ahead_at < len(self._ahead) and self._ahead_pid == os.getpid()

    def _compile_ahead(self, needed: dict[str, bytes]) -> None:
        """Compile the translated models ``needed`` (by cache key), none of them cached, with
        those the next expected models need (their operations alone, as the support probe
        compiles them, and the models) up to ``AHEAD_BATCH``, together, into the compile
        cache, in the probe child: a compiler that dies or hangs on one of them kills only the
        child, and whatever it did not compile is compiled alone when it is needed, as
        before. A key it once failed on is never batched again. Called with ``_probe_lock``
        held."""
        from nncert.drivers.probe import build_ahead

        entries = {k: c for k, c in needed.items() if k not in self._ahead_failed}
        if not entries:
            return
        while len(entries) < self.AHEAD_BATCH and self._ahead_at < len(self._ahead):
            make = self._ahead[self._ahead_at]
            self._ahead_at += 1
            try:
                targets = self._compile_targets(make())
            except Exception:  # a model the test itself will judge
                continue
            for key, content in self._uncached(targets).items():
                if key not in self._ahead_failed:
                    entries.setdefault(key, content)
        # Those another process is compiling (a pytest-xdist worker told the same tests) are
        # its to build: a test that needs one first compiles it alone.
        mine = self.compile_cache.claim(entries)
        try:
            if len(mine) < 2:
                return  # nothing to gain: compiled alone where it is needed
            left = build_ahead(self, [(key, entries[key]) for key in mine])
        finally:
            self.compile_cache.release(mine)
        self._ahead_failed.update(mine if left is None else left)

    def _uncached(self, models: Sequence[Model]) -> dict[str, bytes]:
        """The translated bytes of those of ``models`` the compile cache has not got, by key
        (one the exporter refuses left out: whoever needs it says why)."""
        assert self.compile_cache is not None
        found = {}
        for model in models:
            try:
                content = self.translate(model)
            except Exception:
                continue
            key = self._cache_key(model, content)
            if not self.compile_cache.has(key):
                found[key] = content
        return found

    def _compile_targets(self, model: Model) -> list[Model]:
        """What preparing ``model`` compiles: each operation alone as the support probe
        compiles it (an operation whose optional inputs a request may omit is probed in
        several forms: left out), and the widened model, its shapes known from its inputs'."""
        copy = model.copy()
        wide = widen_float16(copy)
        targets = [plan.single for plan in self._plan_each(copy, wide)
                   if isinstance(plan, _Probe) and not plan.omittable]
        sg = wide.main
        if not fully_specified(wide) and all(sg.operands[i].fully_specified for i in sg.input_indexes):
            wide = specialize_shapes(wide, [sg.operands[i].dimensions for i in sg.input_indexes])
        if fully_specified(wide):
            targets.append(wide)
        return targets

    def load_form(self, form: bytes, model: Model) -> Executable:
        """An executable of ``runtime_form``'s bytes."""
        return self.load_built(form, model) if self.builds() else self.load(form, model)

    def compile(self, model: Model) -> Executable:
        return self.load_form(self.runtime_form(model), model)

    def options_label(self) -> str:
        """The options that change behaviour, for version strings and caches ("kernels=ref")."""
        return ""

    def standalone_runner(self, wide: Model, content: bytes) -> StandaloneRunner:
        """The runtime's part of a standalone reproducer of ``wide`` (float16 widened, shapes
        known), whose ``translate`` gave ``content``: the model file(s) and the code that runs
        them as this driver does, with the same options."""
        raise NotImplementedError(f"the {self.name} driver writes no standalone reproducer")

    # -- the protocol --
    def version_string(self) -> str:
        from nncert import __version__
        opts = self.options_label()
        return f"nncert-{self.name} {__version__} ({self.runtime}{', ' + opts if opts else ''})"

    def capabilities(self) -> Capabilities:
        from nncert.drivers.measure import measured_capabilities
        return measured_capabilities(self)

    def supported_operations(self, model: Model) -> list[bool]:
        return [reason is None for reason in self.decline_reasons(model)]

    def decline_reasons(self, model: Model) -> list[str | None]:
        validate_model(model, self.feature_level)
        copy = model.copy()  # the copy's enum types, not a decoded model's raw ints
        return self._probed(self._plans(copy, widen_float16(copy)))

    def _plans(self, model: Model, wide: Model) -> list[str | _Probe | None]:
        """``_widening_problem`` or ``_probe_plan`` of each operation of ``model`` (``wide``
        its widened form), remembered for the last few models by their content: preparing
        a model plans what ``supported_operations`` of the same model has just planned."""
        key = _model_digest(model)
        with self._probe_lock:
            plans = self._planned.get(key)
            if plans is not None:
                self._planned.move_to_end(key)
                return plans
        plans = self._plan_each(model, wide)
        with self._probe_lock:
            self._planned[key] = plans
            while len(self._planned) > PLANNED_MODELS:
                self._planned.popitem(last=False)
        return plans

    def _plan_each(self, model: Model, wide: Model) -> list[str | _Probe | None]:
        """``_widening_problem`` or ``_probe_plan`` of each operation (``_plans`` uncached)."""
        return [_widening_problem(model, n) or self._probe_plan(wide, n)
                for n in range(len(wide.main.operations))]

    def why_unsupported(self, wide: Model, index: int) -> str | None:
        """Why the driver declines operation ``index`` of a widened model, or None."""
        return self._probed([self._probe_plan(wide, index)])[0]

    def _probe_plan(self, wide: Model, index: int) -> str | _Probe | None:
        """Why the driver declines operation ``index`` of a widened model, None, or the probe
        that decides it."""
        try:
            problem = self.operation_problem(wide, index)
        except Exception as e:  # an exporter bug declines, and says so
            problem = f"exporter error: {type(e).__name__}: {e}"
        if problem:
            return problem
        single = isolate_operation(wide, index)
        omittable = omittable_inputs(wide, index)
        if not fully_specified(single):
            # Known inputs, unknown outputs (dynamic output shapes): what the exporter or the
            # kernels decide may depend on the output shapes, which follow from the inputs.
            sg = single.main
            if not all(sg.operands[i].fully_specified for i in sg.input_indexes):
                return None  # decided when it runs, with actual shapes
            try:
                single = specialize_shapes(single, [sg.operands[i].dimensions for i in sg.input_indexes])
            except ShapeUnknown as e:
                # An output shape that follows from an input's *value* (FILL's dims given as a
                # model input): every execution would fail, since this driver compiles per
                # input shapes. Declined, rather than claimed and failed (DRV-2).
                return f"{e}; {self.name} compiles for shapes known before it runs"
            except Exception:
                return None  # not decidable before it runs: compiled (and judged) then
        key = _probe_key(single)
        if omittable:  # which inputs a request may omit decides what is probed too
            key = hashlib.blake2b(key + repr(omittable).encode(), digest_size=20).digest()
        return _Probe(key, single, omittable)

    def _probed(self, plans: Sequence[str | _Probe | None]) -> list[str | None]:
        """The verdict of each of ``_probe_plan``'s answers: the cached one of a probe's
        signature, else the probe's, those not cached run together in one request to the probe
        child (each signature once, in order)."""
        with self._probe_lock:
            todo: dict[bytes, _Probe] = {}
            for p in plans:
                if isinstance(p, _Probe) and p.key not in self._probes:
                    todo.setdefault(p.key, p)
            store = probe_verdicts.current()  # a fuzz campaign's, shared by its processes
            space = store.space(self) if store is not None and todo else None
            stored: dict[bytes, str | None] = {}
            if space is not None:
                for key in list(todo):
                    hit, verdict = space.get(key)
                    if hit:
                        stored[key] = verdict
                        del todo[key]
            if todo and self._ahead_pending():
                needed = self._uncached([p.single for p in todo.values()])
                if needed:
                    self._compile_ahead(needed)
            found = dict(zip(todo, probe_operations(self, [(p.single, p.omittable) for p in todo.values()]),
                             strict=True)) if todo else {}
            if space is not None and found:
                space.put(found)
            found.update(stored)
            verdicts = [(found[p.key] if p.key in found else self._probes[p.key]) if isinstance(p, _Probe)
                        else p for p in plans]
            if len(self._probes) + len(found) > PROBE_CACHE:  # a fuzz campaign's endless variety
                self._probes.clear()
            self._probes.update(found)
            return verdicts

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        check_preparation(model, preference, priority, deadline, self.feature_level)
        model = model.copy()  # the caller may change its model afterwards
        wide = widen_float16(model)
        for (n, op), reason in zip(enumerate(wide.main.operations), self._probed(self._plans(model, wide)),
                                   strict=True):
            if reason:
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"operation {n} ({op.type.name}) is not supported: {reason}")
        prepared = self._prepared(model, wide)
        return self.save_to_cache(prepared, model_cache, data_cache, token)

    def _prepared(self, model: Model, wide: Model, content: bytes | None = None) -> CompiledPreparedModel:
        try:
            return CompiledPreparedModel(self, model, wide, content)
        except HalError:
            raise
        except Exception as e:
            raise HalError(ErrorStatus.GENERAL_FAILURE,
                           f"{self.name} cannot compile the model: {type(e).__name__}: {e}") from None

    # -- compilation caching (CACHE-1..7): the HAL model plus the runtime's form --
    def export_compiled(self, prepared: PreparedModel) -> tuple[bytes, bytes]:
        from nncert.drivers.caching import export_model
        return export_model(prepared.model, getattr(prepared, "content", None) or b"")

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        """The cached runtime form loaded as it is (its hash was checked: CACHE-4), with the
        HAL model for requests; without one (dynamic shapes), the model prepared afresh."""
        from nncert.drivers.caching import import_model
        model, content = import_model(model_cache, data_cache, self.feature_level)
        if not content or not self.translates():
            return self.prepare_model(model)
        return self._prepared(model, widen_float16(model), content)


def _outputs_unknown(model: Model) -> Subgraph:
    """The main subgraph with every operation's output dimensions unknown (0, rank kept), so
    that specializing it computes them all from the inputs."""
    sg = model.main
    operands = list(sg.operands)
    for op in sg.operations:
        for i in op.outputs:
            o = operands[i]
            if o.type.is_tensor:
                operands[i] = dataclasses.replace(o, dimensions=tuple(0 for _ in o.dimensions))
    return dataclasses.replace(sg, operands=operands)


def value_shaped(wide: Model) -> bool:
    """Whether a shape of ``wide`` may follow from a model input's value (an operation whose
    shape rule reads a non-constant input: a PAD's paddings given by the request), or from
    input dimensions known only at run time: what ``run_time_shapes`` then works out before
    each run. False for the ordinary model, whose shapes its inputs' declared ones decide."""
    sg = wide.main
    dims = [sg.operands[i].dimensions for i in sg.input_indexes]
    if not all(sg.operands[i].fully_specified for i in sg.input_indexes if sg.operands[i].type.is_tensor):
        return True
    # What a shape rule reads the value of is a scalar or a small integer or boolean tensor
    # (paddings, a shape, multiples, axes, a RANGE's bounds): a model with no such non-constant
    # operand is decided without the walk (a float random graph of 35 operations: 3 ms).
    if not any(o.type.is_scalar or (o.type in (T.TENSOR_INT32, T.TENSOR_BOOL8)
                                    and math.prod(o.dimensions) <= SHAPE_VALUE_ELEMENTS)
               for op in sg.operations for o in (sg.operands[i] for i in op.inputs)
               if o.lifetime not in CONSTANT):
        return False
    try:
        specialize_subgraph(wide, _outputs_unknown(wide), dims)
    except ShapeUnknown:
        return True
    except Exception:  # the declared shapes aside, the run's values decide
        return True
    return False


def index_guards(wide: Model) -> list[tuple[int, str, int, tuple[str, int], int]]:
    """The operations of ``wide``'s main subgraph that pick slices by index (their catalogue
    record's ``picks``) from indices that are a model input, each (operation, its name, the
    indices' input position, where the row count comes from: ("rows", count) when the indexed
    operand's dimension is known, ("input", position) when the request gives it, the axis). An
    axis that is not a constant, or rows counted inside the graph, are left to the runtime."""
    sg = wide.main
    position = {idx: p for p, idx in enumerate(sg.input_indexes)}
    guards = []
    for n, op in enumerate(sg.operations):
        record = get(op.type)
        if record is None or record.picks is None:
            continue
        names = [a.name for a in record.signatures[0].inputs]
        where = [None if name is None else names.index(name) for name in record.picks]
        if op.inputs[where[0]] not in position:
            continue
        table = sg.operands[op.inputs[where[1]]]
        axis = 0
        if where[2] is not None:
            value = wide.constant_value(sg.operands[op.inputs[where[2]]])
            if value is None:
                continue
            axis = int(value) % max(1, len(table.dimensions))
        if axis < len(table.dimensions) and table.dimensions[axis]:
            source = ("rows", table.dimensions[axis])
        elif op.inputs[where[1]] in position:
            source = ("input", position[op.inputs[where[1]]])
        else:
            continue
        guards.append((n, op.type.name, position[op.inputs[where[0]]], source, axis))
    return guards


def run_time_shapes(wide: Model, feeds: Sequence[np.ndarray]) -> dict[int, tuple[int, ...]] | None:
    """Operand index -> the dimensions that ``feeds`` (the run's inputs, every one given) give
    each operation output of the main subgraph, by the catalogue's shape rules with the
    inputs' values (those of at most SHAPE_VALUE_ELEMENTS elements); an output left unknown
    (an IF's, decided by its branch) is absent. None when a shape depends on a value only the
    run computes; HalError INVALID_ARGUMENT for values the operation rejects."""
    sg = wide.main
    values = {idx: a for idx, a in zip(sg.input_indexes, feeds, strict=True)
              if a.size <= SHAPE_VALUE_ELEMENTS}
    try:
        special = specialize_subgraph(wide, _outputs_unknown(wide), [a.shape for a in feeds], values)
    except ShapeUnknown:
        return None
    except ValueError as e:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, str(e)) from None
    return {i: tuple(special.operands[i].dimensions) for op in sg.operations for i in op.outputs
            if special.operands[i].fully_specified}


class _Probe(NamedTuple):
    """What the support probe runs to decide an operation: the operation alone (``single``),
    the inputs a request may omit, and the key its verdict is cached under."""

    key: bytes
    single: Model
    omittable: tuple[int, ...]


def _widening_problem(model: Model, index: int) -> str | None:
    """Why computing operation ``index`` in float32 instead of float16 would change its
    result: it reads its inputs' stored bytes (``OpRecord.reads_bytes``)."""
    from nncert.ops import get

    sg = model.main
    op = sg.operations[index]
    record = get(op.type)
    if record is None or not record.reads_bytes:
        return None
    if any(sg.operands[i].type is T.TENSOR_FLOAT16 for i in op.inputs):
        return (f"{op.type.name} reads its inputs' stored bytes; this driver computes float16 in "
                f"float32, whose bytes differ")
    return None


def _model_digest(model: Model) -> bytes:
    """A digest of everything in ``model`` (a copy: enum types) that decides what the driver
    makes of it: every subgraph's operands, operations, inputs and outputs, the constants'
    bytes (those in a pool as they are now) and the float16 relaxation."""
    described = (model.main, model.referenced, model.relax_computation_float32_to_float16)
    h = hashlib.blake2b(repr(described).encode(), digest_size=20)
    for sg in (model.main, *model.referenced):
        for o in sg.operands:
            if o.lifetime in CONSTANT:
                h.update(model.constant_bytes(o) or b"")
    return h.digest()


def _probe_key(single: Model) -> bytes:
    """What decides whether a runtime takes an operation: its type, every operand's type,
    shape and quantisation, and the values of its parameters (scalars and small integer or
    boolean tensors such as axes, paddings and shapes; not the contents of weights); for an
    IF / WHILE, the same of every referenced subgraph."""
    h = hashlib.blake2b(digest_size=20)
    for sg in (single.main, *single.referenced):
        h.update(repr([(op.type, op.inputs, op.outputs) for op in sg.operations]).encode())
        h.update(repr((sg.input_indexes, sg.output_indexes)).encode())
        for o in sg.operands:
            h.update(repr((o.type, o.dimensions, o.scale, o.zero_point, o.lifetime,
                           o.channel_quant, o.location.offset if o.type is T.SUBGRAPH else 0)).encode())
            parameter = o.type.is_scalar or (o.type in (T.TENSOR_INT32, T.TENSOR_BOOL8) and
                                             int(np.prod(o.dimensions)) <= 64)
            if o.lifetime in CONSTANT and parameter:
                h.update(single.constant_bytes(o) or b"")
    return h.digest()
