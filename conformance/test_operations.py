"""Per-operation tests (the CTS generated tests): every operation x type variant x layout x
fused activation, three seeded cases each, compared with the reference (ACC-1..4, ACC-6), plus
the CTS variations: relaxed fp32, inputs as internal operands, all tensors as inputs, and
outputs of unknown shape (EXE-4, EXE-6); and the edge cases the catalogue declares, on
every execution path."""

from __future__ import annotations

import functools
import zlib

import pytest

from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import HalError, ValidationError
from nncert.hal.transform import omit_inputs
from nncert.hal.validation import input_may_be_omitted, validate_model
from nncert.ops.interpreter import run_model
from nncert.testing.cases import (
    SEEDS,
    VARIATION_TESTS,
    case_id,
    enumerate_cases,
    enumerate_edge_cases,
    is_heavy,
    sample_case,
)
from nncert.testing.criteria import output_mismatches, tolerance
from nncert.testing.harness import (
    PATHS,
    execute,
    expect_invalid,
    own_criterion,
    prepare_or_skip,
    run_case,
    run_state_chain,
)


def models_ahead(item) -> list:
    """What the test ``item`` prepares, made when called (nncert.pytest_plugin hands these to
    a driver that compiles ahead): the case's model in the test's variation; nothing for the
    tests that prepare something else (omitted inputs, state chains)."""
    variation = _VARIATIONS.get(item.originalname)
    key = getattr(item, "callspec", None) and item.callspec.params.get("key")
    if variation is None or key is None:
        return []
    return [lambda: sample_case(*key).model(variation)[0]]


def _key_id(key) -> str:
    return case_id(*key)


def _acc_req(key) -> str:
    _, sig, var_, *_ = key
    return tolerance(sig.outputs[0].resolve(var_.types)).requirement


@functools.cache
def _marks(req: str, operation: str, label: str, *extra: str) -> tuple:
    """A test's requirement and operation marks, made once for all the tests that share them
    (tens of thousands of marks were a third of collecting this module)."""
    return (pytest.mark.req(req, "ACC-6", *extra), pytest.mark.operation(operation, label))


def _params(keys, *extra):
    return [pytest.param(k, id=_key_id(k), marks=_marks(_acc_req(k), k[0].name, k[2].label, *extra))
            for k in keys]


ALL = list(enumerate_cases(SEEDS))
# Variations run on one seed and without fused activation, as CTS varies one thing at a time.
ONE = [k for k in ALL if k[5] == 0 and not k[4]]


@functools.cache
def _one_case(key):
    return sample_case(*key)


def _supporting(variation: str) -> list:
    """The keys whose case the variation applies to (CTS applies each selectively); each
    case is sampled once for the four variations (collection time is every run's cost)."""
    return [k for k in ONE if _one_case(k).supports(variation)]


@pytest.mark.req("DRV-2", "MEM-1", "MEM-2")
@pytest.mark.parametrize("key", _params(ALL))
def test_operation(driver, key):
    run_case(driver, sample_case(*key))


@pytest.mark.req("ACC-1")
@pytest.mark.parametrize("key", _params(_supporting("relaxed")))
def test_operation_relaxed(driver, key):
    run_case(driver, sample_case(*key), "relaxed")


@pytest.mark.parametrize("key", _params(_supporting("inputs_as_internal")))
def test_operation_inputs_as_internal(driver, key):
    run_case(driver, sample_case(*key), "inputs_as_internal")


@pytest.mark.parametrize("key", _params(_supporting("all_tensors_as_inputs")))
def test_operation_all_tensors_as_inputs(driver, key):
    run_case(driver, sample_case(*key), "all_tensors_as_inputs")


@pytest.mark.parametrize("key", _params(_supporting("output_consumed")))
def test_operation_output_consumed(driver, key):
    """Each output of the operation is a model output and read by another operation too, twice:
    ADD(output, output) (NNAPI allows it; a driver that fuses the two, or runs the ADD in place
    over its input, must still produce the first's value)."""
    run_case(driver, sample_case(*key), "output_consumed")


@pytest.mark.req("EXE-4", "EXE-6", "DRV-3")
@pytest.mark.parametrize("key", _params(_supporting("dynamic_output")))
def test_operation_dynamic_output_shape(driver, key):
    run_case(driver, sample_case(*key), "dynamic_output")


#: The variation each test function runs its case in (``models_ahead``).
_VARIATIONS = {**{test: variation for variation, test in VARIATION_TESTS.items()},
               "test_operation_edge": "base", "test_operation_activation_split": "activation_split",
               "test_operation_then_inverse": "then_inverse"}


# Edge cases declared in the catalogue (nncert/ops/edges.py): saturating activations, long
# reductions, extreme quantisation parameters, length-1 axes, broadcast corners, window
# borders. Each runs on every execution path (EXE-1, EXE-3). CI (-m 'not slow') runs each on
# the synchronous path and on one of the others, picked by its id, so that every path sees
# every family; a heavy one (tens of thousands of elements) on the synchronous path only.

EDGES = list(enumerate_edge_cases())


def _in_ci(key, path: str) -> bool:
    if path == "sync":
        return True
    return not is_heavy(key) and PATHS[1 + zlib.crc32(_key_id(key).encode()) % (len(PATHS) - 1)] == path


def _edge_params():
    params = []
    for key in EDGES:
        for path in PATHS:
            marks = _marks(_acc_req(key), key[0].name, key[2].label)
            if not _in_ci(key, path):
                marks = (*marks, pytest.mark.slow)
            params.append(pytest.param(key, path, id=f"{_key_id(key)}-{path}", marks=marks))
    return params


@pytest.mark.req("DRV-2", "EXE-1", "EXE-3")
@pytest.mark.parametrize(("key", "path"), _edge_params())
def test_operation_edge(driver, key, path):
    run_case(driver, sample_case(*key), path=path)


# The saturating edge cases (each fused activation's clamp reached) again with the activation
# run as an operation of its own: the operation with activation NONE into an intermediate, then
# RELU / RELU1 / RELU6 of it, same golden. A driver that fuses the pair back (a compiler's
# conv + relu6 pattern) must apply the second operation's clamp; the synchronous path only.

SPLIT = [k for k in EDGES if k[6].startswith("saturate_")]


@pytest.mark.req("DRV-2", "ACC-6")
@pytest.mark.parametrize("key", _params(SPLIT))
def test_operation_activation_split(driver, key):
    run_case(driver, sample_case(*key), "activation_split")


# Pairs a compiler folds away: CAST float -> int then back, QUANTIZE then DEQUANTIZE,
# DEQUANTIZE then QUANTIZE at another scale, two TRANSPOSEs, a quantised ADD or MUL then ADD of
# zero or MUL by one into another scale (cases.py's _then_inverse). The
# random graphs draw none of these pairs; the golden is the second operation's reference kernel
# on the first's golden.

INVERSE = [k for k in ONE if k[0].name in ("CAST", "QUANTIZE", "DEQUANTIZE", "TRANSPOSE", "ADD", "MUL") and
           _one_case(k).supports("then_inverse")]


@pytest.mark.req("DRV-2", "ACC-6")
@pytest.mark.parametrize("key", _params(INVERSE))
def test_operation_then_inverse(driver, key):
    run_case(driver, sample_case(*key), "then_inverse")


# Recurrent operations (OpRecord.state): one prepared model runs three executions, the
# state outputs of one fed back into the next, then the first state again; one seed of
# every variant, on every path (the state must survive each path's plumbing alike).

STATEFUL = [k for k in ALL if k[0].state_pairs(k[1]) and k[5] == 0]


@pytest.mark.req("DRV-2", "EXE-3")
@pytest.mark.parametrize(("key", "path"), [pytest.param(k, path, id=f"{_key_id(k)}-{path}",
                                                        marks=[pytest.mark.req(_acc_req(k), "ACC-6"),
                                                               pytest.mark.operation(k[0].name, k[2].label)])
                                           for k in STATEFUL for path in PATHS])
def test_operation_state(driver, key, path):
    run_state_chain(driver, sample_case(*key), path)


# Omitted inputs: a request may give no value to a model input that every operation reading it
# takes as optional (an LSTM's peephole weights, TRANSPOSE's perm), and the operation then
# runs as with that input omitted. A driver that claims such a model must run those requests
# too (DRV-2). Each case whose model has such inputs (its optional tensors as inputs) runs
# with each of them omitted alone and with all of them omitted, where the catalogue's rules
# take that; the golden is the reference interpreter's, run with those inputs omitted.

def _optional_tensors(key) -> bool:
    _, sig, var_, *_ = key
    return any(a.optional and a.resolve(var_.types).is_tensor for a in sig.inputs)


def _omissions(model) -> list[tuple[int, ...]]:
    """The ways of omitting the model's omittable inputs tried: each alone, then all."""
    may = tuple(p for p in range(len(model.main.input_indexes)) if input_may_be_omitted(model, p))
    tried = []
    for omitted in [(p,) for p in may] + ([may] if len(may) > 1 else []):
        try:
            validate_model(omit_inputs(model, omitted))
        except ValidationError:
            continue  # a combination the operation's rules refuse (an LSTM gate's weights without its bias)
        tried.append(omitted)
    return tried


OMITTING = [(k, variation) for k in ONE if _optional_tensors(k)
            for variation in ("base", "all_tensors_as_inputs")
            if _one_case(k).supports(variation) and _omissions(_one_case(k).model(variation)[0])]


@pytest.mark.req("DRV-2", "VAL-1")
@pytest.mark.parametrize(("key", "variation"), [
    pytest.param(k, v, id=f"{_key_id(k)}-{v}", marks=[pytest.mark.req(_acc_req(k), "ACC-6"),
                                                       pytest.mark.operation(k[0].name, k[2].label)])
    for k, v in OMITTING])
def test_operation_omitted_inputs(driver, key, variation):
    model, feeds = _one_case(key).model(variation)
    prepared = prepare_or_skip(driver, model)
    ran = 0
    for omitted in _omissions(model):
        given = [None if p in omitted else f for p, f in enumerate(feeds)]
        try:
            expected = run_model(model, given)
        except HalError:
            continue  # the reference refuses this omission when it runs: not a request to judge by
        dims = [e.shape for e in expected]
        request = build_request(model, feeds, dims, omitted_inputs=omitted)
        what = f"inputs {list(omitted)} given no value"
        try:
            execute(prepared, request)
        except HalError as e:
            pytest.fail(f"DRV-2: claimed every operation, then execution with {what} failed: {e}")
        actual = read_outputs(model, request, dims)
        if own_criterion(model):  # random results: the shapes only
            problems = [f"output {i}: shape {list(a.shape)}, expected {list(e.shape)}"
                        for i, (e, a) in enumerate(zip(expected, actual, strict=True)) if a.shape != e.shape]
        else:
            problems = [str(m) for m in output_mismatches(model, expected, actual)]
        if problems:
            pytest.fail(f"with {what}: " + "; ".join(problems))
        # Omitted is given no value, not left out: without those arguments the request has
        # fewer inputs than the model, which no omission makes valid (VAL-1).
        short = build_request(model, feeds, dims, omitted_inputs=omitted)
        short.inputs = [a for p, a in enumerate(short.inputs) if p not in omitted]
        expect_invalid(lambda r=short: execute(prepared, r),
                       f"a request that leaves out inputs {list(omitted)} instead of giving them no value")
        ran += 1
    if not ran:
        pytest.skip("the reference refuses every omission of this case when it runs")
