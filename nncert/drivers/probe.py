"""The support probe of compiled drivers (DRV-2): an operation is claimed only once the runtime
has compiled it alone and run it once, in a child process with a deadline.

``probe_operation(driver, single, omittable)`` says why a ``CompiledDriver`` cannot take
``single`` (one operation, as ``isolate_operation`` gives it, shapes known), or None:

- it compiles the operation and runs it on small sample values (``sample_feeds``), each way
  a request may omit its optional inputs included (``omission_patterns``): execution compiles
  a variant of the model for each, so each must compile and run;
- in the driver's probe child (``ProbeChild``): a runtime that dies or hangs compiling or
  running the operation (LiteRT's quantised comparisons abort at invoke when an input scale is
  exactly 1) kills only the child, and the operation is declined with what happened;
- a compilation that raises declines with the runtime's message; a run that raises declines
  unless the reference rejects the same sample values; wrong results are not a reason (the
  suites report them).

The child is a fresh interpreter that rebuilds the driver from its constructor's arguments
(``CompiledDriver.recipe``), started through nncert.testing.outcome.run_isolated (a fork that
execs at once), so no thread, lock or descriptor of this process is inherited: IREE, TVM and
OpenVINO hang in a fork of a process that has run them. A driver whose runtime is safe to fork
(``probe_fork``), or whose arguments cannot be handed over, gets a fork of this process
instead. One child serves every probe of its driver, one request at a time: the operations of
a model that are not in the driver's cache are probed in one request (``probe_operations``),
so a model costs a round trip, not a process start nor a round trip an operation.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import pickle
import signal
import stat
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nncert.drivers.base import readable
from nncert.hal.errors import ValidationError
from nncert.hal.model import Model, dtype_of
from nncert.hal.transform import CONSTANT, omit_inputs
from nncert.hal.types import OperandLifeTime, OperationType
from nncert.hal.types import OperandType as T
from nncert.hal.validation import input_may_be_omitted, validate_model
from nncert.testing.outcome import Kind, Outcome, run_isolated

if TYPE_CHECKING:
    from nncert.drivers.compiled import CompiledDriver

#: Inputs of one operation that a request may omit, at most, for the probe to try every
#: combination (each is checked by the catalogue's rules: 2^12 checks take ~2 s).
OMISSION_INPUTS = 12
#: Valid ways of omitting an operation's inputs that the probe compiles and runs, at most.
OMISSION_PATTERNS = 16
#: Seconds a fresh child may take to start (import the runtime, rebuild the driver).
START_S = 120.0
#: Seconds the child may take to compile models together ahead (``build_ahead``): this, and
#: as much again a model.
AHEAD_S, AHEAD_S_PER_MODEL = 60.0, 10.0
#: Bytes of one operand, and of all the operands of the isolated operation together, that the
#: probe allocates at most (sample values, the reference's and the runtime's results): beyond,
#: the operation is declined before anything is allocated (a fuzzed GROUPED_CONV_2D of batch
#: 2^31 - 1 asked numpy for 320 GiB of sample values, and ``supported_operations`` raised).
SAMPLE_OPERAND_BYTES = 64 << 20
SAMPLE_TOTAL_BYTES = 256 << 20


def probe_operation(driver: CompiledDriver, single: Model, omittable: Sequence[int]) -> str | None:
    """Why ``driver`` cannot take ``single`` (see the module's docstring), or None."""
    return probe_operations(driver, [(single, omittable)])[0]


def probe_operations(driver: CompiledDriver,
                     items: Sequence[tuple[Model, Sequence[int]]]) -> list[str | None]:
    """``probe_operation`` of each (single, omittable) of ``items``, those that need the child
    sent to it as one request (a model's operations in one round trip, not one each); each is
    judged as if probed alone, in the same order."""
    verdicts: list[str | None] = [None] * len(items)
    probes: list[tuple[int, Model, list[tuple[int, ...]], list[Model], list]] = []
    for k, (single, omittable) in enumerate(items):
        too_large = oversized(single)
        if too_large:
            verdicts[k] = too_large
            continue
        patterns = omission_patterns(single, omittable)
        if isinstance(patterns, str):
            verdicts[k] = patterns
            continue
        models = [omit_inputs(single, p) for p in patterns]
        feeds = [None if _has_while(m) else sample_feeds(m) for m in models]
        probes.append((k, single, patterns, models, feeds))
    answers = _ask_many(driver, [(models, feeds) for _, _, _, models, feeds in probes])
    for (k, single, patterns, models, feeds), (outcome, at) in zip(probes, answers, strict=True):
        verdicts[k] = _verdict(driver, single, patterns, models, feeds, outcome, at)
    return verdicts


def _verdict(driver: CompiledDriver, single: Model, patterns: list[tuple[int, ...]], models: list[Model],
             feeds: list, outcome: Outcome, at: tuple[int, str]) -> str | None:
    """The probe's verdict on ``single`` from its child's answer (or how the child ended)."""
    who = driver.runtime or driver.name
    n, stage = at
    if outcome.kind in (Kind.CRASH, Kind.HANG):
        verb = "runs" if stage == "run" else "compiles"
        return (f"{who}: {outcome.reason} when it {verb} {describe(single)}{_omitting(patterns[n])}: "
                f"found by the support probe")[:500]
    if outcome.kind is not Kind.SUCCESS:
        return f"the support probe failed: {outcome.reason}"[:500]
    results = outcome.value
    if not (isinstance(results, list) and len(results) <= len(models) and all(
            r is None or (isinstance(r, tuple) and len(r) == 2 and r[0] in ("compile", "run")
                          and isinstance(r[1], str)) for r in results)):
        return f"the support probe failed: its child answered {str(results)[:100]!r}"
    for n, result in enumerate(results):
        if result is None:
            continue
        stage, reason = result
        if stage == "compile":
            return (reason + (f" ({_omitting(patterns[n]).strip()})" if patterns[n] else ""))[:500]
        if _reference_runs(models[n], feeds[n]):
            return (f"{who} fails to run {describe(single)}{_omitting(patterns[n])} on data the "
                    f"reference runs: {reason}")[:500]
    return None


def _ask_many(driver: CompiledDriver,
              probes: list[tuple[list[Model], list]]) -> list[tuple[Outcome, tuple[int, str]]]:
    """Each probe (models, feeds) answered by the driver's probe child, started when it has
    none (or after one died), in one request: per probe the Outcome (SUCCESS: the child's
    results) and the model and stage it got to. Each probe has its own deadline
    (``probe_timeout`` a model) from when the child starts it. When the child dies, the probes
    it finished keep their answers; a child that dies after serving earlier probes may have
    been broken by one of them: the probe it died on is tried again first in a fresh child,
    whose verdict stands, and the rest follow it there."""
    answers: list[tuple[Outcome, tuple[int, str]] | None] = [None] * len(probes)
    order = list(range(len(probes)))
    while order:
        child = _child(driver)
        fresh = child.served == 0
        batch = [probes[i] for i in order]
        outcome, at, done = child.ask(batch, [driver.probe_timeout * len(models) for models, _ in batch])
        if outcome.kind is Kind.SUCCESS:
            values = outcome.value
            if not (isinstance(values, list) and len(values) == len(order)):
                values = [values] * len(order)  # judged (and refused) probe by probe
            for i, value in zip(order, values, strict=True):
                answers[i] = (Outcome(Kind.SUCCESS, value=value), (0, "compile"))
            break
        child.close()
        driver._probe_child = None
        if child.start_error and not child.forked:
            driver._probe_exec_failed = True  # the driver cannot be rebuilt: a fork it is
            continue
        for i, value in zip(order, done, strict=False):
            answers[i] = (Outcome(Kind.SUCCESS, value=value), (0, "compile"))
        order = order[len(done):]
        if fresh and not done:
            answers[order[0]] = (outcome, at)
            order = order[1:]
    return answers  # type: ignore[return-value]  (every probe answered)


def _child(driver: CompiledDriver) -> ProbeChild:
    """The driver's probe child, started when it has none (or after one died)."""
    child = driver._probe_child
    if child is None or not child.usable():
        if child is not None:
            child.close()
        child = driver._probe_child = ProbeChild(driver)
    return child


def build_ahead(driver: CompiledDriver, entries: list[tuple[str, bytes]]) -> list[str] | None:
    """Have the driver's probe child compile the translated models of ``entries`` (cache key,
    content) together into the compile cache (``compile_together``): the keys it did not
    compile, or None when it died or ran past ``AHEAD_S`` plus ``AHEAD_S_PER_MODEL`` a model
    (it is then replaced, as after a probe; nothing is judged from it: what it did not compile
    is compiled alone, where a probe or a preparation needs it)."""
    child = _child(driver)
    answer = child.request(("build", entries), AHEAD_S + AHEAD_S_PER_MODEL * len(entries))
    keys = {key for key, _ in entries}
    if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "built"
            and isinstance(answer[1], list) and set(answer[1]) <= keys):
        child.close()
        driver._probe_child = None
        return None
    return answer[1]


def compile_together(driver: CompiledDriver, entries: list[tuple[str, bytes]]) -> list[str]:
    """In the probe child: ``driver.build_together`` of ``entries`` (cache key, translated
    content), each artefact stored under its key. The models the runtime says it refuses are
    left out and the rest tried again; where it does not say which, each half is tried. The
    keys of those refused are returned: the probe or the preparation compiles them alone, and
    says why."""
    from nncert.drivers.compiled import RefusedTogether

    if not entries:
        return []
    out: set[int] = set()
    try:
        artefacts = driver.build_together([content for _, content in entries])
    except RefusedTogether as e:
        out = {n for n in e.refused if 0 <= n < len(entries)}
    except Exception:
        pass
    else:
        assert driver.compile_cache is not None
        for (key, _), artefact in zip(entries, artefacts, strict=True):
            driver.compile_cache.put(key, artefact)
        return []
    if out:
        return [entries[n][0] for n in sorted(out)] + compile_together(
            driver, [entry for n, entry in enumerate(entries) if n not in out])
    if len(entries) == 1:
        return [entries[0][0]]
    half = len(entries) // 2
    return compile_together(driver, entries[:half]) + compile_together(driver, entries[half:])


# -- what is probed --

def omittable_inputs(wide: Model, index: int) -> tuple[int, ...]:
    """Positions in ``isolate_operation(wide, index)``'s input list of the model inputs that
    feed operation ``index`` and that a request may give no value (``input_may_be_omitted``).
    None for IF / WHILE: an omitted input they would pass to a subgraph fails the execution
    (``CompiledPreparedModel``), as the reference mostly does."""
    sg = wide.main
    op = sg.operations[index]
    if op.type in (OperationType.IF, OperationType.WHILE):
        return ()
    position = {idx: p for p, idx in enumerate(sg.input_indexes)}
    skip = (*CONSTANT, OperandLifeTime.NO_VALUE, OperandLifeTime.SUBGRAPH)
    fed = [idx for idx in dict.fromkeys(op.inputs)  # isolate_operation's model inputs, in order
           if sg.operands[idx].lifetime not in skip]
    return tuple(j for j, idx in enumerate(fed)
                 if idx in position and input_may_be_omitted(wide, position[idx]))


def omission_patterns(single: Model, omittable: Sequence[int]) -> list[tuple[int, ...]] | str:
    """The ways a request may omit inputs ``omittable`` of ``single`` that the catalogue's rules
    accept (the reference runs them), first the one omitting nothing; or why there are too many
    to probe each."""
    if len(omittable) > OMISSION_INPUTS:
        return (f"{len(omittable)} of its inputs are model inputs that a request may omit: more "
                f"combinations than the support probe tries (at most {OMISSION_INPUTS} such inputs; "
                f"as constants they would be fixed)")
    patterns: list[tuple[int, ...]] = [()]
    for r in range(1, len(omittable) + 1):
        for subset in itertools.combinations(omittable, r):
            try:
                validate_model(omit_inputs(single, subset))
            except ValidationError:
                continue
            patterns.append(subset)
    if len(patterns) - 1 > OMISSION_PATTERNS:
        return (f"a request may omit its optional inputs in {len(patterns) - 1} valid ways: more "
                f"than the {OMISSION_PATTERNS} the support probe compiles and runs")
    return patterns


def _has_while(model: Model) -> bool:
    """A WHILE anywhere: on sample data its loop may never end, so the probe does not run it."""
    return any(op.type is OperationType.WHILE
               for sg in (model.main, *model.referenced) for op in sg.operations)


def oversized(single: Model) -> str | None:
    """Why the probe cannot run ``single`` on sample data: an operand (input, output or other,
    in any subgraph) of more than SAMPLE_OPERAND_BYTES, or all of them together more than
    SAMPLE_TOTAL_BYTES; None when they fit. Computed from the shapes alone (Python integers:
    a fuzzed dimension of 2^63 neither overflows nor allocates)."""
    total = 0
    for sg in (single.main, *single.referenced):
        for k, o in enumerate(sg.operands):
            if not o.type.is_tensor or o.lifetime is OperandLifeTime.NO_VALUE:
                continue
            size = np.dtype(dtype_of(o.type)).itemsize
            for d in o.dimensions:
                size *= max(int(d), 0)
            total += size
            if size > SAMPLE_OPERAND_BYTES:
                return (f"operand {k} ({o.type.name}{list(o.dimensions)}) holds {size} bytes, more than "
                        f"the {SAMPLE_OPERAND_BYTES >> 20} MiB per operand of sample data the support "
                        f"probe runs an operation on: {describe(single)}")[:500]
    if total > SAMPLE_TOTAL_BYTES:
        return (f"its operands hold {total} bytes, more than the {SAMPLE_TOTAL_BYTES >> 20} MiB of sample "
                f"data the support probe runs an operation on: {describe(single)}")[:500]
    return None


def sample_feeds(single: Model) -> list[np.ndarray]:
    """Small deterministic values for ``single``'s inputs (their types, float16 widened): real
    values 0.25, 0.5, 0.75 cycling (positive, non-zero, within (-1, 1), whatever domain the
    operation's argument asks), quantised as such; integer tensors 0 (a valid index, axis or
    offset), or 1 where the argument must be positive or non-zero (a divisor); booleans
    true, false, false."""
    from nncert.ops import get
    from nncert.ops.base import match

    sg = single.main
    domains: dict[int, str | None] = {}
    for op in sg.operations:
        record = get(op.type)
        if record is None:
            continue
        try:
            in_types = [None if sg.operands[i].lifetime is OperandLifeTime.NO_VALUE else sg.operands[i].type
                        for i in op.inputs]
            m = match(record, in_types, [sg.operands[i].type for i in op.outputs])
        except Exception:
            continue
        for a in m.signature.inputs:
            for p in m.positions.get(a.name, ()):
                domains[op.inputs[p]] = a.domain
    feeds = []
    for idx in sg.input_indexes:
        o = sg.operands[idx]
        dtype = dtype_of(o.type)
        dims = tuple(o.dimensions) if o.type.is_tensor else ()
        step = np.arange(3, dtype=np.int64) + 1  # one period, repeated in the operand's own dtype
        if o.type.is_quant:
            info = np.iinfo(dtype)
            values = np.clip(o.zero_point + step, info.min, info.max)
        elif dtype.kind == "f":
            values = step * 0.25
        elif dtype.kind == "b":
            values = step == 1
        else:
            values = np.full(step.shape, 1 if domains.get(idx) in ("positive", "nonzero") else 0)
        count = 1
        for d in dims:
            count *= max(int(d), 0)
        feeds.append(np.resize(np.asarray(values).astype(dtype), count).reshape(dims))
    return feeds


def _reference_runs(model: Model, feeds: list[np.ndarray]) -> bool:
    """Whether the reference interpreter runs ``model`` on ``feeds``: a runtime's failure on
    data the reference rejects too (an index out of range) says nothing of the operation."""
    from nncert.ops.interpreter import run_model

    try:
        run_model(model, feeds)
    except Exception:
        return False
    return True


def describe(single: Model) -> str:
    """An isolated operation in words: its type and its inputs' types, shapes and quantisation."""
    sg = single.main
    op = sg.operations[0]
    words = []
    for i in op.inputs:
        o = sg.operands[i]
        if o.lifetime is OperandLifeTime.NO_VALUE or o.type is T.SUBGRAPH:
            continue
        word = f"{o.type.name}{list(o.dimensions)}" if o.type.is_tensor else o.type.name
        if o.type.is_quant and not o.channel_quant:
            word += f" (scale {o.scale:g}, zero point {o.zero_point})"
        words.append(word)
    return f"{op.type.name} on {', '.join(words)}"


def _omitting(pattern: Sequence[int]) -> str:
    return f" with inputs {', '.join(map(str, pattern))} omitted" if pattern else ""


# -- the child --

class ProbeChild:
    """A driver's probe child: started through ``run_isolated`` from a daemon thread that waits
    for it (so run_isolated reaps it and says how it died: a CRASH and its signal), serving
    requests (a list of probes, each (models, feeds): ``compile_and_run``) until it dies or is
    closed. Requests and answers are length-prefixed pickles on two pipes. Before each step the
    child writes which probe, model and stage it is at, and after each probe its results, into
    a shared memory file (``Progress``) that this side reads only to place a death or to time
    each probe: no message, and so no wake-up of this process, per step. Each probe has a
    deadline from when the child starts it, past which the child's process group is killed (a
    HANG). A fork of the owner (a test run in a child of its own) starts a child of its own
    rather than use the owner's."""

    #: run_isolated needs a finite deadline (poll's, in ms, fits 31 bits): the child lives
    #: until it is closed or dies, or for a week.
    LIFETIME_S = 7 * 86400.0
    #: A forked child is replaced after this many probes or seconds: it holds the pages of
    #: this process as they were at the fork, which this process's writes make copies of.
    FORK_REQUESTS, FORK_AGE_S = 256, 120.0
    #: How often (seconds) a waiting request looks at which probe the child has got to.
    TICK_S = 1.0

    def __init__(self, driver: CompiledDriver) -> None:
        self.owner = os.getpid()
        self.born = time.monotonic()
        self.served = 0
        self.outcome: Outcome | None = None
        recipe = _recipe_bytes(driver)
        self.forked = recipe is None
        request_r, self.request_w = os.pipe()
        self.answer_r, answer_w = os.pipe()
        self.progress = Progress(os.memfd_create("nncert-probe-progress", os.MFD_CLOEXEC))
        ends = (request_r, answer_w, self.progress.fd, self.request_w, self.answer_r)
        if self.forked:
            fn, args = _serve_in_fork, (weakref.ref(driver), *ends)
        else:
            fn, args = _exec_server, ends

        def host() -> None:
            try:
                self.outcome = run_isolated(fn, *args, timeout=self.LIFETIME_S)
            except Exception as e:  # no child: the reads below see the thread end
                self.outcome = Outcome(Kind.FAILURE,
                                       f"the probe child did not start: {type(e).__name__}: {e}")

        self.thread = threading.Thread(target=host, name=f"nncert-probe-{driver.name}", daemon=True)
        self.thread.start()
        self.pid: int | None = None  # once it serves; ``child`` as soon as it is forked
        self.child: int | None = None
        self.start_error: str | None = None
        try:
            deadline = time.monotonic() + START_S
            self.child = int(self._message(deadline)[1])
            if recipe is not None:
                _send(self.request_w, recipe)
            hello = self._message(deadline)
            if hello[0] == "ready":
                self.pid = self.child
            elif hello[0] == "error":
                self.start_error = str(hello[1])
        except Exception:  # no child, or it said nothing we know: ask() reports how it ended
            self.kill()
        os.close(request_r)
        os.close(answer_w)
        self._finalizer = weakref.finalize(driver, self.close)

    def usable(self) -> bool:
        if self.owner != os.getpid() or self.pid is None or self.outcome is not None:
            return False
        young = time.monotonic() - self.born < self.FORK_AGE_S
        return not self.forked or (self.served < self.FORK_REQUESTS and young)

    def ask(self, probes: list, budgets: list[float]) -> tuple[Outcome, tuple[int, str], list]:
        """Send ``probes`` (each (models, feeds)); their answers (SUCCESS, one value a probe), or
        how the child ended, with the model and stage it had got to in the first probe it did
        not finish, and the results of those it finished. Probe ``j`` may take ``budgets[j]``
        seconds from when the child starts it."""
        self.progress.clear()
        budget = budgets[0] if budgets else 1.0
        self._deadline = time.monotonic() + budget
        self._started = 0
        self._budgets = budgets
        try:
            if self.pid is None:
                raise EOFError
            _send(self.request_w, pickle.dumps(probes, pickle.HIGHEST_PROTOCOL))
            message = self._message()
            if not (isinstance(message, tuple) and len(message) == 2 and message[0] == "answer"):
                raise EOFError
        except TimeoutError:
            self.kill()
            self._wait()
            return self._ended(Outcome(Kind.HANG, f"no answer within {self._budgets[self._started]:g} s"),
                               len(probes))
        except Exception:  # its end, or what no child of ours writes: it is done for
            self.kill()
            self._wait()
            if self.start_error:
                outcome = Outcome(Kind.FAILURE, f"the probe child did not start: {self.start_error}")
            else:
                outcome = self.outcome or Outcome(Kind.CRASH, "the probe child ended without an answer")
            return self._ended(outcome, len(probes))
        self.served += len(probes)
        return Outcome(Kind.SUCCESS, value=message[1]), (0, "compile"), []

    def request(self, message: object, budget: float) -> object:
        """Another request than probes (``_serve``): the child's answer within ``budget``
        seconds, or None (it died, or is killed at the deadline: a HANG)."""
        try:
            if self.pid is None:
                raise EOFError
            _send(self.request_w, pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
            return self._message(time.monotonic() + budget)
        except Exception:  # TimeoutError too: it is done for
            self.kill()
            self._wait()
            return None

    def _ended(self, outcome: Outcome, count: int) -> tuple[Outcome, tuple[int, str], list]:
        """How the child ended, where it was, and the results of the probes it finished
        (read from ``progress`` once it is dead: nothing writes there any more)."""
        done, (j, n, stage) = self.progress.read(count)
        return outcome, ((n, stage) if j == len(done) else (0, "compile")), done

    def _tick(self) -> None:
        """Give the probe the child has started since the last look its own deadline."""
        j = self.progress.current()
        if self._started < j < len(self._budgets):
            self._started = j
            self._deadline = time.monotonic() + self._budgets[j]

    def _message(self, deadline: float | None = None) -> Any:
        """The child's next message, None at the end of its pipe; TimeoutError at the deadline
        (``deadline``, else the current probe's)."""
        head = self._read(8, deadline)
        if len(head) < 8:
            return None
        body = self._read(struct.unpack("=q", head)[0], deadline)
        return pickle.loads(body) if body else None

    def _read(self, n: int, deadline: float | None) -> bytes:
        """``n`` bytes of the answer pipe; fewer at its end; TimeoutError at the deadline."""
        chunks, left = [], n
        while left:
            limit = self._deadline if deadline is None else deadline
            if not readable([self.answer_r], min(self.TICK_S, max(0.0, limit - time.monotonic()))):
                if deadline is None:
                    self._tick()
                    limit = self._deadline
                if time.monotonic() >= limit:
                    raise TimeoutError
                if not self.thread.is_alive():  # no child at all (it never started)
                    break
                continue
            chunk = os.read(self.answer_r, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        """Kill the child's process group (run_isolated made it its leader), while it is
        unreaped (the host thread is waiting for it), so the id cannot have been reused."""
        if self.owner == os.getpid() and self.child is not None and self.thread.is_alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child, signal.SIGKILL)

    def _wait(self) -> None:
        """Until run_isolated has reaped the child (it exits, or is killed at the latest now)."""
        self.thread.join(30.0)
        if self.thread.is_alive():
            self.kill()
            self.thread.join(30.0)

    def close(self) -> None:
        """End the child (its requests end: it exits) and free this end's resources."""
        if self.owner != os.getpid():
            return  # a fork's copy: the owner's child is the owner's to end
        for fd in (self.request_w, self.answer_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.request_w = self.answer_r = -1
        self.progress.close()
        self._wait()
        self._finalizer.detach()


def _recipe_bytes(driver: CompiledDriver) -> bytes | None:
    """How a fresh interpreter rebuilds ``driver`` (its class and constructor arguments,
    pickled), or None where the child must be a fork: the driver asks for one
    (``probe_fork``), or its arguments cannot be handed over."""
    if driver.probe_fork or driver.recipe is None or getattr(driver, "_probe_exec_failed", False):
        return None
    try:
        return pickle.dumps(driver.recipe, pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


def _send(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack("=q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int) -> bytes | None:
    """One length-prefixed message of ``fd`` (blocking); None at its end."""
    head = _read_exactly(fd, 8)
    return _read_exactly(fd, struct.unpack("=q", head)[0]) if head else None


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return b""
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _exec_server(request_r: int, answer_w: int, progress: int, request_w: int, answer_r: int) -> None:
    """In run_isolated's fork: become a fresh interpreter running this module's ``main`` on the
    two pipe ends (the only descriptors it keeps besides run_isolated's stdio)."""
    from nncert.certify.runner import die_with_parent

    os.close(request_w)
    os.close(answer_r)
    _send(answer_w, pickle.dumps(("pid", os.getpid())))
    die_with_parent()  # kept across exec
    for fd in (request_r, answer_w, progress):
        os.set_inheritable(fd, True)
    env = dict(os.environ)  # the driver's class is found where this process found it
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    argv = [sys.executable, "-m", "nncert.drivers.probe", str(request_r), str(answer_w), str(progress)]
    os.execve(sys.executable, argv, env)


def _serve_in_fork(driver_ref: weakref.ref, request_r: int, answer_w: int, progress: int, request_w: int,
                   answer_r: int) -> None:
    """In run_isolated's fork: serve the driver as it was at the fork."""
    from nncert.certify.runner import die_with_parent

    os.close(request_w)  # the parent's ends: the child must see the requests end
    os.close(answer_r)
    _send(answer_w, pickle.dumps(("pid", os.getpid())))
    _let_go_of_inherited((request_r, answer_w, progress))
    die_with_parent()
    driver = driver_ref()
    if driver is not None:
        _serve(driver, request_r, answer_w, progress)


def _let_go_of_inherited(keep: Sequence[int]) -> None:
    """In a long-lived fork: close the inherited descriptors that others wait on, pipe and
    socket ends (a reader sees its end of a pipe only when every writer's copy is closed)
    and files that hold a lock (an flock lasts while any copy of its descriptor is open:
    nncert.drivers.measure's lock file would stay taken). Other files stay open: a runtime
    may use them, and faulthandler writes to one."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return  # no /proc: nothing known to close
    for name in names:
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                with open(f"/proc/self/fdinfo/{fd}") as f:
                    if "\nlock:" not in f.read():
                        continue
            elif not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
                continue
            os.close(fd)
        except OSError:
            continue  # listdir's own descriptor, gone since


def _serve(driver: CompiledDriver, request_r: int, answer_w: int, progress_fd: int) -> None:
    """Say ready, then answer each request (a list of probes) until the requests end."""
    progress = Progress(progress_fd)
    _send(answer_w, pickle.dumps(("ready", os.getpid())))
    while (data := _receive(request_r)) is not None:
        request = pickle.loads(data)
        if isinstance(request, tuple) and request[0] == "build":
            _send(answer_w, pickle.dumps(("built", compile_together(driver, request[1]))))
            continue
        progress.start()
        answers = []
        for j, (models, feeds) in enumerate(request):
            result = compile_and_run(driver, models, feeds, lambda n, stage, j=j: progress.at(j, n, stage))
            progress.finished(result)
            answers.append(result)
        _send(answer_w, pickle.dumps(("answer", answers), pickle.HIGHEST_PROTOCOL))


def compile_and_run(driver: CompiledDriver, models: Sequence[Model], feeds: Sequence[list[np.ndarray] | None],
                    progress: Callable[[int, str], None] | None = None) -> list[tuple[str, str] | None]:
    """Compile each model and run it once on its feeds (None: compiled only). Per model, None
    or (the stage that raised, why); after a compilation fails nothing more is tried. Before
    each step, ``progress(model, stage)`` says where it is."""
    results: list[tuple[str, str] | None] = []
    for n, (model, inputs) in enumerate(zip(models, feeds, strict=True)):
        stage = "compile"
        try:
            if progress is not None:
                progress(n, stage)
            exe = driver.compile(model)
            if inputs is not None:
                stage = "run"
                if progress is not None:
                    progress(n, stage)
                exe.run(inputs)
        except Exception as e:
            results.append((stage, f"{type(e).__name__}: {e}".strip()))
            if stage == "compile":
                break
            continue
        results.append(None)
    return results


class Progress:
    """Where a probe child is, in a small shared memory file (memfd) both sides hold: the
    child writes which probe, model and stage it is at before each step and appends each
    finished probe's results; the owner clears it before each request and reads it on a
    tick (the probe under way, for its deadline) or once the child is dead (where it died,
    and what it finished). Each write is one pwrite: no message, no wake-up."""

    _HEAD = struct.Struct("=qqqqq")  # probe, model, stage (0 compile, 1 run), probes done, end
    _START = 64
    #: The most bytes of finished results read back.
    LIMIT = 64 << 20

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.done = 0
        self.end = self._START

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    # -- the child's side --
    def start(self) -> None:
        self.done, self.end = 0, self._START

    def at(self, probe: int, model: int, stage: str) -> None:
        os.pwrite(self.fd, struct.pack("=qqq", probe, model, stage == "run"), 0)

    def finished(self, result: object) -> None:
        data = pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
        os.pwrite(self.fd, struct.pack("=q", len(data)) + data, self.end)
        self.end += 8 + len(data)
        self.done += 1
        os.pwrite(self.fd, struct.pack("=qq", self.done, self.end), 24)

    # -- the owner's side --
    def clear(self) -> None:
        os.pwrite(self.fd, self._HEAD.pack(0, 0, 0, 0, self._START), 0)

    def _head(self) -> tuple[int, int, int, int, int]:
        data = os.pread(self.fd, self._HEAD.size, 0)
        return self._HEAD.unpack(data) if len(data) == self._HEAD.size else (0, 0, 0, 0, self._START)

    def current(self) -> int:
        """The probe the child is at (it may be writing: a torn value is caught up next tick)."""
        return self._head()[0]

    def read(self, count: int) -> tuple[list, tuple[int, int, str]]:
        """The results of the probes the child finished (at most ``count``, each read back as
        written; the first that is not ends the list) and where it was: (probe, model, stage)."""
        probe, model, stage, done, end = self._head()
        end = min(max(end, self._START), self._START + self.LIMIT)
        data = os.pread(self.fd, end - self._START, self._START) if end > self._START else b""
        results, offset = [], 0
        while len(results) < min(done, count) and offset + 8 <= len(data):
            size = struct.unpack_from("=q", data, offset)[0]
            if not 0 < size <= len(data) - offset - 8:
                break
            try:
                results.append(pickle.loads(data[offset + 8:offset + 8 + size]))
            except Exception:
                break
            offset += 8 + size
        return results, (probe, model, "run" if stage else "compile")


def main(argv: Sequence[str]) -> int:
    """The fresh child: ``python -m nncert.drivers.probe REQUEST_FD ANSWER_FD PROGRESS_FD``. Its first
    request is the driver's recipe (module, class name, arguments, keyword arguments)."""
    import faulthandler

    faulthandler.enable()  # a fatal signal's traceback in run_isolated's output
    request_r, answer_w, progress = (int(a) for a in argv)
    data = _receive(request_r)
    if data is None:
        return 0
    try:
        module, qualname, args, kwargs = pickle.loads(data)
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        driver = cls(*args, **kwargs)
    except Exception as e:
        _send(answer_w, pickle.dumps(("error", f"{type(e).__name__}: {e}")))
        return 1
    _serve(driver, request_r, answer_w, progress)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
