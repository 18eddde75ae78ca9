"""Driver registry: resolve a driver spec such as ``reference``, ``mutant:quant_off_by_2``,
``litert:kernels=ref,threads=1`` or ``my_package.module:factory`` to a driver instance.

Names come from the built-in table below and from the ``nncert.drivers`` entry-point group,
so an installed package can plug its own driver in. Options after ``:`` are comma-separated
``key=value`` pairs passed to the factory as keyword arguments (strings); a bare word is a
positional argument (``mutant:NAME``). A factory marked ``raw_spec`` (``service``) receives
the whole rest of the spec, itself another driver's spec (``service:litert:kernels=ref``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

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
    "mutant": ("nncert.drivers.mutants:create",
               "deliberately faulty drivers the suites must catch: mutant:NAME"),
    "service": ("nncert.drivers.service:create",
                "any driver hosted in a child process over a Unix socket: service:SPEC, service:@PATH"),
}


class DriverSpecError(ValueError):
    """A driver spec that names no known driver or passes options it rejects."""


def known_drivers() -> dict[str, str]:
    """Every name that can be plugged in, with a description."""
    names = {name: desc for name, (_, desc) in BUILTIN.items()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, f"entry point {ep.value}")
    return dict(sorted(names.items()))


def parse_spec(spec: str) -> tuple[str, list[str], dict[str, str]]:
    """Split ``name[:opts]`` (or ``pkg.module:factory[:opts]``) into name, positionals, options."""
    spec = spec.strip()
    if not spec:
        raise DriverSpecError("empty driver spec")
    head, _, rest = spec.partition(":")
    if "." in head:  # an import path: module:factory[:options]
        factory, _, rest = rest.partition(":")
        if not factory:
            raise DriverSpecError(f"driver spec {spec!r}: an import path needs module:factory")
        head = f"{head}:{factory}"
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


def _import(path: str) -> Callable[..., Driver]:
    module, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except Exception as e:  # a vendor module may fail any way at import (OSError opening a device)
        raise DriverSpecError(f"cannot import driver module {module!r}: {_why(e)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise DriverSpecError(f"module {module!r} has no {attr!r}") from None
    return obj


def factory_for(name: str) -> Callable[..., Driver]:
    if ":" in name:
        return _import(name)
    if name in BUILTIN:
        return _import(BUILTIN[name][0])
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            return ep.load()
        except Exception as e:
            raise DriverSpecError(f"driver {name!r} (entry point {ep.value}) cannot be loaded: "
                                  f"{_why(e)}") from None
    raise DriverSpecError(f"unknown driver {name!r}; known drivers: {', '.join(known_drivers())}")


def load_driver(spec: str, extra_options: dict[str, str] | None = None) -> Driver:
    """Instantiate the driver ``spec`` names; options are merged with ``extra_options``."""
    name, args, options = parse_spec(spec)
    factory = factory_for(name)
    if getattr(factory, "raw_spec", False):
        # A wrapper (service:SPEC): everything after its name is another driver's spec.
        args, options = [spec.strip().partition(":")[2]], {}
    options.update(extra_options or {})
    try:
        driver = factory(*args, **options)
    except DriverSpecError:
        raise
    except (TypeError, ValueError, KeyError) as e:  # options the factory rejects
        raise DriverSpecError(f"driver {spec!r}: {e}") from None
    except Exception as e:  # the factory could not start the driver (OSError: cannot open /dev/npu0)
        raise DriverSpecError(f"driver {spec!r} could not be started: {_why(e)}") from None
    if not isinstance(driver, Driver):
        raise DriverSpecError(f"driver {spec!r}: factory returned {type(driver).__name__}, not a Driver")
    return driver
