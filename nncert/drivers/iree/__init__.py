"""The IREE driver: HAL models exported to ONNX (the ONNX Runtime driver's exporter, QDQ
form), imported into MLIR by IREE's ONNX importer (torch-mlir), compiled ahead of time by
IREE's compiler in process (its C API) into a ``.vmfb`` module, and run by IREE's runtime on
its synchronous local CPU device (``local-sync``).

Options (strings, from a spec such as ``iree:backend=vmvx,opt=O2``):

- ``backend``: the compiler's target backend, ``llvm-cpu`` (native code for this machine's
  CPU, ``--iree-llvmcpu-target-cpu=host``) or ``vmvx`` (IREE's portable VM bytecode
  kernels); default llvm-cpu;
- ``opt``: ``--iree-opt-level``, O0 | O1 | O2 | O3 (default: IREE's own default, O0 in
  IREE 3.13);
- ``flags``: more compiler flags, space-separated (``flags=--iree-llvmcpu-debug-symbols=false``),
  checked by the compiler's own flag parser when the driver is made; they come after the
  driver's own, so that they may override them (``--iree-llvmcpu-target-cpu=...``);
- ``cache``: where compiled modules are kept (nncert.drivers.compile_cache): ``on`` (the
  default directory), ``off`` or a directory.

Every option that changes what is compiled is in the version string, hence in the compile
cache's key and the HAL caching token; with ``backend=llvm-cpu`` so is a fingerprint of the
host CPU (the code is built for it), so that a cache shared between machines never hands
one machine code built for another CPU.

IF is ONNX If (torch-mlir lowers it to structured control flow). WHILE is declined: IREE's
runtime cannot stop a running invocation, so a loop that never ends would hang the process
past the loop timeout (EXE-9, EXE-10). An operation the compiler refuses is declined with
the compiler's error message.

onnx and IREE are imported when a driver is made, never by ``import nncert.drivers``.
"""

from __future__ import annotations

import bisect
import ctypes
import hashlib
import os
import platform
import re
import tempfile
import threading
from importlib import metadata

import numpy as np

from nncert.drivers import compile_cache
from nncert.drivers.compiled import CompiledDriver, RefusedTogether, StandaloneRunner
from nncert.hal.model import Model, dtype_of
from nncert.hal.types import DeviceType, OperationType
from nncert.hal.types import OperandType as T

BACKENDS = ("llvm-cpu", "vmvx")
OPT_LEVELS = ("O0", "O1", "O2", "O3")
#: The name of the compiled function: the exported ONNX graph's name.
FUNCTION = "nncert"
#: The head of an artefact compiled together with others (``build_together``): the name of
#: its model's function follows, up to a newline, then the module they share.
TOGETHER = b"nncert-iree-function:"
#: The runtime's HAL driver: executes on the calling thread, one invocation at a time.
RUNTIME_DEVICE = "local-sync"
#: Characters of a compiler error kept in an exception (the decline reason keeps 500).
MESSAGE_LIMIT = 2000

_LOCATION = re.compile(r"^\S+\.mlir:(\d+):\d+: ")


class IREECompileError(Exception):
    """The compiler refused a model; the message is its first error diagnostics, ``lines``
    the lines of the MLIR text they are at."""

    def __init__(self, message: str, lines: list[int]) -> None:
        super().__init__(message)
        self.lines = lines


def _one_line(text: str) -> str:
    return " ".join(text.split())


def host_cpu_fingerprint() -> str:
    """A short hash naming this machine's CPU as code generation sees it (model and feature
    flags): compiled code for ``-target-cpu=host`` may use any of its features."""
    h = hashlib.blake2b(digest_size=6)
    h.update(platform.machine().encode())
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            first = f.read().split("\n\n", 1)[0]
        for line in first.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("vendor_id", "cpu family", "model", "flags", "Features", "CPU implementer",
                               "CPU part", "CPU architecture"):
                h.update(f"{key.strip()}={value.strip()}\n".encode())
    except OSError:
        h.update(platform.processor().encode())
    return h.hexdigest()


def _catching_stderr(call):
    """``call()`` with what LLVM's option parser prints to file descriptor 2 captured:
    returns (result or None, the exception or None, the captured text)."""
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            try:
                result, error = call(), None
            except Exception as e:
                result, error = None, e
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode(errors="replace")
    return result, error, text


class IREEExecutable:
    """A loaded module: its own VM context on the driver's device, one function."""

    def __init__(self, config, artefact: bytes, out_types: list[np.dtype] | None = None) -> None:
        import iree.runtime as rt

        function = FUNCTION
        if artefact.startswith(TOGETHER):
            name, _, artefact = artefact[len(TOGETHER):].partition(b"\n")
            function = name.decode("ascii", errors="replace")
        self._context = rt.SystemContext(config=config)
        self._context.add_vm_module(rt.VmModule.copy_buffer(config.vm_instance, artefact))
        self._function = self._context.modules.module[function]
        self._out_types = out_types

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        result = self._function(*inputs)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        outs = [r.to_host() if hasattr(r, "to_host") else np.asarray(r) for r in result]
        if self._out_types is not None and len(outs) == len(self._out_types):
            # IREE's buffers are signless: a uint8 result comes back as int8 of the same bits.
            outs = [a.view(t) if a.dtype != t and a.dtype.kind in "iu" and t.kind in "iu" and
                    a.dtype.itemsize == t.itemsize else a for a, t in zip(outs, self._out_types, strict=True)]
        return outs


class IREEDriver(CompiledDriver):
    name = "iree"
    device_type = DeviceType.CPU

    def __init__(self, backend: str = "llvm-cpu", opt: str = "", flags: str = "", cache: str = "on",
                 state_dir: str | None = None) -> None:
        super().__init__(state_dir)
        if backend not in BACKENDS:
            raise ValueError(f"iree option backend={backend!r}: allowed values are {', '.join(BACKENDS)}")
        if opt and opt not in OPT_LEVELS:
            raise ValueError(f"iree option opt={opt!r}: allowed values are {', '.join(OPT_LEVELS)}")
        import iree.compiler.api as api
        import iree.runtime as rt

        self._api = api
        self.backend = backend
        self.extra_flags = tuple(flags.split())
        base = ["--iree-input-type=onnx", f"--iree-hal-target-backends={backend}"]
        if backend == "llvm-cpu":
            base.append("--iree-llvmcpu-target-cpu=host")
        if opt:
            base.append(f"--iree-opt-level={opt}")
        #: every compiler flag, the user's last (a standalone reproducer passes the same)
        self.flags = [*base, *self.extra_flags]
        session = api.Session()
        session.set_flags(*base)
        for flag in self.extra_flags:  # one at a time: the error names the flag; the user's win
            _, error, printed = _catching_stderr(lambda f=flag: session.set_flags(f))
            if error is not None:
                detail = _one_line(str(error)).removeprefix("Error parsing flags: ")
                said = _one_line(printed).removeprefix(":")
                raise ValueError(f"iree option flags: {flag!r} is refused by the compiler: {detail}"
                                 f"{' (' + said.strip() + ')' if said.strip() else ''}")
        levels = [f for f in session.get_flags() if f.startswith("--iree-opt-level=")]
        # What the compiler will use: the user's flags may set it too.
        self.opt = levels[0].split("=", 1)[1] if levels else (opt or "default")
        self._session = session
        self._compile_lock = threading.Lock()
        self._config = rt.Config(RUNTIME_DEVICE)
        self.host = host_cpu_fingerprint() if backend == "llvm-cpu" else ""
        compiler = metadata.version("iree-base-compiler")
        runtime = metadata.version("iree-base-runtime")
        self.runtime = f"iree {compiler}" + (f" (runtime {runtime})" if runtime != compiler else "")
        self.compile_cache = compile_cache.from_option(cache, self.name, self.version_string())

    def options_label(self) -> str:
        label = f"backend={self.backend}, opt={self.opt}"
        if self.extra_flags:
            label += f", flags={' '.join(self.extra_flags)}"
        if self.host:
            label += f", host={self.host}"
        return label

    # -- what can be expressed --
    def operation_problem(self, model: Model, index: int) -> str | None:
        """The exporter's reason for the operation alone, or IREE's own rules (no WHILE, no
        GENERATE_PROPOSALS)."""
        from nncert.drivers.onnxruntime.export import exported_operation

        op = model.main.operations[index]
        if op.type is OperationType.GENERATE_PROPOSALS:
            # Found by conformance (GENERATE_PROPOSALS-float32-*-s2, 3.13.0): claimed, then refused
            # at run time whenever a proposal is filtered out (DRV-2).
            return ("IREE's NonMaxSuppression refuses a score threshold above the lowest score "
                    "('unimplemented: score_threshold should be <= min(scores)'), and the export masks "
                    "the proposals filtered by size or pre_nms_max with -inf scores")
        return _while_problem(model, op) or exported_operation(model, index)[0]

    # -- HAL model -> ONNX -> vmfb --
    def translate(self, model: Model) -> bytes:
        from nncert.drivers.onnxruntime.export import canonical_bytes

        return canonical_bytes(model)

    def build(self, content: bytes, model: Model) -> bytes:
        with self._compile_lock:  # neither the session nor the importer's context is shared safely
            return self._compile(self._import(content))

    def build_together(self, contents: list[bytes]) -> list[bytes]:
        """One module with a function per model (most of a compilation's half second is the
        pipeline's set-up, paid once here), each artefact that module headed by its function."""
        names = [f"m{n}" for n in range(len(contents))]
        with self._compile_lock:
            text = self._import(*contents, names=names)
            try:
                vmfb = self._compile(text)
            except IREECompileError as e:
                # The diagnostics' lines say whose function it refused.
                starts = [n for n, line in enumerate(text.splitlines(), 1)
                          if line.lstrip().startswith("func.func @m")]
                refused = {bisect.bisect_right(starts, line) - 1 for line in e.lines} - {-1}
                if refused:
                    raise RefusedTogether(sorted(refused)) from None
                raise
        return [TOGETHER + name.encode() + b"\n" + vmfb for name in names]

    def _import(self, *contents: bytes, names: list[str] | None = None) -> str:
        """The ONNX models as MLIR text (torch dialect), by IREE's ONNX importer: one module,
        a function per model, named ``names`` (``FUNCTION`` for one model)."""
        import onnx
        from iree.compiler import ir
        from iree.compiler.extras import onnx_importer

        module = ir.Module.create(ir.Location.unknown(ir.Context())).operation
        for content, name in zip(contents, names or [FUNCTION], strict=True):
            proto = onnx.load_from_string(content)
            proto.graph.name = name
            # Without inferred shapes the importer gives intermediate values no type.
            proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
            info = onnx_importer.ModelInfo(proto)
            onnx_importer.NodeImporter.define_function(info.main_graph, module).import_all()
        return str(module)

    def _compile(self, text: str) -> bytes:
        api = self._api
        messages: list[str] = []
        lines: list[int] = []

        def collect(severity, message, size, _user):
            if severity == 2:  # IREE_COMPILER_DIAGNOSTIC_SEVERITY_ERROR
                first = ctypes.string_at(message, size).decode(errors="replace").split("\n\n", 1)[0]
                at = _LOCATION.match(first)
                if at:
                    lines.append(int(at.group(1)))
                messages.append(_LOCATION.sub("", _one_line(first)))

        callback = _DIAGNOSTIC(collect)
        inv = self._session.invocation()
        try:
            _enable_callback_diagnostics(inv, callback)
            source = api.Source.wrap_buffer(self._session, text.encode())
            if not inv.parse_source(source) or not inv.execute():
                detail = "; ".join(dict.fromkeys(messages)) or "no diagnostic"
                raise IREECompileError(f"IREE's compiler refuses the model: {detail}"[:MESSAGE_LIMIT], lines)
            output = api.Output.open_membuffer()
            try:
                inv.output_vm_bytecode(output)
                return bytes(output.map_memory())
            finally:
                output.close()
        finally:
            inv.close()
            del callback

    def standalone_runner(self, wide: Model, content: bytes) -> StandaloneRunner:
        """The MLIR that IREE's ONNX importer makes of the exported model (the .onnx beside
        it), compiled with this driver's flags and run on the ``local-sync`` device."""
        with self._compile_lock:
            mlir = self._import(content).encode()
        given = ("--iree-input-type=", "--iree-hal-target-backends=")  # compile_file's arguments
        flags = [f for f in self.flags if not f.startswith(given)]
        code = f"""def run(inputs):
    import iree.compiler
    import iree.runtime

    vmfb = iree.compiler.compile_file(str(HERE / "model.mlir"), input_type="onnx",
                                      target_backends=[{self.backend!r}], extra_args={flags!r})
    config = iree.runtime.Config({RUNTIME_DEVICE!r})
    context = iree.runtime.SystemContext(config=config)
    context.add_vm_module(iree.runtime.VmModule.copy_buffer(config.vm_instance, vmfb))
    results = context.modules.module[{FUNCTION!r}](*inputs)
    results = results if isinstance(results, (tuple, list)) else [results]
    outputs = []
    for result, output in zip(results, CASE["outputs"]):
        a, wanted = result.to_host(), np.dtype(output["dtype"])
        # IREE's integers are signless: a uint8 result comes back as int8 of the same bits
        if a.dtype != wanted and a.dtype.kind in "iu" and wanted.kind in "iu":
            a = a.view(wanted)
        outputs.append(a)
    return outputs
"""
        packages = [f"iree-base-compiler=={metadata.version('iree-base-compiler')}",
                    f"iree-base-runtime=={metadata.version('iree-base-runtime')}"]
        return StandaloneRunner({"model.mlir": mlir, "model.onnx": content}, code, packages,
                                {"flags": self.flags, "device": RUNTIME_DEVICE})

    def load_built(self, artefact: bytes, model: Model) -> IREEExecutable:
        out_types = None if model is None else \
            [np.dtype(dtype_of(model.main.operands[i].type)) for i in model.main.output_indexes]
        return IREEExecutable(self._config, artefact, out_types)


def _while_problem(model: Model, op, sg=None, seen=None) -> str | None:
    """Why a WHILE (the operation itself, or one in a subgraph an IF calls, nested too) is
    declined, or None."""
    if op.type is OperationType.WHILE:
        return ("IREE's runtime cannot stop a running invocation, so a WHILE loop still running "
                "at the loop timeout or the deadline would hang the process (EXE-9, EXE-10)")
    sg = model.main if sg is None else sg
    seen = set() if seen is None else seen
    for i in op.inputs:
        o = sg.operands[i]
        if o.type is T.SUBGRAPH and o.location.offset not in seen:
            seen.add(o.location.offset)
            inner = model.referenced[o.location.offset]
            for inner_op in inner.operations:
                if _while_problem(model, inner_op, inner, seen):
                    return (f"subgraph {o.location.offset} holds a WHILE: IREE's runtime cannot stop a "
                            f"running invocation, so a loop still running at the loop timeout or the "
                            f"deadline would hang the process (EXE-9, EXE-10)")
    return None


_DIAGNOSTIC = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_configured = False


def _enable_callback_diagnostics(inv, callback) -> None:
    """Route an invocation's diagnostics to ``callback`` (the C API's
    ireeCompilerInvocationEnableCallbackDiagnostics, which the Python wrapper lacks)."""
    global _configured
    from iree.compiler.api import ctypes_dl

    dylib = ctypes_dl._dylib
    if not _configured:
        fn = dylib.ireeCompilerInvocationEnableCallbackDiagnostics
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, _DIAGNOSTIC, ctypes.c_void_p]
        _configured = True
    dylib.ireeCompilerInvocationEnableCallbackDiagnostics(inv._inv_p, 0, callback, None)


__all__ = ["IREEDriver"]
