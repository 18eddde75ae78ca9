"""The N-way verdict: when a case fails on a driver, which of the reference and the peer
runtimes (LiteRT, ONNX Runtime, OpenVINO, IREE, TVM: every one installed) agree with the
reference and which with the driver, so that a user sees at once whether the driver or the
golden is the odd one out.

The failing case is replayed on every chosen peer that is installed and is not the driver
under test. Peers run out of process (``service:litert``, ``service:openvino``, ...), each
started on the first failure that needs it and kept for the session, so a peer that aborts
costs that peer's answer, never the test run; every call to a peer has a deadline
(``PEER_DEADLINE_S``): a peer past it is an "error" for that case, and restarted for the
next. Each peer's outputs are judged against the reference (the golden) and against the
driver's own outputs with the same criteria as the test (ACC-1..4).

The runtimes that judged the case then fall into camps: the reference with the peers that
agree with it, the driver with the peers that agree with it, and the peers that agree with
neither, grouped by those that agree with each other (peers that decline, fail or agree with
both judge nothing). A camp of two runtimes at least that is larger than every other is the
majority, and every runtime outside it is an odd one out; when the largest camps tie, the
verdict says there is no clear majority and names the camps.

The pytest plugin turns it on (``--triage``, the default) with a budget of cases and of
seconds a session, so a driver failing thousands of cases does not spend the session on
triage; a failure met once either is spent says it was not triaged and why.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nncert.testing.criteria import output_mismatches

#: name -> (driver spec of the peer, the modules that must be importable: the runtime's own
#: and nncert's driver for it)
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "litert": ("service:litert", ("ai_edge_litert", "nncert.drivers.litert")),
    "onnxruntime": ("service:onnxruntime", ("onnxruntime", "nncert.drivers.onnxruntime")),
    "openvino": ("service:openvino", ("openvino", "nncert.drivers.openvino")),
    "iree": ("service:iree", ("iree.compiler", "iree.runtime", "nncert.drivers.iree")),
    "tvm": ("service:tvm", ("tvm", "nncert.drivers.tvm")),
}

#: Peers left out when none are named: IREE and TVM compile each case (a quarter to half a
#: second of CPU, most of a second of wall time under load: 20 times what the others take),
#: so a driver failing hundreds of cases would spend its session on them. They join when
#: named (``--triage-peers=...,iree,tvm``, or ``all``).
SLOW_PEERS = frozenset({"iree", "tvm"})

#: Cases triaged a session, and seconds spent on triage a session, by default.
BUDGET_CASES = 200
BUDGET_SECONDS = 300.0
#: Seconds one call to a peer (its start, support query, preparation, execution) may take
#: before the peer counts as hung: killed, an "error" for this case, restarted for the next.
PEER_DEADLINE_S = 60.0

#: The line every verdict starts with (the report and the HTML page find it by it).
PREFIX = "N-way verdict: "


def installed(name: str) -> bool:
    """Whether peer ``name``'s runtime and nncert's driver for it can be imported."""
    for module in PEERS[name][1]:
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):  # a dotted name whose parent is missing or broken
            return False
    return True


def parse_peers(text: str) -> list[str]:
    """``--triage-peers``: comma-separated peer names, each known and installed; a ValueError
    with one line saying what is wrong otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        names = [n for n in PEERS if installed(n)]
    if not names:
        raise ValueError("--triage-peers: name at least one peer runtime (or turn triage off with "
                         "--no-triage)")
    present = [n for n in PEERS if installed(n)]
    for n in names:
        if n not in PEERS:
            raise ValueError(f"--triage-peers: {n!r} is no peer runtime (known: {', '.join(PEERS)}; "
                             f"installed: {', '.join(present) or 'none'})")
        if n not in present:
            raise ValueError(f"--triage-peers: {n} is not installed "
                             f"(installed: {', '.join(present) or 'none'})")
    return list(dict.fromkeys(names))


@dataclass
class PeerResult:
    peer: str
    #: agrees-reference | agrees-driver | agrees-both | differs | declines | error | skipped
    #: (not asked: the session's triage time ran out during this case)
    verdict: str
    detail: str = ""
    #: For a peer that agrees with neither: the first such peer whose outputs it agrees with
    #: (they side with each other), or "".
    sides_with: str = ""


def _listed(names: Sequence[str], last: str = ", ") -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + last + names[-1]


def _verb(names: Sequence[str], one: str, many: str) -> str:
    return f"{_listed(names)} {one if len(names) == 1 else many}"


@dataclass
class Verdict:
    driver: str
    peers: list[PeerResult] = field(default_factory=list)
    #: Why the case was not triaged at all (the session's budget is spent), or "".
    not_triaged: str = ""
    #: The driver gave no outputs (it refused the model, failed or died): no peer can side with it.
    no_outputs: bool = False

    def _named(self, verdict: str) -> list[str]:
        return [p.peer for p in self.peers if p.verdict == verdict]

    @property
    def agree_with_reference(self) -> list[str]:
        return self._named("agrees-reference")

    @property
    def agree_with_driver(self) -> list[str]:
        return self._named("agrees-driver")

    @property
    def camps(self) -> list[list[str]]:
        """The runtimes that judged the case, by whom they side with: the reference ("reference")
        and the peers agreeing with it, the driver and the peers agreeing with it, then the peers
        agreeing with neither, grouped by those that agree with each other. Peers that decline,
        fail or agree with both judge nothing and are in none."""
        others: dict[str, list[str]] = {}
        for p in self.peers:
            if p.verdict == "differs":
                others.setdefault(p.sides_with or p.peer, []).append(p.peer)
        return [["reference", *self.agree_with_reference], [self.driver, *self.agree_with_driver],
                *others.values()]

    @property
    def majority(self) -> list[str]:
        """The camp larger than every other, of two runtimes at least; [] without one (no peer
        judged the case, or the largest camps tie)."""
        camps = sorted(self.camps, key=len, reverse=True)
        if len(camps[0]) < 2 or len(camps[0]) == len(camps[1]):
            return []
        return camps[0]

    @property
    def odd_ones_out(self) -> list[str]:
        """The runtimes that judged the case outside the majority ("reference": the reference);
        [] without a majority."""
        majority = self.majority
        return [n for camp in self.camps for n in camp if n not in majority] if majority else []

    @property
    def summary(self) -> str:
        """One line: who agrees with whom, and who is the odd one out."""
        if self.not_triaged:
            return f"{PREFIX}not triaged ({self.not_triaged})"
        if not self.peers:
            return f"{PREFIX}no peer runtime available"
        camps = self.camps
        parts = [_verb(camps[0][1:], "agrees with reference", "agree with reference")] if camps[0][1:] else []
        if camps[1][1:]:
            parts.append(_verb(camps[1][1:], f"agrees with {self.driver}", f"agree with {self.driver}"))
        both = self._named("agrees-both")
        if both:
            parts.append(_verb(both, "agrees with both", "agree with both"))
        parts += [_verb(camp, "agrees with neither", "agree with neither, but with each other")
                  for camp in camps[2:]]
        declined = self._named("declines")
        if declined:
            parts.append(_verb(declined, "declines the case", "decline the case"))
        parts += [f"{p.peer} failed ({p.detail})" for p in self.peers if p.verdict == "error"]
        skipped = [p for p in self.peers if p.verdict == "skipped"]
        if skipped:
            parts.append(f"{_listed([p.peer for p in skipped])} not asked ({skipped[0].detail})")
        conclusion = ""
        odd = ["the reference" if n == "reference" else n for n in self.odd_ones_out]
        if odd:
            conclusion = f" -> {_listed(odd, ' and ')} " + \
                ("is the odd one out" if len(odd) == 1 else "are the odd ones out")
            if self.no_outputs and self.driver in odd:
                conclusion += f" ({self.driver} gave no outputs)"
        elif any(len(camp) > 1 for camp in camps) or len(camps) > 2:
            conclusion = " -> no clear majority: " + " against ".join(_listed(c, " and ") for c in camps)
        return PREFIX + "; ".join(parts) + conclusion

    def as_dict(self) -> dict:
        out = {"driver": self.driver, "summary": self.summary, "no_outputs": self.no_outputs,
               "peers": {p.peer: {"verdict": p.verdict, "detail": p.detail,
                                  **({"sides_with": p.sides_with} if p.sides_with else {})}
                         for p in self.peers},
               "agree_with_reference": self.agree_with_reference,
               "agree_with_driver": self.agree_with_driver,
               "camps": self.camps, "majority": self.majority, "odd_ones_out": self.odd_ones_out}
        if self.not_triaged:
            out["not_triaged"] = self.not_triaged
        return out


class Triage:
    """Replays failing cases on the peer runtimes: at most ``budget`` cases and about
    ``seconds`` seconds a session (a case begun in time finishes; a peer it has not asked
    when the time runs out is "skipped"). ``peers`` chooses them (default: every installed
    one but the SLOW_PEERS). A peer whose default spec is the driver under test itself is
    left out (``litert:kernels=ref`` is judged by ``litert`` and the others)."""

    def __init__(self, driver_spec: str, budget: int = BUDGET_CASES,
                 peers: Sequence[str] | None = None, seconds: float = BUDGET_SECONDS,
                 deadline: float = PEER_DEADLINE_S) -> None:
        from nncert.testing.expectations import hosted_spec

        under_test = hosted_spec(driver_spec)
        names = [n for n in PEERS if n not in SLOW_PEERS] if peers is None else list(peers)
        self.driver_name = under_test
        self.peer_names = [n for n in names if n in PEERS and hosted_spec(PEERS[n][0]) != under_test
                           and installed(n)]
        self.budget = budget
        self.cases = budget
        self.seconds = seconds
        self.spent = 0.0
        self.deadline = deadline
        self._drivers: dict[str, object] = {}
        self._last: Verdict | None = None

    def _peer(self, name: str):
        if name not in self._drivers or not self._drivers[name].alive():
            if name in self._drivers:
                self._drivers[name].restart()
            else:
                self._drivers[name] = self._start(PEERS[name][0])
        return self._drivers[name]

    def _start(self, spec: str):
        from nncert.drivers import load_driver
        if spec.startswith("service:") and not spec.startswith("service:@"):
            from nncert.drivers.service import create
            return create(spec[len("service:"):], timeout=str(self.deadline))
        return load_driver(spec)

    def _spent(self) -> str:
        """Why no more cases are triaged this session, or ""."""
        if self.budget <= 0:
            return f"the triage budget of {self.cases} cases a session is spent"
        if self.spent >= self.seconds:
            return f"the triage time of {self.seconds:g} s a session is spent"
        return ""

    def verdict(self, model, feeds: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                actual: Sequence[np.ndarray] | None, relaxed: bool = False,
                agree: Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], bool] | None = None,
                budgeted: bool = True) -> Verdict:
        """The verdict on one failing case (once the session's budget is spent, one saying it
        was not triaged and why). ``agree(one, other)`` says whether two sets of outputs
        agree; by default, within the per-operation tolerances of ACC-1..4 (random graphs
        pass their ACC-5 criteria). ``budgeted=False``: triaged whatever the budget left (its
        time still counts), for a verdict that must not depend on what earlier tests spent."""
        out = Verdict(self.driver_name, not_triaged=self._spent() if budgeted else "",
                      no_outputs=actual is None)
        if not out.not_triaged:
            if budgeted:
                self.budget -= 1
            agree = agree or (lambda one, other: not output_mismatches(model, one, other, relaxed))
            differing: list[tuple[PeerResult, Sequence[np.ndarray]]] = []
            for name in self.peer_names:
                start = time.monotonic()
                if budgeted and self.spent >= self.seconds:
                    out.peers.append(PeerResult(name, "skipped", f"the triage time of {self.seconds:g} s "
                                                                 "a session is spent"))
                    continue
                result, got = self._judge(name, model, feeds, expected, actual, agree)
                if result.verdict == "differs":  # the camp of an earlier such peer it agrees with
                    result.sides_with = next((p.sides_with or p.peer for p, other in differing
                                              if agree(other, got)), "")
                    differing.append((result, got))
                out.peers.append(result)
                self.spent += time.monotonic() - start
        self._last = out
        return out

    def take(self) -> Verdict | None:
        """The last verdict given, once (the pytest plugin files it with the test's report)."""
        last, self._last = self._last, None
        return last

    def _judge(self, name: str, model, feeds, expected, actual, agree
               ) -> tuple[PeerResult, Sequence[np.ndarray] | None]:
        """The peer's verdict, and its outputs where it gave any."""
        from nncert.hal.builder import build_request, read_outputs
        from nncert.hal.errors import HalError
        try:
            peer = self._peer(name)
            if not all(peer.supported_operations(model)):
                return PeerResult(name, "declines"), None
            dims = [tuple(e.shape) for e in expected]
            request = build_request(model, feeds, dims)
            peer.prepare_model(model).execute_synchronously(request)
            got = read_outputs(model, request, dims)
        except HalError as e:
            return PeerResult(name, "error", str(e)[:200]), None
        except Exception as e:  # a peer's own trouble must not change the test's outcome
            return PeerResult(name, "error", f"{type(e).__name__}: {e}"[:200]), None
        vs_reference = agree(expected, got)
        vs_driver = actual is not None and agree(actual, got) and _same_non_finite(actual, got)
        verdict = {(True, True): "agrees-both", (True, False): "agrees-reference",
                   (False, True): "agrees-driver", (False, False): "differs"}[(vs_reference, vs_driver)]
        return PeerResult(name, verdict), got

    def close(self) -> None:
        for d in self._drivers.values():
            d.close()
        self._drivers.clear()


def _same_non_finite(driver: Sequence[np.ndarray], peer: Sequence[np.ndarray]) -> bool:
    """Whether the peer has the driver's every NaN and infinity in the same places. The
    criteria skip the non-finite elements of their expected side, which is right for the
    reference (its NaN leaves an element undefined) but not for the driver's outputs: a NaN
    from the driver is its answer, and a peer with a number there does not agree with it
    (IREE's NaN from a slice read out of bounds was "agreed with" by every peer)."""
    for d, p in zip(driver, peer, strict=False):  # (a count mismatch is the criteria's to judge)
        d, p = np.asarray(d), np.asarray(p)
        if d.dtype.kind != "f" or d.shape != p.shape:
            continue  # the criteria judge shapes and non-float types
        odd = ~np.isfinite(d)
        if odd.any() and not np.array_equal(d[odd], p[odd].astype(d.dtype), equal_nan=True):
            return False
    return True


#: The session's triage, set by the pytest plugin (None: off).
ACTIVE: Triage | None = None


def set_active(triage: Triage | None) -> None:
    global ACTIVE
    if ACTIVE is not None and ACTIVE is not triage:
        ACTIVE.close()
    ACTIVE = triage
