"""The driver service (service:SPEC): descriptors instead of bytes, remote handles, death and
deadlines, bursts over the shared-memory queue, protocol robustness."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import background_runs
import numpy as np
import pytest

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.base import SyncFence, set_hang_timeout
from nncert.drivers.service import wire
from nncert.drivers.service.fmq import MessageQueue, QueueAborted, QueueTimeout
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.types import ErrorStatus, MeasureTiming, OperandType, OperationType
from nncert.testing.harness import execute, status_of, wait_fence

T = OperandType


def _add_model(n: int = 4):
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (n,))
    y = b.operand(T.TENSOR_FLOAT32, (n,))
    out = b.operand(T.TENSOR_FLOAT32, (n,))
    b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


def _feeds(n: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2)]


def _run(prepared, model, feeds, path="sync"):
    request = build_request(model, feeds)
    execute(prepared, request, path)
    return read_outputs(model, request, [(len(feeds[0]),)])[0]


@pytest.fixture
def service():
    driver = load_driver("service:reference")
    yield driver
    driver.close()


def _stats(driver) -> dict:
    return driver.conn.call("stats")[0]


def test_results_and_queries_match_the_hosted_driver(service):
    reference = load_driver("reference")
    assert service.version_string() == reference.version_string()
    assert service.capabilities() == reference.capabilities()
    assert service.type() == reference.type()
    assert service.number_of_cache_files_needed() == reference.number_of_cache_files_needed()
    model, feeds = _add_model(), _feeds()
    prepared = service.prepare_model(model)
    for path in ("sync", "async", "fenced", "burst"):
        np.testing.assert_array_equal(_run(prepared, model, feeds, path), feeds[0] + feeds[1])


def test_pools_travel_as_descriptors_not_bytes(service, monkeypatch):
    """MEM-2: a 4 MiB input crosses the socket as a descriptor; the messages stay small."""
    sizes = []
    real = wire.send_message

    def spy(sock, call_id, body, blob=b"", fds=()):
        sizes.append(len(blob) + len(str(body)))
        return real(sock, call_id, body, blob, fds)

    monkeypatch.setattr(wire, "send_message", spy)
    n = 1 << 20
    model, feeds = _add_model(n), _feeds(n)
    prepared = service.prepare_model(model)
    np.testing.assert_array_equal(_run(prepared, model, feeds), feeds[0] + feeds[1])
    assert sizes and max(sizes) < 4096, f"a message carried {max(sizes)} bytes"


def test_dropped_handles_are_released(service):
    """DRV-5: dropping a prepared model (or a burst) frees it in the service."""
    model = _add_model()
    prepared = [service.prepare_model(model) for _ in range(3)]
    burst = prepared[0].configure_execution_burst()
    assert _stats(service)["handles"] == 4
    del prepared[1:], burst
    assert _stats(service)["handles"] == 1  # the releases ride on this very call
    del prepared
    assert _stats(service)["handles"] == 0


def test_a_client_that_disconnects_leaks_nothing(service):
    other = load_driver(service.attach_spec)
    other.prepare_model(_add_model()).configure_execution_burst()
    assert _stats(service)["clients"] == 2
    other.close()
    for _ in range(100):
        if _stats(service)["clients"] == 1:
            break
        time.sleep(0.02)
    assert _stats(service)["clients"] == 1
    model, feeds = _add_model(), _feeds()
    np.testing.assert_array_equal(_run(service.prepare_model(model), model, feeds), feeds[0] + feeds[1])


def test_death_between_calls_fails_every_later_call_until_restart(service):
    model, feeds = _add_model(), _feeds()
    prepared = service.prepare_model(model)
    os.kill(service.conn.service_pid, signal.SIGKILL)
    time.sleep(0.1)
    assert not service.alive()
    for call in (service.capabilities, lambda: service.prepare_model(model),
                 lambda: _run(prepared, model, feeds)):
        with pytest.raises(DriverFault) as info:
            call()
        assert info.value.status is ErrorStatus.DEVICE_UNAVAILABLE and info.value.outcome == "CRASH"
        assert "SIGKILL" in str(info.value)
    started = time.monotonic()
    service.restart()
    assert time.monotonic() - started < 10
    np.testing.assert_array_equal(_run(service.prepare_model(model), model, feeds), feeds[0] + feeds[1])
    with pytest.raises(DriverFault):  # a handle of the dead instance stays dead
        _run(prepared, model, feeds)


@pytest.mark.parametrize("path", ["sync", "async", "burst"])
def test_crash_during_a_call_is_a_crash_with_the_signal_and_stderr(path):
    driver = load_driver("service:mutant:crash,op=ADD")
    try:
        model, feeds = _add_model(), _feeds()
        prepared = driver.prepare_model(model)
        started = time.monotonic()
        with pytest.raises(HalError) as info:
            _run(prepared, model, feeds, path)
        assert time.monotonic() - started < 10
        fault = info.value
        assert fault.status is ErrorStatus.DEVICE_UNAVAILABLE
        if path != "async":  # the async path reports through its callback: a status only
            assert isinstance(fault, DriverFault) and fault.outcome == "CRASH"
            assert "SIGABRT" in str(fault) and "aborting on ADD" in fault.detail
        assert not driver.alive()
    finally:
        driver.close()


def test_a_hang_is_killed_at_the_deadline():
    driver = load_driver("service:mutant:hang,op=ADD", {"timeout": "1"})
    try:
        model, feeds = _add_model(), _feeds()
        prepared = driver.prepare_model(model)
        pid = driver.conn.service_pid
        started = time.monotonic()
        with pytest.raises(DriverFault) as info:
            _run(prepared, model, feeds)
        assert info.value.outcome == "HANG"
        assert time.monotonic() - started < 5
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        driver.close()


def test_a_hal_deadline_bounds_the_wait():
    """EXE-10: with a deadline 0.2 s away, a hung service is given up on soon after it."""
    driver = load_driver("service:mutant:hang,op=ADD")
    try:
        model, feeds = _add_model(), _feeds()
        prepared = driver.prepare_model(model)
        started = time.monotonic()
        with pytest.raises(DriverFault):
            prepared.execute_synchronously(build_request(model, feeds), MeasureTiming.NO,
                                           time.monotonic_ns() + 200_000_000)
        assert time.monotonic() - started < 5
    finally:
        driver.close()


def test_burst_death_wakes_the_waiting_side_at_once():
    """BURST-4: the service dies in the middle of a burst; the client's wait ends with it,
    long before the (30 s) call deadline."""
    driver = load_driver("service:mutant:burst_death")
    try:
        model = _add_model()
        burst = driver.prepare_model(model).configure_execution_burst()
        request = build_request(model, _feeds())
        burst.execute(request, [0, 1])
        started = time.monotonic()
        with pytest.raises(DriverFault) as info:
            burst.execute(request, [0, 1])
        assert time.monotonic() - started < 5
        assert info.value.outcome == "CRASH" and "SIGABRT" in str(info.value)
    finally:
        driver.close()


def test_a_fence_never_signalled_is_a_hang():
    driver = load_driver("service:mutant:silent_fence")
    set_hang_timeout(0.5)
    try:
        model, feeds = _add_model(), _feeds()
        prepared = driver.prepare_model(model)
        with pytest.raises(DriverFault) as info:
            execute(prepared, build_request(model, feeds), "fenced")
        assert info.value.outcome == "HANG"
    finally:
        set_hang_timeout(30)
        driver.close()


def test_fenced_execution_waits_for_a_fence_signalled_in_this_process(service):
    """EXE-1/EXE-8: the wait-for fence crosses the socket as an eventfd; the service waits on it."""
    model, feeds = _add_model(), _feeds()
    prepared = service.prepare_model(model)
    gate = SyncFence()
    request = build_request(model, feeds)
    fence, callback = prepared.execute_fenced(request, [gate], MeasureTiming.YES)
    assert fence is not None and not fence.wait(0.1), "ran before its fence was signalled"
    gate.signal()
    wait_fence(fence)
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE
    assert info.timing_launched.time_in_driver >= 100_000 > info.timing_fenced.time_in_driver
    np.testing.assert_array_equal(read_outputs(model, request, [(4,)])[0], feeds[0] + feeds[1])


def test_parallel_executions_from_threads(service):
    """DRV-4: several threads executing at once on one prepared model, each its own result."""
    model = _add_model()
    prepared = service.prepare_model(model)
    errors = []

    def worker(seed):
        try:
            for i in range(20):
                feeds = _feeds(seed=seed * 100 + i)
                np.testing.assert_array_equal(_run(prepared, model, feeds), feeds[0] + feeds[1])
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert _stats(service)["connections"] >= 2, "concurrent calls were not given connections of their own"


def test_a_forked_child_gets_its_own_connection(service):
    model, feeds = _add_model(), _feeds()
    service.version_string()
    pid = os.fork()
    if pid == 0:
        try:
            out = _run(service.prepare_model(model), model, feeds)
            service.close()  # the child's own connection only: the service and its socket stay
            os._exit(0 if np.array_equal(out, feeds[0] + feeds[1]) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert service.alive() and service.version_string()
    other = load_driver(service.attach_spec)  # the socket is still there for other clients
    other.close()


def test_malformed_messages_get_invalid_argument_and_the_service_survives(service):
    with pytest.raises(HalError) as info:
        service.conn.call("execute", {"handle": 12345})
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(HalError) as info:
        service.conn.call("no_such_operation")
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(HalError) as info:
        service.conn.call("prepare_model", {"model": {"main": "nonsense"}, "preference": 1, "priority": 0})
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    # A client speaking garbage is dropped; the others carry on.
    rogue = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    rogue.connect(service.address)
    rogue.sendall(b"GARBAGE!" * 10)
    try:
        assert rogue.recv(1) == b""
    except ConnectionResetError:
        pass
    rogue.close()
    with pytest.raises(HalError) as info:
        service.conn.call("execute", {"handle": 1})
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    assert service.version_string()


def test_invalid_models_reach_the_hosted_driver_unchanged(service):
    """VAL-1 through the service: an operand type code outside the enum survives the wire."""
    model = _add_model()
    model.main.operands[0].type = 77
    with pytest.raises(HalError) as info:
        service.prepare_model(model)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT and "77" in info.value.message


def test_bad_specs_are_one_line_errors():
    for spec, words in [("service:", "needs the driver"), ("service:no_such_driver", "no_such_driver"),
                        ("service:service:reference", "cannot host"),
                        ("service:@/nonexistent/sock", "no driver"),
                        ("service:mutant:crash,op=NOPE", "NOPE")]:
        with pytest.raises(DriverSpecError) as info:
            load_driver(spec)
        assert words in str(info.value) and "\n" not in str(info.value)


def test_cli_reports_a_bad_service_spec_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "nncert.cli", "drivers", "--check", "service:nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_message_queue_wraps_around_and_gives_up():
    queue = MessageQueue.create(256)
    for i in range(50):  # crosses the end of the ring many times
        payload = bytes([i]) * (i % 40 + 1)
        queue.write(payload)
        assert queue.read() == payload
    with pytest.raises(QueueTimeout):
        queue.read(time.monotonic() + 0.05)
    queue.write(b"x" * 200)
    with pytest.raises(QueueTimeout):  # full: no room for another 200 bytes
        queue.write(b"y" * 200, time.monotonic() + 0.05)
    abort = SyncFence.signalled()
    queue.read()
    with pytest.raises(QueueAborted):
        queue.read(None, (abort.fd,))
    with pytest.raises(ValueError):
        queue.write(b"z" * 300)
    queue.close()


def test_a_pool_the_service_cannot_map_is_general_failure(service):
    """MEM-3: a pool larger than its file cannot be mapped: GENERAL_FAILURE, model or request."""
    from nncert.hal.memory import Memory
    model, feeds = _add_model(), _feeds()
    prepared = service.prepare_model(model)
    request = build_request(model, feeds)
    fds: list[int] = []
    body = {"handle": prepared.handle, "mode": "sync", "request": wire.encode_request(request, fds),
            "measure": 0, "deadline": None, "loop_timeout": None}
    body["request"]["pools"][0]["size"] = 1 << 40
    with pytest.raises(HalError) as info:
        service.conn.call("execute", body, fds=fds)
    assert info.value.status is ErrorStatus.GENERAL_FAILURE
    big = _add_model(64)
    pool = Memory.create(16)
    big.pools.append(pool)
    fds = []
    desc, blob = wire.encode_model(big, fds)
    desc["pools"][0]["size"] = 1 << 40
    with pytest.raises(HalError) as info:
        service.conn.call("prepare_model", {"model": desc, "preference": 1, "priority": 90}, blob, fds)
    assert info.value.status is ErrorStatus.GENERAL_FAILURE
    body["measure"] = 7
    body["request"] = wire.encode_request(request, fds := [])
    with pytest.raises(HalError) as info:
        service.conn.call("execute", body, fds=fds)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_a_burst_slot_sent_but_never_run_can_be_released(service):
    model, feeds = _add_model(), _feeds()
    burst = service.prepare_model(model).configure_execution_burst()
    request = build_request(model, feeds)
    burst.execute(request, [0, 1])
    extra = build_request(model, feeds)
    fds: list[int] = []
    desc = wire.encode_pool(extra.pools[0], fds)
    service.conn.call("burst_memory", {"handle": burst.handle, "slot": 9, "pool": desc}, fds=fds)
    service.conn.call("burst_release_memory", {"handle": burst.handle, "slot": 9})
    burst.release_memory_resource(0)
    with pytest.raises(HalError) as info:
        burst.release_memory_resource(42)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_a_burst_request_must_be_a_json_object(service):
    """A list of [key, value] pairs would make a Python dict: it is still not an object."""
    model, feeds = _add_model(), _feeds()
    burst = service.prepare_model(model).configure_execution_burst()
    burst.execute(build_request(model, feeds), [0, 1])
    pairs = [["slots", [0, 1]], ["inputs", [[False, [0, 0, 16, 0], []], [False, [0, 16, 16, 0], []]]],
             ["outputs", [[False, [1, 0, 16, 0], []]]], ["measure", 0]]
    with burst._lock:
        burst.requests.write(json.dumps(pairs).encode())
        reply = json.loads(burst.results.read(time.monotonic() + 10))
    assert reply["status"] == ErrorStatus.INVALID_ARGUMENT and "JSON object" in reply["message"], reply


@pytest.mark.req("BURST-3", "EXE-3")
def test_a_request_too_big_for_the_burst_queue_takes_the_ordinary_path(service, monkeypatch):
    """As the NNAPI runtime does when a request does not fit its burst's queue."""
    from nncert.drivers.service import RemoteBurst

    monkeypatch.setattr(RemoteBurst, "QUEUE_CAPACITY", 64)
    model, feeds = _add_model(), _feeds()
    burst = service.prepare_model(model).configure_execution_burst()
    assert not burst.requests.fits(b"x" * 64)
    request = build_request(model, feeds)
    burst.execute(request, [0, 1])
    np.testing.assert_array_equal(read_outputs(model, request, [(len(feeds[0]),)])[0], feeds[0] + feeds[1])
    with pytest.raises(HalError) as info:
        service.conn.call("burst_memory", {"handle": burst.handle, "slot": 2**64, "pool": {"token": 1}})
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def _raw_hello(address: str, body: dict) -> dict:
    """The reply to a first call on a connection of its own."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(address)
        wire.send_message(sock, 1, {"op": "hello", **body})
        got = wire.recv_message(sock)
    assert got is not None, "the service closed the connection instead of answering"
    return got[1]


def test_fields_of_the_wrong_json_type_are_invalid_argument(service):
    """The protocol converts nothing: a number where an integer belongs, a boolean where a
    number belongs, a string of digits, are malformed calls (INVALID_ARGUMENT, never a
    GENERAL_FAILURE or a silent conversion)."""
    from nncert.drivers.service.fmq import MessageQueue

    model, feeds = _add_model(), _feeds()
    prepared = service.prepare_model(model)  # handle 1: `true` must not find it
    burst = prepared.configure_execution_burst()
    request = build_request(model, feeds)

    def execute_call(op: str = "execute", **change):
        def call():
            fds: list[int] = []
            body = {"handle": prepared.handle, "mode": "sync", "request": wire.encode_request(request, fds),
                    "measure": 0, "deadline": None, "loop_timeout": None}
            if op == "execute_fenced":
                body["fences"] = 0
            for key, value in change.items():
                if key == "first_input":
                    body["request"]["inputs"][0] = value
                elif key == "first_pool":
                    body["request"]["pools"][0] = value
                else:
                    body[key] = value
            service.conn.call(op, body, fds=fds)
        return call

    def prepare_call(**change):
        def call():
            fds: list[int] = []
            desc, blob = wire.encode_model(model, fds)
            body = {"model": desc, "preference": 1, "priority": 90, "deadline": None, **change}
            if "relax" in change:
                desc["relax"] = body.pop("relax")
            service.conn.call("prepare_model", body, blob, fds)
        return call

    def slot_call(op: str, slot):
        def call():
            fds: list[int] = []
            body = {"handle": burst.handle, "slot": slot}
            if op == "burst_memory":
                body["pool"] = wire.encode_pool(request.pools[0], fds)
            service.conn.call(op, body, fds=fds)
        return call

    def bad_ring():
        queues = [MessageQueue.create(256), MessageQueue.create(256)]
        queues[0].memory.view()[20] = 2  # layout version 2
        try:
            service.conn.call("burst_configure", {"handle": prepared.handle, "queue_size": 64 + 256},
                              fds=queues[0].fds() + queues[1].fds())
        finally:
            for q in queues:
                q.close()

    cases = {
        "measure true": execute_call(measure=True),
        "measure 1.0": execute_call(measure=1.0),
        "handle true": execute_call(handle=True),
        "deadline string": execute_call(deadline="soon"),
        "loop_timeout float": execute_call(loop_timeout=1.5),
        "location of 2": execute_call(first_input=[False, [0, 0], []]),
        "location of 5": execute_call(first_input=[False, [0, 0, 16, 0, 0], []]),
        "has_no_value 0": execute_call(first_input=[0, [0, 0, 16, 0], []]),
        "token string": execute_call(first_pool={"token": "1"}),
        "pool size string": execute_call(first_pool={"kind": "ashmem", "size": "32", "offset": 0}),
        "fences string": execute_call("execute_fenced", fences="0"),
        "relax 1": prepare_call(relax=1),
        "model_cache 0.0": prepare_call(model_cache=0.0),
        "cache token not hex": prepare_call(token="xyz0"),
        "cache token odd": prepare_call(token="abc"),
        "prepare deadline string": prepare_call(deadline="soon"),
        "slot string": slot_call("burst_memory", "3"),
        "slot true": slot_call("burst_memory", True),
        "release slot 1.0": slot_call("burst_release_memory", 1.0),
        "ring layout 2": bad_ring,
    }
    wrong = {what: status.name for what, call in cases.items()
             if (status := status_of(call)) is not ErrorStatus.INVALID_ARGUMENT}
    assert not wrong, f"expected INVALID_ARGUMENT: {wrong}"
    for body in ({"protocol": True, "pid": os.getpid()}, {"protocol": 1, "join": [1], "key": "x"},
                 {"protocol": 1, "join": 1, "key": "\u00e9" * 32}):
        reply = _raw_hello(service.address, body)
        assert reply["status"] == ErrorStatus.INVALID_ARGUMENT, f"hello {body}: {reply}"
    np.testing.assert_array_equal(_run(prepared, model, feeds, "burst"), feeds[0] + feeds[1])


def test_a_registered_burst_slot_names_its_memory_until_released(service):
    """BURST-2: registering a slot again is refused (the driver may have cached the first
    memory); releasing works for a registered slot only, and frees the slot id."""
    model = _add_model()
    feeds, later = _feeds(seed=1), _feeds(seed=2)
    burst = service.prepare_model(model).configure_execution_burst()
    request, other = build_request(model, feeds), build_request(model, later)
    burst.execute(request, [0, 1])

    def register(slot: int):
        fds: list[int] = []
        desc = wire.encode_pool(other.pools[0], fds)
        return lambda: service.conn.call("burst_memory", {"handle": burst.handle, "slot": slot, "pool": desc},
                                         fds=fds)

    assert status_of(register(0)) is ErrorStatus.INVALID_ARGUMENT
    burst.execute(request, [0, 1])  # still slot 0's first memory
    np.testing.assert_array_equal(read_outputs(model, request, [(4,)])[0], feeds[0] + feeds[1])
    for slot in (7, -1, 2**63):
        release = lambda s=slot: service.conn.call("burst_release_memory",  # noqa: E731
                                                   {"handle": burst.handle, "slot": s})
        assert status_of(release) is ErrorStatus.INVALID_ARGUMENT, f"releasing slot {slot}"
    burst.release_memory_resource(0)
    assert status_of(register(0)) is ErrorStatus.NONE


def _publish(b, frame: bytes) -> None:
    """Raw bytes on a burst's request ring, published at once (as a faulty client would)."""
    queue = b.requests
    head, tail = queue._index[0], queue._index[1]
    assert queue.capacity - (tail - head) >= len(frame)
    queue._copy_in(tail, frame)
    queue._index[1] = tail + len(frame)
    os.eventfd_write(queue.data_fd, 1)


def test_a_corrupt_request_length_drops_what_was_published_and_gets_one_result(service):
    """The recovery rule: a length beyond the published bytes loses the message boundaries, so
    the service drops every byte published so far, answers once (INVALID_ARGUMENT) and reads on
    from there; the burst then works."""
    import struct

    model, feeds = _add_model(), _feeds()
    burst = service.prepare_model(model).configure_execution_burst()
    burst.execute(build_request(model, feeds), [0, 1])
    valid = json.dumps({"slots": [0, 1], "inputs": [[False, [0, 0, 16, 0], []], [False, [0, 16, 16, 0], []]],
                        "outputs": [[False, [1, 0, 16, 0], []]], "measure": 0}).encode()
    # A corrupt header, then a whole valid message, published together: both are dropped.
    frame = struct.pack("<I", 1 << 20) + b"{}" + struct.pack("<I", len(valid)) + valid
    with burst._lock:
        _publish(burst, frame)
        reply = json.loads(burst.results.read(time.monotonic() + 10))
        assert reply["status"] == ErrorStatus.INVALID_ARGUMENT, reply
        with pytest.raises(QueueTimeout):  # one result for the lot
            burst.results.read(time.monotonic() + 0.3)
        assert burst.requests._index[0] == burst.requests._index[1], "the published bytes were not dropped"
    np.testing.assert_array_equal(_run(burst.prepared, model, feeds, "burst"), feeds[0] + feeds[1])


def test_a_burst_result_too_big_for_its_ring_becomes_an_error_result(service, monkeypatch):
    """Every request gets exactly one result: one that cannot fit the result ring (here the
    message naming 1,500 unknown slots) is replaced by GENERAL_FAILURE, and the burst goes on."""
    from nncert.drivers.service import RemoteBurst

    monkeypatch.setattr(RemoteBurst, "QUEUE_CAPACITY", 4096)
    model, feeds = _add_model(), _feeds()
    burst = service.prepare_model(model).configure_execution_burst()
    burst.execute(build_request(model, feeds), [0, 1])
    payload = json.dumps({"slots": [7] * 1500, "inputs": [], "outputs": [], "measure": 0},
                         separators=(",", ":")).encode()
    assert burst.requests.fits(payload)
    with burst._lock:
        burst.requests.write(payload)
        try:
            reply = json.loads(burst.results.read(time.monotonic() + 10))
        except QueueTimeout:
            pytest.fail("no result: the burst worker stopped")
    assert reply["status"] == ErrorStatus.GENERAL_FAILURE and "does not fit" in reply["message"], reply
    np.testing.assert_array_equal(_run(burst.prepared, model, feeds, "burst"), feeds[0] + feeds[1])


def test_an_unreadable_burst_result_is_the_services_death(service):
    """A result ring with a corrupt length can only come from a broken service: the client
    says CRASH and kills it, as for a framing error in a reply, instead of a ValueError."""
    import struct

    model, feeds = _add_model(), _feeds()
    burst = service.prepare_model(model).configure_execution_burst()
    results = burst.results
    tail = results._index[1]
    results._copy_in(tail, struct.pack("<I", 1 << 20))
    results._index[1] = tail + 4
    pid = service.conn.service_pid
    with pytest.raises(DriverFault) as info:
        burst.execute(build_request(model, feeds), [0, 1])
    assert info.value.outcome == "CRASH" and "unreadable result" in str(info.value)
    assert not service.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


#: Conformance tests of what only a hosted driver has (a message queue, a second client):
#: they skip in process.
HOSTED_ONLY = {"test_malformed_queue_message_gets_an_error_result", "test_token_of_another_client"}


#: The conformance suite in two parts: CI runs the first; the validation suite (6,400 invalid
#: models and requests, ~100 s of CPU through the service) runs under -m slow.
PARTS = ("suites", "validation")


def _whole_suite(spec: str, part: str) -> tuple[list[str], Path]:
    """The run of one part of the conformance suite on ``spec`` and the report it writes: every
    suite but validation (of the per-operation cases the first seed: every operation, type and
    variation; the other seeds draw other values through the same calls), or validation."""
    report = background_runs.scratch() / f"{spec.replace(':', '_')}-{part}.json"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    validation = os.path.join(root, "conformance", "test_validation.py")
    where = [validation] if part == "validation" else \
        [os.path.join(root, "conformance"), f"--ignore={validation}", "-k", "not s1 and not s2"]
    return [sys.executable, "-m", "pytest", *where, "-q", "-p", "no:cacheprovider",
            f"--driver={spec}", f"--nncert-report={report}"], report


SERVICE_EQUALS = ("reference", "service:reference")


def runs_to_start(item) -> list[background_runs.Run]:
    """The two runs test_conformance_through_the_service_equals_in_process waits on, started
    at collection (tests/background_runs.py)."""
    if item.originalname == "test_conformance_through_the_service_equals_in_process":
        # The session's longest runs: at the head of the queue, so that they do not end it.
        return [background_runs.Run(tuple(_whole_suite(spec, item.callspec.params["part"])[0]), first=True)
                for spec in SERVICE_EQUALS]
    return []


@pytest.mark.req("DRV-1", "MEM-2", "EXE-1")
@pytest.mark.parametrize("part", [PARTS[0], pytest.param(PARTS[1], marks=pytest.mark.slow)])
def test_conformance_through_the_service_equals_in_process(part):
    """The conformance suite gives the very same outcome for every test whether the reference
    runs in process or hosted as a service."""
    outcomes = {}
    for spec in SERVICE_EQUALS:
        argv, report = _whole_suite(spec, part)
        proc = background_runs.run(argv, timeout=1500)
        assert proc.returncode == 0, f"{spec}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        outcomes[spec] = {n: r["outcome"] for n, r in json.loads(report.read_text())["tests"].items()}
    local, remote = outcomes["reference"], outcomes["service:reference"]
    assert local.keys() == remote.keys()
    assert len(local) > (5000 if part == "validation" else 3000)
    differ = [n for n in local if local[n] != remote[n]
              and not (n.split("::")[-1].split("[")[0] in HOSTED_ONLY and local[n] == "skipped")]
    assert not differ, f"{len(differ)} tests differ, e.g. {differ[:3]}"


def test_the_service_does_not_outlive_a_killed_owner_even_mid_hang(tmp_path):
    """A harness killed while its call hangs in the driver leaves no service behind."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import os, sys, threading, time\n"
        "from nncert.drivers import load_driver\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_service import _add_model, _feeds, _run\n"
        "d = load_driver('service:mutant:hang,op=ADD')\n"
        "model, feeds = _add_model(), _feeds()\n"
        "p = d.prepare_model(model)\n"
        "threading.Thread(target=_run, args=(p, model, feeds), daemon=True).start()\n"
        "time.sleep(0.5)\n"
        "print(d.conn.service_pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, str(script), os.path.dirname(os.path.abspath(__file__))],
                          capture_output=True, text=True, timeout=60)
    pid = int(proc.stdout.split()[0])
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the service outlived its killed owner by 5 s")


def _sent_ops(monkeypatch) -> list[str]:
    """The ops of the messages this process sends from now on."""
    sent: list[str] = []
    real = wire.send_message

    def spy(sock, call_id, body, blob=b"", fds=()):
        sent.append(body.get("op"))
        return real(sock, call_id, body, blob, fds)

    monkeypatch.setattr(wire, "send_message", spy)
    return sent


def test_first_run_is_one_round_trip_for_the_three_calls(service, monkeypatch):
    """Driver.first_run through the service: supported_operations, prepare_model and one
    synchronous execution in one call, with what each gives apart; a second execution is a
    call of its own, and the prepared model a handle like any other (DRV-5)."""
    sent = _sent_ops(monkeypatch)
    model, feeds = _add_model(), _feeds()
    request = build_request(model, feeds)
    first = service.first_run(model, request)
    prepared = first.prepare()
    shapes, _ = first.execute(prepared)
    assert sent == ["first_run"]
    assert first.supported == [True] and [tuple(s.dimensions) for s in shapes] == [(4,)]
    np.testing.assert_array_equal(read_outputs(model, request, [(4,)])[0], feeds[0] + feeds[1])
    np.testing.assert_array_equal(_run(prepared, model, _feeds(seed=1)), sum(_feeds(seed=1)))
    first.execute(prepared)
    assert sent[-1] == "execute"
    assert _stats(service)["handles"] == 1
    del first, prepared
    assert _stats(service)["handles"] == 0
    # Without a request: the claim and the preparation only.
    first = service.first_run(model)
    assert sent[-2:] == ["stats", "first_run"]
    np.testing.assert_array_equal(_run(first.prepare(), model, feeds), feeds[0] + feeds[1])


def test_first_run_fails_each_call_where_it_would_fail_apart(service):
    """An invalid model fails the claim; a preparation or an execution that fails raises its
    own status from ``prepare()`` or ``execute()``, as the call would apart: never a fault."""
    bad_model = _add_model()
    bad_model.main.operations[0].inputs[2] = 99  # no such operand
    with pytest.raises(HalError) as info:
        service.first_run(bad_model)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT and not isinstance(info.value, DriverFault)
    model, feeds = _add_model(), _feeds()
    request = build_request(model, feeds)
    loc = request.inputs[0].location
    short = type(loc)(loc.pool_index, loc.offset, loc.length - 4, loc.padding)
    request.inputs[0] = type(request.inputs[0])(False, short, request.inputs[0].dimensions)
    first = service.first_run(model, request)
    with pytest.raises(HalError) as ran:
        first.execute(first.prepare())
    with pytest.raises(HalError) as apart:
        service.prepare_model(model).execute_synchronously(request)
    assert ran.value.status is apart.value.status is ErrorStatus.INVALID_ARGUMENT
    assert ran.value.message == apart.value.message
    assert service.alive()

    driver = load_driver("service:mutant:static_shapes_only")
    try:
        b = ModelBuilder()
        x, y = b.operand(T.TENSOR_FLOAT32, (4,)), b.operand(T.TENSOR_FLOAT32, (4,))
        out = b.operand(T.TENSOR_FLOAT32, (0,))  # of unknown size: this mutant cannot compile it
        b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
        unknown = b.build([x, y], [out])
        first = driver.first_run(unknown, build_request(unknown, feeds, [(4,)]))
        assert first.supported == [True]
        with pytest.raises(HalError) as prepared:
            first.prepare()
        with pytest.raises(HalError) as apart:
            driver.prepare_model(unknown)
        assert prepared.value.status is apart.value.status is ErrorStatus.GENERAL_FAILURE
        assert not isinstance(prepared.value, DriverFault) and driver.alive()
    finally:
        driver.close()


def test_the_harness_judges_a_hosted_driver_as_it_judges_it_in_process():
    """check_case through Driver.first_run (one round trip a case) gives the verdict the
    calls apart give in process: the ADD cases of one seed on a mutant that gets the
    quantised ones wrong, base and dynamic-output variations."""
    from nncert.testing.cases import enumerate_cases, sample_case
    from nncert.testing.harness import CaseError, check_case

    def verdicts(driver) -> list[str]:
        out = []
        for key in enumerate_cases(seeds=(0,)):
            if key[0].name != "ADD":
                continue
            case = sample_case(*key)
            for variation in ("base", "dynamic_output"):
                if variation != "base" and not case.supports(variation):
                    continue
                try:
                    out.append(str(check_case(driver, case, variation)))
                except CaseError as e:
                    out.append(f"CaseError: {e}")
        return out

    hosted = load_driver("service:mutant:quant_off_by_2")
    try:
        got = verdicts(hosted)
    finally:
        hosted.close()
    expected = verdicts(load_driver("mutant:quant_off_by_2"))
    assert got == expected
    assert sum(v.startswith("CaseError") for v in got) >= 4 and got.count("None") >= 4
