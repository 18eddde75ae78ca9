"""Driver registry: resolve a driver spec such as ``reference``, ``mutant:quant_off_by_2``,
``litert:kernels=ref,threads=1`` or ``my_package.module:MyDriver`` to a driver instance.

Names come from the built-in table below and from the ``nncert.drivers`` entry-point group,
so an installed package can plug its own driver in. Options after ``:`` are comma-separated
``key=value`` pairs passed to the factory as keyword arguments (strings); a bare word is a
positional argument (``mutant:NAME``). A factory marked ``raw_spec`` (``service``) receives
the whole rest of the spec, itself another driver's spec (``service:litert:kernels=ref``).

An import path ``module:attr[:options]`` names a driver without registering it. ``module``
may be dotted (``my_npu.driver:MyNpuDriver``) or not (``my_npu:MyNpuDriver``): a first part
that is no registered name, followed by a Python identifier, is an import path. The module
is imported, and ``attr`` must then be a ``Driver`` subclass or a function marked with
``@driver_factory``: anything else is refused before it is called, so that a spec such as
``os.path:os.system:...`` runs nothing (docs/security.md). A registered name's factory
(built-in or entry point) may be any callable: registering it is the vendor's word that it
makes a Driver; a class that is no Driver subclass is refused there too.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, NamedTuple, TypeVar

from nncert.drivers.base import Driver
from nncert.extras import install_hint
from nncert.hal.errors import describe_exception

ENTRY_POINT_GROUP = "nncert.drivers"

#: name -> (import path of the factory, one-line description)
BUILTIN: dict[str, tuple[str, str]] = {
    "reference": ("nncert.drivers.reference:ReferenceDriver",
                  "numpy reference kernels of the operation catalogue (the golden)"),
    "litert": ("nncert.drivers.litert:LiteRTDriver",
               "LiteRT (TFLite) CPU runtime: litert:kernels=xnnpack|builtin|ref,threads=N,delegate=PATH"),
    "onnxruntime": ("nncert.drivers.onnxruntime:OnnxRuntimeDriver",
                    "ONNX Runtime: onnxruntime:provider=NAME,opt_level=LEVEL,threads=N"),
    "openvino": ("nncert.drivers.openvino:OpenVINODriver",
                 "OpenVINO: openvino:device=CPU,precision=f32|bf16|f16,threads=N,frontend=onnx|tflite,"
                 "cache=on|off|DIR"),
    "iree": ("nncert.drivers.iree:IREEDriver",
             "IREE (MLIR compiler + runtime): iree:backend=llvm-cpu|vmvx,opt=O0..O3,flags=...,"
             "cache=on|off|DIR"),
    "tvm": ("nncert.drivers.tvm:TVMDriver",
            "Apache TVM (Relax): tvm:target=llvm...,opt_level=0..3,cache=on|off|DIR"),
    "mutant": ("nncert.drivers.mutants:create",
               "deliberately faulty drivers the suites must catch: mutant:NAME"),
    "service": ("nncert.drivers.service:create",
                "any driver hosted in a child process over a Unix socket: service:SPEC, service:@PATH"),
}


#: Real-runtime drivers -> (the distributions they need, the extra that installs them). LiteRT
#: also runs on tflite-runtime, its older packaging.
RUNTIMES: dict[str, tuple[tuple[str, ...], str]] = {
    "litert": (("ai-edge-litert|tflite-runtime",), "litert"),
    "onnxruntime": (("onnxruntime", "onnx"), "onnx"),
    "openvino": (("openvino", "onnx"), "openvino"),
    "iree": (("iree-base-compiler", "iree-base-runtime", "onnx"), "iree"),
    "tvm": (("apache-tvm", "onnx"), "tvm"),
}


def runtime_status(name: str) -> str | None:
    """For a real-runtime driver: its runtime's release ("openvino 2026.4.1") or how to install
    it; None for any other driver. Read from the installed distributions' metadata, without
    importing the runtime."""
    from importlib.metadata import PackageNotFoundError, version

    if name not in RUNTIMES:
        return None
    needed, extra = RUNTIMES[name]
    found = []
    for alternatives in needed:
        for dist in alternatives.split("|"):
            try:
                found.append(f"{dist} {version(dist)}")
                break
            except PackageNotFoundError:
                continue
        else:
            return f"not installed: pip install 'nncert[{extra}]'"
    return "installed: " + ", ".join(found)


class DriverSpecError(ValueError):
    """A driver spec that names no known driver or passes options it rejects."""


#: The attribute ``driver_factory`` sets on a function.
FACTORY_MARK = "__nncert_driver_factory__"

F = TypeVar("F", bound=Callable[..., Driver])


def driver_factory(function: F) -> F:
    """Mark ``function`` (it returns a Driver) as one that an import-path spec may name:
    ``--driver=my_npu.driver:create`` calls only functions so marked (and Driver classes)."""
    setattr(function, FACTORY_MARK, True)
    return function


class Factory(NamedTuple):
    """A resolved driver name: what to call, and how errors name it."""

    call: Callable[..., Driver]
    #: ``module:attr`` of the factory.
    target: str
    #: The entry point's name when the factory came from one, else "".
    entry_point: str = ""

    def label(self, spec: str) -> str:
        """How an error names the driver of ``spec``: an entry point's target included."""
        return f"driver {spec!r}" + (f" (entry point {self.target})" if self.entry_point else "")


def known_drivers() -> dict[str, str]:
    """Every name that can be plugged in, with a description."""
    names = {name: desc for name, (_, desc) in BUILTIN.items()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, f"entry point {ep.value}")
    return dict(sorted(names.items()))


def _registered(name: str) -> bool:
    return name in BUILTIN or bool(entry_points(group=ENTRY_POINT_GROUP, name=name))


def _attribute_path(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def parse_spec(spec: str) -> tuple[str, list[str], dict[str, str]]:
    """Split ``name[:opts]`` (or ``module:attr[:opts]``) into name, positionals, options."""
    spec = spec.strip()
    if not spec:
        raise DriverSpecError("empty driver spec")
    head, _, rest = spec.partition(":")
    attr, _, after = rest.partition(":")
    if "." in head or (head.isidentifier() and _attribute_path(attr) and not _registered(head)):
        # An import path: module:attr[:options]
        if not _attribute_path(attr):
            raise DriverSpecError(f"driver spec {spec!r}: an import path needs module:attribute")
        head, rest = f"{head}:{attr}", after
    args: list[str] = []
    options: dict[str, str] = {}
    for token in filter(None, (t.strip() for t in rest.split(","))):
        key, eq, value = token.partition("=")
        if eq:
            if not key:
                raise DriverSpecError(f"driver spec {spec!r}: option {token!r} has no name")
            options[key] = value
        elif options:
            raise DriverSpecError(f"driver spec {spec!r}: positional {token!r} after key=value options")
        else:
            args.append(token)
    return head, args, options


def _why(e: BaseException) -> str:
    """One line: the missing optional dependency and how to install it, or the exception."""
    return install_hint(e) or describe_exception(e)


def _kind(obj: Any) -> str:
    """What an import path named, for an error: "the function os.system" (no call, no repr)."""
    name = getattr(obj, "__qualname__", None)
    if not isinstance(name, str):
        return f"a {type(obj).__name__} object"
    module = getattr(obj, "__module__", None)
    what = "class" if isinstance(obj, type) else "function" if callable(obj) else type(obj).__name__
    return f"the {what} {module + '.' if isinstance(module, str) else ''}{name}"


def _resolve(target: str, entry_point: str = "", registered: bool = True) -> Factory:
    """The factory at ``target`` (``module:attr``), checked before anything is called."""
    label = f"driver {entry_point!r} (entry point {target}): " if entry_point else ""
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except (Exception, SystemExit) as e:  # a vendor module may fail any way at import (OSError
        # opening a device, a sys.exit): one line naming the module
        raise DriverSpecError(f"{label}cannot import driver module {module!r}: {_why(e)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise DriverSpecError(f"{label}module {module!r} has no {attr!r}") from None
        except Exception as e:  # a module __getattr__ that raises
            raise DriverSpecError(f"{label}{target}: {_why(e)}") from None
    if isinstance(obj, type):
        if not issubclass(obj, Driver):
            raise DriverSpecError(f"{label}{target} is {_kind(obj)}, not a subclass of "
                                  f"nncert.drivers.base.Driver: refused, nothing was called")
    elif registered:
        if not callable(obj):
            raise DriverSpecError(f"{label}{target} is {_kind(obj)}, not a driver factory")
    elif getattr(obj, FACTORY_MARK, False) is not True:
        raise DriverSpecError(f"{target} is {_kind(obj)}: an import path must name a Driver subclass or a "
                              f"function marked @nncert.drivers.driver_factory (refused, nothing was called)")
    return Factory(obj, target, entry_point)


def resolve(name: str) -> Factory:
    """The factory ``name`` (a spec's first part, as ``parse_spec`` gives it) stands for."""
    if ":" in name:
        module = name.partition(":")[0]
        if "." not in module and importlib.util.find_spec(module) is None:
            raise DriverSpecError(f"unknown driver {module!r}, and no module {module!r} for the import path "
                                  f"{name!r}; known drivers: {', '.join(known_drivers())}")
        return _resolve(name, registered=False)
    if name in BUILTIN:
        return _resolve(BUILTIN[name][0])
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        return _resolve(f"{ep.module}:{ep.attr}", entry_point=name)
    raise DriverSpecError(f"unknown driver {name!r}; known drivers: {', '.join(known_drivers())}")


def factory_for(name: str) -> Callable[..., Driver]:
    """The checked factory of ``name`` (see ``resolve``)."""
    return resolve(name).call


def load_driver(spec: str, extra_options: dict[str, str] | None = None) -> Driver:
    """Instantiate the driver ``spec`` names; options are merged with ``extra_options``."""
    name, args, options = parse_spec(spec)
    factory = resolve(name)
    if getattr(factory.call, "raw_spec", False):
        # A wrapper (service:SPEC): everything after its name is another driver's spec.
        args, options = [spec.strip().partition(":")[2]], {}
    options.update(extra_options or {})
    label = factory.label(spec.strip())
    try:
        driver = factory.call(*args, **options)
    except DriverSpecError:
        raise
    except (TypeError, ValueError, KeyError) as e:  # options the factory rejects
        raise DriverSpecError(f"{label}: {e}") from None
    except Exception as e:  # the factory could not start the driver (OSError: cannot open /dev/npu0)
        raise DriverSpecError(f"{label} could not be started: {_why(e)}") from None
    if not isinstance(driver, Driver):
        raise DriverSpecError(f"{label}: {factory.target} returned {type(driver).__name__}, not a Driver")
    return driver
