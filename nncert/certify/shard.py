"""Sharded certification: one plan run on N machines at once, each running a deterministic 1/N
of every suite's tests (``nncert certify --shard I/N``), the N reports merged into one
(nncert.certify.merge). docs/certification.md, "Sharding".

The unit is the test, not the suite: a plan has a dozen suites of very unequal size (the
per-operation suite is most of a run), so a shard runs every suite over its share of that
suite's tests. Each suite's child pytest collects the suite as an unsharded run would (the same
``-k`` and ``-m``), then keeps its shard's tests (the pytest plugin's ``--nncert-shard``). Every
shard computes the same partition on its own, from the collected ids and the *partition file*
(``partition.json``, the same bytes on every shard):

- ``round-robin`` (no earlier report): a suite's ids sorted, dealt one to each shard in turn,
  the first to shard ``(k mod N) + 1`` for the plan's k-th suite, so that suites' remainders do
  not all fall on shard 1.
- ``durations`` (``--durations-from REPORT``): the earlier report's test durations; longest
  first (ties by id), each test into the shard with the least work so far (ties: the first from
  the suite's rotation on). Work carries over from suite to suite, as the earlier run's tests of
  the suites before would have filled the shards, so the whole plan is balanced, not each suite
  alone. A test the earlier report has no duration of weighs the median of its suite's known
  ones (of the whole report's, if the suite has none; one second if the report has none).

Durations are whole milliseconds (at least 1): integer sums, the same on every machine.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PARTITION_FILE = "partition.json"
ROUND_ROBIN = "round-robin"
DURATIONS = "durations"
METHODS = (ROUND_ROBIN, DURATIONS)
#: The most shards a run may be cut into (as many as --jobs may be).
MAX_SHARDS = 1024
#: The weight of a test nothing is known of, when the earlier report has no duration at all.
_UNKNOWN_MS = 1000


class ShardError(ValueError):
    """A shard or partition that cannot be used: one line naming what is wrong."""


def parse_shard(text: str, option: str = "--shard") -> tuple[int, int]:
    """``"I/N"`` as (I, N), 1 <= I <= N; ShardError naming ``option`` otherwise."""
    m = re.fullmatch(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", text or "")
    if not m:
        raise ShardError(f"{option} {text!r}: expected I/N, shard I of N (e.g. 2/3)")
    index, count = int(m[1]), int(m[2])
    if not 1 <= count <= MAX_SHARDS:
        raise ShardError(f"{option} {text}: N must be 1 to {MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ShardError(f"{option} {text}: I must be 1 to {count} (shard I of N)")
    return index, count


def shard_name(index: int, count: int) -> str:
    return f"{index}/{count}"


def assign(
    ids: Iterable[str],
    count: int,
    weights: Mapping[str, int] | None = None,
    default: int = 1,
    loads: Sequence[int] | None = None,
    rotate: int = 0,
) -> tuple[dict[str, int], list[int]]:
    """Each id's bin (0-based) and the bins' loads after: heaviest first (ties by id), each into
    the bin with the least load (ties: the first from ``rotate`` on). Without weights every id
    weighs 1: sorted ids dealt round-robin from bin ``rotate``."""
    weights = weights or {}
    load = list(loads) if loads is not None else [0] * count
    if len(load) != count:
        raise ShardError(f"the partition has {len(load)} loads for {count} shards")
    order = sorted(set(ids), key=lambda i: (-weights.get(i, default), i))
    bins = {}
    for test_id in order:
        b = min(range(count), key=lambda k: (load[k], (k - rotate) % count))
        bins[test_id] = b
        load[b] += weights.get(test_id, default)
    return bins, load


def _milliseconds(seconds: Any) -> int | None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return None
    return max(1, round(seconds * 1000)) if seconds >= 0 else None


def partition(suites: Sequence[str], count: int, previous: dict[str, Any] | None = None,
              previous_sha256: str = "") -> dict[str, Any]:
    """The partition file's content for ``suites`` (the run's, in plan order) cut into ``count``
    shards: round-robin, or balanced by the tests' durations in ``previous`` (a report)."""
    if previous is None:
        return {
            "method": ROUND_ROBIN,
            "count": count,
            "durations_from": None,
            "suites": {name: {"rotate": k % count} for k, name in enumerate(suites)},
        }
    known: dict[str, dict[str, int]] = {}
    for t in previous.get("tests", []):
        ms = _milliseconds(t.get("duration")) if isinstance(t, dict) else None
        if ms is not None and isinstance(t.get("suite"), str) and isinstance(t.get("id"), str):
            known.setdefault(t["suite"], {})[t["id"]] = ms
    every = [ms for w in known.values() for ms in w.values()]
    fallback = statistics.median_low(every) if every else _UNKNOWN_MS
    loads = [0] * count
    entries = {}
    for k, name in enumerate(suites):
        weights = dict(sorted(known.get(name, {}).items()))
        default = statistics.median_low(weights.values()) if weights else fallback
        entries[name] = {"rotate": k % count, "loads": list(loads), "default": default, "weights": weights}
        # The earlier run's tests of this suite, dealt as they would be: the next suite starts
        # from the work they leave on each shard.
        _, loads = assign(weights, count, weights, default, loads, k % count)
    return {
        "method": DURATIONS,
        "count": count,
        "durations_from": {"report_sha256": previous_sha256, "tests": len(every)},
        "suites": entries,
    }


def dumps(content: dict[str, Any]) -> str:
    """The partition file's text: canonical, so equal partitions have equal hashes."""
    return json.dumps(content, indent=1, sort_keys=True) + "\n"


def suite_entry(content: Any, suite: str, count: int, where: str) -> dict[str, Any]:
    """The checked entry of ``suite`` in a partition file's ``content`` (ShardError naming
    ``where`` otherwise)."""
    if not isinstance(content, dict) or content.get("method") not in METHODS:
        raise ShardError(f"{where}: not a partition file (no known 'method')")
    if content.get("count") != count:
        raise ShardError(f"{where}: a partition into {content.get('count')!r} shards, not {count}")
    entry = (content.get("suites") or {}).get(suite) if isinstance(content.get("suites"), dict) else None
    if not isinstance(entry, dict):
        raise ShardError(f"{where}: no partition of suite {suite!r}")
    rotate, loads = entry.get("rotate", 0), entry.get("loads", [0] * count)
    weights, default = entry.get("weights", {}), entry.get("default", 1)
    if (
        not _whole(rotate)
        or not isinstance(loads, list)
        or len(loads) != count
        or not all(_whole(x) for x in loads)
        or not _whole(default)
        or not isinstance(weights, dict)
        or not all(_whole(x) for x in weights.values())
    ):
        raise ShardError(f"{where}: the partition of suite {suite!r} is malformed")
    return {"rotate": rotate, "loads": loads, "weights": weights, "default": default}


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def select(ids: Sequence[str], index: int, count: int, entry: dict[str, Any] | None = None) -> set[str]:
    """The ids of ``ids`` that shard ``index`` of ``count`` runs, by the suite's partition
    ``entry`` (round-robin from bin 0 without one)."""
    entry = entry or {}
    bins, _ = assign(
        ids, count, entry.get("weights"), entry.get("default", 1), entry.get("loads"), entry.get("rotate", 0)
    )
    return {i for i, b in bins.items() if b == index - 1}
