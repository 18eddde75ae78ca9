"""atheris fuzz target `prepare_model` (nncert.fuzz.targets; VAL-3).

    python fuzz/prepare_model.py [--driver SPEC] [libFuzzer flags] [corpus dirs]

A seed corpus: `nncert fuzz corpus` (nncert.fuzz.targets.write_corpus). A Finding (an
oracle violation) is reported by atheris as an uncaught exception, with its traceback.
"""

import sys

import atheris
import numpy  # noqa: F401 - imported before instrumentation: only nncert's code is instrumented

from nncert.fuzz import HARNESS_MODULES

with atheris.instrument_imports(include=["nncert"], exclude=HARNESS_MODULES):
    from nncert.fuzz.targets import fuzz_main

if __name__ == "__main__":
    fuzz_main("prepare_model", sys.argv)
