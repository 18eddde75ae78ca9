"""Per-driver expectations: the known discrepancies of a real runtime, as strict xfails.

A driver package may ship ``expectations.toml`` beside its ``__init__.py``; a vendor can
pass more files with ``--expectations``. Each ``[[xfail]]`` entry names the tests it covers
with globs on the pytest node id (``*`` and ``?`` are the only wildcards), why they fail,
how big the discrepancy is and how to reproduce it; ``when`` restricts it to some driver
options, matched against the spec's options over the file's ``[defaults]``. A covered test
that passes is an error (strict), so an entry goes as soon as the runtime is fixed; nothing
is hidden by a tolerance.

```toml
[defaults]
kernels = "xnnpack"

[[xfail]]
test = ["conformance/test_operations.py::test_operation[SOFTMAX-quant8_asymm_signed-*]",
        "conformance/test_execution.py::*[SOFTMAX-quant8_asymm_signed-*]"]
when = ["kernels=ref"]
reason = "the reference SOFTMAX aborts on an int8 input of scale 1e-8"
magnitude = "process abort (SIGABRT)"
reproduce = "python -m pytest '...' --driver=service:litert:kernels=ref"
agrees_with = "onnxruntime"
```
"""

from __future__ import annotations

import fnmatch
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from nncert.drivers import factory_for, parse_spec

FILE_NAME = "expectations.toml"
_KEYS = {"test", "when", "reason", "reproduce", "magnitude", "agrees_with"}


class ExpectationsError(ValueError):
    """A malformed expectations file (the message names the file and the entry)."""


@dataclass(frozen=True)
class Expectation:
    tests: tuple[str, ...]
    reason: str
    when: tuple[str, ...] = ()
    reproduce: str = ""
    magnitude: str = ""
    agrees_with: str = ""
    source: str = ""

    def covers(self, nodeid: str) -> bool:
        # Only * and ? are wildcards: node ids are full of brackets.
        return any(fnmatch.fnmatchcase(nodeid, t.replace("[", "[[]")) for t in self.tests)

    def applies(self, options: dict[str, str]) -> bool:
        """Every KEY=VALUE of ``when`` holds (VALUE may list alternatives: a|b)."""
        return all(options.get(k) in v.split("|") for k, _, v in (w.partition("=") for w in self.when))

    def describe(self) -> str:
        text = self.reason
        if self.magnitude:
            text += f" ({self.magnitude})"
        if self.agrees_with:
            text += f"; agrees with {self.agrees_with}"
        return f"{text} [{self.source}]"


def hosted_spec(spec: str) -> str:
    """The spec of the driver that really runs: ``service:litert:x=1`` -> ``litert:x=1``."""
    spec = spec.strip()
    while spec.startswith("service:") and not spec.startswith("service:@"):
        spec = spec[len("service:"):]
    return spec


def driver_file(spec: str) -> Path | None:
    """The expectations file shipped with the driver package ``spec`` names, if any."""
    name, _, _ = parse_spec(hosted_spec(spec))
    factory = factory_for(name)
    module = sys.modules.get(getattr(factory, "__module__", ""), None)
    where = getattr(module, "__file__", None)
    if not where:
        return None
    path = Path(where).parent / FILE_NAME
    return path if Path(where).name == "__init__.py" and path.is_file() else None


def load_file(path: Path, spec: str) -> list[Expectation]:
    """The entries of ``path`` that apply to driver ``spec``."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ExpectationsError(f"{path}: {e}") from None
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ExpectationsError(f"{path}: [defaults] must be a table")
    _, _, options = parse_spec(hosted_spec(spec))
    options = {**{k: str(v) for k, v in defaults.items()}, **options}
    entries = data.get("xfail", [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: xfail must be an array of tables ([[xfail]])")
    out = []
    for n, entry in enumerate(entries, 1):
        where = f"{path}: [[xfail]] entry {n}"
        if not isinstance(entry, dict):
            raise ExpectationsError(f"{where} is not a table")
        unknown = set(entry) - _KEYS
        if unknown:
            raise ExpectationsError(f"{where}: unknown key {sorted(unknown)[0]!r} "
                                    f"(known: {', '.join(sorted(_KEYS))})")
        tests = entry.get("test")
        if isinstance(tests, str):
            tests = [tests]
        if not tests or not isinstance(tests, list) or not all(isinstance(t, str) and t for t in tests):
            raise ExpectationsError(f"{where}: 'test' is required: a node-id glob or a list of them")
        if not isinstance(entry.get("reason"), str) or not entry["reason"].strip():
            raise ExpectationsError(f"{where}: 'reason' is required and must be a string")
        when = entry.get("when", [])
        if isinstance(when, str):
            when = [when]
        if not isinstance(when, list) or not all(isinstance(w, str) and "=" in w for w in when):
            raise ExpectationsError(f"{where}: 'when' must be a list of KEY=VALUE strings")
        exp = Expectation(tuple(tests), entry["reason"].strip(), tuple(when),
                          str(entry.get("reproduce", "")), str(entry.get("magnitude", "")),
                          str(entry.get("agrees_with", "")), f"{path.name}#{n}")
        if exp.applies(options):
            out.append(exp)
    return out


def load(spec: str, extra: list[str] | tuple[str, ...] = ()) -> list[Expectation]:
    """Every expectation for driver ``spec``: its package's file, then ``extra`` files."""
    paths = [p for p in [driver_file(spec)] if p is not None] + [Path(p) for p in extra]
    out: list[Expectation] = []
    for p in paths:
        out.extend(load_file(p, spec))
    return out


def match(expectations: list[Expectation], nodeid: str) -> Expectation | None:
    for exp in expectations:
        if exp.covers(nodeid):
            return exp
    return None
