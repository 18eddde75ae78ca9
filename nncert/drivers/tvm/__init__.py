"""The Apache TVM driver: HAL models exported to ONNX (the ONNX Runtime driver's exporter, QDQ
form), imported by TVM's Relax ONNX frontend, compiled ahead of time for the CPU (``llvm``
targets) and run by the Relax virtual machine.

Options (strings, from a spec such as ``tvm:target=llvm,opt_level=3``):

- ``target``: a TVM target for this machine's CPU: a kind (``llvm``), the command-line form
  ``llvm -mcpu=NAME -mattr=+FEATURE`` (``-mcpu=native``: the host's CPU, which puts a
  fingerprint of the host CPU into the compile cache key) or TVM's JSON dict form (Python
  callers: a spec cannot carry commas). Only llvm targets whose code this CPU runs are taken;
  another device's target is refused (default ``llvm``: generic x86-64 code);
- ``opt_level``: the pass context's optimisation level, 0..3 (default 2, TVM's own);
- ``threads``: the workers of TVM's runtime thread pool (default 1, for determinism). TVM's
  pools are per thread and capped by ``TVM_NUM_THREADS`` (set to the usable cores unless the
  user set it): the driver runs all TVM code on one thread per count, so a process has one
  pool per count; a count the pool cannot give is refused;
- ``cache``: ``on`` | ``off`` | a directory: where the compiled libraries are kept by content
  (nncert.drivers.compile_cache).

The artefact (compile cache, HAL model cache) is the shared library ``export_library``
links with the C toolchain found at driver creation (``$CC``, cc, gcc, clang); it is written
to a private file (a fresh 0700 directory, 0600, named by its hash, never through a link),
loaded with ``tvm.runtime.load_module`` and removed at once. Without a toolchain the driver
says so in one line, keeps no compile cache, and its HAL model cache holds the ONNX bytes,
compiled again on import.

The export unrolls every recurrent cell (RNN, UNIDIRECTIONAL_ and BIDIRECTIONAL_SEQUENCE_RNN)
into MatMul / Add and the activation per step: the frontend has no ONNX RNN converter.

IF is an ONNX If (the frontend lowers it to a Relax If); WHILE is declined: the frontend has
no Loop, and a compiled loop could not be stopped at the loop timeout. tvm is imported when a
driver is made, never by ``import nncert.drivers``; TVM's own log lines on stderr (LLVM's
"Scope Saving" warnings, thread-pool notices) are kept out of the user's output.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np

from nncert import files
from nncert.drivers import compile_cache
from nncert.drivers.compiled import CompiledDriver, StandaloneRunner, installed_version
from nncert.hal.model import Model
from nncert.hal.types import DeviceType, OperationType

DEFAULT_OPT_LEVEL = "2"  # tvm.transform.PassContext's default
#: LLVM x86 / Arm feature names that are instruction sets (code using them faults without them).
ISA_FEATURE = re.compile(r"^(sse|ssse|avx|fma|f16c|bmi|lzcnt|popcnt|amx|vpclmul|pclmul|gfni|vaes|aes|sha|"
                         r"movbe|adx|xop|tbm|cx16|rdrnd|rdseed|neon|sve|fp16|fullfp16|dotprod|i8mm|bf16)")
_STDERR_LOCK = threading.RLock()
T = TypeVar("T")


@contextlib.contextmanager
def _quiet() -> Iterator[list[str]]:
    """File descriptor 2 sent to a scratch file while TVM works (its C++ log lines and LLVM's
    warnings are written there, not through Python); what it wrote is handed back in the
    yielded list, for an error message."""
    captured: list[str] = []
    with _STDERR_LOCK:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        saved = os.dup(2)
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                yield captured
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                scratch.seek(0)
                captured.extend(scratch.read(1 << 16).decode(errors="replace").splitlines())


def _set_threads(tvm, n: int) -> int:
    """Ask the calling thread's TVM thread pool for ``n`` workers; the number it then uses."""
    if int(tvm.get_global_func("runtime.NumThreads")()) != n:
        with _quiet():
            tvm.get_global_func("runtime.config_threadpool")(1, n)
    return int(tvm.get_global_func("runtime.NumThreads")())


#: TVM's thread pool is thread-local, and its workers outlive the thread that made it: every
#: thread that ran a kernel would leave a pool behind (DRV-5). So everything that runs TVM
#: code (compiling folds constants by running kernels) runs on one thread per thread count,
#: for the process's life, whose pool is sized once.
_TVM_THREADS: dict[int, ThreadPoolExecutor] = {}
_TVM_THREADS_LOCK = threading.Lock()
_ON_TVM_THREAD = threading.local()


#: The libraries loaded in this process, by the sha256 of their bytes. TVM 0.27 never unloads
#: a library it loaded (its module outlives every reference nncert holds), so the same
#: library loaded again for each prepared model of one model would pile up (DRV-5): it is
#: loaded once and shared (a library is immutable code and constants; each executable has a
#: virtual machine of its own).
_LOADED: dict[str, object] = {}
_LOADED_LOCK = threading.Lock()


def _on_tvm_thread(threads: int, function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` on the TVM thread for ``threads`` workers."""
    if getattr(_ON_TVM_THREAD, "threads", None) == threads:
        return function(*args)
    with _TVM_THREADS_LOCK:
        executor = _TVM_THREADS.get(threads)
        if executor is None:
            def mark() -> None:
                _ON_TVM_THREAD.threads = threads

            executor = _TVM_THREADS[threads] = ThreadPoolExecutor(
                1, thread_name_prefix=f"nncert-tvm-{threads}", initializer=mark)
    return executor.submit(function, *args).result()


def _toolchain() -> str | None:
    """The C compiler that links TVM's objects into a shared library, or None."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def _link(compiler: str):
    """An ``export_library`` fcompile: LLVM's objects linked into a shared library without the
    C runtime's start files (TVM's objects need libm, libc and libgcc's helpers, the rest is
    resolved from the TVM runtime already loaded); the compiler's full default link if that
    fails."""

    def fcompile(output: str, objects: list[str], options: list[str] | None = None, **_: object) -> None:
        objects = [objects] if isinstance(objects, str) else list(objects)
        tries = ([compiler, "-shared", "-nostdlib", "-o", output, *objects, "-lm", "-lc", "-lgcc"],
                 [compiler, "-shared", "-fPIC", "-o", output, *objects, *(options or [])])
        for n, cmd in enumerate(tries):
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
            if done.returncode == 0:
                return
            if n == len(tries) - 1:
                last = done.stdout.decode(errors="replace").strip().splitlines()[-1:]
                raise RuntimeError(f"linking TVM's library with {compiler} failed: {' '.join(last)}")

    fcompile.output_format = "so"
    return fcompile


def parse_target(value: str) -> dict:
    """The target option as TVM's config dict: JSON (``{"kind": "llvm", ...}``), or a kind
    with ``-key=value`` attributes (the command-line form this TVM release no longer parses
    itself). ValueError naming what is wrong."""
    text = value.strip()
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"tvm option target={value!r}: not valid JSON ({e.msg})") from None
        if not isinstance(config, dict):
            raise ValueError(f"tvm option target={value!r}: a JSON target must be an object")
        return config
    words = text.split()
    if not words:
        raise ValueError("tvm option target='': a TVM target is needed, e.g. llvm")
    config: dict = {"kind": words[0]}
    for word in words[1:]:
        key, eq, val = word.lstrip("-").partition("=")
        if not word.startswith("-") or not eq or not key:
            raise ValueError(f"tvm option target={value!r}: {word!r} is not a -key=value attribute")
        if key == "mattr":  # -mattr=+avx2+fma: features added (removals: the JSON form)
            if not val.startswith("+"):
                raise ValueError(f"tvm option target={value!r}: -mattr takes +feature+feature...")
            config[key] = [f"+{f}" for f in val[1:].split("+")]
        else:
            config[key] = val
    return config


class TVMExecutable:
    """A Relax VM over a loaded library (or an in-memory executable, without a toolchain)."""

    def __init__(self, tvm, module, threads: int) -> None:
        from tvm import relax

        self._tvm = tvm
        self.threads = threads
        self.module = module  # keeps the library mapped while the VM lives
        self.vm = relax.VirtualMachine(module, tvm.cpu())
        self.main = self.vm["main"]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return _on_tvm_thread(self.threads, self._run, inputs)

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        tensor = self._tvm.runtime.tensor
        result = self.main(*[tensor(np.ascontiguousarray(a)) for a in inputs])
        if isinstance(result, self._tvm.runtime.Tensor):
            return [result.numpy()]
        return [r.numpy() for r in result]


class TVMDriver(CompiledDriver):
    name = "tvm"
    device_type = DeviceType.CPU

    def __init__(self, target: str = "llvm", opt_level: str = DEFAULT_OPT_LEVEL, threads: str = "1",
                 cache: str = "on", state_dir: str | None = None) -> None:
        super().__init__(state_dir)
        if opt_level not in ("0", "1", "2", "3"):
            raise ValueError(f"tvm option opt_level={opt_level!r}: allowed values are 0, 1, 2, 3")
        try:
            n_threads = int(threads)
        except ValueError:
            n_threads = -1
        if n_threads < 1:
            raise ValueError(f"tvm option threads={threads!r}: allowed values are integers >= 1")
        if cache == "":
            raise ValueError("tvm option cache='': allowed values are on, off or a directory")
        config = parse_target(target)
        # TVM caps each thread pool at TVM_NUM_THREADS (else at the physical cores, one here);
        # the TVM thread then asks for the driver's count. A user's own setting wins.
        os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
        import tvm
        from tvm.target import codegen

        self._tvm = tvm
        self.target, self.host_fingerprint = self._check_target(tvm, codegen, target, config)
        pool = _on_tvm_thread(n_threads, _set_threads, tvm, n_threads)
        if pool != n_threads:
            raise ValueError(f"tvm option threads={threads!r}: TVM's thread pool in this process gives "
                             f"at most {pool} (TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}, and "
                             f"the cores this process may use)")
        self.opt_level = int(opt_level)
        self.threads = n_threads
        self.compiler = _toolchain()
        self.runtime = f"tvm {tvm.__version__}"
        if self.compiler is None:
            print("nncert: tvm: no C compiler found (CC, cc, gcc, clang): compiled models are not "
                  "kept (cache off) and the HAL model cache holds ONNX bytes, compiled again on import",
                  file=sys.stderr, flush=True)
            self.compile_cache = None
        else:
            try:
                self.compile_cache = compile_cache.from_option(cache, self.name, self.version_string())
            except files.UnsafePathError as e:
                raise ValueError(f"tvm option cache={cache!r}: {e}") from None

    @staticmethod
    def _check_target(tvm, codegen, value: str, config: dict):
        """The Target of ``config``, refused (ValueError) unless its code runs on this CPU; and
        the host fingerprint when the code is built for the host's own CPU (``-mcpu=native``)."""
        kind = config.get("kind")
        if kind != "llvm":
            why = ("it is not for the CPU" if kind not in (None, "c") else
                   "the C source target needs a separate build" if kind == "c" else "no kind given")
            raise ValueError(f"tvm option target={value!r}: only llvm targets run here, on this "
                             f"machine's CPU ({why})")
        host_triple = codegen.llvm_get_system_triple()
        triple = config.setdefault("mtriple", host_triple)
        if triple.split("-")[0] != host_triple.split("-")[0]:
            raise ValueError(f"tvm option target={value!r}: mtriple {triple} is another architecture "
                             f"than this machine's ({host_triple}); its code cannot run here")
        fingerprint = ""
        host_cpu = codegen.llvm_get_system_cpu()
        if config.get("mcpu") == "native":
            config["mcpu"] = host_cpu
            fingerprint = _host_fingerprint(host_cpu)
        try:
            with _quiet():
                target = tvm.target.Target(config)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"tvm option target={value!r}: {first}") from None
        mcpu = config.get("mcpu")
        if mcpu and not codegen.llvm_is_valid_cpu(mcpu, triple):
            raise ValueError(f"tvm option target={value!r}: LLVM knows no CPU {mcpu!r}")
        if mcpu or config.get("mattr"):
            with _quiet():
                wanted = set(codegen.llvm_get_cpu_features(target))
                host = set(codegen.llvm_get_cpu_features(
                    tvm.target.Target({"kind": "llvm", "mtriple": triple, "mcpu": host_cpu})))
            # Instruction sets only: LLVM's list also holds tuning hints (fast-gather, ermsb).
            missing = sorted(f for f in wanted - host if ISA_FEATURE.match(f))
            if missing:
                raise ValueError(f"tvm option target={value!r}: needs CPU features this host ({host_cpu}) "
                                 f"lacks: {', '.join(missing[:8])}; its code would fault here")
        return target, fingerprint

    def options_label(self) -> str:
        label = f"target={self.target}, opt_level={self.opt_level}, threads={self.threads}"
        return label + (f", host={self.host_fingerprint}" if self.host_fingerprint else "")

    def builds(self) -> bool:
        return self.compiler is not None

    def operation_problem(self, model: Model, index: int) -> str | None:
        """The exporter's reason for the operation alone, or this runtime's own."""
        from nncert.drivers.onnxruntime.export import exported_operation

        if model.main.operations[index].type is OperationType.WHILE:
            return ("TVM's Relax ONNX frontend has no Loop converter, and a compiled loop cannot be "
                    "stopped at the loop timeout")
        return _uncropped_transpose_conv(model, index) or exported_operation(model, index, unroll_rnn=True)[0]

    def translate(self, model: Model) -> bytes:
        """The ONNX export with every recurrent cell unrolled: the frontend has no RNN."""
        from nncert.drivers.onnxruntime.export import canonical_bytes

        return canonical_bytes(model, unroll_rnn=True)

    def standalone_runner(self, wide: Model, content: bytes) -> StandaloneRunner:
        """The exported ONNX model imported by the Relax ONNX frontend, compiled with this
        driver's target and optimisation level and run by the Relax VM on TVM_NUM_THREADS
        threads (the driver links and loads the library; the VM runs the same code)."""
        target = {k: v for k, v in json.loads(str(self.target)).items()
                  if not (k == "tag" and not v) and not (k == "keys" and v == ["cpu"])}
        code = f"""def run(inputs):
    import os

    os.environ["TVM_NUM_THREADS"] = "{self.threads}"  # before TVM starts its thread pool
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    module = from_onnx(onnx.load(str(HERE / "model.onnx")), keep_params_in_input=False)
    target = tvm.target.Target({target!r})
    with tvm.transform.PassContext(opt_level={self.opt_level}):
        executable = tvm.compile(module, target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    results = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs])
    results = [results] if isinstance(results, tvm.runtime.Tensor) else list(results)
    return [r.numpy() for r in results]
"""
        return StandaloneRunner({"model.onnx": content}, code,
                                [f"apache-tvm=={installed_version('apache-tvm')}",
                                 f"onnx=={installed_version('onnx')}"],
                                {"target": target, "opt_level": self.opt_level, "threads": self.threads})

    def _compiled(self, content: bytes):
        """The Relax VM executable of ONNX bytes (TVM's errors with what it logged)."""
        return _on_tvm_thread(self.threads, self._compile_here, content)

    def _compile_here(self, content: bytes):
        import onnx
        from tvm.relax.frontend.onnx import from_onnx

        tvm = self._tvm
        with _quiet() as log:
            try:
                mod = from_onnx(onnx.ModelProto.FromString(content), keep_params_in_input=False)
                with tvm.transform.PassContext(opt_level=self.opt_level):
                    return tvm.compile(mod, target=self.target)
            except Exception as e:
                failure = (type(e).__name__, str(e))
            # The failed import's objects (a BlockBuilder) log when destroyed: here, quietly.
            gc.collect()
        raise _with_log(*failure, log)

    def build(self, content: bytes, model: Model) -> bytes:
        ex = self._compiled(content)
        with tempfile.TemporaryDirectory(prefix="nncert-tvm-") as scratch, _quiet() as log:
            path = Path(scratch) / "model.so"
            try:
                ex.export_library(str(path), fcompile=_link(self.compiler), workspace_dir=scratch)
            except Exception as e:
                failure = (type(e).__name__, str(e))
            else:
                return path.read_bytes()
        raise _with_log(*failure, log)

    def load_built(self, artefact: bytes, model: Model) -> TVMExecutable:
        return _on_tvm_thread(self.threads, self._load_here, artefact)

    def _load_here(self, artefact: bytes) -> TVMExecutable:
        digest = hashlib.sha256(artefact).hexdigest()
        with _LOADED_LOCK:
            module = _LOADED.get(digest)
        if module is not None:
            return TVMExecutable(self._tvm, module, self.threads)
        # A fresh directory each time: the dynamic loader hands back a library already loaded
        # under the same path, so a path is never reused for other code.
        with tempfile.TemporaryDirectory(prefix="nncert-tvm-") as scratch:
            directory = files.private_dir(scratch)
            path = directory / f"{digest[:32]}.so"
            fd = files.open_private(path, os.O_WRONLY | os.O_EXCL)
            with os.fdopen(fd, "wb") as f:
                f.write(artefact)
            with _quiet() as log:
                try:
                    module = self._tvm.runtime.load_module(str(path))
                except Exception as e:
                    failure = (type(e).__name__, str(e))
                else:
                    with _LOADED_LOCK:
                        module = _LOADED.setdefault(digest, module)
                    return TVMExecutable(self._tvm, module, self.threads)
        raise _with_log(*failure, log)

    def load(self, content: bytes, model: Model) -> TVMExecutable:
        """Without a toolchain: the ONNX bytes compiled and run in memory."""
        return _on_tvm_thread(self.threads, lambda: TVMExecutable(self._tvm, self._compiled(content),
                                                                  self.threads))


def _uncropped_transpose_conv(model: Model, index: int) -> str | None:
    """TVM computes a ConvTranspose's whole output, (input - 1) x stride + filter along each
    spatial axis, before it removes the padding: memory and time in proportion to the stride
    even where the padding leaves a few columns (the tvm prepare_model campaign's
    TRANSPOSE_CONV_2D of stride 7.7e8 and input width 4, padded down to an output of 6: 37 GB,
    which hung the support probe; onnxruntime runs it in constant memory). Declined where that
    whole output would not fit the support probe's sample data (the output itself is checked by
    the probe)."""
    from nncert.drivers.probe import SAMPLE_OPERAND_BYTES

    op = model.main.operations[index]
    if op.type is not OperationType.TRANSPOSE_CONV_2D or len(op.inputs) not in (9, 11):
        return None
    operands = model.main.operands
    data, weights = (operands[i] for i in op.inputs[:2])
    values = [model.constant_value(operands[i]) for i in op.inputs[-4:-2] + op.inputs[-1:]]
    if any(v is None for v in values) or len(data.dimensions) != 4 or len(weights.dimensions) != 4:
        return None  # strides or layout known only at run time: the probe decides
    stride_w, stride_h, nchw = (int(v) for v in values)
    n, h, w = (data.dimensions[k] for k in ((0, 2, 3) if nchw else (0, 1, 2)))
    depth_out, filter_h, filter_w = weights.dimensions[:3]
    full_h, full_w = (max(h - 1, 0) * stride_h + filter_h, max(w - 1, 0) * stride_w + filter_w)
    size = 4 * n * depth_out * full_h * full_w
    if size <= SAMPLE_OPERAND_BYTES:
        return None
    return (f"TVM computes a transposed convolution's whole output, (input - 1) x stride + filter per "
            f"axis ({full_h} x {full_w} here), before it removes the padding: {size} bytes, more than the "
            f"{SAMPLE_OPERAND_BYTES >> 20} MiB of sample data the support probe runs an operation on")


def _host_fingerprint(cpu: str) -> str:
    """The host CPU's name and a digest of its feature flags: code built for the host's own
    CPU is never loaded from a cache shared with another machine."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    return f"{cpu}/{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def _with_log(name: str, text: str, log: list[str]) -> RuntimeError:
    """An error of TVM's as one line: its type and the first line of its message (not the
    traceback TVM puts into it), else the last line TVM logged."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = next((ln for ln in lines if not ln.startswith(("Traceback", "File ", "^"))), "")
    if not head and log:
        head = log[-1].strip()
    return RuntimeError(f"{name}: {head}"[:500])


__all__ = ["TVMDriver", "parse_target"]
