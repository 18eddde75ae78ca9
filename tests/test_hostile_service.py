"""A service that lies, and other users on the machine (issue 18; docs/service-protocol.md,
"Trust"): the client checks who it talks to before it sends anything, takes the service's
pid from the kernel and signals it only through a pidfd, and turns any malformed reply into
the driver's CRASH; the service serves only its own user, caps its connections and never
allocates for bytes that have not arrived.

The fake services here are forked children of the test process speaking just enough of the
protocol (``_Fake``): forked, so that they are processes of their own that the client may
kill, and so that "another local user" is a ``setuid`` away (those tests need root).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.base import SyncFence
from nncert.drivers.service import wire
from nncert.drivers.service.fmq import MessageQueue
from nncert.hal.builder import build_request
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.memory import Memory
from nncert.hal.model import BufferDesc, BufferRole
from nncert.hal.types import ErrorStatus
from nncert.testing.harness import add_model, claim, execute
from nncert.testing.outcome import Kind, classify_exception

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another local user is a setuid(65534) away: "
                                                           "needs root")

#: What the fake answers when a case says nothing else: a working service's replies.
HELLO = {"status": 0, "protocol": 1, "driver": "fake", "client": 1, "key": "0" * 32,
         "feature_level": 17, "device_type": 4}
DEFAULTS: dict[str, dict] = {
    "prepare_model": {"status": 0, "handle": 1},
    "execute": {"status": 0, "shapes": [[[2, 3], True]], "timing": [2**64 - 1, 2**64 - 1]},
    "execute_fenced": {"status": 0, "callback": 3, "fence": False},
    "burst_configure": {"status": 0, "handle": 2},
    "allocate": {"status": 0, "handle": 4, "token": 1},
}
#: A reply that does not come (the fake keeps the connection open and says nothing).
SILENCE = object()


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _ready(rfd: int, what: str) -> bytes:
    if not select.select([rfd], [], [], 20)[0]:
        pytest.fail(f"{what} did not start")
    said = os.read(rfd, 4096)
    if not said:
        pytest.fail(f"{what} ended at once (its error is on stderr)")
    return said


class _Fake:
    """A forked child listening at ``path`` (as ``uid`` when given) that answers each call
    with ``replies[op]`` (a dict, ``SILENCE``, raw ``bytes``, or a callable of the call's
    body giving one of those); the burst ring's results are ``burst_result`` (raw bytes, or
    None for none). ``report()`` tells what it received: connections, bytes, descriptors."""

    def __init__(self, path: Path, replies: dict | None = None, hello_pid: int | None = None,
                 burst_result: bytes | None = None, uid: int | None = None,
                 accept_timeout: float = 30) -> None:
        self.path = path
        rfd, wfd = os.pipe()
        self.report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the fake service
            code = 0
            try:
                os.close(rfd)
                os.close(self.report_r)
                if uid is not None:
                    os.setgid(uid)
                    os.setuid(uid)
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(str(path))
                listener.listen(8)
                os.write(wfd, b"ready")
                os.close(wfd)
                self._serve(listener, replies or {}, hello_pid, burst_result, report_w, accept_timeout)
            except BaseException as e:  # whatever happens, the child leaves by os._exit
                with contextlib.suppress(Exception):
                    os.write(2, f"fake service: {type(e).__name__}: {e}\n".encode())
                code = 1
            finally:
                os._exit(code)
        os.close(wfd)
        os.close(report_w)
        self.pid = pid
        self.status: int | None = None
        try:
            _ready(rfd, "the fake service")
        finally:
            os.close(rfd)

    # -- in the child --
    @staticmethod
    def _serve(listener: socket.socket, replies: dict, hello_pid: int | None, burst_result: bytes | None,
               report_w: int, accept_timeout: float) -> None:
        received = {"connections": 0, "bytes": 0, "fds": 0}

        def report() -> None:
            os.write(report_w, json.dumps(received).encode() + b"\n")

        listener.settimeout(accept_timeout)
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                report()
                return
            received["connections"] += 1
            report()
            while True:
                try:
                    got = wire.recv_message(conn)
                except (OSError, wire.ProtocolError):
                    break
                if got is None:
                    break
                call_id, body, _blob, fds = got
                received["bytes"] += 1
                received["fds"] += len(fds)
                report()
                op = body.get("op")
                if op == "burst_configure" and len(fds) == 6:
                    size = body["queue_size"]
                    queues = [MessageQueue(Memory.adopt("ashmem", fds[i], size), fds[i + 1], fds[i + 2])
                              for i in (0, 3)]
                    threading.Thread(target=_Fake._burst, args=(*queues, burst_result), daemon=True).start()
                else:
                    wire.close_fds(fds)
                if op == "hello" and "join" not in body:
                    reply = dict(HELLO, pid=os.getpid() if hello_pid is None else hello_pid)
                else:
                    reply = DEFAULTS.get(op, {"status": 0})
                reply = replies.get(op, reply)
                if callable(reply):
                    reply = reply(body)
                if reply is SILENCE:
                    time.sleep(3600)
                elif isinstance(reply, bytes):
                    conn.sendall(reply)
                else:
                    wire.send_message(conn, call_id, reply)

    @staticmethod
    def _burst(requests: MessageQueue, results: MessageQueue, result: bytes | None) -> None:
        while True:
            requests.read()
            if result is None:
                continue  # never answers
            results.write(result)

    # -- in the test --
    def report(self, timeout: float = 5.0) -> dict:
        """The last of what the fake said it received (waiting up to ``timeout`` for more)."""
        last = {"connections": 0, "bytes": 0, "fds": 0}
        data = b""
        until = time.monotonic() + timeout
        while select.select([self.report_r], [], [], max(0.0, until - time.monotonic()))[0]:
            chunk = os.read(self.report_r, 4096)
            if not chunk:
                break
            data += chunk
        for line in data.splitlines():
            last = json.loads(line)
        return last

    def ended_by(self, timeout: float = 5.0) -> int | None:
        """The signal that ended the fake (None: still running after ``timeout``, or exited)."""
        until = time.monotonic() + timeout
        while self.status is None and time.monotonic() < until:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
            else:
                time.sleep(0.02)
        if self.status is None or not os.WIFSIGNALED(self.status):
            return None
        return os.WTERMSIG(self.status)

    def stop(self) -> None:
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.status = 0
        os.close(self.report_r)


@pytest.fixture
def sock_dir(tmp_path):
    return _private_dir(tmp_path / "service")


@pytest.fixture
def shared_tmp():
    """A directory other users may pass through (pytest's own is private to this user)."""
    path = Path(tempfile.mkdtemp(prefix="nncert-hostile-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fakes():
    started: list[_Fake] = []
    yield started
    for fake in started:
        fake.stop()


@pytest.fixture
def bystander():
    """An unrelated process of this user's, which nothing may kill."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _attach(path: Path, timeout: float = 2.0):
    return load_driver(f"service:@{path}", {"timeout": str(timeout)})


def _request():
    model = add_model()
    feeds = [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)]
    return model, build_request(model, feeds)


def _crash_of(action: Callable[[], object], driver) -> DriverFault:
    """The DriverFault ``action`` ends in: raised, or (an asynchronous path, which reports a
    status) the driver's own fault. Any other exception is the harness's bug: it propagates."""
    try:
        action()
    except DriverFault as e:
        return e
    except HalError as e:
        assert e.status is ErrorStatus.DEVICE_UNAVAILABLE, f"{e.status.name}: {e.message}"
        fault = driver.fault()
        assert fault is not None, "an asynchronous path failed, but the driver has no fault"
        return fault
    pytest.fail("the malformed reply was accepted")


def _fenced(driver):
    model, request = _request()
    prepared = driver.prepare_model(model)
    _fence, callback = prepared.execute_fenced(request, [SyncFence.signalled()])
    return callback.get_execution_info()


def _burst(driver):
    model, request = _request()
    burst = driver.prepare_model(model).configure_execution_burst()
    return burst.execute(request, list(range(len(request.pools))))


def _allocate(driver):
    model, _ = _request()
    prepared = driver.prepare_model(model)
    return driver.allocate(BufferDesc((2, 3)), [prepared], [BufferRole(0, 0, 1.0)], [])


def _first_run(driver):
    model, request = _request()
    first = driver.first_run(model, request)
    return first.execute(first.prepare())


#: The calls a driver makes, each reaching the op whose reply a case spoils.
ACTIONS: dict[str, Callable] = {
    "capabilities": lambda d: d.capabilities(),
    "version_string": lambda d: d.version_string(),
    "type": lambda d: d.type(),
    "supported_extensions": lambda d: d.supported_extensions(),
    "number_of_cache_files_needed": lambda d: d.number_of_cache_files_needed(),
    "supported_operations": lambda d: d.supported_operations(add_model()),
    "prepare_model": lambda d: d.prepare_model(add_model()),
    "prepare_model_from_cache": lambda d: d.prepare_model_from_cache(None, [], [], b"\0" * 32),
    "execute": lambda d: execute(d.prepare_model(_request()[0]), _request()[1], "sync"),
    "execute_async": lambda d: execute(d.prepare_model(_request()[0]), _request()[1], "async"),
    "execute_fenced": _fenced,
    "fenced_info": _fenced,
    "burst_configure": lambda d: d.prepare_model(add_model()).configure_execution_burst(),
    "burst": _burst,
    "allocate": _allocate,
    "first_run": _first_run,
}


def _offers_first_run(body: dict) -> dict:
    """A hello that names ``first_run`` among its calls, so that the client makes it."""
    return {**HELLO, "pid": os.getpid(), "extra_calls": ["first_run"]}


def _first_run_replies(reply: dict) -> dict:
    return {"hello": _offers_first_run, "first_run": {"status": 0, **reply}}


_PREPARED = {"status": 0, "handle": 1}
_EXECUTED = DEFAULTS["execute"]

def _answer_another_call(body: dict) -> bytes:
    text = json.dumps({"status": 0, "value": "x"}).encode()
    return wire.HEADER.pack(wire.MAGIC, 1, 0, 999, len(text), 0) + text


#: (case id, action, the fake's replies, the burst ring's result): every reply here is
#: something no working service sends.
MALFORMED = [
    ("status-a-string", "version_string", {"version_string": {"status": "0", "value": "x"}}, None),
    ("status-missing", "version_string", {"version_string": {"value": "x"}}, None),
    ("status-unknown", "version_string", {"version_string": {"status": 42, "message": "?"}}, None),
    ("error-message-not-a-string", "version_string", {"version_string": {"status": 4, "message": 5}}, None),
    ("error-shapes-garbage", "execute", {"execute": {"status": 3, "message": "", "shapes": "x"}}, None),
    ("reply-to-another-call", "version_string", {"version_string": _answer_another_call}, None),
    ("reply-not-a-message", "version_string", {"version_string": b"GARBAGE!" * 8}, None),
    ("reply-not-json", "version_string",
     {"version_string": wire.HEADER.pack(wire.MAGIC, 1, 0, 2, 9, 0) + b"{not json"}, None),
    ("reply-json-too-deep", "version_string",
     {"version_string": wire.HEADER.pack(wire.MAGIC, 1, 0, 2, 20000, 0) + b"[" * 10000 + b"]" * 10000}, None),
    ("reply-with-binary-part", "version_string",
     {"version_string": wire.HEADER.pack(wire.MAGIC, 1, 0, 2, 2, 4) + b"{}" + b"blob"}, None),
    ("capabilities-empty", "capabilities", {"capabilities": {"status": 0, "value": {}}}, None),
    ("capabilities-short-perf", "capabilities",
     {"capabilities": {"status": 0, "value": {"relaxed_scalar": [1], "relaxed_tensor": [1, 1],
                                              "operands": [], "if": [1, 1], "while": [1, 1]}}}, None),
    ("version-string-int", "version_string", {"version_string": {"status": 0, "value": 5}}, None),
    ("type-string", "type", {"type": {"status": 0, "value": "GPU"}}, None),
    ("extensions-ints", "supported_extensions", {"supported_extensions": {"status": 0, "value": [1]}}, None),
    ("cache-files-one", "number_of_cache_files_needed",
     {"number_of_cache_files_needed": {"status": 0, "value": [1]}}, None),
    ("cache-files-string", "number_of_cache_files_needed",
     {"number_of_cache_files_needed": {"status": 0, "value": "ab"}}, None),
    ("supported-ints", "supported_operations", {"supported_operations": {"status": 0, "value": [1]}}, None),
    ("supported-missing", "supported_operations", {"supported_operations": {"status": 0}}, None),
    ("handle-string", "prepare_model", {"prepare_model": {"status": 0, "handle": "1"}}, None),
    ("handle-missing", "prepare_model_from_cache", {"prepare_model_from_cache": {"status": 0}}, None),
    ("execute-no-shapes", "execute", {"execute": {"status": 0, "timing": [0, 0]}}, None),
    ("execute-timing-short", "execute", {"execute": {"status": 0, "shapes": [], "timing": [1]}}, None),
    ("execute-shape-strings", "execute",
     {"execute": {"status": 0, "shapes": [[["a"], True]], "timing": [0, 0]}}, None),
    ("execute-async-garbage", "execute_async", {"execute": {"status": 0, "shapes": 7, "timing": None}}, None),
    ("fenced-fence-a-string", "execute_fenced",
     {"execute_fenced": {"status": 0, "callback": 3, "fence": "yes"}}, None),
    ("fenced-fence-without-descriptor", "execute_fenced",
     {"execute_fenced": {"status": 0, "callback": 3, "fence": True}}, None),
    ("fenced-no-callback", "execute_fenced", {"execute_fenced": {"status": 0, "fence": False}}, None),
    ("fenced-info-short", "fenced_info", {"fenced_info": {"status": 0, "info": [0, [1, 2]]}}, None),
    ("fenced-info-a-string", "fenced_info", {"fenced_info": {"status": 0, "info": "x"}}, None),
    ("fenced-info-unknown-status", "fenced_info",
     {"fenced_info": {"status": 0, "info": [99, [0, 0], [0, 0]]}}, None),
    ("fenced-info-message-int", "fenced_info",
     {"fenced_info": {"status": 0, "info": [0, [0, 0], [0, 0]], "message": 1}}, None),
    ("burst-configure-no-handle", "burst_configure", {"burst_configure": {"status": 0}}, None),
    ("burst-result-a-list", "burst", {}, b"[]"),
    ("burst-result-not-json", "burst", {}, b"{not json"),
    ("burst-result-too-deep", "burst", {}, b"[" * 20000 + b"]" * 20000),
    ("burst-result-no-shapes", "burst", {}, b'{"status":0,"timing":[0,0]}'),
    ("burst-result-bad-timing", "burst", {}, b'{"status":0,"shapes":[],"timing":"x"}'),
    ("burst-result-status-string", "burst", {}, b'{"status":"NONE"}'),
    ("burst-result-error-shapes", "burst", {}, b'{"status":3,"message":"","shapes":[[1]]}'),
    ("allocate-token-string", "allocate", {"allocate": {"status": 0, "handle": 4, "token": "t"}}, None),
    ("first-run-flags-ints", "first_run", _first_run_replies({"value": [1]}), None),
    ("first-run-claimed-not-prepared", "first_run", _first_run_replies({"value": [True]}), None),
    ("first-run-declined-yet-prepared", "first_run",
     _first_run_replies({"value": [False], "prepared": _PREPARED}), None),
    ("first-run-prepared-a-list", "first_run",
     _first_run_replies({"value": [True], "prepared": [0, 1]}), None),
    ("first-run-prepared-handle-string", "first_run",
     _first_run_replies({"value": [True], "prepared": {"status": 0, "handle": "1"},
                         "executed": _EXECUTED}), None),
    ("first-run-prepared-not-run", "first_run",
     _first_run_replies({"value": [True], "prepared": _PREPARED}), None),
    ("first-run-run-after-a-failed-preparation", "first_run", _first_run_replies(
        {"value": [True], "prepared": {"status": 1, "message": "", "shapes": []},
         "executed": _EXECUTED}), None),
    ("first-run-executed-no-timing", "first_run", _first_run_replies(
        {"value": [True], "prepared": _PREPARED, "executed": {"status": 0, "shapes": []}}), None),
    ("first-run-executed-status-unknown", "first_run", _first_run_replies(
        {"value": [True], "prepared": _PREPARED, "executed": {"status": 77}}), None),
]


@pytest.mark.parametrize("action, replies, burst_result",
                         [pytest.param(*case[1:], id=case[0]) for case in MALFORMED])
def test_a_malformed_reply_is_the_services_crash_and_it_is_killed(sock_dir, fakes, action, replies,
                                                                   burst_result):
    """(a) Whatever the service answers, the harness sees CRASH (a DriverFault, the service
    killed), never a KeyError, TypeError or ValueError of its own."""
    fake = _Fake(sock_dir / "sock", replies, burst_result=burst_result)
    fakes.append(fake)
    driver = _attach(fake.path)
    try:
        fault = _crash_of(lambda: ACTIONS[action](driver), driver)
        assert fault.outcome == "CRASH", fault
        assert classify_exception(fault).kind is Kind.CRASH
        assert "\n" not in fault.message
        assert not driver.alive() or driver.fault() is not None
        assert fake.ended_by() == signal.SIGKILL, "the broken service was not killed"
    finally:
        driver.close()


@pytest.mark.parametrize("offered", [True, False])
def test_first_run_declined_or_not_offered_is_no_fault(sock_dir, fakes, offered):
    """A well-formed decline in ``first_run`` is the flags alone; a service that does not name
    ``first_run`` in its hello gets the calls apart (so a foreign service need not know it)."""
    replies = _first_run_replies({"value": [False]}) if offered else {
        "supported_operations": {"status": 0, "value": [False]}}
    fake = _Fake(sock_dir / "sock", replies)
    fakes.append(fake)
    driver = _attach(fake.path)
    try:
        model, request = _request()
        reason, _ = claim(driver, model, request)
        assert reason == f"{driver.name} declines ADD"
        assert driver.alive() and fake.ended_by(0.2) is None
    finally:
        driver.close()


@pytest.mark.parametrize("reply", [
    pytest.param({"pid": "1"}, id="pid-a-string"),
    pytest.param({"client": None}, id="client-null"),
    pytest.param({"key": 5}, id="key-an-int"),
    pytest.param({"feature_level": 99}, id="unknown-feature-level"),
    pytest.param({"device_type": "GPU"}, id="device-type-a-string"),
    pytest.param({"driver": ["x"]}, id="driver-a-list"),
    pytest.param({"status": True}, id="status-true"),
    pytest.param({"extra_calls": "first_run"}, id="extra-calls-a-string"),
    pytest.param({"extra_calls": [1]}, id="extra-calls-ints"),
])
def test_a_malformed_hello_fails_the_load_in_one_line(sock_dir, fakes, reply):
    fake = _Fake(sock_dir / "sock", {"hello": lambda body: {**HELLO, "pid": os.getpid(), **reply}})
    fakes.append(fake)
    with pytest.raises(DriverSpecError) as info:
        _attach(fake.path)
    assert "malformed reply" in str(info.value) and "\n" not in str(info.value)
    assert fake.ended_by() == signal.SIGKILL


def test_a_foreign_pid_in_hello_is_never_signalled(sock_dir, fakes, bystander):
    """(b) A service that names another process's pid as its own, then leaves a call
    unanswered: the client never signals that process (it would have SIGKILLed it on the
    hang); the lie itself is a CRASH, and the service is killed through its pidfd."""
    fake = _Fake(sock_dir / "sock", {"version_string": SILENCE}, hello_pid=bystander.pid)
    fakes.append(fake)
    with pytest.raises((DriverSpecError, DriverFault)) as info:
        driver = _attach(fake.path, timeout=1)
        try:
            driver.version_string()  # the old client got here, then killed the bystander
        finally:
            driver.close()
    time.sleep(0.2)
    assert bystander.poll() is None, "the client killed a process the service named"
    assert str(bystander.pid) in str(info.value), info.value  # the lie, named
    assert fake.ended_by() == signal.SIGKILL


@pytest.mark.parametrize("action, replies, burst_result", [
    pytest.param("version_string", {"version_string": SILENCE}, None, id="call"),
    pytest.param("fenced_info", {"fenced_info": SILENCE}, None, id="fenced-info"),
    pytest.param("burst", {}, None, id="burst-result"),
])
def test_an_unanswered_call_is_a_hang_that_kills_only_the_service(sock_dir, fakes, bystander, action, replies,
                                                                   burst_result):
    """(c) HANG at the deadline; the service's process (the kernel's peer, pinned by a
    pidfd) is killed, nothing else."""
    fake = _Fake(sock_dir / "sock", replies, burst_result=burst_result)
    fakes.append(fake)
    driver = _attach(fake.path, timeout=1)
    try:
        started = time.monotonic()
        fault = _crash_of(lambda: ACTIONS[action](driver), driver)
        assert fault.outcome == "HANG", fault
        assert time.monotonic() - started < 10
        assert fake.ended_by() == signal.SIGKILL
        assert bystander.poll() is None
    finally:
        driver.close()


def test_a_reply_header_claiming_a_gigabyte_costs_the_client_nothing(sock_dir, fakes):
    """A reply announcing a huge binary part is refused from its header (replies have none),
    before anything is allocated for it: CRASH, and this process's memory does not grow."""
    header = wire.HEADER.pack(wire.MAGIC, 1, 0, 2, 2, 1 << 30) + b"{}"
    fake = _Fake(sock_dir / "sock", {"version_string": header})
    fakes.append(fake)
    driver = _attach(fake.path, timeout=2)
    try:
        before = _rss(os.getpid())
        fault = _crash_of(driver.version_string, driver)
        assert fault.outcome in ("CRASH", "HANG")
        assert _rss(os.getpid()) - before < 64 << 20
    finally:
        driver.close()


# -- (d) another local user ---------------------------------------------------------------

def _nobody_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, NOBODY)
    return path


def _refused(path: Path, words: str) -> str:
    with pytest.raises(DriverSpecError) as info:
        _attach(path)
    message = str(info.value)
    assert words in message and str(path) in message and "\n" not in message, message
    return message


@needs_root
def test_a_service_of_another_user_in_its_own_directory_is_refused(shared_tmp, fakes):
    """(d) The directory (and socket) are another user's: refused before connecting."""
    fake = _Fake(_nobody_dir(shared_tmp / "nobody") / "sock", uid=NOBODY, accept_timeout=1)
    fakes.append(fake)
    _refused(fake.path, f"uid {NOBODY}")
    assert fake.report(3) == {"connections": 0, "bytes": 0, "fds": 0}


@needs_root
def test_a_socket_in_a_directory_others_may_write_is_refused(tmp_path, fakes):
    """(d) The socket is this user's, but anyone could have put it there or replaced it."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    fake = _Fake(open_dir / "sock", accept_timeout=1)
    fakes.append(fake)
    _refused(fake.path, "writable by other users")
    assert fake.report(3)["connections"] == 0


@needs_root
def test_a_socket_another_user_owns_is_refused(shared_tmp, fakes):
    """(d) In this user's private directory, a socket another user made (moved there)."""
    fake = _Fake(_nobody_dir(shared_tmp / "nobody") / "sock", uid=NOBODY, accept_timeout=1)
    fakes.append(fake)
    mine = _private_dir(shared_tmp / "mine") / "sock"
    os.rename(fake.path, mine)
    _refused(mine, f"owned by uid {NOBODY}")
    assert fake.report(3)["connections"] == 0


@needs_root
def test_a_listener_of_another_user_is_refused_before_anything_is_sent(shared_tmp, fakes):
    """(d) Every path check passes (this user's socket, in this user's private directory),
    but the process listening on it is another user's: the kernel says so (SO_PEERCRED) and
    the client sends nothing, so no descriptor of a model, pool or cache file reaches it."""
    fake = _Fake(_nobody_dir(shared_tmp / "nobody") / "sock", uid=NOBODY, accept_timeout=2)
    fakes.append(fake)
    mine = _private_dir(shared_tmp / "mine") / "sock"
    os.rename(fake.path, mine)
    os.chown(mine, 0, 0)
    os.chmod(mine, 0o600)
    _refused(mine, f"runs as uid {NOBODY}")
    report = fake.report(4)
    assert report["bytes"] == 0 and report["fds"] == 0, f"the other user's process received {report}"


# -- the standalone service: its socket, its peers, its memory, its connections ------------

def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def _standalone(path: Path, *args: str, umask: int | None = None):
    """``python -m nncert.drivers.service.server --socket PATH``, ready once its socket
    answers a client."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "nncert.drivers.service.server", "--driver", "reference",
                             "--socket", str(path), *args], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                            preexec_fn=None if umask is None else (lambda: os.umask(umask)))
    try:
        for _ in range(400):
            if path.exists() or proc.poll() is not None:
                break
            time.sleep(0.025)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        driver = _attach(path, timeout=30)  # waits for the driver to load, checks it answers
        driver.version_string()
        driver.close()
        yield proc
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def _raw(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


def _closed_by_peer(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_the_standalone_socket_is_private_whatever_the_umask(sock_dir):
    with _standalone(sock_dir / "sock", umask=0):
        mode = stat.S_IMODE(os.stat(sock_dir / "sock").st_mode)
        assert mode & 0o077 == 0, f"socket mode {mode:04o} lets other users connect"


def test_the_standalone_service_refuses_a_directory_others_may_write(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    proc = subprocess.run([sys.executable, "-m", "nncert.drivers.service.server", "--driver", "reference",
                           "--socket", str(open_dir / "sock")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2 and "writable by other users" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (open_dir / "sock").exists()


@needs_root
def test_the_service_drops_connections_from_other_users(shared_tmp):
    """(d) Even where the file system would let another user connect (a socket made
    world-connectable), the service hangs up on it at accept (SO_PEERCRED): no reply."""
    sock_dir = _private_dir(shared_tmp / "service")
    path = sock_dir / "sock"
    with _standalone(path):
        os.chmod(sock_dir, 0o711)
        os.chmod(path, 0o666)
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            verdict = b"?"
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                sock = _raw(path)
                with contextlib.suppress(OSError):
                    wire.send_message(sock, 1, {"op": "hello", "protocol": 1})
                verdict = b"dropped" if _closed_by_peer(sock, 5) else b"served"
            finally:
                os.write(wfd, verdict)
                os._exit(0)
        os.close(wfd)
        verdict = _ready(rfd, "the other user's client")
        os.close(rfd)
        os.waitpid(pid, 0)
        assert verdict == b"dropped"
        os.chmod(path, 0o600)  # (this user's client would refuse the socket as it was)
        os.chmod(sock_dir, 0o700)
        driver = _attach(path)  # this user's clients are served as before
        assert driver.version_string()
        driver.close()


def test_a_stalled_gigabyte_header_costs_the_service_nothing(sock_dir):
    """(e) Two connections announce a message of 1 GiB and send 16 bytes of it: the service
    allocates only what arrived (its RSS does not grow) and goes on serving others."""
    path = sock_dir / "sock"
    with _standalone(path) as proc:
        before = _rss(proc.pid)
        stalled = []
        for call_id in (1, 2):
            sock = _raw(path)
            sock.sendall(wire.HEADER.pack(wire.MAGIC, 1, 0, call_id, 1024, 1 << 30) + b"{" * 16)
            stalled.append(sock)
        time.sleep(1.0)
        grown = _rss(proc.pid) - before
        assert grown < 64 << 20, f"the service grew by {grown >> 20} MiB for 32 bytes received"
        driver = _attach(path)
        assert driver.version_string()
        driver.close()
        for sock in stalled:
            sock.close()


def test_a_message_begun_and_never_finished_loses_its_connection(sock_dir):
    """(e) A stalled half-sent message has a deadline: the service hangs up after it."""
    path = sock_dir / "sock"
    with _standalone(path, "--message-timeout", "1"):
        sock = _raw(path)
        sock.sendall(wire.HEADER.pack(wire.MAGIC, 1, 0, 1, 1024, 0) + b"{")
        started = time.monotonic()
        assert _closed_by_peer(sock, 10), "the stalled connection was kept"
        assert 0.5 < time.monotonic() - started < 5
        sock.close()


def test_connections_beyond_the_cap_are_closed(sock_dir):
    """(f) The 65th connection at once is closed at accept; closing some makes room."""
    path = sock_dir / "sock"
    with _standalone(path):
        held = [_raw(path) for _ in range(64)]
        time.sleep(0.3)
        extra = _raw(path)
        assert _closed_by_peer(extra, 5), "a connection beyond the cap was served"
        extra.close()
        for sock in held[:8]:
            sock.close()
        time.sleep(0.3)
        driver = _attach(path)
        assert driver.version_string()
        driver.close()
        for sock in held[8:]:
            sock.close()


def test_a_spawned_service_is_the_kernels_peer(tmp_path):
    """The spawned child listens itself, so the first socket's peer is the child (the pid
    the client kills on a hang); the service's pid comes from the kernel."""
    driver = load_driver("service:reference")
    try:
        assert driver.conn.service_pid == driver.conn.process.pid
        sock = driver.conn.idle[0]
        assert wire.peer_credentials(sock)[:2] == (driver.conn.process.pid, os.geteuid())
    finally:
        driver.close()


def test_fences_wait_beyond_fd_setsize_and_without_a_deadline():
    """A driver that leaks descriptors pushes the harness's own past FD_SETSIZE (1024): a fence
    must still be waited on (poll, not select), and "no deadline" (years away) must not overflow
    the wait; the leak is the driver's to report (DRV-5), never the harness's error."""
    import resource

    from nncert.drivers.base import SyncFence, readable

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard descriptor limit ({hard}) is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers = []
    try:
        while not fillers or fillers[-1] < 1100:
            fillers.append(os.dup(0))
        fence = SyncFence()
        assert fence.fd > 1024
        assert not fence.wait(0.01)
        fence.signal()
        assert fence.wait(0) and readable([fence.fd], 1e9) == [fence.fd]
        fence.close()
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
