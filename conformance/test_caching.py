"""Compilation caching (CACHE-1..7), after the VTS's CompilationCachingTests: saving and
retrieving, wrong numbers of cache files and wrong access modes, TOCTOU races, a swapped,
corrupted or lengthened model cache, a wrong token, a corrupted data cache, concurrent
savers, and a driver restart. A driver that needs no cache files skips the suite.

Every model is run three ways: a float model, a quantised model and a long chain of ADDs
(the VTS's large model, against a chain of MULs as the "other" model)."""

from __future__ import annotations

import os
import random
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.drivers.base import Driver, PreparedModel
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import Model, Timing, dtype_of
from nncert.hal.types import ErrorStatus, OperandType, OperationType
from nncert.ops.interpreter import run_model
from nncert.testing.control_flow_models import counting_feeds, counting_while_model
from nncert.testing.harness import (
    PATHS,
    add_model,
    check_outputs,
    decline,
    declined,
    execute,
    expect_invalid,
    status_of,
)

T = OperandType
#: Operations of the long chain models (the VTS uses 100).
CHAIN = 50
#: Rounds of each TOCTOU race (the VTS's).
TOCTOU_ROUNDS = 100
#: Seeds of each corruption (the VTS's).
SEEDS = range(10)
RW, RO, WO = os.O_RDWR | os.O_CREAT, os.O_RDONLY, os.O_WRONLY | os.O_CREAT
#: Either refusal a prepareModelFromCache with bad arguments may give.
REFUSED = (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)


# -- models ----------------------------------------------------------------------------------

def _float_model() -> Model:
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2, 16))
    w = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, (8, 16)).astype(np.float32))
    bias = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, 8).astype(np.float32))
    act = b.constant(T.INT32, 0)
    fc = b.operand(T.TENSOR_FLOAT32, (2, 8))
    b.operation(OperationType.FULLY_CONNECTED, [x, w, bias, act], [fc])
    c = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, (2, 8)).astype(np.float32))
    out = b.operand(T.TENSOR_FLOAT32, (2, 8))
    b.operation(OperationType.ADD, [fc, c, b.constant(T.INT32, 1)], [out])
    return b.build([x], [out])


def _quant_model() -> Model:
    rng = np.random.default_rng(1)
    q = T.TENSOR_QUANT8_ASYMM
    b = ModelBuilder()
    x = b.operand(q, (2, 16), 0.5, 128)
    w = b.constant(q, rng.integers(0, 256, (8, 16)).astype(np.uint8), 0.25, 120)
    bias = b.constant(T.TENSOR_INT32, rng.integers(-500, 500, 8).astype(np.int32), 0.125)
    fc = b.operand(q, (2, 8), 8.0, 128)
    b.operation(OperationType.FULLY_CONNECTED, [x, w, bias, b.constant(T.INT32, 0)], [fc])
    c = b.constant(q, rng.integers(0, 256, (2, 8)).astype(np.uint8), 4.0, 100)
    out = b.operand(q, (2, 8), 8.0, 128)
    b.operation(OperationType.ADD, [fc, c, b.constant(T.INT32, 0)], [out])
    return b.build([x], [out])


def _chain_model(op: OperationType, type_: OperandType = T.TENSOR_FLOAT32, length: int = CHAIN) -> Model:
    """input -> OP -> OP -> ... -> output, each OP's second input a constant [1] of its own
    (so the constants are many): ADD gives input + length, MUL gives the input."""
    quant = type_ is not T.TENSOR_FLOAT32
    scale, const_scale, const = (1.0, 1.0, 1) if op is OperationType.ADD else (1.0, 0.5, 2)
    if not quant:
        scale, const_scale, const = 0.0, 0.0, 1.0
    b = ModelBuilder()
    act = b.constant(T.INT32, 0)
    x = cur = b.operand(type_, (1,), scale)
    for _ in range(length):
        k = b.constant(type_, np.array([const]), const_scale)
        nxt = b.operand(type_, (1,), scale)
        b.operation(op, [cur, k, act], [nxt])
        cur = nxt
    return b.build([x], [cur])


def _listed_against_indexes_model() -> Model:
    """(a - b) * c with a constant c, whose inputs are listed (a, b) where a's operand index is
    the larger, as are its outputs (a - b, (a - b) * c): a cache that keeps the lists in operand
    order swaps the request's arguments."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    act = b.constant(T.INT32, 0)
    second, first = b.operand(T.TENSOR_FLOAT32, (2, 8)), b.operand(T.TENSOR_FLOAT32, (2, 8))
    c = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, (2, 8)).astype(np.float32))
    product, diff = b.operand(T.TENSOR_FLOAT32, (2, 8)), b.operand(T.TENSOR_FLOAT32, (2, 8))
    b.operation(OperationType.SUB, [first, second, act], [diff])
    b.operation(OperationType.MUL, [diff, c, act], [product])
    return b.build([first, second], [diff, product])


def _feeds(model: Model) -> list[np.ndarray]:
    rng = np.random.default_rng(2)
    feeds = []
    for idx in model.main.input_indexes:
        operand = model.main.operands[idx]
        if operand.dimensions == (1,):  # a chain: the VTS's input, 1
            feeds.append(np.array([1], dtype_of(operand.type)))
        elif operand.type is T.TENSOR_FLOAT32:
            feeds.append(rng.uniform(-2, 2, operand.dimensions).astype(np.float32))
        else:
            feeds.append(rng.integers(0, 256, operand.dimensions).astype(np.uint8))
    return feeds


#: The latest deadline there is (steady_clock::time_point::max(), in nanoseconds): a driver
#: that holds the time left in fewer bits reads it as long past.
UNLIMITED = 2**63 - 1

MODELS = {
    "float": _float_model,
    "quant": _quant_model,
    "chain": lambda: _chain_model(OperationType.ADD),
}
#: The models saved and retrieved: MODELS, and one whose inputs and outputs are listed against
#: the order of their operand indexes (the order a cache must keep, MEM-2).
RETRIEVED = {**MODELS, "listed_against_indexes": _listed_against_indexes_model}
#: The VTS's race and swap pairs: a chain of ADDs and a chain of MULs, float and quantised.
PAIRS = {"float": T.TENSOR_FLOAT32, "quant": T.TENSOR_QUANT8_ASYMM}


# -- fixtures and helpers ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def caching_driver(driver: Driver) -> Driver:
    needed = driver.number_of_cache_files_needed()
    if tuple(needed) == (0, 0):
        decline(f"{driver.name} needs no cache files (number_of_cache_files_needed is (0, 0)): "
                    f"no compilation caching")
    assert all(n >= 0 for n in needed), f"CACHE-2: negative number of cache files {needed}"
    return driver


class CacheFiles:
    """A set of cache files in a directory, opened as the test says."""

    def __init__(self, directory: Path, driver: Driver, tag: str = "") -> None:
        n_model, n_data = driver.number_of_cache_files_needed()
        self.model = [directory / f"model{i}{tag}" for i in range(n_model)]
        self.data = [directory / f"data{i}{tag}" for i in range(n_data)]
        self.spare = directory / f"spare{tag}"

    @contextmanager
    def open(self, model_modes: list[int] | None = None, data_modes: list[int] | None = None,
             extra_model: int = 0, extra_data: int = 0) -> Iterator[tuple[list[int], list[int]]]:
        """(model fds, data fds); ``extra_*`` = +1 adds the spare file, -1 leaves the last out."""
        model = _adjust(self.model, extra_model, self.spare)
        data = _adjust(self.data, extra_data, self.spare)
        model_modes = model_modes or [RW] * len(model)
        data_modes = data_modes or [RW] * len(data)
        fds: list[int] = []
        try:
            for path, mode in [*zip(model, model_modes, strict=True), *zip(data, data_modes, strict=True)]:
                if not mode & os.O_CREAT and not path.exists():
                    path.touch()
                fds.append(os.open(path, mode, 0o600))
            yield fds[:len(model)], fds[len(model):]
        finally:
            for fd in fds:
                os.close(fd)


def _adjust(paths: list[Path], extra: int, spare: Path) -> list[Path]:
    if extra > 0:
        return [*paths, spare]
    return paths[:len(paths) + extra] if extra < 0 else paths


def _golden(model: Model) -> list[np.ndarray]:
    return [np.asarray(a) for a in run_model(model, _feeds(model))]


def _outputs(model: Model, prepared: PreparedModel) -> list[np.ndarray]:
    golden = _golden(model)
    request = build_request(model, _feeds(model))
    prepared.execute_synchronously(request)
    return read_outputs(model, request, [g.shape for g in golden])


def _check_runs(model: Model, prepared: PreparedModel, what: str) -> None:
    try:
        check_outputs(_golden(model), _outputs(model, prepared), model)
    except pytest.fail.Exception as e:
        pytest.fail(f"{what}: {e}")


def _supported_or_skip(driver: Driver, *models: Model) -> None:
    for model in models:
        reason = declined(driver, model)
        if reason:
            decline(reason)


def _save(driver: Driver, model: Model, files: CacheFiles, token: bytes, **open_args) -> PreparedModel:
    """prepareModel with caching: must succeed whatever happens to the caches."""
    with files.open(**open_args) as (model_fds, data_fds):
        try:
            return driver.prepare_model(model, model_cache=model_fds, data_cache=data_fds, token=token)
        except HalError as e:
            pytest.fail(f"CACHE-1: prepare_model with caching failed: {e}")


def _from_cache(driver: Driver, files: CacheFiles, token: bytes, advance: int = 0,
                deadline: int | None = None, **open_args) -> tuple[ErrorStatus, PreparedModel | None]:
    """prepareModelFromCache; (status, prepared model), a prepared model iff NONE."""
    with files.open(**open_args) as (model_fds, data_fds):
        for fd in model_fds + data_fds:
            os.lseek(fd, advance, os.SEEK_SET)
        try:
            prepared = driver.prepare_model_from_cache(deadline, model_fds, data_fds, token)
        except HalError as e:
            return e.status, None
    if prepared is None:
        pytest.fail("CACHE-1: prepare_model_from_cache returned no prepared model and no error")
    return ErrorStatus.NONE, prepared


def _token() -> bytes:
    return secrets.token_bytes(32)


def _refused(status: ErrorStatus, expected: tuple[ErrorStatus, ...], what: str, rid: str) -> None:
    if status not in expected:
        pytest.fail(f"{rid}: {what}: prepare_model_from_cache gave {status.name}, expected "
                    f"{' or '.join(s.name for s in expected)}")


# -- saving and retrieving (CACHE-1) -------------------------------------------------------------

@pytest.mark.req("CACHE-1", "CACHE-2")
@pytest.mark.parametrize("kind", RETRIEVED)
def test_save_and_retrieve(caching_driver, tmp_path, kind):
    """Files already holding bytes and fds at a non-zero offset: the driver writes and reads
    from offset 0; the model from cache computes what the compiled one does."""
    model = RETRIEVED[kind]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    with files.open() as (model_fds, data_fds):
        for fd in model_fds + data_fds:
            os.write(fd, b"\0\0")
        prepared = caching_driver.prepare_model(model, model_cache=model_fds, data_cache=data_fds,
                                                token=token)
    compiled = _outputs(model, prepared)
    status, cached = _from_cache(caching_driver, files, token, advance=1)
    assert status is ErrorStatus.NONE, f"CACHE-1: prepare_model_from_cache after saving gave {status.name}"
    _check_runs(model, cached, "CACHE-1: the model prepared from cache")
    for i, (a, b) in enumerate(zip(compiled, _outputs(model, cached), strict=True)):
        assert np.array_equal(a, b), f"CACHE-1: output {i} from cache differs from the compiled model's"


@pytest.mark.req("CACHE-1", "EXE-1", "EXE-3", "EXE-7", "EXE-10")
def test_model_from_cache_runs_on_every_path(caching_driver, tmp_path):
    """A model prepared from cache is a prepared model like any other: it runs on every path
    (sync, async, fenced, burst), gives what the compiled model gives with no timing unless
    asked (EXE-7), and misses an execution deadline already past on each (EXE-10); and the same
    files prepare it a second time (CACHE-1)."""
    model = MODELS["float"]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    compiled = _outputs(model, _save(caching_driver, model, files, token))
    status, cached = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, f"CACHE-1: prepare_model_from_cache after saving gave {status.name}"
    for path in PATHS:
        request = build_request(model, _feeds(model))
        try:
            _, timing = execute(cached, request, path)
        except HalError as e:
            pytest.fail(f"EXE-1: the model prepared from cache failed on the {path} path: {e}")
        assert timing == Timing(), f"EXE-7: the {path} path from cache reported timing {timing} unasked"
        actual = read_outputs(model, request, [c.shape for c in compiled])
        for i, (a, b) in enumerate(zip(compiled, actual, strict=True)):
            assert np.array_equal(a, b), \
                f"EXE-3: output {i} from cache on the {path} path differs from the compiled model's"
        late = build_request(model, _feeds(model))
        status = status_of(lambda p=path, r=late: execute(cached, r, p, deadline=time.monotonic_ns() - 10**9))
        _refused(status, (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT),
                 f"a {path} execution from cache with a deadline 1 s in the past", "EXE-10")
    # A cache hit is a hit every time (each start of an app): the same files prepare again.
    status, again = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, \
        f"CACHE-1: a second prepare_model_from_cache from the same files gave {status.name}"
    request = build_request(model, _feeds(model))
    execute(again, request, "sync")
    actual = read_outputs(model, request, [c.shape for c in compiled])
    assert all(np.array_equal(a, b) for a, b in zip(compiled, actual, strict=True)), \
        "EXE-3: the model prepared from cache a second time differs from the compiled model"


@pytest.mark.req("CACHE-1", "EXE-3")
def test_model_from_cache_reads_its_scalar_inputs_every_run(caching_driver, tmp_path):
    """ADD(x, y, activation) with the activation a model input, saved and prepared from cache:
    each run applies the activation its request gives (NONE, RELU1, RELU6 in turn on the same
    inputs), as the compiled model does; a cache that folds the first run's scalars in does
    not."""
    b = ModelBuilder()
    x, y, out = (b.operand(T.TENSOR_FLOAT32, (2, 3)) for _ in range(3))
    act = b.operand(T.INT32)
    b.operation(OperationType.ADD, [x, y, act], [out])
    model = b.build([x, y, act], [out])
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    _save(caching_driver, model, files, token)
    status, cached = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, f"CACHE-1: prepare_model_from_cache after saving gave {status.name}"
    rng = np.random.default_rng(4)
    a, c = (rng.uniform(-5, 5, (2, 3)).astype(np.float32) for _ in range(2))
    for code, (lo, hi) in ((0, (-np.inf, np.inf)), (2, (-1, 1)), (3, (0, 6))):
        request = build_request(model, [a, c, np.array(code, np.int32)])
        execute(cached, request, "sync")
        try:
            check_outputs([np.clip(a + c, lo, hi).astype(np.float32)], read_outputs(model, request, [(2, 3)]),
                          model)
        except pytest.fail.Exception as e:
            pytest.fail(f"CACHE-1: the model from cache with activation {code} given at run time: {e}")


@pytest.mark.req("CACHE-1", "EXE-6")
def test_save_and_retrieve_unknown_dimensions(caching_driver, tmp_path):
    """A model of unknown batch, saved and prepared from cache: the cached model keeps the
    batch unknown, and runs batches of 2 and 5 as the compiled one does."""
    model = add_model(dims=(0, 3))
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    prepared = _save(caching_driver, model, files, token)
    status, cached = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, f"CACHE-1: prepare_model_from_cache after saving gave {status.name}"
    rng = np.random.default_rng(4)
    for batch in (2, 5):
        feeds = [rng.uniform(-2, 2, (batch, 3)).astype(np.float32) for _ in range(2)]
        results = []
        for what, p in (("compiled", prepared), ("from cache", cached)):
            request = build_request(model, feeds, [(batch, 3)])
            try:
                p.execute_synchronously(request)
            except HalError as e:
                pytest.fail(f"CACHE-1: the {what} model of unknown batch failed a batch of {batch}: {e}")
            results.append(read_outputs(model, request, [(batch, 3)]))
        check_outputs([feeds[0] + feeds[1]], results[1], model)
        assert np.array_equal(results[0][0], results[1][0]), \
            f"CACHE-1: a batch of {batch} from cache differs from the compiled model's"


@pytest.mark.req("CACHE-1", "EXE-9")
def test_save_and_retrieve_control_flow(caching_driver, tmp_path):
    """A WHILE model (its condition and body are referenced subgraphs), saved and prepared from
    cache: the cached model runs the loop as the compiled one does."""
    model = counting_while_model()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    prepared = _save(caching_driver, model, files, token)
    status, cached = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, f"CACHE-1: prepare_model_from_cache after saving gave {status.name}"
    for bound in (0, 5):
        for what, p in (("compiled", prepared), ("from cache", cached)):
            request = build_request(model, counting_feeds(0, 0, bound))
            try:
                p.execute_synchronously(request)
            except HalError as e:
                pytest.fail(f"CACHE-1: the {what} WHILE model failed counting to {bound}: {e}")
            total = int(read_outputs(model, request, [(1,)])[0][0])
            assert total == bound * (bound - 1) // 2, \
                f"CACHE-1: the {what} WHILE model summed 0..{bound - 1} to {total}"


# -- wrong arguments (CACHE-2) ---------------------------------------------------------------------

def _wrong_numbers(driver: Driver) -> list[dict]:
    n_model, n_data = driver.number_of_cache_files_needed()
    cases = [{"extra_model": 1}, {"extra_data": 1}]
    cases += [{"extra_model": -1}] if n_model else []
    cases += [{"extra_data": -1}] if n_data else []
    return cases


@pytest.mark.req("CACHE-2")
@pytest.mark.parametrize("kind", MODELS)
def test_save_with_wrong_number_of_files(caching_driver, tmp_path, kind):
    """The model is prepared (and right) but nothing is cached: the same files are refused."""
    model = MODELS[kind]()
    _supported_or_skip(caching_driver, model)
    for n, wrong in enumerate(_wrong_numbers(caching_driver)):
        files, token = CacheFiles(tmp_path, caching_driver, f"-{n}"), _token()
        prepared = _save(caching_driver, model, files, token, **wrong)
        _check_runs(model, prepared, f"CACHE-2: prepared with {wrong}")
        status, _ = _from_cache(caching_driver, files, token, **wrong)
        _refused(status, REFUSED, f"files {wrong}", "CACHE-2")


@pytest.mark.req("CACHE-2")
@pytest.mark.parametrize("kind", MODELS)
def test_prepare_from_cache_with_wrong_number_of_files(caching_driver, tmp_path, kind):
    model = MODELS[kind]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    _save(caching_driver, model, files, token)
    for wrong in _wrong_numbers(caching_driver):
        status, _ = _from_cache(caching_driver, files, token, **wrong)
        _refused(status, REFUSED, f"files {wrong}", "CACHE-2")


@pytest.mark.req("CACHE-1", "VAL-1")
def test_token_of_the_wrong_length(caching_driver, tmp_path):
    """A token is BYTE_SIZE_OF_CACHE_TOKEN (32) bytes; one a byte short or long is invalid.
    Saving under a 31-byte token prepares the model (and right) but caches nothing, so not even
    its zero-padded 32-byte form finds a cache; retrieving a saved cache with its token cut
    short, lengthened or empty is refused with INVALID_ARGUMENT, never served (a driver that
    pads or truncates tokens to size serves it)."""
    model = MODELS["float"]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver, "-short"), _token()
    prepared = _save(caching_driver, model, files, token[:31])
    _check_runs(model, prepared, "CACHE-1: prepared with a 31-byte token")
    status, _ = _from_cache(caching_driver, files, token[:31])
    _refused(status, (ErrorStatus.INVALID_ARGUMENT,), "a 31-byte token", "VAL-1")
    status, _ = _from_cache(caching_driver, files, token[:31] + bytes(1))
    _refused(status, REFUSED, "the zero-padded form of a 31-byte token, under which nothing could be saved",
             "CACHE-1")
    files, token = CacheFiles(tmp_path, caching_driver, "-saved"), _token()
    _save(caching_driver, model, files, token)
    for bad, what in ((token[:31], "the saved token cut to 31 bytes"),
                      (token + bytes(1), "the saved token with a 33rd byte"), (b"", "an empty token")):
        status, _ = _from_cache(caching_driver, files, bad)
        _refused(status, (ErrorStatus.INVALID_ARGUMENT,), what, "VAL-1")
    status, cached = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, f"CACHE-1: the saved token itself then gave {status.name}"
    _check_runs(model, cached, "CACHE-1: the model prepared from cache")


@pytest.mark.req("EXE-10", "CACHE-1")
def test_prepare_from_cache_with_a_past_deadline_is_missed(caching_driver, tmp_path):
    """prepareModelFromCache takes a deadline as prepareModel does (EXE-10): one that passed a
    second before the call, or 0 (the epoch), must be missed, MISSED_DEADLINE_* and no prepared
    model; the same
    cache then prepares with a deadline 10 s away (one read against another clock is missed)."""
    model = MODELS["float"]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    _save(caching_driver, model, files, token)
    for deadline, what in ((time.monotonic_ns() - 1_000_000_000, "a deadline 1 s in the past"),
                           (0, "a deadline of 0 (the epoch)")):
        status, _ = _from_cache(caching_driver, files, token, deadline=deadline)
        _refused(status, (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT),
                 what, "EXE-10")
    status, cached = _from_cache(caching_driver, files, token, deadline=time.monotonic_ns() + 10_000_000_000)
    assert status is ErrorStatus.NONE, f"EXE-10: the cache then gave {status.name} with a deadline 10 s away"
    _check_runs(model, cached, "CACHE-1: the model prepared from cache")
    status, cached = _from_cache(caching_driver, files, token, deadline=UNLIMITED)
    assert status is ErrorStatus.NONE, \
        f"EXE-10: the cache then gave {status.name} with the unlimited deadline (the clock's maximum)"


@pytest.mark.req("EXE-10", "CACHE-1")
def test_prepare_with_caches_and_a_past_deadline_is_missed(caching_driver, tmp_path):
    """prepareModel given caching information (files and a token) keeps its deadline: one a
    second past is missed, MISSED_DEADLINE_* and no prepared model, as without caching."""
    model = MODELS["float"]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    for deadline, what in ((time.monotonic_ns() - 1_000_000_000, "1 s in the past"), (0, "of 0 (the epoch)")):
        with files.open() as (model_fds, data_fds):
            status = status_of(lambda d=deadline: caching_driver.prepare_model(
                model, deadline=d, model_cache=model_fds, data_cache=data_fds, token=token))
        _refused(status, (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT),
                 f"prepare_model with caches and a deadline {what}", "EXE-10")


@pytest.mark.req("VAL-1", "CACHE-1")
def test_prepare_validates_a_model_whose_token_is_cached(caching_driver, tmp_path):
    """prepareModel compiles the model it is given: an invalid model under a token whose cache
    is saved and good is still INVALID_ARGUMENT (a driver that loads the token's cache instead
    takes it)."""
    model = MODELS["float"]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    _save(caching_driver, model, files, token)
    invalid = model.copy()
    invalid.main.operations[0].inputs[0] = len(invalid.main.operands) + 7  # no such operand
    with files.open() as (model_fds, data_fds):
        expect_invalid(lambda: caching_driver.prepare_model(invalid, model_cache=model_fds,
                                                            data_cache=data_fds, token=token),
                       "prepare_model of an invalid model under a saved token")


def _one_mode(n: int, i: int, mode: int) -> list[int]:
    return [mode if k == i else RW for k in range(n)]


@pytest.mark.req("CACHE-2", "CACHE-1")
@pytest.mark.parametrize("kind", MODELS)
def test_save_with_read_only_file(caching_driver, tmp_path, kind):
    """A file the driver cannot write: the model is still prepared, and nothing half-written
    may validate afterwards."""
    model = MODELS[kind]()
    _supported_or_skip(caching_driver, model)
    n_model, n_data = caching_driver.number_of_cache_files_needed()
    cases = [{"model_modes": _one_mode(n_model, i, RO)} for i in range(n_model)]
    cases += [{"data_modes": _one_mode(n_data, i, RO)} for i in range(n_data)]
    for n, modes in enumerate(cases):
        files, token = CacheFiles(tmp_path, caching_driver, f"-{n}"), _token()
        prepared = _save(caching_driver, model, files, token, **modes)
        _check_runs(model, prepared, "CACHE-2: prepared with a read-only cache file")
        status, _ = _from_cache(caching_driver, files, token, **modes)
        _refused(status, REFUSED, "a cache saved through a read-only file", "CACHE-2")


@pytest.mark.req("CACHE-2", "CACHE-6")
@pytest.mark.parametrize("kind", MODELS)
def test_prepare_from_write_only_file(caching_driver, tmp_path, kind):
    model = MODELS[kind]()
    _supported_or_skip(caching_driver, model)
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    _save(caching_driver, model, files, token)
    n_model, n_data = caching_driver.number_of_cache_files_needed()
    cases = [{"model_modes": _one_mode(n_model, i, WO)} for i in range(n_model)]
    cases += [{"data_modes": _one_mode(n_data, i, WO)} for i in range(n_data)]
    for modes in cases:
        status, _ = _from_cache(caching_driver, files, token, **modes)
        _refused(status, REFUSED, "a write-only cache file", "CACHE-2")
    status, _ = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, f"CACHE-1: the intact cache was refused afterwards ({status.name})"


# -- TOCTOU and swapped caches (CACHE-4, CACHE-5) ---------------------------------------------------

@pytest.fixture(params=list(PAIRS), scope="module")
def chain_pair(request, caching_driver, tmp_path_factory):
    """An ADD chain and a MUL chain of one type; the MUL chain saved to its own files."""
    type_ = PAIRS[request.param]
    add, mul = _chain_model(OperationType.ADD, type_), _chain_model(OperationType.MUL, type_)
    _supported_or_skip(caching_driver, add, mul)
    directory = tmp_path_factory.mktemp(f"pair-{request.param}")
    mul_files = CacheFiles(directory, caching_driver, "-mul")
    _save(caching_driver, mul, mul_files, _token())
    return add, mul, mul_files


def _copy_over(source: CacheFiles, target: CacheFiles) -> None:
    """Rewrite the target's model cache files with the source's (in place, as cp does)."""
    for src, dst in zip(source.model, target.model, strict=True):
        data = src.read_bytes()
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)


def _copy_later(source: CacheFiles, target: CacheFiles, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        _copy_over(source, target)

    thread = threading.Thread(target=run, name="nncert-cache-rewriter")
    thread.start()
    return thread


#: The rewriter strikes this many seconds after the call starts, spread over the rounds: a
#: driver that checks one copy of the cache and uses another is caught in between.
def _delays() -> list[float]:
    return [0.02 * k / TOCTOU_ROUNDS for k in random.Random(5).sample(range(TOCTOU_ROUNDS), TOCTOU_ROUNDS)]


def _check_race_result(add: Model, status: ErrorStatus, prepared: PreparedModel | None, round_: int) -> None:
    if status is ErrorStatus.NONE:
        _check_runs(add, prepared, f"CACHE-5: round {round_}: a model prepared from a cache rewritten "
                                   f"with another model's")


@pytest.mark.req("CACHE-5", "CACHE-7")
def test_toctou_while_saving(caching_driver, tmp_path, chain_pair):
    """Another model's cache is copied over the files while the driver saves: preparing from
    them later may fail, but a success computes the saved model (never the other)."""
    add, _mul, mul_files = chain_pair
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    for n, delay in enumerate(_delays()):
        thread = _copy_later(mul_files, files, delay)
        _save(caching_driver, add, files, token)
        thread.join()
        _check_race_result(add, *_from_cache(caching_driver, files, token), n)


@pytest.mark.req("CACHE-5", "CACHE-7")
def test_toctou_while_preparing(caching_driver, tmp_path, chain_pair):
    """Another model's cache is copied over the files while the driver prepares from them."""
    add, _mul, mul_files = chain_pair
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    for n, delay in enumerate(_delays()):
        _save(caching_driver, add, files, token)
        thread = _copy_later(mul_files, files, delay)
        status, prepared = _from_cache(caching_driver, files, token)
        thread.join()
        _check_race_result(add, status, prepared, n)


@pytest.mark.req("CACHE-4")
def test_replaced_model_cache(caching_driver, tmp_path, chain_pair):
    """The model cache of another model (saved under another token) is refused."""
    add, _mul, mul_files = chain_pair
    files, token = CacheFiles(tmp_path, caching_driver), _token()
    _save(caching_driver, add, files, token)
    _copy_over(mul_files, files)
    status, _ = _from_cache(caching_driver, files, token)
    _refused(status, (ErrorStatus.GENERAL_FAILURE,), "another model's model cache", "CACHE-4")


# -- corruption (CACHE-3, CACHE-4, CACHE-6) ---------------------------------------------------------

def _flip_bit(path: Path, rng: random.Random) -> bool:
    data = bytearray(path.read_bytes())
    if not data:
        return False
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return True


def _append(path: Path, rng: random.Random) -> bool:
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(rng.randint(1, 256))))
    return True


def _corrupted(driver: Driver, kind: str, tmp_path: Path, corrupt) -> Iterator[tuple[int, ErrorStatus,
                                                                                   PreparedModel | None]]:
    """For each seed: save the model, corrupt what ``corrupt(files, token, rng)`` says, and
    prepare from cache with the token it returns."""
    model = MODELS[kind]()
    _supported_or_skip(driver, model)
    for seed in SEEDS:
        files, token = CacheFiles(tmp_path, driver, f"-{seed}"), _token()
        _save(driver, model, files, token)
        token = corrupt(files, token, random.Random(seed))
        if token is None:
            continue
        yield (seed, *_from_cache(driver, files, token))


@pytest.mark.req("CACHE-4")
@pytest.mark.parametrize("kind", MODELS)
def test_corrupted_model_cache(caching_driver, tmp_path, kind):
    def corrupt(files, token, rng):
        return token if all(_flip_bit(p, rng) for p in files.model) else None

    for seed, status, _ in _corrupted(caching_driver, kind, tmp_path, corrupt):
        _refused(status, (ErrorStatus.GENERAL_FAILURE,), f"seed {seed}: a bit flipped in the model cache",
                 "CACHE-4")


@pytest.mark.req("CACHE-4")
@pytest.mark.parametrize("kind", MODELS)
def test_model_cache_with_bytes_appended(caching_driver, tmp_path, kind):
    def corrupt(files, token, rng):
        for p in files.model:
            _append(p, rng)
        return token

    for seed, status, _ in _corrupted(caching_driver, kind, tmp_path, corrupt):
        _refused(status, (ErrorStatus.GENERAL_FAILURE,), f"seed {seed}: bytes appended to the model cache",
                 "CACHE-4")


@pytest.mark.req("CACHE-4")
@pytest.mark.parametrize("kind", MODELS)
def test_wrong_token(caching_driver, tmp_path, kind):
    def corrupt(files, token, rng):
        flipped = bytearray(token)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        return bytes(flipped)

    for seed, status, _ in _corrupted(caching_driver, kind, tmp_path, corrupt):
        _refused(status, (ErrorStatus.GENERAL_FAILURE,), f"seed {seed}: a bit flipped in the token",
                 "CACHE-4")


@pytest.mark.req("CACHE-3", "CACHE-6")
@pytest.mark.parametrize("how", ["flip", "append"])
@pytest.mark.parametrize("kind", MODELS)
def test_corrupted_data_cache(caching_driver, tmp_path, kind, how):
    """Nothing worse than wrong values: no crash, a prepared model iff NONE, and one that runs."""
    change = _flip_bit if how == "flip" else _append

    def corrupt(files, token, rng):
        return token if all(change(p, rng) for p in files.data) else None

    model = MODELS[kind]()
    for seed, status, prepared in _corrupted(caching_driver, kind, tmp_path, corrupt):
        if status is ErrorStatus.NONE:
            try:
                _outputs(model, prepared)
            except HalError as e:
                assert e.status is not ErrorStatus.NONE, f"CACHE-3: seed {seed}: {e}"


# -- concurrency and restarts (CACHE-4, CACHE-7) ------------------------------------------------------

@pytest.mark.req("CACHE-7")
def test_concurrent_savers_of_one_token(caching_driver, tmp_path):
    """Two threads save and load one token, each with its own files: nothing crashes, every
    success is right, and the store still works afterwards."""
    model = MODELS["chain"]()
    _supported_or_skip(caching_driver, model)
    token = _token()
    problems: list[str] = []

    def work(n: int) -> None:
        files = CacheFiles(tmp_path, caching_driver, f"-t{n}")
        for _ in range(10):
            try:
                with files.open() as (model_fds, data_fds):
                    caching_driver.prepare_model(model, model_cache=model_fds, data_cache=data_fds,
                                                 token=token)
                status, prepared = _from_cache(caching_driver, files, token)
                if status is ErrorStatus.NONE:
                    got = _outputs(model, prepared)
                    if not all(np.array_equal(g, e) for g, e in zip(got, _golden(model), strict=True)):
                        problems.append("a model prepared from cache computed wrong values")
            except Exception as e:
                problems.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems, f"CACHE-7: {problems[0]}"
    files = CacheFiles(tmp_path, caching_driver, "-after")
    _save(caching_driver, model, files, token)
    status, prepared = _from_cache(caching_driver, files, token)
    assert status is ErrorStatus.NONE, \
        f"CACHE-7: the store refused a fresh save after concurrent use: {status.name}"
    _check_runs(model, prepared, "CACHE-7: after concurrent use")


@pytest.mark.req("CACHE-4")
def test_tampering_while_the_driver_is_down(request, caching_driver, tmp_path):
    """Hashes outlive the driver: a cache tampered with while no driver ran is refused by a
    new instance, an intact one is accepted."""
    from nncert.pytest_plugin import _driver_options

    model = MODELS["float"]()
    _supported_or_skip(caching_driver, model)
    spec = request.config.getoption("driver")
    first = load_driver(spec, _driver_options(request.config))
    intact, tampered = CacheFiles(tmp_path, first, "-intact"), CacheFiles(tmp_path, first, "-tampered")
    intact_token, tampered_token = _token(), _token()
    try:
        _save(first, model, intact, intact_token)
        _save(first, model, tampered, tampered_token)
    finally:
        first.close()
    for p in tampered.model:
        _flip_bit(p, random.Random(0))
    second = load_driver(spec, _driver_options(request.config))
    try:
        status, _ = _from_cache(second, tampered, tampered_token)
        _refused(status, (ErrorStatus.GENERAL_FAILURE,), "a cache tampered with while the driver was down",
                 "CACHE-4")
        status, prepared = _from_cache(second, intact, intact_token)
        assert status is ErrorStatus.NONE, \
            f"CACHE-4: an intact cache was refused after a restart ({status.name})"
        _check_runs(model, prepared, "CACHE-4: prepared from cache after a restart")
    finally:
        second.close()


@pytest.mark.req("CACHE-6")
@pytest.mark.parametrize("pair", list(PAIRS))
def test_token_collision(caching_driver, tmp_path, pair):
    """Two models saved under one token (a collision nobody can detect): every later call
    returns a status or a prepared model, never a crash; a model prepared from either cache
    runs (its values may be wrong), and the last one saved is still prepared as compiled."""
    type_ = PAIRS[pair]
    first, second = _chain_model(OperationType.ADD, type_), _chain_model(OperationType.MUL, type_)
    _supported_or_skip(caching_driver, first, second)
    token = _token()
    first_files = CacheFiles(tmp_path, caching_driver, "-first")
    second_files = CacheFiles(tmp_path, caching_driver, "-second")
    try:
        _save(caching_driver, first, first_files, token)
        prepared = _save(caching_driver, second, second_files, token)
        _check_runs(second, prepared, "CACHE-6: the second model saved under a colliding token")
        for model, files in ((first, first_files), (second, second_files)):
            status, cached = _from_cache(caching_driver, files, token)
            if status is ErrorStatus.NONE:
                try:
                    _outputs(model, cached)
                except HalError as e:
                    assert e.status is not ErrorStatus.NONE
    except HalError:
        raise
    except Exception as e:  # anything but a status is the driver dying
        pytest.fail(f"CACHE-6: a token collision crashed the driver: {type(e).__name__}: {e}")


@pytest.mark.req("CACHE-7")
def test_concurrent_preparations_of_two_models(caching_driver, tmp_path):
    """Two threads each save and prepare from cache their own model (an ADD chain and a MUL
    chain) under their own token at the same time: every model prepared from cache computes
    its own model, never the other thread's."""
    models = {"add": _chain_model(OperationType.ADD), "mul": _chain_model(OperationType.MUL)}
    _supported_or_skip(caching_driver, *models.values())
    problems: list[str] = []

    def work(name: str) -> None:
        model, token = models[name], _token()
        files = CacheFiles(tmp_path, caching_driver, f"-{name}")
        golden = _golden(model)
        for round_ in range(10):
            try:
                with files.open() as (model_fds, data_fds):
                    caching_driver.prepare_model(model, model_cache=model_fds, data_cache=data_fds,
                                                 token=token)
                status, prepared = _from_cache(caching_driver, files, token)
                if status is ErrorStatus.NONE and not all(
                        np.array_equal(g, e) for g, e in zip(_outputs(model, prepared), golden, strict=True)):
                    problems.append(f"round {round_}: the {name} model prepared from its cache computed "
                                    f"another model")
            except Exception as e:
                problems.append(f"round {round_}, {name}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(name,)) for name in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems, f"CACHE-7: {problems[0]}"
