"""The requirement IDs of SPEC.md, with a short title each (for markers and reports)."""

from __future__ import annotations

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


def matches(requirement: str, selector: str) -> bool:
    """``ACC-2`` matches ``ACC-2`` and the family selector ``ACC``."""
    return requirement == selector or requirement.split("-")[0] == selector
