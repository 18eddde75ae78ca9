"""The requirements a conforming driver must meet: docs/requirements.md is the source (its IDs,
their full text, the families and the notes), read from the checkout or from the wheel's
nncert/docs. ``REQUIREMENTS`` gives each ID a short title for markers and reports; a test keeps
its IDs equal to the document's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from nncert.resources import docs_dir

REQUIREMENTS: dict[str, str] = {
    "DRV-1": "capabilities and device queries are stable",
    "DRV-2": "supported operations are honest: claimed means prepared and run",
    "DRV-3": "prepareModel accepts unknown dimensions at compile time",
    "DRV-4": "several prepared models alive, executions interleaved",
    "DRV-5": "releasing a prepared model frees its resources",
    "DRV-6": "first execution not much slower than later ones",
    "EXE-1": "synchronous, asynchronous and fenced execution",
    "EXE-2": "request data is row-major without padding",
    "EXE-3": "same results on every execution path",
    "EXE-4": "actual output shapes are returned",
    "EXE-5": "OUTPUT_INSUFFICIENT_SIZE with the shapes",
    "EXE-6": "unknown internal/output dimensions; inputs specified at execution",
    "EXE-7": "timing: UINT64_MAX when not measured or failed; driver >= device",
    "EXE-8": "fenced timing: launched and fenced",
    "EXE-9": "control flow: IF and WHILE, loop timeout",
    "EXE-10": "quality of service: priority and deadlines",
    "VAL-1": "invalid models and requests give INVALID_ARGUMENT",
    "VAL-2": "one client cannot reach another client's data",
    "VAL-3": "fuzzed input never crashes the driver",
    "ACC-1": "floating-point tolerance (fp32, fp16, relaxed)",
    "ACC-2": "quantised results within one step (MobileNet: three)",
    "ACC-3": "boolean results exact",
    "ACC-4": "signed and unsigned 8-bit variants agree up to an offset of 128",
    "ACC-5": "random graphs within the CTS criteria",
    "ACC-6": "every claimed operation passes its generated tests in every variant",
    "CACHE-1": "cache hit, miss and no-cache paths",
    "CACHE-2": "number of cache files; wrong handle counts are invalid",
    "CACHE-3": "data cache tampering gives at worst wrong values",
    "CACHE-4": "a corrupted model cache is detected and refused",
    "CACHE-5": "TOCTOU: hash over the driver's own copy",
    "CACHE-6": "token collisions never crash",
    "CACHE-7": "concurrent cache readers and writers",
    "MEM-1": "constants: CONSTANT_COPY and CONSTANT_REFERENCE",
    "MEM-2": "execution inputs and outputs in memory pools",
    "MEM-3": "ashmem, mmap_fd and hardware_buffer_blob pools",
    "MEM-4": "memory domains: allocate with roles, validated tokens",
    "MEM-5": "IBuffer copyTo / copyFrom",
    "MEM-6": "dynamic-shape device buffers",
    "MEM-7": "concurrent buffer access never crashes or blocks",
    "BURST-1": "burst objects for rapid executions",
    "BURST-2": "burst memory caching by slot, released when told",
    "BURST-3": "fast message queues; results equal other paths",
    "BURST-4": "a dead queue peer never blocks forever",
    "MLTS-1": "real models on real data against the CPU baseline",
    "MLTS-2": "stress and crash tests: SUCCESS / FAILURE / HANG / CRASH",
    "MLTS-3": "results presented as a report",
    "VER-1": "HAL versions and compliance",
}

#: Where the document is named in messages (its path in the repository).
DOCUMENT = "docs/requirements.md"

_FAMILY = re.compile(r"^## (?P<title>.+) \((?P<code>[A-Z]+)\)\s*$")
_ITEM = re.compile(r"^- (?P<id>[A-Z]+-\d+) ")
_NOTES = re.compile(r"^### Notes on (?P<id>[A-Z]+-\d+)\b")


@dataclass(frozen=True)
class Requirement:
    id: str
    family: str
    #: The requirement as the document words it ("ACC-2 Quantised: ..."): the list item's
    #: lines, without the marker and the indentation.
    text: str
    #: The document's "### Notes on ID" section, heading included; "" when it has none.
    notes: str = ""


@dataclass(frozen=True)
class Family:
    code: str
    title: str
    #: The family's whole section of the document, heading, requirements and notes.
    section: str


@dataclass(frozen=True)
class Document:
    text: str
    families: dict[str, Family]
    requirements: dict[str, Requirement]

    def show(self, selector: str) -> str:
        """What ``nncert requirements SELECTOR`` prints: the whole document (""), one
        requirement with its notes (``ACC-5``) or a family's section (``ACC``). KeyError names
        what is unknown."""
        if not selector:
            return self.text.rstrip("\n")
        key = selector.strip().upper()
        if key in self.requirements:
            req = self.requirements[key]
            return f"{req.text}\n\n{req.notes}" if req.notes else req.text
        if key in self.families:
            return self.families[key].section
        raise KeyError(f"no requirement or family {selector!r} in {DOCUMENT} "
                       f"(an ID such as ACC-2, or a family: {', '.join(self.families)})")


def document_path() -> Path:
    return docs_dir() / "requirements.md"


def _level(line: str) -> int:
    """A markdown heading's level (## is 2); 0 for any other line."""
    return len(line) - len(line.lstrip("#"))


def parse(text: str) -> Document:
    """The families, requirements and notes of the requirements document ``text``."""
    lines = text.rstrip("\n").splitlines()
    families: dict[str, Family] = {}
    items: dict[str, tuple[str, list[str]]] = {}
    notes: dict[str, str] = {}
    family = ""
    for n, line in enumerate(lines):
        if _level(line):
            # A section runs to the next heading of its level or above.
            end = next((m for m in range(n + 1, len(lines)) if 0 < _level(lines[m]) <= _level(line)),
                       len(lines))
            section = "\n".join(lines[n:end]).rstrip()
            heading = _FAMILY.match(line)
            if heading:
                family = heading["code"]
                families[family] = Family(family, heading["title"], section)
            notes_of = _NOTES.match(line)
            if notes_of:
                notes[notes_of["id"]] = section
        item = _ITEM.match(line)
        if item and family:
            if item["id"] in items:
                raise ValueError(f"{DOCUMENT}: {item['id']} is defined twice")
            # The item's continuation lines are indented under its text.
            body = [line[2:]]
            for more in lines[n + 1:]:
                if not more.startswith("  ") or not more.strip():
                    break
                body.append(more.strip())
            items[item["id"]] = (family, body)
    requirements = {rid: Requirement(rid, fam, "\n".join(body), notes.get(rid, ""))
                    for rid, (fam, body) in items.items()}
    unknown = sorted(set(notes) - set(requirements))
    if unknown:
        raise ValueError(f"{DOCUMENT}: notes on {unknown[0]}, which is no requirement")
    return Document(text, families, requirements)


@cache
def document() -> Document:
    """The requirements document nncert ships, parsed."""
    return parse(document_path().read_text())


def matches(requirement: str, selector: str) -> bool:
    """``ACC-2`` matches ``ACC-2`` and the family selector ``ACC``."""
    return requirement == selector or requirement.split("-")[0] == selector
