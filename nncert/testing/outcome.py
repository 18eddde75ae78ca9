"""Outcome classification (MLTS-2) and running a callable in a forked child with a deadline.

Anything that may crash or hang — a real runtime, a fuzz input, a stress test — runs through
``run_isolated``: the child may die or stop answering, the caller always gets an ``Outcome``
(SUCCESS, FAILURE, HANG or CRASH) and carries on. A driver that lives in a process of its
own reports its death through the call as a ``DriverFault``; ``classify_exception`` turns
that into CRASH or HANG too, whether the call ran in a child or in this process.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import json
import math
import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NoReturn

from nncert.hal.errors import describe_exception, driver_fault_of

#: How much of the child's output an Outcome keeps: enough for a traceback or a fatal error.
TAIL_CHARS = 2000

#: Exit status of a child whose harness code itself failed before it could report.
_HARNESS_BROKEN = 70  # EX_SOFTWARE

#: Whether this process is a child that armed faulthandler's watchdog (the traceback shortly
#: before the deadline). A fork of it (a run_isolated inside a run_isolated, a driver's probe
#: child in an isolated test) inherits the armed state but not the watchdog thread: arming or
#: cancelling it again there waits for that thread forever (CPython's faulthandler has no fork
#: handler), so such a child goes without.
_watchdog_armed = False


class Kind(StrEnum):
    """How a run ended (MLTS-2)."""

    SUCCESS = "SUCCESS"  # ran without error
    FAILURE = "FAILURE"  # ran, and raised: could not compile or run, or a check failed
    HANG = "HANG"  # stopped answering within its deadline and was killed
    CRASH = "CRASH"  # the process died (a signal, or an exit without an answer)


@dataclass
class Outcome:
    """The result of one isolated run, or of classifying one exception."""

    kind: Kind
    reason: str = ""
    value: Any = None
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str = ""
    duration: float = 0.0

    def __str__(self) -> str:
        head = str(self.kind)
        if self.signal is not None:
            head += f" ({signal_name(self.signal)})"
        return f"{head}: {self.reason}" if self.reason else head

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record (the value as its repr when JSON cannot hold it)."""
        try:
            value = json.loads(json.dumps(self.value))
        except (TypeError, ValueError):
            value = repr(self.value)
        return {"kind": str(self.kind), "reason": self.reason, "value": value,
                "exit_code": self.exit_code, "signal": self.signal,
                "signal_name": None if self.signal is None else signal_name(self.signal),
                "stderr_tail": self.stderr_tail, "duration": self.duration}


def signal_name(signum: int) -> str:
    """SIGABRT for 6; a plain number for a signal Python does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def how_it_ended(code: int) -> str:
    """A child process's end from its return code: "killed by SIGABRT", "exited with status 3"."""
    return f"killed by {signal_name(-code)}" if code < 0 else f"exited with status {code}"


def classify_exception(exc: BaseException) -> Outcome:
    """FAILURE naming the exception, unless a DriverFault is behind it: then the driver's own
    process died or hung during the call, and the outcome is the fault's CRASH or HANG."""
    fault = driver_fault_of(exc)
    if fault is not None:
        reason = fault.message.removeprefix(f"{fault.outcome}: ").strip().partition("\n")[0]
        return Outcome(Kind(fault.outcome), reason, stderr_tail=fault.detail[-TAIL_CHARS:])
    return Outcome(Kind.FAILURE, describe_exception(exc))


def run_isolated(fn: Callable[..., Any], /, *args: Any, timeout: float, **kwargs: Any) -> Outcome:
    """Run ``fn(*args, **kwargs)`` in a forked child and classify how it ended.

    The child is a fork: it shares this process's memory as it was at the call, so closures
    and unpicklable arguments work, but only the calling thread exists in it (locks other
    threads held stay held). Its stdin is /dev/null; its stdout and stderr go to a temporary
    file whose tail the Outcome keeps, followed by the start of faulthandler's traceback of a
    fatal signal or, shortly before the deadline, of where it was stuck. It leads a process
    group of its own, so whatever it started dies with it. It always leaves by ``os._exit``:
    no atexit handler or pytest teardown of this process runs twice. The return value comes
    back pickled; at the deadline the child is killed with SIGKILL and the run is a HANG.
    """
    if not 0 < timeout < math.inf:
        raise ValueError(f"run_isolated needs a positive, finite timeout, not {timeout!r}")
    start = time.monotonic()
    for stream in (sys.stdout, sys.stderr):  # or the child inherits, and may write, their buffers
        if stream is not None:
            stream.flush()
    rfd, wfd = os.pipe()
    with tempfile.TemporaryFile(buffering=0) as output, tempfile.TemporaryFile(buffering=0) as dump:
        try:
            pid = os.fork()
            if pid == 0:
                _child(fn, args, kwargs, rfd, wfd, output.fileno(), dump.fileno(), timeout)
            with contextlib.suppress(OSError):  # the child does it too; whoever is first wins the race
                os.setpgid(pid, pid)
            os.close(wfd)
            wfd = -1
            data, exited, status = _collect(pid, rfd, start + timeout)
        finally:
            os.close(rfd)
            if wfd >= 0:
                os.close(wfd)
        outcome = _classify(data, status) if exited else Outcome(
            Kind.HANG, f"no answer within {float(timeout)} s")
        outcome.stderr_tail = _report_text(output.fileno(), dump.fileno(), outcome.stderr_tail)
    outcome.duration = time.monotonic() - start
    return outcome


def _child(fn: Callable[..., Any], args: tuple, kwargs: dict, rfd: int, wfd: int, output_fd: int,
           dump_fd: int, timeout: float) -> NoReturn:
    """The child's whole life: redirect, run, answer, ``os._exit`` (never return)."""
    global _watchdog_armed
    # The objects inherited from the parent stay out of the child's collections: a collection
    # writes to every object it visits, which would copy the whole heap page by page.
    gc.freeze()
    nested = _watchdog_armed
    status = _HARNESS_BROKEN
    try:
        os.setpgid(0, 0)
        os.close(rfd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        # Fresh objects: the inherited ones may be replaced (pytest's capture) or hold a lock
        # another thread of the parent had taken.
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        # The default action for the fatal signals, not the parent's handlers: a library the
        # parent loaded may have installed its own (LLVM's crash handler, in IREE's compiler,
        # turned an abort into a SIGSEGV), and the child must die of the signal it got.
        faulthandler.disable()  # (an enabled one would not install itself again below)
        for fatal in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(fatal, signal.SIG_DFL)
        _fresh_signal_stack()
        # A file of their own, not fd 2: code under test may point fd 2 elsewhere (pytest's
        # capture does), and the innermost frames, which come first, must not be cut off.
        faulthandler.enable(file=dump_fd, all_threads=True)
        if not nested:
            faulthandler.dump_traceback_later(max(timeout * 0.9, timeout - 1.0), file=dump_fd)
            _watchdog_armed = True
        try:
            answer: tuple[str, Any] = ("value", fn(*args, **kwargs))
        except SystemExit:
            raise
        except BaseException as e:
            traceback.print_exc()
            answer = ("raised", classify_exception(e))
        if not nested:
            faulthandler.cancel_dump_traceback_later()
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            unpicklable = Outcome(Kind.FAILURE, f"return value cannot be pickled: {describe_exception(e)}")
            data = pickle.dumps(("raised", unpicklable))
        view = memoryview(data)
        while view:
            view = view[os.write(wfd, view):]
        status = 0
    except SystemExit as e:
        status = _exit_status(e)
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


class _SignalStack(ctypes.Structure):
    """``stack_t`` of sigaltstack(2)."""
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


#: The child's alternate signal stack (kept alive for the child's life).
_child_signal_stack: ctypes.Array | None = None


def _fresh_signal_stack(size: int = 1 << 16) -> None:
    """Give the child an alternate signal stack of its own. The inherited one may be memory a
    library freed without uninstalling it (OpenVINO's CPU plugin leaves the main thread's
    pointing at a released buffer): a fatal signal delivered on it becomes a SIGSEGV the
    kernel raises, and the child would die of that instead of the signal it got."""
    global _child_signal_stack
    with contextlib.suppress(OSError, AttributeError, TypeError):
        buffer = ctypes.create_string_buffer(size)
        stack = _SignalStack(ctypes.cast(buffer, ctypes.c_void_p), 0, size)
        if ctypes.CDLL(None, use_errno=True).sigaltstack(ctypes.byref(stack), None) == 0:
            _child_signal_stack = buffer


def _exit_status(e: SystemExit) -> int:
    """The status the interpreter would exit with for ``sys.exit(e.code)``."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    with contextlib.suppress(BaseException):
        print(e.code, file=sys.stderr)
    return 1


def _collect(pid: int, rfd: int, deadline: float) -> tuple[bytes, bool, int | None]:
    """Read the child's answer until it exits; kill it at the deadline. Returns the bytes read,
    whether it exited in time, and its wait status (None if someone else reaped it). The
    child is always reaped and its process group killed."""
    chunks: list[bytes] = []
    pidfd = _pidfd(pid)
    poller = select.poll()  # not select(): descriptors above 1023 are common in driver tests
    poller.register(rfd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    exited, reading = False, True
    try:
        while not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # Without a pidfd the child's exit is polled; a grandchild may hold the pipe open.
            wait = remaining if pidfd is not None else min(remaining, 0.005)
            ready = {fd for fd, _ in poller.poll(math.ceil(wait * 1000))}
            if rfd in ready:
                chunk = os.read(rfd, 1 << 16)
                if chunk:
                    chunks.append(chunk)
                else:
                    poller.unregister(rfd)
                    reading = False
            if pidfd is None or pidfd in ready:
                exited = _has_exited(pid)
        if exited and reading:
            os.set_blocking(rfd, False)
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(rfd, 1 << 16):
                    chunks.append(chunk)
    finally:
        # Killed while the child is still unreaped, so its group id cannot have been reused.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if not exited:
                os.kill(pid, signal.SIGKILL)
            os.killpg(pid, signal.SIGKILL)
        status = _reap(pid)
        if pidfd is not None:
            os.close(pidfd)
    return b"".join(chunks), exited, status


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd_open before Linux 5.3, or blocked by seccomp
        return None


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else
        return True


def _reap(pid: int) -> int | None:
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _classify(data: bytes, status: int | None) -> Outcome:
    """The outcome of a child that exited: its answer, else how it died."""
    if status is not None and os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        return Outcome(Kind.CRASH, f"killed by {signal_name(signum)}", signal=signum)
    code = None if status is None else os.waitstatus_to_exitcode(status)
    if not data or code not in (0, None):  # it sends its answer whole, and only then exits with 0
        if code is None:
            return Outcome(Kind.CRASH, "exited without an answer (its status was reaped elsewhere)")
        return Outcome(Kind.CRASH, f"exited with code {code}" + (" without an answer" if code == 0 else ""),
                       exit_code=code)
    try:
        tag, payload = pickle.loads(data)
    except Exception as e:
        return Outcome(Kind.FAILURE, f"the answer cannot be unpickled: {describe_exception(e)}",
                       exit_code=code)
    outcome = Outcome(Kind.SUCCESS, value=payload) if tag == "value" else payload
    outcome.exit_code = code
    return outcome


def _report_text(output_fd: int, dump_fd: int, detail: str) -> str:
    """The last TAIL_CHARS of the child's output, the first TAIL_CHARS of faulthandler's
    traceback (most recent call first), then ``detail`` (a DriverFault's)."""
    size = os.fstat(output_fd).st_size
    output = os.pread(output_fd, 4 * TAIL_CHARS, max(0, size - 4 * TAIL_CHARS)).decode(errors="replace")
    dump = os.pread(dump_fd, 4 * TAIL_CHARS, 0).decode(errors="replace")
    parts = [output[-TAIL_CHARS:], dump[:TAIL_CHARS], detail[-TAIL_CHARS:]]
    return "\n".join(part.rstrip("\n") for part in parts if part.strip())
