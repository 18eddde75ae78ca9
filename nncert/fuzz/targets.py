"""The fuzz targets: one-input functions with an oracle, their seed corpora and a description
of an input for reports (VAL-1, VAL-3, CACHE-4/6, BURST-4).

``TARGETS[name].make(spec)`` loads the driver ``spec`` (None: the reference) and returns the
function atheris calls with each input; it returns quietly, or raises ``Finding``. A crash
of an in-process driver kills the process, a hang stalls it: the runner isolates and times
out. A hosted driver (``service:SPEC``) that dies or stops answering during a call is a
Finding of kind "crash" or "hang".
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from nncert import files
from nncert.drivers import load_driver
from nncert.drivers.base import Driver, PreparedModel
from nncert.drivers.caching import read_file, write_file
from nncert.files import open_private
from nncert.fuzz import Finding
from nncert.fuzz import decode as dec
from nncert.hal.builder import read_outputs
from nncert.hal.errors import HalError, ValidationError, driver_fault_of
from nncert.hal.model import Model
from nncert.hal.request_io import read_inputs
from nncert.hal.types import LATEST, ErrorStatus
from nncert.hal.validation import (
    validate_execution_preference,
    validate_model,
    validate_priority,
    validate_request,
)
from nncert.ops.interpreter import run_model
from nncert.testing import harness
from nncert.testing.criteria import output_mismatches

OneInput = Callable[[bytes], None]

#: Seconds a burst exchange may take before it is a hang (BURST-4).
BURST_ANSWER_WITHIN_S = 5.0


@dataclass
class Target:
    name: str
    needs_driver: bool
    make: Callable[[str | None], OneInput]
    seeds: Callable[[], Iterable[bytes]]
    describe: Callable[[bytes], str]
    #: The operations of the model an input decodes into ("CONV_2D,RELU"), for a target that
    #: has one: what tells apart hangs that leave no frame of their own (a wait on the support
    #: probe's child, a runtime's native loop), which would otherwise share the key HANG||.
    operations: Callable[[bytes], str] | None = None


# -- seeds -------------------------------------------------------------------------------------

def case_seeds() -> Iterator[bytes]:
    """The encoding of every catalogue case in every variation it supports: each decodes to
    a valid model (and, for the request targets, a valid request)."""
    yield from _case_seeds()


@functools.cache
def _case_seeds() -> tuple[bytes, ...]:
    # Five targets share them, and campaigns run side by side: encoded once per process.
    return tuple(dec.encode_case(index) for index in range(len(dec.cases())) if dec.supported(index))


def burst_seeds() -> Iterator[bytes]:
    """One input per burst action kind (a valid message, API executions and releases)."""
    yield bytes([4, 0, 3, 1, 3, 1])  # the valid message, its measure field set to 0 again
    yield bytes([0, 2, 0, 0])  # an execution naming slots 0, 0
    yield bytes([1, 0])  # releasing slot 0 (known or not, an answer must come)
    yield bytes([2]) + b'{"slots": [0, 1]}'
    yield bytes([3, 0, 0])


def write_corpus(target: str, directory: str | os.PathLike) -> int:
    """Write ``target``'s seeds into ``directory``, one file per seed named by the sha1 of its
    content (libFuzzer's own naming); returns how many files are new. Regenerate with
    ``nncert fuzz corpus`` whenever the catalogue changes."""
    path = files.own_dir(directory)
    new = 0
    for seed in TARGETS[target].seeds():
        f = path / hashlib.sha1(seed).hexdigest()
        if not f.exists():
            files.write_atomic(f, seed, sync=False)
            new += 1
    return new


# -- helpers -----------------------------------------------------------------------------------

def _driver(spec: str | None) -> Driver:
    return load_driver(spec or "reference")


def _fault(exc: BaseException, operation: str, what: str) -> None:
    """A Finding when a hosted driver died or hung in the call (VAL-3, BURST-4)."""
    fault = driver_fault_of(exc)
    if fault is not None:
        raise Finding(fault.outcome.lower(), f"{what}: {fault.reason}", operation,
                      ErrorStatus.DEVICE_UNAVAILABLE.name) from exc


def _unexpected(exc: Exception, operation: str, what: str) -> Finding:
    return Finding("exception", f"{what} raised {type(exc).__name__}: {exc}", operation)


def _verdicts(d: dec.DecodedModel, version) -> tuple[ValidationError | None, ValidationError | None]:
    """validate_model's verdict on the model, and on the model with the preparation's
    preference and priority (None: valid); any other exception is a finding of the
    validator itself."""
    try:
        validate_model(d.model, version)
    except ValidationError as e:
        return e, e
    except Exception as e:
        raise _unexpected(e, d.case.key.operation, "validate_model") from e
    try:
        validate_execution_preference(d.preference)
        validate_priority(d.priority)
    except ValidationError as e:
        return None, e
    return None, None


# -- validate_model / validate_request ------------------------------------------------------------

#: Models the validate_model target remembers having validated (then it starts afresh).
VALIDATED_MEMO = 1 << 16
#: A model whose mutated constants are larger than this is not remembered (memory).
MEMO_VALUES_BYTES = 1 << 12


def make_validate_model(spec: str | None = None) -> OneInput:
    """The validator on each decoded model, once per distinct model: validation is a pure
    function of the model, and about two inputs in three of a campaign decode to a model
    already validated (``decode.model_key``), which would only give the same verdict and the
    same coverage again. A model that raised anything but ValidationError is not remembered."""
    validated: set[tuple] = set()

    def one_input(data: bytes) -> None:
        d = dec.decode_model(data, private=False)  # the validator only reads it
        key = dec.model_key(d)
        if key in validated:
            return
        try:
            validate_model(d.model)
        except ValidationError:
            pass
        except Exception as e:
            raise _unexpected(e, d.case.key.operation, "validate_model") from e
        if d.model.operand_values is d.case.model.operand_values or \
                len(d.model.operand_values) <= MEMO_VALUES_BYTES:
            if len(validated) >= VALIDATED_MEMO:
                validated.clear()
            validated.add(key)

    return one_input


def make_validate_request(spec: str | None = None) -> OneInput:
    def one_input(data: bytes) -> None:
        d = dec.decode_request(data)
        try:
            validate_request(d.request, d.case.model)
        except ValidationError:
            pass
        except Exception as e:
            raise _unexpected(e, d.case.key.operation, "validate_request") from e

    return one_input


# -- prepare_model: the driver against validate_model (VAL-1) --------------------------------------

def make_prepare_model(spec: str | None = None) -> OneInput:
    driver = _driver(spec)
    version = getattr(driver, "feature_level", LATEST)

    def one_input(data: bytes) -> None:
        d = dec.decode_model(data)
        op = d.case.key.operation
        verdicts = _verdicts(d, version)
        for what, invalid, call in (
                ("supported_operations", verdicts[0], lambda: driver.supported_operations(d.model)),
                ("prepare_model", verdicts[1],
                 lambda: driver.prepare_model(d.model, d.preference, d.priority))):
            try:
                call()
            except HalError as e:
                _fault(e, op, what)
                if invalid is not None and e.status is not ErrorStatus.INVALID_ARGUMENT:
                    raise Finding("wrong-status", f"{what} refused an invalid model with {e.status.name} "
                                  f"({e.message}); validate_model: {invalid.message}", op,
                                  e.status.name) from e
                continue
            except Exception as e:
                raise _unexpected(e, op, what) from e
            if invalid is not None:
                raise Finding("wrong-acceptance", f"{what} accepted an invalid model: {invalid.message}",
                              op, ErrorStatus.NONE.name)

    return one_input


# -- execute: fuzzed requests on a valid prepared model ------------------------------------------

def make_execute(spec: str | None = None) -> OneInput:
    driver = _driver(spec)
    prepared: dict[str, PreparedModel | None] = {}

    def prepare(case: dec.SeedCase) -> PreparedModel | None:
        key = case.key.id
        if key not in prepared:
            try:
                prepared[key] = driver.prepare_model(case.model)
            except HalError as e:
                _fault(e, case.key.operation, "prepare_model")
                prepared[key] = None  # declined (an unsupported operation): nothing to execute
        return prepared[key]

    def one_input(data: bytes) -> None:
        d = dec.decode_request(data)
        case, request, op = d.case, d.request, d.case.key.operation
        p = prepare(case)
        if p is None:
            return
        try:
            validate_request(request, case.model)
            invalid = None
        except ValidationError as e:
            invalid = e
        inputs = None
        if invalid is None and not _overlapping_outputs(request):
            try:
                inputs = read_inputs(case.model, request)  # before the driver writes its outputs
            except HalError:
                inputs = None
        what = f"execute ({d.path})"
        try:
            shapes, _ = harness.execute(p, request, d.path)
        except HalError as e:
            _fault(e, op, what)
            if invalid is not None and e.status is not ErrorStatus.INVALID_ARGUMENT:
                raise Finding("wrong-status", f"{what} refused an invalid request with {e.status.name} "
                              f"({e.message}); validate_request: {invalid.message}", op, e.status.name) from e
            return
        except Exception as e:
            raise _unexpected(e, op, what) from e
        if invalid is not None:
            raise Finding("wrong-acceptance", f"{what} accepted an invalid request: {invalid.message}",
                          op, ErrorStatus.NONE.name)
        if inputs is None or not _specified_range(case.model, inputs) or \
                harness.own_criterion(case.model, unspecified=True):
            return
        try:
            expected = run_model(case.model, inputs)
        except Exception:
            return  # the reference cannot run these inputs either: no golden to compare with
        # A fenced execution reports no shapes: the valid request's (the seed case's) then.
        dims = [s.dimensions for s in shapes] if shapes else [e.shape for e in expected]
        actual = read_outputs(case.model, request, dims)
        bad = output_mismatches(case.model, expected, actual, case.model.relax_computation_float32_to_float16)
        if bad:
            raise Finding("wrong-result", f"{what}: {bad[0]}", op, ErrorStatus.NONE.name,
                          test=case.key.conformance_test)

    return one_input


def _specified_range(model: Model, inputs: list[np.ndarray | None]) -> bool:
    """Whether every floating-point and int32 input is finite and small enough that no product
    of two of them overflows the type the driver may compute in (fp16 for a relaxed model,
    int32 accumulators). Beyond that, overflow of intermediates (a square in L2_POOL_2D, a
    huge int32 bias added to a quantised convolution's accumulator) is the implementation's
    choice, and the outputs are not compared; the statuses still are."""
    for x in inputs:
        if x is None or not x.size or x.dtype.kind not in "fi":
            continue
        if x.dtype.kind == "i" and x.dtype.itemsize < 4:  # 8-bit quantised values cannot overflow
            continue
        if x.dtype.kind == "i":
            limit = _SQRT_INT32_MAX
        elif x.dtype == np.float16 or model.relax_computation_float32_to_float16:
            limit = _SQRT_FP16_MAX
        else:
            limit = _SQRT_FP32_MAX
        with np.errstate(invalid="ignore"):
            if not (np.abs(x.astype(np.float64)) <= limit).all():
                return False
    return True


_SQRT_FP16_MAX = float(np.sqrt(np.finfo(np.float16).max))
_SQRT_FP32_MAX = float(np.sqrt(np.finfo(np.float32).max))
_SQRT_INT32_MAX = float(np.sqrt(np.iinfo(np.int32).max))


def _overlapping_outputs(request) -> bool:
    """Whether an output's bytes overlap another argument's (the values are then undefined)."""
    spans = [(a.location.pool_index, a.location.offset, a.location.offset + a.location.length, out)
             for out, args in ((False, request.inputs), (True, request.outputs))
             for a in args if not a.has_no_value]
    for i, (p, lo, hi, out) in enumerate(spans):
        for q, lo2, hi2, out2 in spans[i + 1:]:
            if (out or out2) and p == q and lo < hi2 and lo2 < hi:
                return True
    return False


# -- prepare_from_cache: corrupted caches and tokens (CACHE-4, CACHE-6) ------------------------------

class _CacheFuzz:
    """Per case: a cache saved by ``prepare_model``; per input: mutated contents and token
    offered to ``prepare_model_from_cache``."""

    def __init__(self, spec: str | None) -> None:
        self.state = tempfile.TemporaryDirectory(prefix="nncert-fuzz-cache-")
        try:
            self.driver = load_driver(spec or "reference", {"state_dir": self.state.name})
        except ValueError:  # a wrapper that takes no state_dir (service:SPEC): its default
            self.driver = _driver(spec)
        self.n_model, self.n_data = self.driver.number_of_cache_files_needed()
        if (self.n_model, self.n_data) == (0, 0):
            raise ValueError(f"driver {self.driver.name!r} does not support compilation caching: "
                             "the prepare_from_cache target needs one that does (CACHE-2)")
        self.fds = [open_private(os.path.join(self.state.name, f"cache{i}"))
                    for i in range(self.n_model + self.n_data)]
        #: case id -> (model cache files' bytes, data cache files' bytes, token), None: not cached
        self.saved: dict[str, tuple[list[bytes], list[bytes], bytes] | None] = {}
        self.tokens: dict[bytes, list[bytes]] = {}

    def save(self, case: dec.SeedCase) -> tuple[list[bytes], list[bytes], bytes] | None:
        key = case.key.id
        if key not in self.saved:
            token = hashlib.sha256(f"nncert-fuzz/{key}".encode()).digest()
            model_fds, data_fds = self.fds[:self.n_model], self.fds[self.n_model:]
            try:
                self.driver.prepare_model(case.model, model_cache=model_fds, data_cache=data_fds, token=token)
                entry = ([read_file(fd) for fd in model_fds], [read_file(fd) for fd in data_fds], token)
            except HalError as e:
                _fault(e, case.key.operation, "prepare_model")
                entry = None
            if entry is not None and not any(entry[0]):
                entry = None  # nothing was written: this model is not cached
            self.saved[key] = entry
            if entry is not None:
                self.tokens[token] = entry[0]
        return self.saved[key]

    def __call__(self, data: bytes) -> None:
        reader = dec.ByteReader(data)
        case = dec.seed_case(dec.case_index(reader))
        op = case.key.operation
        saved = self.save(case)
        if saved is None:
            return
        models, datas, token = saved
        d = dec.decode_cache(models[0], datas[0] if datas else b"", token, reader,
                             tuple(t for t in self.tokens if t != token))
        contents = [d.model_cache, *models[1:], *([d.data_cache, *datas[1:]] if datas else [])]
        for fd, content in zip(self.fds, contents, strict=True):
            write_file(fd, content)
        try:
            self.driver.prepare_model_from_cache(None, self.fds[:self.n_model], self.fds[self.n_model:],
                                                 d.token)
        except HalError as e:
            _fault(e, op, "prepare_model_from_cache")
            return
        except Exception as e:
            raise _unexpected(e, op, "prepare_model_from_cache") from e
        expected = self.tokens.get(bytes(d.token))
        if expected is None:
            raise Finding("cache-accepted", "prepare_model_from_cache accepted a token under which no "
                          f"cache was saved ({d.describe()})", op, ErrorStatus.NONE.name)
        if [d.model_cache, *models[1:]] != expected:
            raise Finding("cache-accepted", "prepare_model_from_cache accepted a model cache that differs "
                          f"from the one saved under its token (CACHE-4; {d.describe()})", op,
                          ErrorStatus.NONE.name)


def make_prepare_from_cache(spec: str | None = None) -> OneInput:
    return _CacheFuzz(spec)


def describe_cache_input(data: bytes) -> str:
    reader = dec.ByteReader(data)
    case = dec.seed_case(dec.case_index(reader))
    d = dec.decode_cache(b"<model cache>", b"<data cache>", b"<token>", reader, (b"<another token>",))
    return f"case {case.key.id}; {d.describe()}"


# -- burst: malformed messages and slots on a hosted driver's queue (BURST-4, VAL-1) ---------------

class _BurstFuzz:
    def __init__(self, spec: str | None) -> None:
        import numpy as np

        from nncert.drivers.service import RemoteBurst
        from nncert.hal.builder import ModelBuilder, build_request
        from nncert.hal.types import OperandType, OperationType

        spec = spec or "reference"
        self.driver = _driver(spec if spec.startswith("service:") else f"service:{spec}")
        b = ModelBuilder()
        x, y = (b.operand(OperandType.TENSOR_FLOAT32, (2, 3)) for _ in range(2))
        out = b.operand(OperandType.TENSOR_FLOAT32, (2, 3))
        b.operation(OperationType.ADD, [x, y, b.constant(OperandType.INT32, 0)], [out])
        self.model = b.build([x, y], [out])
        self.request = build_request(self.model, [np.ones((2, 3), np.float32)] * 2)
        self.prepared = self.driver.prepare_model(self.model)
        self.burst = self.prepared.configure_execution_burst()
        if not isinstance(self.burst, RemoteBurst):
            raise ValueError(f"driver {self.driver.name!r} gave a {type(self.burst).__name__}: the burst "
                             "target needs a queue-based burst (a hosted driver, service:SPEC)")
        self.burst.execute(self.request, [0, 1])  # slots 0 and 1 known, as the valid message says

    def __call__(self, data: bytes) -> None:
        d = dec.decode_burst(data, self.burst.requests.capacity)
        try:
            if d.kind == "execute":
                self.burst.execute(self.request, d.slots)
            elif d.kind == "release":
                self.burst.release_memory_resource(d.slots[0])
            else:
                self._exchange(d)
        except HalError as e:
            _fault(e, "ADD", f"burst {d.kind}")
        except Exception as e:
            raise _unexpected(e, "ADD", f"burst {d.kind}") from e
        if not self.driver.alive():
            raise Finding("crash", f"the service died after a burst {d.kind}: {d.describe()}", "ADD",
                          ErrorStatus.DEVICE_UNAVAILABLE.name)

    def _exchange(self, d: dec.DecodedBurst) -> None:
        """Raw bytes on the request queue, then the one result the service must answer with."""
        from nncert.drivers.service.fmq import QueueAborted, QueueTimeout

        b = self.burst
        queue = b.requests
        give_up = time.monotonic() + BURST_ANSWER_WITHIN_S
        abort = () if b.conn.death_fd is None else (b.conn.death_fd,)
        with b._lock:
            while queue.capacity - (queue._index[1] - queue._index[0]) < len(d.frame):
                if time.monotonic() > give_up:
                    raise Finding("hang", "the service stopped consuming the burst request queue "
                                  f"(BURST-4): {d.describe()}", "ADD", "")
                time.sleep(0.001)
            tail = queue._index[1]
            queue._copy_in(tail, d.frame)
            queue._index[1] = tail + len(d.frame)
            os.eventfd_write(queue.data_fd, 1)
            try:
                b.results.read(give_up, abort)
            except QueueAborted:
                raise Finding("crash", f"the service died on a burst message (BURST-4): {d.describe()}",
                              "ADD", ErrorStatus.DEVICE_UNAVAILABLE.name) from None
            except QueueTimeout:
                raise Finding("hang", f"no burst result within {BURST_ANSWER_WITHIN_S} s (BURST-4): "
                              f"{d.describe()}", "ADD", "") from None


def make_burst(spec: str | None = None) -> OneInput:
    return _BurstFuzz(spec)


# -- the atheris scripts (fuzz/<target>.py) ------------------------------------------------------

def split_driver_argument(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--driver SPEC`` (or ``--driver=SPEC``) taken out of ``argv``; the rest is libFuzzer's."""
    spec, rest, args = None, [], iter(argv)
    for arg in args:
        if arg == "--driver":
            spec = next(args, None)
        elif arg.startswith("--driver="):
            spec = arg.partition("=")[2]
        else:
            rest.append(arg)
    return spec, rest


def fuzz_main(target: str, argv: list[str]) -> None:
    """What fuzz/<target>.py runs: the target on its driver, under atheris (which reports an
    uncaught Finding as a crash with its traceback). A campaign's worker (``--keep-going=FILE``)
    goes on past what Python raises instead (nncert.fuzz.campaign.keep_going), and shares its
    campaign's support-probe verdicts (``--probe-verdicts=DIR``)."""
    import atheris

    # Imported here: after the instrumented imports, and so left out of them.
    from nncert.fuzz.campaign import keep_going, use_probe_verdicts

    spec, argv = split_driver_argument(argv)
    argv = use_probe_verdicts(argv)
    one_input, argv = keep_going(TARGETS[target].make(spec), argv)
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


# -- the table ---------------------------------------------------------------------------------

def _describe_model(data: bytes) -> str:
    return dec.decode_model(data, private=False).describe()


def _describe_request(data: bytes) -> str:
    return dec.decode_request(data).describe()


def _model_operations(data: bytes) -> str:
    return _names(dec.decode_model(data, private=False).model)


def _request_operations(data: bytes) -> str:
    return _names(dec.decode_request(data).case.model)


def _names(model) -> str:
    return ",".join(sorted({op.type.name for op in model.main.operations}))


def _describe_burst(data: bytes) -> str:
    return dec.decode_burst(data, 1 << 16).describe()


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("validate_model", False, make_validate_model, case_seeds, _describe_model, _model_operations),
    Target("validate_request", False, make_validate_request, case_seeds, _describe_request,
           _request_operations),
    Target("prepare_model", True, make_prepare_model, case_seeds, _describe_model, _model_operations),
    Target("execute", True, make_execute, case_seeds, _describe_request, _request_operations),
    Target("prepare_from_cache", True, make_prepare_from_cache, case_seeds, describe_cache_input),
    Target("burst", True, make_burst, burst_seeds, _describe_burst),
)}

__all__ = ["BURST_ANSWER_WITHIN_S", "TARGETS", "Target", "burst_seeds", "case_seeds", "fuzz_main",
           "split_driver_argument", "write_corpus"]
