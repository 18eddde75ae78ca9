"""Shared memory that the other side may attack (issue 18): every memfd nncert makes is sealed
against shrinking, growing and further seals, and a descriptor received from another process
is mapped only when it is sealed against shrinking and long enough (nncert/hal/memory.py,
docs/service-protocol.md "Seals").

Truncating a file under someone else's mapping kills them with SIGBUS at their next touch of
it. So the experiments in which the harness itself is the target run in a child process: a
SIGBUS there is a signal exit the test sees, not the death of pytest. The ones aimed at the
service check that it goes on serving."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.drivers.service import wire
from nncert.drivers.service.fmq import CorruptMessageError, MessageQueue
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.memory import F_ADD_SEALS, F_SEAL_GROW, F_SEAL_SHRINK, FIXED_SIZE, KINDS, Memory, seals
from nncert.hal.types import ErrorStatus
from nncert.testing.harness import add_model, execute, status_of

ROOT = Path(__file__).resolve().parent.parent
DIMS = (2, 3)
FEEDS = [np.arange(6, dtype=np.float32).reshape(DIMS), np.full(DIMS, 0.5, np.float32)]
EXPECTED = FEEDS[0] + FEEDS[1]


def _child(code: str, *args: str, timeout: float = 120) -> tuple[int, dict, str]:
    """Run ``code`` in a child Python (the harness as a user runs it); its last line of
    output is a JSON object. A negative exit status is the signal that killed it."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if proc.returncode == 0 and lines else {}, proc.stderr


def _signal_name(code: int) -> str:
    return signal.Signals(-code).name if code < 0 else f"exit {code}"


@pytest.fixture
def service():
    driver = load_driver("service:reference")
    yield driver
    driver.close()


def _adds(driver) -> None:
    """An ordinary execution on ``driver`` gives the right answer (the service is serving)."""
    model = add_model(DIMS)
    request = build_request(model, FEEDS)
    execute(driver.prepare_model(model), request, "sync")
    np.testing.assert_array_equal(read_outputs(model, request, [DIMS])[0], EXPECTED)


def _unsealed_memfd(data: bytes, sealable: bool = False) -> int:
    """A memfd holding ``data`` with no seal (without MFD_ALLOW_SEALING it can never have one)."""
    fd = os.memfd_create("nncert-test-unsealed", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealable else 0))
    os.write(fd, data)
    return fd


# -- what nncert creates ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_every_pool_kind_is_sealed_at_creation(kind):
    pool = Memory.create(4096, kind)
    assert seals(pool.fd) == FIXED_SIZE
    for size in (0, 4096 + pool.offset - 1, 1 << 20):
        with pytest.raises(PermissionError):
            os.ftruncate(pool.fd, size)
    assert os.fstat(pool.fd).st_size == 4096 + pool.offset
    pool.view()[-1] = 7  # still writable: the seals fix the size, not the contents
    pool.close()


def test_a_burst_ring_is_sealed_at_creation():
    queue = MessageQueue.create(256)
    assert seals(queue.memory.fd) == FIXED_SIZE
    with pytest.raises(PermissionError):
        os.ftruncate(queue.memory.fd, 0)
    queue.close()


def test_adopting_checks_seals_before_size():
    """INVALID_ARGUMENT for a descriptor without F_SEAL_SHRINK (the sender's fault: it could
    truncate it under the mapping); ValueError (GENERAL_FAILURE under MEM-3) for a sealed one
    shorter than the pool. Either way the descriptor is closed."""
    for fd in (_unsealed_memfd(bytes(64)), _unsealed_memfd(bytes(64), sealable=True)):
        with pytest.raises(HalError) as info:
            Memory.adopt("ashmem", fd, 64)
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT and "F_SEAL_SHRINK" in info.value.message
        with pytest.raises(OSError):
            os.fstat(fd)
    short = Memory.create(64)
    fd = os.dup(short.fd)
    with pytest.raises(ValueError, match="the file has 64 bytes, the pool needs 67"):
        Memory.adopt("mmap_fd", fd, 64, 3)
    adopted = Memory.adopt("ashmem", os.dup(short.fd), 64)
    adopted.view()[0] = 9
    assert short.view()[0] == 9
    adopted.close()
    short.close()


def test_the_client_never_hands_over_an_unsealed_pool(service):
    """A pool made outside Memory.create (here an unsealed memfd) is refused before it is sent,
    with a reason the user can act on, rather than copied."""
    model = add_model(DIMS)
    request = build_request(model, FEEDS)
    data = bytes(request.pools[0].view())
    request.pools[0] = Memory(_unsealed_memfd(data), len(data))
    with pytest.raises(HalError) as info:
        service.prepare_model(model).execute_synchronously(request)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    assert "not sealed against shrinking" in info.value.message and "Memory.create" in info.value.message
    _adds(service)


# -- (a) a hosted driver that truncates the request pools ---------------------------------------

TRUNCATE_CHILD = """
import json, os, sys
import numpy as np
from nncert.drivers import load_driver
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.testing.harness import add_model, execute

driver = load_driver(sys.argv[1])
model = add_model((2, 3))
prepared = driver.prepare_model(model)
feeds = [np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)]
results = {}
for run in sys.argv[2].split(","):
    path, kind = run.split(":")
    request = build_request(model, feeds, pool_kind=kind)
    try:
        execute(prepared, request, path)
        outcome, message = "NONE", ""
    except DriverFault as e:
        outcome, message = e.outcome, e.message
    except HalError as e:
        outcome, message = e.status.name, e.message
    sizes = [os.fstat(p.fd).st_size == p.size + p.offset for p in request.pools]
    read_outputs(model, request, [(2, 3)])  # the harness reads its pools: SIGBUS were one truncated
    bytes(request.pools[0].view())
    results[run] = [outcome, message, all(sizes)]
print(json.dumps(results))
"""

RUNS = ",".join([*(f"sync:{kind}" for kind in KINDS), "async:ashmem", "fenced:ashmem", "burst:ashmem"])


@pytest.mark.req("MLTS-2", "MEM-2")
def test_a_hosted_driver_truncating_the_request_pools_cannot_kill_the_harness():
    """The mutant writes the results, then truncates every pool it was given, on every path
    and pool kind. The pools are sealed: the kernel refuses (EPERM), the execution fails with
    the mutant's own error, and the harness reads its pools intact. (Unsealed, the harness
    died of SIGBUS reading the outputs.)"""
    code, results, stderr = _child(TRUNCATE_CHILD, "service:mutant:truncates_pools", RUNS)
    assert code == 0, f"the harness died ({_signal_name(code)}): {stderr[-2000:]}"
    for run, (outcome, message, intact) in results.items():
        assert outcome == "CRASH" or (outcome == "GENERAL_FAILURE" and "refused" in message
                                      and "Operation not permitted" in message), f"{run}: {outcome} {message}"
        assert intact, f"{run}: a pool changed size"


@pytest.mark.req("MLTS-2", "MEM-3")
def test_a_conformance_run_against_it_completes(tmp_path):
    """The same through the suites: every pool kind's test fails with the mutant's refused
    truncation, and the run ends normally. (Unsealed, pytest itself died of SIGBUS.)"""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "conformance" / "test_execution.py"), "-q",
         "-p", "no:cacheprovider", "--tb=no", "--no-three-way", "--driver=service:mutant:truncates_pools",
         f"--nncert-report={report}", "-k", "memory_pool_kinds and ADD"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, \
        f"{_signal_name(proc.returncode)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    tests = json.loads(report.read_text())["tests"]
    assert len(tests) == len(KINDS) and all(rec["outcome"] == "failed" for rec in tests.values()), tests
    assert all("refused" in json.dumps(rec) for rec in tests.values()), tests


# -- (b) a client that truncates its burst ring -------------------------------------------------

def _unsealed_ring(capacity: int = 256) -> MessageQueue:
    """A burst ring as a client that skips the seals would make it."""
    fd = _unsealed_memfd(struct.pack("<QQII", 0, 0, capacity, 1) + bytes(64 - 24 + capacity))
    flags = os.EFD_CLOEXEC | os.EFD_NONBLOCK
    return MessageQueue(Memory(fd, 64 + capacity), os.eventfd(0, flags), os.eventfd(0, flags))


@pytest.mark.req("BURST-4", "DRV-4")
def test_a_client_truncating_its_burst_ring_cannot_take_the_shared_service_down():
    """Two clients of one service; the second hands over unsealed rings and truncates them
    under the service's burst worker. The service refuses unsealed rings (INVALID_ARGUMENT),
    and a sealed ring cannot be truncated at all, so both clients go on being served.
    (Accepted, the worker's next look at the ring killed the service: SIGBUS.)"""
    owner = load_driver("service:reference")
    other = load_driver(owner.attach_spec)
    try:
        prepared = other.prepare_model(add_model(DIMS))
        rings = [_unsealed_ring(), _unsealed_ring()]
        body = {"handle": prepared.handle, "queue_size": rings[0].memory.size}
        status = status_of(lambda: other.conn.call("burst_configure", body,
                                                   fds=rings[0].fds() + rings[1].fds()))
        for ring in rings:  # accepted or not: truncate, then wake the worker to it
            os.ftruncate(ring.memory.fd, 0)
            os.eventfd_write(ring.data_fd, 1)
            os.eventfd_write(ring.space_fd, 1)
        time.sleep(0.5)
        assert owner.alive(), f"the service died: {owner.fault()}"
        _adds(owner)
        _adds(other)
        assert status is ErrorStatus.INVALID_ARGUMENT, status
        sealed = MessageQueue.create(256)
        with pytest.raises(PermissionError):
            os.ftruncate(sealed.memory.fd, 0)
        sealed.close()
        for ring in rings:
            ring.close()
    finally:
        other.close()
        owner.close()


# -- (c) a hosted driver that corrupts its burst's result ring ----------------------------------

RING_CHILD = """
import json, sys
import numpy as np
from nncert.drivers import load_driver
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.testing.harness import add_model, execute

driver = load_driver(sys.argv[1], {"timeout": "5"})
model = add_model((2, 3))
feeds = [np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)]
burst = driver.prepare_model(model).configure_execution_burst()
try:
    burst.execute(build_request(model, feeds), [0, 1])
    outcome, message = "NONE", ""
except DriverFault as e:
    outcome, message = e.outcome, e.message
except HalError as e:
    outcome, message = e.status.name, e.message
alive = driver.alive()
driver.restart()  # the harness goes on with a fresh service
request = build_request(model, feeds)
execute(driver.prepare_model(model), request, "sync")
after = read_outputs(model, request, [(2, 3)])[0].tolist()
driver.close()
print(json.dumps({"outcome": outcome, "message": message, "alive": alive, "after": after}))
"""


@pytest.mark.req("BURST-3", "BURST-4", "MLTS-2")
@pytest.mark.parametrize("how", ["length", "indexes", "truncate"])
def test_a_corrupt_result_ring_is_the_services_crash(how):
    """Scribbled over from the service's side, the result ring is the service's CRASH (killed
    by the client, then restarted): never an exception of the harness's, nor a wait to the
    deadline (``indexes`` publishes 2 bytes: a client that trusted them waited for the rest,
    a HANG). Truncating it is refused by its seal: the mutant's own error. (Unsealed, the
    harness died of SIGBUS at its next look at the ring.)"""
    started = time.monotonic()
    code, result, stderr = _child(RING_CHILD, f"service:mutant:corrupts_ring,how={how}")
    assert code == 0, f"the harness died ({_signal_name(code)}): {stderr[-2000:]}"
    if how == "truncate":
        assert result["outcome"] == "GENERAL_FAILURE" and "refused" in result["message"], result
        assert result["alive"]
    else:
        assert result["outcome"] == "CRASH" and "corrupt queue" in result["message"], result
        assert not result["alive"]
    assert result["after"] == [[3.0] * 3] * 2
    assert time.monotonic() - started < 30, "the client waited for the corrupt ring"


# -- (d) unsealed or short descriptors handed to the service ------------------------------------

@pytest.mark.req("MEM-3", "VAL-1")
def test_unsealed_or_short_pools_are_refused_and_the_service_survives(service):
    """A pool descriptor without F_SEAL_SHRINK (an unsealed memfd, a memfd with other seals, a
    regular file) is INVALID_ARGUMENT; a sealed one shorter than the pool is GENERAL_FAILURE
    (MEM-3). A burst slot is the sharpest case: the service keeps it mapped between calls, so
    an unsealed one truncated afterwards killed the service at the next execution naming it
    (SIGBUS). The service goes on serving."""
    model = add_model(DIMS)
    prepared = service.prepare_model(model)
    request = build_request(model, FEEDS)
    data = bytes(request.pools[0].view())

    def execute_with(fd: int, size: int = len(data), kind: str = "ashmem", offset: int = 0):
        fds: list[int] = []
        body = {"handle": prepared.handle, "mode": "sync", "request": wire.encode_request(request, fds),
                "measure": 0, "deadline": None, "loop_timeout": None}
        body["request"]["pools"][0] = {"kind": kind, "size": size, "offset": offset}
        fds[0] = fd
        try:
            return status_of(lambda: service.conn.call("execute", body, fds=fds))
        finally:
            os.close(fd)

    with tempfile.TemporaryFile() as f:
        f.write(b"xyz" + data)
        f.flush()
        statuses = {
            "unsealed memfd": execute_with(_unsealed_memfd(data)),
            "memfd sealed against growing only": execute_with(_grow_sealed(data)),
            "regular file": execute_with(os.dup(f.fileno()), kind="mmap_fd", offset=3),
            "sealed, one byte short": execute_with(os.dup(request.pools[0].fd), len(data) + 1),
        }

    burst = prepared.configure_execution_burst()
    slot_pool = Memory(_unsealed_memfd(data), len(data))
    body = {"handle": burst.handle, "slot": 5, "pool": {"kind": "ashmem", "size": len(data), "offset": 0}}
    registered = status_of(lambda: service.conn.call("burst_memory", body, fds=[slot_pool.fd]))
    os.ftruncate(slot_pool.fd, 0)  # registered or not: gone
    burst.slots[5] = slot_pool  # as if registered: the next execution names slot 5
    slot_request = build_request(model, FEEDS)
    try:
        status_of(lambda: burst.execute(slot_request, [5, 1]))
    except DriverFault as e:
        pytest.fail(f"the service died: {e}")
    assert service.alive()
    _adds(service)
    assert registered is ErrorStatus.INVALID_ARGUMENT
    assert statuses == {"unsealed memfd": ErrorStatus.INVALID_ARGUMENT,
                        "memfd sealed against growing only": ErrorStatus.INVALID_ARGUMENT,
                        "regular file": ErrorStatus.INVALID_ARGUMENT,
                        "sealed, one byte short": ErrorStatus.GENERAL_FAILURE}, statuses


def _grow_sealed(data: bytes) -> int:
    fd = _unsealed_memfd(data, sealable=True)
    fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_GROW)
    assert not seals(fd) & F_SEAL_SHRINK
    return fd


# -- a mutant that would reseal or grow pools -----------------------------------------------------

@pytest.mark.req("MLTS-2")
def test_a_hosted_driver_cannot_reseal_or_grow_the_request_pools(service):
    """F_SEAL_SEAL and F_SEAL_GROW: the mutant's F_SEAL_FUTURE_WRITE and its extra gigabyte are
    both refused, so the pools keep their size and stay mappable for writing."""
    driver = load_driver("service:mutant:grows_pools")
    try:
        model = add_model(DIMS)
        request = build_request(model, FEEDS)
        with pytest.raises(HalError) as info:
            execute(driver.prepare_model(model), request, "sync")
        assert info.value.status is ErrorStatus.GENERAL_FAILURE
        refusals = info.value.message.count("Operation not permitted")
        assert refusals == 2 * len(request.pools), info.value.message
        for pool in request.pools:
            assert seals(pool.fd) == FIXED_SIZE and os.fstat(pool.fd).st_size == pool.size + pool.offset
            again = Memory(os.dup(pool.fd), pool.size, pool.offset)  # writable, as the service maps it
            again.view()[0] = 1
            again.close()
        _adds(service)
    finally:
        driver.close()


# -- the ring's indexes -----------------------------------------------------------------------------

def test_indexes_no_working_peer_publishes_are_corrupt():
    """Part of a length published, more than the ring holds, a head past the tail: a
    CorruptMessageError at once (the consumer drops what was published and can go on), never
    a wait for bytes that will not come."""
    queue = MessageQueue.create(256)
    for head, tail in ((0, 2), (0, 300), (10, 4), (2**64 - 4, 2**64 - 1)):
        queue._index[0], queue._index[1] = head, tail
        with pytest.raises(CorruptMessageError, match="corrupt queue"):
            queue.read(time.monotonic() + 5)
        assert queue._index[0] == tail  # dropped
        queue._index[0], queue._index[1] = head, tail
        with pytest.raises(CorruptMessageError):
            queue.write(b"x", time.monotonic() + 5)
    queue._index[0] = queue._index[1] = 2**64 - 6
    with pytest.raises(CorruptMessageError, match="end of the index range"):
        queue.write(b"xy")
    queue._index[0] = queue._index[1] = 40
    queue.write(b"fine")
    assert queue.read() == b"fine"
    queue.close()
