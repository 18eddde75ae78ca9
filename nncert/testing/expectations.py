"""Per-driver expectations: the known discrepancies of a real runtime, as strict xfails.

A driver package may ship ``expectations.toml`` beside its ``__init__.py``; a vendor can
pass more files with ``--expectations``. Each ``[[xfail]]`` entry names the tests it covers
with globs on the pytest node id (``*`` and ``?`` are the only wildcards), why they fail,
how big the discrepancy is and how to reproduce it; ``when`` restricts it to some driver
options, matched against the spec's options over the file's ``[defaults]``. A covered test
that passes is an error (strict), so an entry goes as soon as the runtime is fixed; nothing
is hidden by a tolerance.

A discrepancy belongs to a runtime release, so the verdict must follow the runtime
installed: the top-level ``runtime`` names the distribution the file is about (its version
is read with importlib.metadata), and an entry's ``versions`` (a PEP 440 specifier set) the
releases it was seen to fail with. An entry outside its range, or for a runtime that is not
installed, is not applied; ``load_report`` returns such entries beside the applied ones,
each with why, and an applied entry that passes says which release fixed it
(``Expectation.fixed_message``). An entry without ``versions`` applies to every release.

A random-graph cell (``test_random_graph[CELL]``) runs its graphs in a fixed order from its
seed, and a run of N graphs a cell runs the first N: an entry for a cell whose first failing
graph (of the default seed) is graph K says so with ``graphs = K`` and covers only runs of more
than K graphs a cell (the CTS-size matrix, 50 a cell, meets defects a run of 5 never reaches,
and a strict xfail must not be claimed where the failing graph is not run).

```toml
runtime = "ai-edge-litert"

[defaults]
kernels = "xnnpack"

[[xfail]]
test = ["conformance/test_operations.py::test_operation[SOFTMAX-quant8_asymm_signed-*]",
        "conformance/test_execution.py::*[SOFTMAX-quant8_asymm_signed-*]"]
when = ["kernels=ref"]
versions = ">=2.3.0"
reason = "the reference SOFTMAX aborts on an int8 input of scale 1e-8"
magnitude = "process abort (SIGABRT)"
reproduce = "python -m pytest '...' --driver=service:litert:kernels=ref"
agrees_with = "onnxruntime"
```
"""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from nncert.datafiles import read_toml
from nncert.drivers import factory_for, parse_spec

FILE_NAME = "expectations.toml"
_TOP_KEYS = {"runtime", "defaults", "xfail"}
_KEYS = {"test", "when", "versions", "reason", "reproduce", "magnitude", "agrees_with", "graphs"}


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
    #: The distribution the file is about (its ``runtime``), "" when it names none.
    runtime: str = ""
    #: The entry's specifier set over the runtime's releases, "" for every release.
    versions: str = ""
    #: The 0-based index of the first failing graph of the random-graph cells it covers (None:
    #: the first graphs fail); it covers runs of more graphs a cell only.
    graphs: int | None = None
    #: The runtime's version the entry was checked against when loaded, "" when not installed.
    runtime_version: str = ""

    def covers(self, nodeid: str, graphs: int | None = None) -> bool:
        """Whether the entry covers test ``nodeid`` in a run of ``graphs`` random graphs a cell
        (None: any)."""
        if self.graphs is not None and graphs is not None and graphs <= self.graphs:
            return False
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
        where = self.source
        if self.runtime:
            where += f"; {self.runtime} {self.runtime_version or 'not installed'}"
            if self.versions:
                where += f" (entry: {self.versions})"
        return f"{text} [{where}]"

    def fixed_message(self) -> str:
        """What a report says when a test this entry covers passes (a strict XPASS): the release
        that fixed the discrepancy, and the range that would keep the entry to the releases
        before it."""
        if not (self.runtime and self.runtime_version):
            return f"no longer fails, so the discrepancy {self.source} records is fixed: delete the entry"
        # The fixing release is the new upper bound; the entry's lower bounds stay.
        kept = [s for s in SpecifierSet(self.versions) if s.operator not in ("<", "<=")]
        fixed = f"fixed in {self.runtime} {self.runtime_version}: {self.source} no longer fails"
        if any(_at_least(s.version, self.runtime_version) for s in kept):
            # It was recorded with this very release: no release left for the entry to cover.
            return f"{fixed}, with the release it was recorded for: delete the entry"
        before = SpecifierSet(",".join([*(str(s) for s in kept), f"<{self.runtime_version}"]))
        return f'{fixed}; give it versions = "{before}"'


def _at_least(bound: str, release: str) -> bool:
    try:
        return Version(bound) >= Version(release)
    except InvalidVersion:  # a wildcard bound (==2.3.*): not a release of its own
        return False


class NotApplied(NamedTuple):
    """An entry that does not apply to this driver and runtime, and why."""

    expectation: Expectation
    why: str


class LoadReport(NamedTuple):
    """What was loaded for a driver: the entries applied, and those that were not (for a report
    to list)."""

    applied: list[Expectation]
    not_applied: list[NotApplied]


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


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution``, "" when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def load_file_report(path: Path, spec: str) -> LoadReport:
    """The entries of ``path``, split into those that apply to driver ``spec`` and the
    installed runtime, and those that do not."""
    data = read_toml(path, ExpectationsError)
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ExpectationsError(f"{path}: unknown top-level key {sorted(unknown)[0]!r} "
                                f"(known: {', '.join(sorted(_TOP_KEYS))})")
    runtime = data.get("runtime", "")
    if not isinstance(runtime, str):
        raise ExpectationsError(f"{path}: 'runtime' must be the runtime's distribution name, a string")
    runtime = runtime.strip()
    version = installed_version(runtime) if runtime else ""
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict) or any(isinstance(v, dict | list) for v in defaults.values()):
        raise ExpectationsError(f"{path}: [defaults] must be a table of option = \"value\"")
    _, _, options = parse_spec(hosted_spec(spec))
    options = {**{k: str(v) for k, v in defaults.items()}, **options}
    entries = data.get("xfail", [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: xfail must be an array of tables ([[xfail]])")
    out = LoadReport([], [])
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
        for key in ("reproduce", "magnitude", "agrees_with"):
            if not isinstance(entry.get(key, ""), str):
                raise ExpectationsError(f"{where}: {key!r} must be a string")
        graphs = entry.get("graphs")
        if graphs is not None and (not isinstance(graphs, int) or isinstance(graphs, bool) or graphs < 0):
            raise ExpectationsError(f"{where}: 'graphs' must be the index (0 or more) of the cells' first "
                                    f"failing graph")
        versions = _versions(entry, where, runtime)
        exp = Expectation(tuple(tests), entry["reason"].strip(), tuple(when),
                          entry.get("reproduce", ""), entry.get("magnitude", ""),
                          entry.get("agrees_with", ""), f"{path.parent.name}/{path.name}#{n}",
                          runtime, str(versions) if versions is not None else "", graphs, version)
        why = _not_applied_why(exp, options, versions)
        if why:
            out.not_applied.append(NotApplied(exp, why))
        else:
            out.applied.append(exp)
    return out


def _versions(entry: dict, where: str, runtime: str) -> SpecifierSet | None:
    """The entry's ``versions`` as a specifier set, None when it has none."""
    if "versions" not in entry:
        return None
    text = entry["versions"]
    if not runtime:
        raise ExpectationsError(f"{where}: 'versions' needs the file's top-level runtime = "
                                f"\"DISTRIBUTION\" (whose releases it ranges over)")
    if not isinstance(text, str) or not text.strip():
        raise ExpectationsError(f"{where}: 'versions' must be a PEP 440 specifier set such as \"<1.32\"")
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise ExpectationsError(f"{where}: 'versions' = {text!r} is not a PEP 440 specifier set "
                                f"(for example \">=2.3\" or \">=1.20,<1.32\")") from None


def _not_applied_why(exp: Expectation, options: dict[str, str], versions: SpecifierSet | None) -> str:
    """Why ``exp`` does not apply to a driver with ``options`` and the installed runtime; ""
    when it does."""
    if not exp.applies(options):
        have = ", ".join(f"{k}={options.get(k, '(unset)')}" for k in dict.fromkeys(
            w.partition("=")[0] for w in exp.when))
        return f"applies when {' and '.join(exp.when)}; the driver runs with {have}"
    if versions is None:
        return ""
    if not exp.runtime_version:
        return f"applies to {exp.runtime} {versions}; {exp.runtime} is not installed"
    # A runtime's nightly or release candidate is judged like a release: it is what runs.
    if not versions.contains(exp.runtime_version, prereleases=True):
        return f"applies to {exp.runtime} {versions}; installed {exp.runtime_version}"
    return ""


def load_file(path: Path, spec: str) -> list[Expectation]:
    """The entries of ``path`` that apply to driver ``spec`` and the installed runtime."""
    return load_file_report(path, spec).applied


def load_report(spec: str, extra: list[str] | tuple[str, ...] = ()) -> LoadReport:
    """Every expectation for driver ``spec`` (its package's file, then ``extra`` files), split
    into the entries applied and those not applied, with why."""
    paths = [p for p in [driver_file(spec)] if p is not None] + [Path(p) for p in extra]
    out = LoadReport([], [])
    for p in paths:
        one = load_file_report(p, spec)
        out.applied.extend(one.applied)
        out.not_applied.extend(one.not_applied)
    return out


def load(spec: str, extra: list[str] | tuple[str, ...] = ()) -> list[Expectation]:
    """The expectations that apply to driver ``spec``: its package's file, then ``extra`` files."""
    return load_report(spec, extra).applied


def match(expectations: list[Expectation], nodeid: str, graphs: int | None = None) -> Expectation | None:
    for exp in expectations:
        if exp.covers(nodeid, graphs):
            return exp
    return None
