"""Request mutations and guard bytes (VAL-1, VAL-2): every mutation is invalid by the rules of
validate_request, the guarded layout is what the suites rely on, the rule on omitted inputs
is explicit, and a mutant hosted in a service is caught through it."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from nncert.drivers.reference import ReferenceDriver
from nncert.hal.builder import ModelBuilder, build_request, guard_bytes, read_outputs
from nncert.hal.errors import ValidationError
from nncert.hal.types import OperandType, OperationType
from nncert.hal.validation import validate_request
from nncert.ops import records
from nncert.testing.cases import sample_case
from nncert.testing.harness import add_model
from nncert.testing.mutations import (
    GUARD,
    REQUEST_KINDS,
    kind_of,
    pool_bytes,
    request_mutations,
    stray_writes,
)

ROOT = Path(__file__).resolve().parent.parent
T = OperandType


def _sample_models():
    for r in records():
        seen = set()
        for v in r.variants:
            if v.primary in seen:
                continue
            seen.add(v.primary)
            yield sample_case(r, r.signatures[0], v, False if r.layout else None, 0 if r.activation else None,
                              0).model()


@pytest.mark.req("VAL-1")
def test_every_request_mutation_is_invalid():
    """Over one case of every operation and type, and a model with open dimensions: each
    mutation breaks a rule of validate_request (so a suite that expects INVALID_ARGUMENT for it
    is right), and every kind is produced."""
    kinds: Counter = Counter()
    valid = []
    cases = [(model, feeds, None) for model, feeds in _sample_models()]
    # Open dimensions, given by the request (inputs) or left open (the output).
    cases.append((add_model(dims=(0, 3)), [np.ones((2, 3), np.float32)] * 2, [(2, 3)]))
    for model, feeds, output_dims in cases:
        request = build_request(model, feeds, output_dims, guard=GUARD)
        if output_dims:
            request.outputs[0].dimensions = ()  # a dynamic output: its size is not known
        validate_request(request, model)
        for label, mutated in request_mutations(request, model):
            kinds[kind_of(label)] += 1
            try:
                validate_request(mutated, model)
            except ValidationError:
                continue
            valid.append(label)
    assert not valid, f"mutations that leave the request valid: {valid[:10]}"
    assert set(kinds) == set(REQUEST_KINDS), f"kinds never produced: {set(REQUEST_KINDS) - set(kinds)}"


@pytest.mark.req("VAL-1")
def test_mutations_cover_every_argument():
    model = add_model()
    request = build_request(model, [np.ones((2, 3), np.float32)] * 2, guard=GUARD)
    labels = [label for label, _ in request_mutations(request, model)]
    for where in ("input 0", "input 1", "output 0"):
        for kind in ("location_pool", "location_offset", "location_padding", "location_length",
                     "dimensions_rank", "dimensions_value"):
            assert f"{kind}[{where}]" in {label.split("=")[0] for label in labels}, (kind, where)
    assert {"no_value[input 0]", "no_value[input 1]", "pool_empty[pool 0]", "pool_empty[pool 1]",
            "remove_pool[pool 1]"} <= set(labels)
    # An output may be shorter than its operand (OUTPUT_INSUFFICIENT_SIZE): never a mutation.
    assert "location_length[output 0]=23 (one byte less than the operand)" not in labels
    assert [label for label, _ in request_mutations(request)] == \
        ["remove_input[0]", "remove_input[1]", "remove_output[0]"]


@pytest.mark.req("VAL-2")
def test_guarded_layout():
    model = add_model()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    request = build_request(model, [x, x], guard=GUARD)
    offsets = [a.location.offset for a in request.inputs + request.outputs]
    assert offsets == [GUARD, 2 * GUARD + 24, GUARD]  # unaligned on purpose
    inputs, outputs = (bytes(p.view()) for p in request.pools)
    assert len(inputs) == 3 * GUARD + 48 and len(outputs) == 2 * GUARD + 24
    assert outputs == guard_bytes(0, len(outputs))  # the output buffer holds the pattern too
    expected = bytearray(guard_bytes(0, len(inputs)))  # the pattern, but where the inputs are
    for a in request.inputs:
        expected[a.location.offset:a.location.offset + 24] = x.tobytes()
    assert inputs == expected
    shapes, _ = ReferenceDriver().prepare_model(model).execute_synchronously(request)
    np.testing.assert_array_equal(read_outputs(model, request, [s.dimensions for s in shapes])[0], x + x)


@pytest.mark.req("VAL-2")
def test_stray_writes_are_found():
    model = add_model()
    request = build_request(model, [np.ones((2, 3), np.float32)] * 2, guard=GUARD)
    before = pool_bytes(request)
    out = request.outputs[0].location
    view = request.pools[1].view()
    view[out.offset:out.offset + out.length] = bytes(out.length)  # inside the output: allowed
    assert stray_writes(request, before, request.outputs) == []
    assert stray_writes(request, before) == [f"pool 1 [{out.offset}, {out.offset + out.length})"]
    view[out.offset + out.length + 1] ^= 0xFF  # one byte of the guard after it
    end = out.offset + out.length
    assert stray_writes(request, before, request.outputs) == [f"pool 1 [{end + 1}, {end + 2})"]


@pytest.mark.req("VAL-1")
def test_only_optional_inputs_may_be_omitted():
    """The rule on has_no_value, explicit: an input may be omitted only where every operation
    reading it takes it as optional (TRANSPOSE's perm: reverse the dimensions), not where one
    requires it (ADD)."""
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2, 3))
    perm = b.operand(T.TENSOR_INT32, (2,))
    out = b.operand(T.TENSOR_FLOAT32, (3, 2))
    b.operation(OperationType.TRANSPOSE, [x, perm], [out])
    model = b.build([x, perm], [out])
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    request = build_request(model, [value, np.array([1, 0], np.int32)], omitted_inputs=[1])
    validate_request(request, model)
    assert not any(label.startswith("no_value") and "input 1" in label
                   for label, _ in request_mutations(request, model))
    ReferenceDriver().prepare_model(model).execute_synchronously(request)
    np.testing.assert_array_equal(read_outputs(model, request, [(3, 2)])[0], value.T)
    add = add_model()
    request = build_request(add, [value, value], omitted_inputs=[0])
    with pytest.raises(ValidationError) as info:
        validate_request(request, add)
    assert (info.value.rule, info.value.where) == ("request-omitted", "request input 0")


@pytest.mark.req("VAL-2")
def test_hosted_mutant_is_caught_through_the_service():
    """A driver that spills past its outputs (16-byte stores), hosted in a service process:
    its stray write lands in the caller's shared memory from the other process, and the
    guard bytes of the burst suite show it, at the bytes just past the output. (The burst
    suite: its collection is cheap; test_validation.py's request tests use the same guards.)"""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "conformance" / "test_burst_validation.py"), "-q",
         "-p", "no:cacheprovider", "--tb=short", "--no-three-way",
         "--driver=service:mutant:writes_past_outputs", "-k", "mutated_request"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    # The output: 6 float32 after the guard. A 16-byte store spills 8 bytes past it, of which
    # the guard after it (the pool's end) holds GUARD.
    end = GUARD + 24
    assert f"VAL-2: a valid burst execution wrote outside its output: pool 1 [{end}, {end + GUARD})" \
        in proc.stdout, proc.stdout[-2000:]
