"""The validator's fast paths (``nncert.hal.validation.FAST_PATHS``: few-branch checks of the
common operand, operation, model input/output list and data flow, which fall back to the rule
by rule checks) never change a verdict: fuzz seed models and deterministic mutations of them
(what the validate_model fuzz target feeds it), at three HAL versions, give the same outcome,
down to the rule, the culprit and the detail, with the fast paths as without."""

from __future__ import annotations

import collections
import random

from nncert.fuzz import decode as dec
from nncert.hal import validation
from nncert.hal.errors import ValidationError
from nncert.hal.types import LATEST, Version

VERSIONS = (Version.V1_0, Version.V1_2, LATEST)


def _outcomes(inputs: list[bytes]) -> list[str]:
    found = []
    for data in inputs:
        model = dec.decode_model(data, private=False).model
        for version in VERSIONS:
            try:
                validation.validate_model(model, version)
                found.append("valid")
            except ValidationError as e:
                found.append(e.message)
    return found


def test_fast_paths_keep_every_verdict(monkeypatch):
    rng = random.Random(23)
    inputs = []
    for index in rng.sample(range(len(dec.cases())), 250):
        seed = dec.encode_case(index)
        inputs.append(seed)
        inputs += [seed[:4] + rng.randbytes(rng.randrange(1, 40)) for _ in range(8)]
    fast = _outcomes(inputs)
    monkeypatch.setattr(validation, "FAST_PATHS", False)
    slow = _outcomes(inputs)
    differ = [(inputs[k // len(VERSIONS)].hex(), VERSIONS[k % len(VERSIONS)].name, a, b)
              for k, (a, b) in enumerate(zip(fast, slow, strict=True)) if a != b]
    assert not differ, differ[:5]
    # The sample reaches both paths: valid models, and many of the rules.
    rules = collections.Counter(o.split("[", 1)[1].split("]", 1)[0] for o in slow if o != "valid")
    assert slow.count("valid") > len(inputs) // 4
    assert len(rules) >= 15, rules
