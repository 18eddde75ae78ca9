"""The three-way verdict: when a case fails on a driver, which of reference / LiteRT / ONNX
Runtime agree, so that a user sees at once whether the driver or the golden is the odd one
out.

The failing case is replayed on every peer that is installed and is not the driver under
test. Peers run out of process (``service:litert``, ``service:onnxruntime``), started on the
first failure and kept for the session, so a peer that aborts cannot take the test run with
it. Each peer's outputs are judged against the reference (the golden) and against the
driver's own outputs with the same criteria as the test (ACC-1..4).

The pytest plugin turns it on (``--three-way``, the default) with a budget of cases, so a
driver failing thousands of cases does not spend the session on triage.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nncert.testing.criteria import output_mismatches

#: name -> (driver spec of the peer, the module that must be importable)
PEERS = {"litert": ("service:litert", "ai_edge_litert"),
         "onnxruntime": ("service:onnxruntime", "onnxruntime")}


@dataclass
class PeerResult:
    peer: str
    #: agrees-reference | agrees-driver | agrees-both | differs | declines | error
    verdict: str
    detail: str = ""


@dataclass
class Verdict:
    driver: str
    peers: list[PeerResult] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One line: who agrees with whom, and who is the odd one out."""
        if not self.peers:
            return "three-way verdict: no peer runtime available"
        parts = []
        for p in self.peers:
            text = {"agrees-reference": f"{p.peer} agrees with reference",
                    "agrees-driver": f"{p.peer} agrees with {self.driver}, not reference",
                    "agrees-both": f"{p.peer} agrees with both",
                    "differs": f"{p.peer} agrees with neither",
                    "declines": f"{p.peer} declines the case",
                    "error": f"{p.peer} failed ({p.detail})"}[p.verdict]
            parts.append(text)
        judged = [p for p in self.peers if p.verdict in ("agrees-reference", "agrees-driver")]
        odd = ""
        if judged and all(p.verdict == "agrees-reference" for p in judged):
            odd = f" -> {self.driver} is the odd one out"
        elif judged and all(p.verdict == "agrees-driver" for p in judged):
            odd = " -> the reference is the odd one out"
        return "three-way verdict: " + "; ".join(parts) + odd

    def as_dict(self) -> dict:
        return {"driver": self.driver, "summary": self.summary,
                "peers": {p.peer: {"verdict": p.verdict, "detail": p.detail} for p in self.peers}}


class Triage:
    """Replays failing cases on the peer runtimes (at most ``budget`` cases a session). A peer
    whose default spec is the driver under test itself is left out (``litert:kernels=ref``
    is judged by ``litert`` and ``onnxruntime``)."""

    def __init__(self, driver_spec: str, budget: int = 200,
                 peers: Sequence[str] | None = None) -> None:
        from nncert.testing.expectations import hosted_spec

        under_test = hosted_spec(driver_spec)
        names = list(PEERS) if peers is None else list(peers)
        self.driver_name = under_test
        self.peer_names = [n for n in names if hosted_spec(PEERS[n][0]) != under_test and
                           importlib.util.find_spec(PEERS[n][1]) is not None]
        self.budget = budget
        self._drivers: dict[str, object] = {}

    def _peer(self, name: str):
        from nncert.drivers import load_driver
        if name not in self._drivers or not self._drivers[name].alive():
            if name in self._drivers:
                self._drivers[name].restart()
            else:
                self._drivers[name] = load_driver(PEERS[name][0])
        return self._drivers[name]

    def verdict(self, model, feeds: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                actual: Sequence[np.ndarray] | None, relaxed: bool = False,
                agree: Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], bool] | None = None
                ) -> Verdict | None:
        """The verdict on one failing case; None once the budget is spent. ``agree(one,
        other)`` says whether two sets of outputs agree; by default, within the
        per-operation tolerances of ACC-1..4 (random graphs pass their ACC-5 criteria)."""
        if self.budget <= 0:
            return None
        self.budget -= 1
        out = Verdict(self.driver_name)
        for name in self.peer_names:
            out.peers.append(self._judge(name, model, feeds, expected, actual,
                                         agree or (lambda one, other: not output_mismatches(
                                             model, one, other, relaxed))))
        return out

    def _judge(self, name: str, model, feeds, expected, actual, agree) -> PeerResult:
        from nncert.hal.builder import build_request, read_outputs
        from nncert.hal.errors import HalError
        try:
            peer = self._peer(name)
            if not all(peer.supported_operations(model)):
                return PeerResult(name, "declines")
            dims = [tuple(e.shape) for e in expected]
            request = build_request(model, feeds, dims)
            peer.prepare_model(model).execute_synchronously(request)
            got = read_outputs(model, request, dims)
        except HalError as e:
            return PeerResult(name, "error", str(e)[:200])
        except Exception as e:  # a peer's own trouble must not change the test's outcome
            return PeerResult(name, "error", f"{type(e).__name__}: {e}"[:200])
        vs_reference = agree(expected, got)
        vs_driver = actual is not None and agree(actual, got)
        verdict = {(True, True): "agrees-both", (True, False): "agrees-reference",
                   (False, True): "agrees-driver", (False, False): "differs"}[(vs_reference, vs_driver)]
        return PeerResult(name, verdict)

    def close(self) -> None:
        for d in self._drivers.values():
            d.close()
        self._drivers.clear()


#: The session's triage, set by the pytest plugin (None: off).
ACTIVE: Triage | None = None


def set_active(triage: Triage | None) -> None:
    global ACTIVE
    if ACTIVE is not None and ACTIVE is not triage:
        ACTIVE.close()
    ACTIVE = triage
