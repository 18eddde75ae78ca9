"""Coverage-guided fuzzing of drivers with atheris (VAL-3).

- ``decode``: structure-aware decoding of fuzz bytes into nearly valid models, requests,
  cache contents and burst messages (pure Python: replay and tests need no atheris);
- ``targets``: the fuzz targets (``TARGETS``), each an oracle that raises ``Finding``;
- ``fuzz/<target>.py`` (repository root): the atheris scripts, one per target.

A crash or a hang of the driver kills the fuzzing process, as libFuzzer expects; an oracle
violation that leaves the process alive is a ``Finding``, which atheris reports as an
uncaught exception. Its one-line message starts with its de-duplication key in brackets,
``[kind|operation|status] detail``, so that a runner reading the traceback can classify it
(``Finding.parse``).
"""

from __future__ import annotations

import re

#: The harness's own modules, which the atheris scripts leave uninstrumented: coverage feedback
#: (and its cost, about 4x per instrumented line) goes to the code under test, the validator,
#: the drivers and the kernels, not to the decoding of inputs or the oracles.
HARNESS_MODULES = ("nncert.fuzz", "nncert.fuzz.decode", "nncert.fuzz.targets", "nncert.fuzz.campaign",
                   "nncert.hal.model", "nncert.testing.cases", "nncert.testing.criteria",
                   "nncert.drivers.probe_verdicts")

_LINE = re.compile(r"Finding: \[([^|\]]*)\|([^|\]]*)\|([^|\]]*)\] ?(.*)")


class Finding(Exception):  # noqa: N818 - what a fuzz target found, named as such
    """An oracle violation found by a target (not a crash: those kill the process).

    ``kind``: "wrong-acceptance" (an invalid argument accepted, VAL-1), "wrong-status" (an
    invalid argument refused with a status other than INVALID_ARGUMENT), "wrong-result"
    (outputs of a valid request outside the ACC tolerances), "exception" (an exception
    other than a HAL error escaped), "cache-accepted" (a corrupted model cache accepted,
    CACHE-4), "crash" / "hang" (a hosted driver's process died or stopped answering,
    VAL-3, BURST-4). ``operation``: the catalogue operation of the input's case; ``status``:
    the ErrorStatus name the driver gave ("NONE" for a success). ``test``: the conformance
    test that runs the input's catalogue case, where there is one, so that a campaign can
    say when the driver's expectations already list the discrepancy."""

    def __init__(self, kind: str, message: str, operation: str = "", status: str = "",
                 test: str = "") -> None:
        self.kind = kind
        self.test = test
        self.message = message
        self.operation = operation
        self.status = status
        super().__init__(f"[{self.key()}] {message}")

    def key(self) -> str:
        """``kind|operation|status``: findings with the same key are one bug."""
        return f"{self.kind}|{self.operation}|{self.status}"

    @classmethod
    def parse(cls, text: str) -> Finding | None:
        """The Finding whose traceback line (``...Finding: [kind|op|status] message``) is in
        ``text`` (the last one), or None."""
        found = None
        for m in _LINE.finditer(text):
            found = cls(m.group(1), m.group(4).strip(), m.group(2), m.group(3))
        return found


__all__ = ["HARNESS_MODULES", "Finding"]
