"""Certification plans: which suites run, with which pytest arguments, under which deadlines.

A plan is data (a TOML file; ``smoke``, ``standard`` and ``full`` ship in ``plans/``, and a
vendor may pass a file of their own), the same whatever the driver. Its SHA-256 goes into the
report, so a reviewer knows exactly what was run. The keys are documented in
docs/certification.md ("Plans").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from nncert.datafiles import parse_toml
from nncert.resources import SUITE_DIRS, suites_root

PLANS_DIR = Path(__file__).resolve().parent / "plans"
_PLAN_KEYS = {"name", "description", "test_timeout", "suite"}
_SUITE_KEYS = {"name", "title", "paths", "args", "timeout", "test_timeout", "exclusive"}
#: The longest deadline a plan may set (a week): beyond what any clock call accepts, a larger
#: number would fail the run instead of bounding it.
_MAX_SECONDS = 7 * 24 * 3600


class PlanError(ValueError):
    """A plan that cannot be used: unknown name, malformed file (the message says where)."""


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    #: Test files, relative to the suites root (conformance/..., mlts/..., fuzz/...).
    paths: tuple[str, ...]
    #: Extra pytest arguments (selection with -k, the suite's own options).
    args: tuple[str, ...]
    #: The whole suite's deadline, seconds: past it, the child is killed and what did not run
    #: has no outcome (the report is INCOMPLETE).
    timeout: float
    #: How long one test may run before it is a HANG.
    test_timeout: float
    #: Run alone (latency measurements must not share the machine with another suite).
    exclusive: bool = False


@dataclass(frozen=True)
class Plan:
    name: str
    description: str
    suites: tuple[Suite, ...]
    #: The plan file as it was read, and its SHA-256 (hex): what the report records.
    text: str
    sha256: str

    def suite(self, name: str) -> Suite:
        for s in self.suites:
            if s.name == name:
                return s
        raise PlanError(f"plan {self.name!r} has no suite {name!r}; its suites: {self.suite_names()}")

    def suite_names(self) -> str:
        return ", ".join(s.name for s in self.suites)


def known_plans() -> list[str]:
    return sorted(p.stem for p in PLANS_DIR.glob("*.toml"))


def plan_path(name: str) -> Path:
    """The file of a shipped plan (``smoke``) or a plan file's own path."""
    if name in known_plans():
        return PLANS_DIR / f"{name}.toml"
    path = Path(name)
    if path.suffix == ".toml" and path.is_file():
        return path
    raise PlanError(f"unknown plan {name!r}; known plans: {', '.join(known_plans())} (or a plan file .toml)")


def load_plan(name: str) -> Plan:
    """The plan ``name`` (a shipped plan's name, or the path of a plan file)."""
    path = plan_path(name)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PlanError(f"plan {path}: cannot read it: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"plan {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
                        ) from None
    return parse_plan(text, str(path))


def parse_plan(text: str, where: str = "plan") -> Plan:
    """A plan from its TOML text; PlanError names ``where`` and the key at fault."""
    if not isinstance(text, str):
        raise PlanError(f"{where}: the plan's text must be a string")
    data = parse_toml(text, where, PlanError)
    unknown = set(data) - _PLAN_KEYS
    if unknown:
        raise PlanError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_PLAN_KEYS))})"
        )
    name = _typed(data, "name", str, where)
    default_test_timeout = _seconds(data, "test_timeout", where, 300.0)
    entries = data.get("suite")
    if not isinstance(entries, list) or not entries:
        raise PlanError(f"{where}: a plan needs at least one [[suite]]")
    suites: list[Suite] = []
    for n, entry in enumerate(entries, 1):
        at = f"{where}: [[suite]] {n}"
        if not isinstance(entry, dict):
            raise PlanError(f"{at} is not a table")
        unknown = set(entry) - _SUITE_KEYS
        if unknown:
            raise PlanError(
                f"{at}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_SUITE_KEYS))})"
            )
        suite_name = _typed(entry, "name", str, at)
        if not suite_name.replace("_", "").isalnum() or suite_name in (s.name for s in suites):
            raise PlanError(f"{at}: suite name {suite_name!r} must be unique, letters, digits and _")
        paths = _strings(entry, "paths", at)
        if not paths:
            raise PlanError(f"{at}: 'paths' names no test file")
        for p in paths:
            if not p or Path(p).is_absolute() or ".." in Path(p).parts or Path(p).parts[0] not in SUITE_DIRS:
                raise PlanError(f"{at}: path {p!r} must lie in {', '.join(d + '/' for d in SUITE_DIRS)}")
        suites.append(
            Suite(
                name=suite_name,
                title=_typed(entry, "title", str, at, suite_name),
                paths=tuple(paths),
                args=tuple(_strings(entry, "args", at)),
                timeout=_seconds(entry, "timeout", at, 3600.0),
                test_timeout=_seconds(entry, "test_timeout", at, default_test_timeout),
                exclusive=_typed(entry, "exclusive", bool, at, False),
            )
        )
    return Plan(
        name, _typed(data, "description", str, where, ""), tuple(suites), text,
        hashlib.sha256(text.encode()).hexdigest(),
    )


def suite_files(suite: Suite) -> list[Path]:
    """The suite's test files, which must exist in this nncert's suites root."""
    root = suites_root()
    files = [root / p for p in suite.paths]
    for f in files:
        if not f.exists():
            raise PlanError(f"suite {suite.name!r}: {f} does not exist")
    return files


def _typed(data: dict, key: str, kind: type, where: str, default: object = None):
    value = data.get(key, default)
    if not isinstance(value, kind):
        raise PlanError(f"{where}: {key!r} must be a {kind.__name__}")
    return value


def _strings(data: dict, key: str, where: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and "\0" not in v for v in value):
        raise PlanError(f"{where}: {key!r} must be a list of strings (without NUL characters)")
    return value


def _seconds(data: dict, key: str, where: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= _MAX_SECONDS:
        raise PlanError(f"{where}: {key!r} must be a positive number of seconds, at most {_MAX_SECONDS:,}")
    return float(value)
