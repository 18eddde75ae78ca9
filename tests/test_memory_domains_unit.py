"""Memory domains below the suite (conformance/test_memory_domains.py): the exact statuses
of the reference, token lifetime, failed writes, and the service's buffer handles."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.drivers.memory_domain import combine_dimensions, lookup
from nncert.drivers.reference import ReferenceDriver
from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import BufferDesc, BufferRole, DataLocation, Request, RequestArgument
from nncert.hal.types import ErrorStatus, OperandType, OperationType

T = OperandType


def _relu(dims=(2, 3)):
    b = ModelBuilder()
    x, y = b.operand(T.TENSOR_FLOAT32, dims), b.operand(T.TENSOR_FLOAT32, dims)
    b.operation(OperationType.RELU, [x], [y])
    return b.build([x], [y])


def _request(token, out, dims=()):
    """Input 0 from the buffer, output 0 to ``out``."""
    return Request([RequestArgument(False, DataLocation(1, 0, 0), dims)],
                   [RequestArgument(False, DataLocation(0, 0, out.size), dims)], [out, token])


def test_combine_dimensions():
    assert combine_dimensions((), (2, 0)) == (2, 0)
    assert combine_dimensions((0, 3), (2, 0)) == (2, 3)
    assert combine_dimensions((2, 3), (2,)) is None
    assert combine_dimensions((2, 3), (4, 3)) is None


@pytest.mark.parametrize("roles", [
    ([], []), ([BufferRole(1, 0)], []), ([], [BufferRole(0, 1)]), ([BufferRole(0, 0, 0.0)], []),
    ([BufferRole(0, 0), BufferRole(0, 0)], []),
])
def test_reference_refuses_bad_allocations_with_invalid_argument(roles):
    driver = ReferenceDriver()
    prepared = driver.prepare_model(_relu())
    with pytest.raises(HalError) as info:
        driver.allocate(BufferDesc(), [prepared], *roles)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_buffer_dimensions_combine_roles_and_descriptor():
    driver = ReferenceDriver()
    buffer, _ = driver.allocate(BufferDesc((0, 3)), [driver.prepare_model(_relu((2, 0)))],
                                [BufferRole(0, 0)], [])
    assert buffer.dimensions == (2, 3)


def test_token_dies_with_its_buffer_and_holds_no_prepared_model():
    driver = ReferenceDriver()
    prepared = driver.prepare_model(_relu())
    buffer, token = driver.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
    assert lookup(token) is buffer
    del buffer
    gc.collect()
    with pytest.raises(HalError) as info:
        lookup(token)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    # DRV-5: a buffer keeps no prepared model alive.
    kept, _ = driver.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
    ref = weakref.ref(prepared)
    del prepared
    gc.collect()
    assert ref() is None and kept.token > 0


def test_a_failed_output_write_leaves_the_buffer_uninitialised():
    """A result whose shape does not fit: GENERAL_FAILURE, and the old contents are gone."""
    driver = ReferenceDriver()
    prepared = driver.prepare_model(_relu((0, 3)))
    buffer, token = driver.allocate(BufferDesc((1, 3)), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
    buffer.copy_from(Memory.from_bytes(np.ones((1, 3), np.float32).tobytes()))
    x = Memory.from_bytes(np.ones((2, 3), np.float32).tobytes())
    request = Request([RequestArgument(False, DataLocation(0, 0, x.size), (2, 3))],
                      [RequestArgument(False, DataLocation(1, 0, 0))], [x, token])
    with pytest.raises(HalError) as info:
        prepared.execute_synchronously(request)
    assert info.value.status is ErrorStatus.GENERAL_FAILURE
    assert not buffer.initialized


def test_scalar_buffer():
    b = ModelBuilder()
    x, y, out = (b.operand(T.TENSOR_FLOAT32, (2,)) for _ in range(3))
    act = b.operand(T.INT32)
    b.operation(OperationType.ADD, [x, y, act], [out])
    driver = ReferenceDriver()
    prepared = driver.prepare_model(b.build([x, y, act], [out]))
    buffer, _ = driver.allocate(BufferDesc(), [prepared], [BufferRole(0, 2)], [])
    with pytest.raises(HalError):
        buffer.copy_from(Memory.from_bytes(np.int32(0).tobytes()), (1,))
    buffer.copy_from(Memory.from_bytes(np.int32(1).tobytes()))
    out = Memory.create(4)
    buffer.copy_to(out)
    assert np.frombuffer(bytes(out.view()), np.int32)[0] == 1


def test_mutant_accepts_a_buffer_in_any_role():
    driver = load_driver("mutant:ignores_roles")
    prepared = driver.prepare_model(_relu())
    buffer, token = driver.allocate(BufferDesc(), [prepared], [], [BufferRole(0, 0)])
    buffer.copy_from(Memory.create(24))
    prepared.execute_synchronously(_request(token, Memory.create(24)))  # as an input: accepted


def test_service_buffers_are_handles_released_with_their_proxy():
    driver = load_driver("service:reference")
    try:
        prepared = driver.prepare_model(_relu())
        before = driver.conn.call("stats")[0]["handles"]
        buffer, token = driver.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        assert driver.conn.call("stats")[0]["handles"] == before + 1
        buffer.copy_from(Memory.from_bytes(np.arange(-3, 3, dtype=np.float32).tobytes()))
        # A burst slot may hold a token (MEM-4 through BURST-2).
        out = Memory.create(24)
        burst = prepared.configure_execution_burst()
        burst.execute(_request(token, out), [0, 1])
        assert np.array_equal(np.frombuffer(bytes(out.view()), np.float32), [0, 0, 0, 0, 1, 2])
        del burst
        buffer.release()
        driver.conn.call("ping")  # carries the release
        with pytest.raises(HalError) as info:
            prepared.execute_synchronously(_request(token, out))
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    finally:
        driver.close()
