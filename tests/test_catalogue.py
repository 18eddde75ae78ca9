"""The catalogue's own consistency: every record samples valid cases whose kernel output
agrees with the shape rule, in every variant, layout and activation."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.validation import validate_model
from nncert.ops import records
from nncert.ops.interpreter import run_model
from nncert.testing.cases import enumerate_cases, sample_case

KEYS = list(enumerate_cases(seeds=(0,)))


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("key", KEYS, ids=lambda k: sample_case.__name__ and
                         "-".join(str(x) for x in (k[0].name, k[1].name, k[2].label, k[3], k[4])))
def test_record_samples_valid_cases(key):
    case = sample_case(*key)
    for variation in ("base", "all_tensors_as_inputs", "inputs_as_internal", "dynamic_output"):
        if not case.supports(variation):
            continue
        model, feeds = case.model(variation)
        validate_model(model)
        got = run_model(model, feeds)
        for g, e in zip(got, case.expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("record", records(), ids=lambda r: r.name)
def test_record_declares_versions_and_docs(record):
    assert record.doc, f"{record.name} needs a one-line doc"
    for v in record.variants:
        assert v.version >= record.type.version, f"{record.name} {v.label} predates the operation"
