"""Capabilities measured on reference workloads (DRV-1).

NNAPI's capabilities are a driver's cost relative to the CPU, per operand type. A compiled
driver measures them: one small workload per type family (a 3x3 CONV_2D over a 16x16x8
input for float and quantised types, a broadcast ADD for int32, the float32 convolution
with relaxed computation), timed on the driver and on the reference driver in the same
process (median of several runs after warm-up). ``exec_time`` is the ratio driver /
reference; a CPU has no power meter here, so ``power_usage`` is taken equal to it (energy
proportional to time on the same cores). A type family whose workload the driver declines
reports FLT_MAX (unsupported), as NNAPI does.

The answer must not change from call to call (DRV-1), so it is measured once per driver
version and option set and kept in ``$NNCERT_CACHE_DIR`` (default ``~/.cache/nncert``),
capabilities.json; every process on the machine then reports the same figures. That directory
is nncert's state: made 0700 and refused (``UnsafePathError``) when another user owns it or may
write into it; the lock and the figures are created 0600, the figures replaced whole
(nncert.files).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from nncert import files
from nncert.datafiles import DataFileError, read_json
from nncert.drivers.base import Driver
from nncert.hal.builder import ModelBuilder, build_request
from nncert.hal.model import Capabilities, Model, PerformanceInfo
from nncert.hal.types import OperandType, OperationType

T = OperandType
FLT_MAX = 3.4028234663852886e38
UNSUPPORTED = PerformanceInfo(FLT_MAX, FLT_MAX)
RUNS = 9

#: Each operand type's workload family.
FAMILY = {
    T.FLOAT32: "float32", T.TENSOR_FLOAT32: "float32",
    T.FLOAT16: "float16", T.TENSOR_FLOAT16: "float16",
    T.INT32: "int32", T.UINT32: "int32", T.BOOL: "int32", T.TENSOR_INT32: "int32",
    T.TENSOR_BOOL8: "int32",
    T.TENSOR_QUANT8_ASYMM: "quant8_asymm",
    T.TENSOR_QUANT8_ASYMM_SIGNED: "quant8_asymm_signed",
    T.TENSOR_QUANT8_SYMM: "quant8_asymm_signed",
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: "quant8_asymm_signed",
}
_QUANT = {"quant8_asymm": (T.TENSOR_QUANT8_ASYMM, 128),
          "quant8_asymm_signed": (T.TENSOR_QUANT8_ASYMM_SIGNED, 0)}

_lock = threading.Lock()
_memo: dict[str, Capabilities] = {}


def cache_path() -> Path:
    root = os.environ.get("NNCERT_CACHE_DIR") or Path.home() / ".cache" / "nncert"
    return Path(root) / "capabilities.json"


def workload(family: str, relax: bool = False) -> tuple[Model, list[np.ndarray]]:
    """The model and inputs that stand for one type family."""
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    if family == "int32":
        x = b.operand(T.TENSOR_INT32, (1, 32, 32, 8))
        y = b.constant(T.TENSOR_INT32, rng.integers(-100, 100, (8,)))
        out = b.operand(T.TENSOR_INT32, (1, 32, 32, 8))
        b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
        return b.build([x], [out]), [rng.integers(-100, 100, (1, 32, 32, 8)).astype(np.int32)]
    shape, filt = (1, 16, 16, 8), (8, 3, 3, 8)
    if family in _QUANT:
        t, zp = _QUANT[family]
        lo, hi = t.quant_range
        x = b.operand(t, shape, 0.05, zp)
        w = b.constant(t, rng.integers(lo, hi + 1, filt), 0.02, zp)
        bias = b.constant(T.TENSOR_INT32, rng.integers(-50, 50, (8,)), 0.05 * 0.02, 0)
        out = b.operand(t, shape, 0.5, zp)
        feed = rng.integers(lo, hi + 1, shape).astype(np.uint8 if zp else np.int8)
    else:
        t = T.TENSOR_FLOAT16 if family == "float16" else T.TENSOR_FLOAT32
        x = b.operand(t, shape)
        w = b.constant(t, rng.uniform(-1, 1, filt))
        bias = b.constant(t, rng.uniform(-1, 1, (8,)))
        out = b.operand(t, shape)
        feed = rng.uniform(-1, 1, shape).astype(np.float16 if family == "float16" else np.float32)
    scalar = b.constant
    b.operation(OperationType.CONV_2D, [x, w, bias, scalar(T.INT32, 1), scalar(T.INT32, 1),
                                        scalar(T.INT32, 1), scalar(T.INT32, 0)], [out])
    return b.build([x], [out], relax=relax), [feed]


def _seconds(driver: Driver, model: Model, feeds: list[np.ndarray]) -> float | None:
    """Median seconds of one synchronous execution, or None when the driver declines it."""
    if not all(driver.supported_operations(model)):
        return None
    prepared = driver.prepare_model(model)
    out = model.main.operands[model.main.output_indexes[0]]
    request = build_request(model, feeds, [out.dimensions])
    times = []
    for i in range(RUNS + 2):
        start = time.perf_counter()
        prepared.execute_synchronously(request)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(driver: Driver) -> dict[str, float | None]:
    """Driver/reference time ratio per family (None: declined)."""
    from nncert.drivers.reference import ReferenceDriver

    reference = ReferenceDriver()
    ratios: dict[str, float | None] = {}
    for family, relax in [("float32", False), ("float16", False), ("int32", False),
                          ("quant8_asymm", False), ("quant8_asymm_signed", False), ("relaxed", True)]:
        model, feeds = workload("float32" if relax else family, relax)
        mine = _seconds(driver, model, feeds)
        base = _seconds(reference, model, feeds)
        ratios[family] = None if mine is None or not base else round(mine / base, 4)
    return ratios


def _info(ratio: float | None) -> PerformanceInfo:
    return UNSUPPORTED if ratio is None else PerformanceInfo(ratio, ratio)


def capabilities_from(ratios: dict[str, float | None]) -> Capabilities:
    relaxed = _info(ratios.get("relaxed"))
    per_type = {t: _info(ratios.get(FAMILY[t])) for t in FAMILY}
    # No control flow in the compiled drivers' formats (IF/WHILE are declined).
    return Capabilities(relaxed, relaxed, per_type, UNSUPPORTED, UNSUPPORTED)


@contextlib.contextmanager
def _file_lock(path: Path):
    """One measuring process at a time on the machine (others then read its figures)."""
    fd = None
    try:
        files.private_dir(path.parent)
        fd = files.open_private(path.with_suffix(".lock"))
    except files.UnsafePathError:
        if os.path.lexists(path.parent):
            raise  # another user's or a shared directory, a planted link: refused, not worked around
    except OSError:
        pass
    if fd is None:  # a read-only home: the figures are measured, not kept
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> dict:
    """The figures kept at ``path``; {} when there are none or they do not parse (a corrupted
    file is measured again and rewritten, never an error)."""
    try:
        stored = read_json(path)
    except DataFileError:
        return {}
    return stored if isinstance(stored, dict) else {}


def _well_formed(ratios: object) -> bool:
    """Kept figures of the shape ``measure`` gives: a ratio >= 0 (or None) per family."""
    return isinstance(ratios, dict) and set(ratios) == set(FAMILY.values()) | {"relaxed"} and all(
        r is None or (type(r) in (int, float) and 0 <= r < math.inf) for r in ratios.values())


def measured_capabilities(driver: Driver) -> Capabilities:
    """The driver's capabilities, measured once per version string and kept on disk."""
    key = driver.version_string()
    with _lock:
        if key in _memo:
            return _memo[key]
        path = cache_path()
        with _file_lock(path):
            stored = _read(path)
            ratios = stored.get(key)
            if not _well_formed(ratios):
                ratios = measure(driver)
                stored[key] = ratios
                try:
                    files.write_atomic(path, json.dumps(stored, indent=1, sort_keys=True), mode=0o600)
                except OSError:
                    pass  # a read-only home: the figures still hold for this process
        _memo[key] = capabilities_from(ratios)
        return _memo[key]
