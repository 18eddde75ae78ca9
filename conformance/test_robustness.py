"""Unexpected input never crashes the driver (VAL-3): a short, deterministic pass of the fuzz
campaign's model decoder (nncert.fuzz.decode: near-valid models from bytes) through
``supported_operations`` and ``prepare_model``, each called on its own, as a framework may. Any
outcome but a status or a prepared model (an exception, an assertion) is a failure; which
status is right is VAL-1's (test_validation.py) and the campaign's (fuzz/, ``nncert fuzz``)."""

from __future__ import annotations

import random

import pytest

from nncert.fuzz import decode as dec
from nncert.hal.errors import DriverFault, HalError

#: Inputs per test and their longest length in bytes: enough that most mutation kinds of the
#: decoder occur, few enough for CI.
INPUTS = 150
LONGEST = 64


def _inputs(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [bytes(rng.getrandbits(8) for _ in range(rng.randrange(LONGEST))) for _ in range(INPUTS)]


@pytest.mark.req("VAL-3")
@pytest.mark.parametrize("call", ["supported_operations", "prepare_model"])
@pytest.mark.parametrize("seed", [0, 1])
def test_decoded_models_never_crash(driver, call, seed):
    for n, data in enumerate(_inputs(seed)):
        decoded = dec.decode_model(data)
        try:
            getattr(driver, call)(decoded.model)
        except DriverFault:
            raise
        except HalError:
            continue
        except Exception as e:
            pytest.fail(f"VAL-3: {call} of input {n} (seed {seed}; {decoded.describe()}) raised "
                        f"{type(e).__name__}: {e}")
