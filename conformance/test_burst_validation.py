"""Burst validation (BURST-1..4, VAL-1, VAL-2): bad memory slots, releasing an unknown slot, and
a request whose slot list does not match its pools get INVALID_ARGUMENT, never a hang; every
request mutation sent on a burst whose slots already hold the request's memories gets
INVALID_ARGUMENT with nothing written; for a burst whose requests travel over a shared-memory
queue, malformed messages on the queue get an error result (INVALID_ARGUMENT) and the burst
keeps working."""

from __future__ import annotations

import itertools
import json
import os
import struct
import time

import numpy as np
import pytest

from nncert.drivers.service import RemoteBurst
from nncert.drivers.service.fmq import QueueTimeout
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.types import ErrorStatus
from nncert.testing.harness import (
    add_model,
    check_outputs,
    expect_invalid,
    prepare_or_skip,
    rejection_problems,
)
from nncert.testing.mutations import GUARD, pool_bytes, request_mutations, stray_writes

DIMS = (2, 3)
#: Seconds a queue-level exchange may take before it counts as a hang.
ANSWER_WITHIN_S = 5.0


@pytest.fixture
def burst(driver):
    model = add_model(DIMS)
    prepared = prepare_or_skip(driver, model)
    return model, prepared, prepared.configure_execution_burst()


_FRESH_SLOTS = itertools.count(10)


def _run_ok(model, burst, slots=None) -> None:
    """A valid burst execution gives the right answer (the burst still works). A slot names
    one memory for the burst's life (BURST-2), so fresh memories take fresh slot ids."""
    slots = slots or (next(_FRESH_SLOTS), next(_FRESH_SLOTS))
    rng = np.random.default_rng(slots[0])
    x, y = (rng.uniform(-2, 2, DIMS).astype(np.float32) for _ in range(2))
    request = build_request(model, [x, y])
    burst.execute(request, list(slots))
    check_outputs([x + y], read_outputs(model, request, [DIMS]), model)


@pytest.mark.req("BURST-2", "VAL-1")
@pytest.mark.parametrize("slot", [-1, -(2**40), 2**64], ids=["minus-one", "very-negative", "beyond-int64"])
def test_bad_memory_slot_is_rejected(burst, slot):
    model, _, b = burst
    expect_invalid(lambda: b.execute(build_request(model, [np.zeros(DIMS, np.float32)] * 2), [slot, 1]),
                   f"a burst execution naming memory slot {slot}")
    _run_ok(model, b)


@pytest.mark.req("BURST-2", "VAL-1")
def test_releasing_an_unknown_slot_is_rejected(burst):
    model, _, b = burst
    _run_ok(model, b, (0, 1))
    for slot in (7, -1, 2**64):
        expect_invalid(lambda s=slot: b.release_memory_resource(s), f"releasing unknown memory slot {slot}")
    b.release_memory_resource(0)
    expect_invalid(lambda: b.release_memory_resource(0), "releasing memory slot 0 twice")
    _run_ok(model, b)


@pytest.mark.req("BURST-1", "VAL-1")
@pytest.mark.parametrize("slots", [[0], [0, 1, 2], []], ids=["too-few", "too-many", "none"])
def test_slot_count_must_match_the_pools(burst, slots):
    model, _, b = burst
    expect_invalid(lambda: b.execute(build_request(model, [np.zeros(DIMS, np.float32)] * 2), slots),
                   f"{len(slots)} slot ids for 2 pools")
    _run_ok(model, b)


@pytest.mark.req("BURST-2", "VAL-1", "VAL-2")
def test_mutated_request_on_cached_slots_is_rejected(burst):
    """Once a burst holds the request's memories in its slots (BURST-2), each request mutation
    on those slots still gets INVALID_ARGUMENT and writes nothing: a burst must check every
    request against the memories it holds, not only a memory when it first arrives. New
    memories (a pool too short, an empty one) take fresh slots. The first, valid, execution
    writes nothing but its output (the arguments sit between guard bytes)."""
    model, _, b = burst
    rng = np.random.default_rng(3)
    x, y = (rng.uniform(-2, 2, DIMS).astype(np.float32) for _ in range(2))
    request = build_request(model, [x, y], guard=GUARD)
    held = {}  # id(pool) -> (slot, pool): the pool is kept alive, so its id is never reused

    def slots_of(r) -> list[int]:
        return [held.setdefault(id(p), (next(_FRESH_SLOTS), p))[0] for p in r.pools]

    before = pool_bytes(request)
    b.execute(request, slots_of(request))
    check_outputs([x + y], read_outputs(model, request, [DIMS]), model)
    stray = stray_writes(request, before, request.outputs)
    assert not stray, f"VAL-2: a valid burst execution wrote outside its output: {', '.join(stray)}"
    problems = rejection_problems(request_mutations(request, model), lambda r: b.execute(r, slots_of(r)))
    assert not problems, "VAL-1: invalid requests on a burst's cached slots, expected INVALID_ARGUMENT " \
                         f"and nothing written: {'; '.join(problems[:6])} ({len(problems)} in all)"
    _run_ok(model, b)


# --- malformed queue messages (queue-based bursts only)


@pytest.fixture
def queue_burst(burst):
    model, _, b = burst
    if not isinstance(b, RemoteBurst):
        pytest.skip(f"{type(b).__name__} runs in process: its requests travel on no message queue")
    _run_ok(model, b, (0, 1))  # the malformed messages name slots 0 and 1
    return model, b


def _exchange(b: RemoteBurst, frame: bytes) -> dict:
    """Put raw bytes on the request queue (``frame``: a length header and payload, written
    whole) and read the one result the service must answer with."""
    give_up = time.monotonic() + ANSWER_WITHIN_S
    abort = () if b.conn.death_fd is None else (b.conn.death_fd,)
    queue = b.requests
    with b._lock:
        head, tail = queue._index[0], queue._index[1]
        assert queue.capacity - (tail - head) >= len(frame), "the request queue is not empty"
        queue._copy_in(tail, frame)
        queue._index[1] = tail + len(frame)
        os.eventfd_write(queue.data_fd, 1)
        try:
            return json.loads(b.results.read(give_up, abort))
        except QueueTimeout:
            pytest.fail(f"BURST-4: no result within {ANSWER_WITHIN_S} s for a malformed request message")


def _message(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload


def _valid_message() -> dict:
    return {"slots": [0, 1], "inputs": [[False, [0, 0, 24], []], [False, [0, 24, 24], []]],
            "outputs": [[False, [1, 0, 24], []]], "measure": 0, "deadline": None, "loop_timeout": None}


MALFORMED = {
    "garbage": _message(b"\xff\x00garbage\x13\x37"),
    "truncated-json": _message(json.dumps(_valid_message()).encode()[:-9]),
    "not-an-object": _message(b"[1, 2, 3]"),
    "slots-not-a-list": _message(json.dumps({**_valid_message(), "slots": "0,1"}).encode()),
    "inputs-wrong-type": _message(json.dumps({**_valid_message(), "inputs": 5}).encode()),
    "measure-wrong-type": _message(json.dumps({**_valid_message(), "measure": "yes"}).encode()),
    "deadline-wrong-type": _message(json.dumps({**_valid_message(), "deadline": "soon"}).encode()),
    "missing-field": _message(json.dumps({"slots": [0, 1]}).encode()),
    "unknown-slot": _message(json.dumps({**_valid_message(), "slots": [0, 99]}).encode()),
    # A header claiming more than the whole queue holds, followed by a few bytes.
    "oversized": struct.pack("<I", 1 << 30) + b"{}",
}


@pytest.mark.req("BURST-3", "BURST-4", "VAL-1")
@pytest.mark.parametrize("kind", list(MALFORMED))
def test_malformed_queue_message_gets_an_error_result(queue_burst, kind):
    model, b = queue_burst
    reply = _exchange(b, MALFORMED[kind])
    status = reply.get("status")
    assert status == ErrorStatus.INVALID_ARGUMENT, \
        f"VAL-1: a {kind} request message gave status {status!r} ({reply.get('message')}), " \
        "expected INVALID_ARGUMENT"
    _run_ok(model, b)
