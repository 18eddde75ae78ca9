"""Standalone reproducers of fuzz findings: a campaign's ``findings/NNN-KEY`` directory (its
``minimized`` input and ``spec.json``, nncert.fuzz.campaign) as a directory a runtime's
maintainers run without nncert (nncert.repro.standalone).

``write_of_finding(path, driver, out_dir)``:

1. reads the finding (its directory, its ``minimized`` file or its ``spec.json``) and the
   symptom its campaign recorded, which the reproducer must show: a crash (the same signal),
   a hang, or a wrong result (an output outside its tolerance). The other findings (a model
   or request accepted that the validator refuses, a wrong status, a Python exception, a
   corrupted cache accepted) are answers of nncert's driver layer, which a runtime's model
   file cannot show: refused with the command that replays them instead;
2. decodes the input as its target does (nncert.fuzz.decode): prepare_model's model (fed the
   support probe's sample values, ``probe.sample_feeds``); execute's catalogue model with the
   request's own input values (sample values where the request gives none); for
   prepare_from_cache, the catalogue model whose cache was corrupted, which shows the symptom
   only when the model alone does;
3. checks that run.py shows the symptom on the decoded model, then minimises on the decoded
   model, never on bytes: the fewest operations (each operation alone, fed the values the
   reference computes for it), then the smallest inputs and simplest values
   (nncert.repro.minimise), a candidate kept only when its own run.py, run without nncert in
   a child process with a deadline, shows the same symptom. A hang is not minimised (each try
   would cost the deadline);
4. writes the smallest one with ``write_standalone`` and runs it once more.
"""

from __future__ import annotations

import base64
import binascii
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nncert import files
from nncert.repro import standalone
from nncert.repro.standalone import StandaloneError

if TYPE_CHECKING:
    from nncert.drivers.compiled import CompiledDriver
    from nncert.hal.model import Model

#: The targets whose input decodes into a model (and, for execute, a request).
TARGETS = ("prepare_model", "execute", "prepare_from_cache")
#: The most bytes a finding's input may have (libFuzzer's inputs are a few KiB).
MAX_INPUT_BYTES = 1 << 20
#: Seconds run.py may run before it counts as hung (a hang's symptom), and the deadline of a
#: candidate that should crash or give a wrong result.
HANG_S = standalone.HANG_S
CANDIDATE_S = 120.0
#: Candidates tried at most, and seconds spent at most, minimising one finding.
MAX_RUNS = 60
MAX_SECONDS = 300.0


@dataclass
class Symptom:
    """What the reproducer must show: "crash" (with ``signal``, or any signal when None),
    "hang" or "wrong-result"."""

    kind: str
    signal: str | None = None

    def shown_by(self, case: dict[str, Any]) -> bool:
        """Whether a measured reproducer (its case.json) shows this symptom."""
        outcome = case.get("outcome")
        if self.kind == "crash":
            return outcome == "crashed" and self.signal in (None, case.get("signal"))
        if self.kind == "hang":
            return outcome == "hung"  # killed at the deadline
        return outcome == "reproduced"

    def __str__(self) -> str:
        if self.kind == "crash":
            return f"a crash ({self.signal or 'any signal'})"
        return "a hang" if self.kind == "hang" else "a wrong result"


@dataclass
class FuzzFinding:
    """A finding a campaign wrote: its ``spec.json`` and input bytes."""

    where: Path  # its directory
    spec: dict[str, Any]
    data: bytes

    @property
    def target(self) -> str:
        return str(self.spec.get("target"))

    @property
    def label(self) -> str:
        return f"fuzz finding {self.where.name} ({self.target}, {self.spec.get('key')})"


def is_finding(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a fuzz finding rather than a random-graph spec file or a test id:
    a directory, or a finding's ``spec.json`` or input file (``minimized``, ``original``): one
    of them beside the other (a graph spec may be called spec.json too)."""
    p = Path(path)
    if p.is_dir():
        return True
    inputs = [p.parent / name for name in ("minimized", "original")]
    if p.name == "spec.json":
        if any(i.is_file() for i in inputs):
            return True
        from nncert.datafiles import DataFileError, read_json
        from nncert.testing.graphs import SPEC_FORMAT

        try:  # a finding's spec.json alone holds its input too
            doc = read_json(p, allow_nonfinite=True)  # (a graph spec's criteria may be infinite)
        except DataFileError:
            return False  # the graph spec reader says what is wrong with it
        return not (isinstance(doc, dict) and doc.get("format") == SPEC_FORMAT)
    return p in inputs and (p.parent / "spec.json").is_file()


def load_finding(path: str | os.PathLike) -> FuzzFinding:
    """The finding at ``path`` (see ``is_finding``); StandaloneError (one line) when it is none."""
    from nncert.datafiles import read_json

    p = Path(path)
    where = p if p.is_dir() else p.parent
    spec_path = where / "spec.json"
    if not spec_path.is_file():
        raise StandaloneError(f"{path}: not a fuzz finding (no spec.json in {where}; a campaign writes "
                              f"findings/NNN-KEY/ with spec.json and minimized)")
    spec = read_json(spec_path, StandaloneError)
    if not (isinstance(spec, dict) and all(isinstance(spec.get(k), str) for k in ("target", "kind", "key"))):
        raise StandaloneError(f"{spec_path}: not a fuzz finding's spec (no target, kind and key)")
    if p.is_file() and p.name != "spec.json":
        data = _read_input(p)
    elif (where / "minimized").is_file():
        data = _read_input(where / "minimized")
    else:
        encoded = spec.get("input_base64")
        try:
            data = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            data = None
        if data is None:
            raise StandaloneError(f"{spec_path}: no input (neither a minimized file beside it nor "
                                  f"input_base64)")
    return FuzzFinding(where, spec, data)


def _read_input(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise StandaloneError(f"{path}: {size} bytes, more than a fuzz input has ({MAX_INPUT_BYTES})")
        return path.read_bytes()
    except OSError as e:
        raise StandaloneError(f"{path}: cannot read it: {e.strerror or e}") from None


def symptom_of(finding: FuzzFinding) -> Symptom:
    """The symptom the finding's campaign recorded, as a reproducer shows it; StandaloneError
    for a finding no runtime model file shows (and for a target with no model)."""
    spec = finding.spec
    if finding.target not in TARGETS:
        raise StandaloneError(f"{finding.label}: the {finding.target} target decodes no model to run (a "
                              f"standalone reproducer is written for {', '.join(TARGETS)})")
    kind, key = spec["kind"], spec["key"]
    signal = spec.get("signal")
    if kind == "UNREPRODUCED":
        raise StandaloneError(f"{finding.label}: its campaign's replay ran cleanly (UNREPRODUCED: flaky or "
                              f"state-dependent), so there is no symptom to reproduce")
    if kind == "CRASH":
        if not (isinstance(signal, str) and signal.startswith("SIG")):
            raise StandaloneError(f"{finding.label}: the process ended with {signal or 'no signal'}, not a "
                                  f"signal a reproducer can show")
        return Symptom("crash", signal)
    if kind == "HANG":
        return Symptom("hang")
    finding_kind = key.split("|", 1)[0]
    if kind == "FINDING" and finding_kind in ("crash", "hang"):  # a hosted driver's process
        return Symptom(finding_kind)
    if kind == "FINDING" and finding_kind == "wrong-result":
        return Symptom("wrong-result")
    what = finding_kind if kind == "FINDING" else kind.lower()
    replay = spec.get("command") or f"nncert fuzz replay {finding.target} {finding.where / 'minimized'}"
    raise StandaloneError(f"{finding.label} is a {what} of nncert's driver layer, not a crash, hang or "
                          f"wrong result of the runtime, which is what a standalone reproducer shows; "
                          f"replay it with: {replay}")


def decoded(finding: FuzzFinding) -> tuple[Model, list[np.ndarray], str]:
    """The model the finding's input decodes into, the values to feed it, and how they were
    chosen, in words."""
    from nncert.drivers.probe import sample_feeds
    from nncert.fuzz import decode as dec
    from nncert.hal.errors import HalError, ValidationError
    from nncert.hal.request_io import read_inputs
    from nncert.hal.validation import validate_request

    if finding.target == "prepare_model":
        d = dec.decode_model(finding.data)
        return d.model, sample_feeds(d.model), f"{d.describe()}\nfed the support probe's sample values"
    if finding.target == "execute":
        r = dec.decode_request(finding.data)
        model = r.case.model.copy()
        try:
            validate_request(r.request, r.case.model)
            feeds = read_inputs(r.case.model, r.request)
        except (ValidationError, HalError):
            feeds = [None]
        if any(a is None for a in feeds):
            return model, sample_feeds(model), (f"{r.describe()}\nthe request gives no value for every "
                                                f"input: fed the support probe's sample values")
        return model, [np.array(a) for a in feeds], f"{r.describe()}\nfed the request's input values"
    reader = dec.ByteReader(finding.data)
    case = dec.seed_case(dec.case_index(reader))
    return (case.model.copy(), sample_feeds(case.model),
            f"case {case.key.id} (the model whose compilation cache the input corrupts), fed the support "
            f"probe's sample values")


def write_of_finding(path: str | os.PathLike, driver: CompiledDriver, out_dir: str | os.PathLike, *,
                     minimise: bool = True, max_runs: int = MAX_RUNS, max_seconds: float = MAX_SECONDS,
                     hang_s: float = HANG_S, progress: Callable[[str], None] = lambda line: None) -> Path:
    """The standalone reproducer of the fuzz finding at ``path`` on ``driver`` (a compiled
    driver), minimised unless ``minimise`` is false, written into ``out_dir`` (new or empty)
    and run once; StandaloneError (one line) when it cannot be written or does not show the
    finding's symptom."""
    from nncert.hal.errors import ValidationError
    from nncert.hal.validation import validate_model

    finding = load_finding(path)
    symptom = symptom_of(finding)
    out = standalone.check_out_dir(out_dir)
    try:
        model, feeds, how = decoded(finding)
    except Exception as e:  # decoding is total; a catalogue that changed since is not
        raise StandaloneError(f"{finding.label}: cannot decode its input: {type(e).__name__}: "
                              f"{standalone._one_line(e)}") from None
    try:
        validate_model(model, driver.feature_level)
    except ValidationError as e:
        raise StandaloneError(f"{finding.label}: its model is invalid ({standalone._one_line(e)}): a "
                              f"runtime never gets it, so no runtime model file shows it") from None
    except Exception as e:
        raise StandaloneError(f"{finding.label}: the validator fails on its model: "
                              f"{type(e).__name__}") from None
    deadline = hang_s if symptom.kind == "hang" else CANDIDATE_S
    parent = files.own_dir(out.absolute().parent)
    steps: list[str] = []
    with tempfile.TemporaryDirectory(prefix=".nncert-standalone-", dir=parent) as staging:
        runs = {"n": 0}

        def shows(m: Model, f: list[np.ndarray]) -> bool:
            """Whether run.py of (m, f) shows the symptom (False when nothing can be written)."""
            runs["n"] += 1
            where = Path(staging) / f"candidate-{runs['n']}"
            try:
                standalone.write_standalone(driver, m, f, where, run=False)
            except StandaloneError:
                return False
            return symptom.shown_by(standalone.measure(where, deadline))

        progress(f"{finding.label}: checking that run.py shows {symptom}")
        try:
            standalone.write_standalone(driver, model, feeds, Path(staging) / "decoded", run=False)
        except StandaloneError as e:
            raise StandaloneError(f"{finding.label}: {e}") from None
        first = standalone.measure(Path(staging) / "decoded", deadline)
        if not symptom.shown_by(first):
            raise StandaloneError(f"{finding.label}: run.py on its decoded model does not show {symptom}: "
                                  f"{_outcome(first)}")
        if minimise and symptom.kind != "hang":
            started = time.monotonic()
            model, feeds, op_step = fewest_operations(model, feeds, shows)
            steps += op_step
            from nncert.repro.minimise import minimise as shrink

            left_s = max(0.0, max_seconds - (time.monotonic() - started))
            model, feeds, shrunk = shrink(model, feeds, shows, max_runs=max(0, max_runs - runs["n"]),
                                          max_seconds=left_s)
            steps += shrunk
            progress(f"{finding.label}: {runs['n']} candidates tried"
                     + (f": {'; '.join(steps)}" if steps else ""))
        elif symptom.kind == "hang":
            steps.append("not minimised: a hang costs the deadline per try")
    note = (f"From {finding.label}: {finding.spec.get('message', '')}".strip() + "\n\n" +
            f"The finding's symptom, which run.py must show to reproduce it: {symptom}.\n\n" +
            "Decoded input:\n\n```\n" + how + "\n```\n\n" +
            (f"Minimised by nncert ({'; '.join(steps)})." if steps else "Not made smaller: no smaller "
             "model showed the same symptom.") +
            (f"\n\nReplay the finding through nncert: `{finding.spec['command']}`"
             if isinstance(finding.spec.get("command"), str) else ""))
    path_out = standalone.write_standalone(driver, model, feeds, out, source=str(finding.where), note=note,
                                           timeout=deadline)
    case = standalone.load_case(path_out)
    case["finding"] = {"target": finding.target, "key": finding.spec["key"], "kind": finding.spec["kind"],
                       "symptom": symptom.kind, "signal": symptom.signal, "shown": symptom.shown_by(case)}
    standalone.save_case(path_out, case)
    return path_out


def fewest_operations(model: Model, feeds: list[np.ndarray], shows: Callable[[Model, list[np.ndarray]], bool]
                      ) -> tuple[Model, list[np.ndarray], list[str]]:
    """Each operation alone (``isolate_operation``), fed the values the reference computes
    for its inputs (the probe's sample values where the reference cannot run the model): the
    first that still ``shows`` the symptom, or the model as it is."""
    from nncert.drivers.probe import sample_feeds
    from nncert.hal.transform import isolate_operation

    n_ops = len(model.main.operations)
    if n_ops < 2:
        return model, feeds, []
    seen = _operation_inputs(model, feeds)
    for n in range(n_ops):
        try:
            single = isolate_operation(model, n)
        except Exception:
            continue
        values = seen.get(n)
        single_feeds = values if values is not None and len(values) == len(single.main.input_indexes) \
            else sample_feeds(single)
        if shows(single, single_feeds):
            op = model.main.operations[n].type
            return single, single_feeds, [f"{n_ops} operations cut to operation {n} ({op.name}) alone"]
    return model, feeds, []


def _operation_inputs(model: Model, feeds: list[np.ndarray]) -> dict[int, list[np.ndarray]]:
    """Operation index -> the values of its non-constant inputs (in ``isolate_operation``'s
    order) when the reference runs ``model`` on ``feeds``; {} when it cannot."""
    from nncert.hal.transform import CONSTANT
    from nncert.hal.types import OperandLifeTime
    from nncert.ops.interpreter import run_model

    model = model.copy()  # the interpreter may fill in shapes
    sg = model.main
    index = {id(op): n for n, op in enumerate(sg.operations)}
    seen: dict[int, list[np.ndarray]] = {}

    def after(_k, op, _in_operands, in_values, _out_operands, results):
        n = index.get(id(op))
        if n is not None:
            skip = (*CONSTANT, OperandLifeTime.NO_VALUE, OperandLifeTime.SUBGRAPH)
            firsts = {}
            for pos, i in enumerate(op.inputs):
                if sg.operands[i].lifetime not in skip:
                    firsts.setdefault(i, pos)
            seen[n] = [np.array(in_values[pos]) for pos in firsts.values()]
        return results

    try:
        run_model(model, feeds, after=after)
    except Exception:
        return {}
    return seen


def _outcome(case: dict[str, Any]) -> str:
    last = (case.get("output") or [""])[-1]
    return f"{case.get('outcome')} ({case.get('ended', '')})" + (f": {last}" if last else "")


__all__ = ["TARGETS", "FuzzFinding", "Symptom", "decoded", "fewest_operations", "is_finding", "load_finding",
           "symptom_of", "write_of_finding"]
