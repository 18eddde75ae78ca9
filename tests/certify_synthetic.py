"""A synthetic certification run: a journal and run.json as ``nncert certify`` writes them, with
realistic test ids, requirement IDs, operation and type markers, failures with messages and
three-way verdicts, crashes, hangs, waivers (used and stale), declines with the driver's reasons,
MLTS and fuzz properties. The report tests and benchmarks/bench_certify.py build reports from it
without running a suite."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from nncert.certify.plan import Plan, load_plan
from nncert.certify.runner import JOURNAL_FILE, RunSettings
from nncert.ops import CATALOGUE

TYPES = (
    "float32",
    "float16",
    "int32",
    "quant8_asymm",
    "quant8_asymm_signed",
    "bool8",
    "float32-U=int32",
    "quant8_asymm-W=quant8_symm_per_channel",
    "quant16_symm-U=quant16_symm",
)
_OPERATION_REQ = ["DRV-2", "MEM-1", "MEM-2", "ACC-1", "ACC-6"]
_ACTIVATIONS = ("none", "relu", "relu1", "relu6")
_MUTATIONS = (
    "operand_type",
    "operand_rank",
    "operand_scale",
    "operand_zero_point",
    "operand_lifetime",
    "input_count",
    "output_count",
    "remove_input",
    "add_output",
)
_SMALL_SUITES = {  # suite: (test file, tests, requirement IDs)
    "caching": ("conformance/test_caching.py::test_save_and_retrieve", 38, ["CACHE-1", "CACHE-2"]),
    "memory_domains": ("conformance/test_memory_domains.py::test_allocate", 105, ["MEM-4", "VAL-2"]),
    "qos": ("conformance/test_qos.py::test_execute_with_a_deadline", 27, ["EXE-10"]),
    "control_flow": ("conformance/test_control_flow.py::test_while_loop", 47, ["EXE-9", "EXE-3"]),
    "burst_validation": ("conformance/test_burst_validation.py::test_bad_slot", 17, ["BURST-2", "VAL-1"]),
}
_MODELS = (
    ("efficientnet_lite0", "classification", False),
    ("efficientnet_lite0_int8", "classification", True),
    ("digits_mlp", "classification", False),
    ("blazeface_front", "detection", False),
    ("face_landmark", "landmarks", False),
    ("oww_embedding", "features", False),
    ("oww_alexa", "keyword", False),
    ("mww_hey_jarvis", "keyword", True),
)
_FUZZ_TARGETS = (
    "burst",
    "execute",
    "prepare_from_cache",
    "prepare_model",
    "validate_model",
    "validate_request",
)
_STRESS_MODES = (
    "inference",
    "model_loading",
    "parallel_threads",
    "parallel_processes",
    "client_termination",
    "multiprocess_load_kill",
    "random_models",
    "performance_degradation",
)
#: Expectation entries (as the pytest plugin records them) that waive failures, and one whose
#: tests pass again (stale).
_WAIVERS = [
    {
        "source": f"drivers/litert/expectations.toml:{12 + 9 * i}",
        "reason": reason,
        "reproduce": f"nncert repro litert {op}",
        "magnitude": magnitude,
        "agrees_with": "onnxruntime",
        "runtime": "ai-edge-litert",
        "versions": "<2.4",
        "runtime_version": "2.3.0",
        "text": f"{op}: {reason}",
        "fixed": "",
    }
    for i, (op, reason, magnitude) in enumerate(
        [
            (
                "NOT_EQUAL",
                "XNNPACK compares requantised int8 inputs, not their real values",
                "1 of 64 elements",
            ),
            ("QUANTIZE", "XNNPACK's int8 requantising QUANTIZE rounds a half step up", "0.9 step"),
            ("TRANSPOSE_CONV_2D", "per-channel weights are requantised per tensor", "up to 3 steps"),
        ]
    )
]
_STALE = {
    **_WAIVERS[0],
    "source": "drivers/onnxruntime/expectations.toml:31",
    "reason": "the fused QLinearSoftmax gives 0 where 255 is right",
    "runtime": "onnxruntime",
    "versions": "<1.32",
    "runtime_version": "1.32.0",
    "fixed": "the discrepancy is gone with onnxruntime 1.32.0: fixed in 1.32",
}


def write_run(
    out: Path,
    outcomes: int = 20000,
    *,
    seed: int = 0,
    failures: int = 300,
    hostile: str = "",
    incomplete: bool = False,
    driver: str = "litert",
) -> tuple[Plan, RunSettings]:
    """Write run.json and journal.jsonl of a smoke-plan run with about ``outcomes`` tests into
    ``out`` (created); returns the plan and settings ``report.build`` takes. ``failures`` FAILs
    besides 3 crashes and 2 hangs (none of either with ``failures=0``); ``hostile`` is put into a
    test id and a message, as a driver could; ``incomplete`` stops the operations suite at its
    deadline with tests left without an outcome."""
    rng = random.Random(seed)
    plan = load_plan("smoke")
    out.mkdir(parents=True, exist_ok=True)
    settings = RunSettings(
        driver=driver,
        plan="smoke",
        plan_sha256=plan.sha256,
        suites=[s.name for s in plan.suites],
        expectations=["drivers/litert/expectations.toml"],
        jobs=2,
    )
    settings.save(out)
    tests = _collected(outcomes, rng, hostile)
    cells = sorted({(t["operation"], t["type"]) for t in tests["operations"]})
    declined = {cell for cell in cells if rng.random() < 0.08}
    failing = rng.sample(
        [
            (s, i)
            for s in ("operations", "validation", "execution", "random_graphs")
            for i in range(len(tests[s]))
        ],
        min(failures + 5, 2000),
    )
    special = dict.fromkeys(failing[:failures], "FAIL")
    if failures:
        special.update(dict.fromkeys(failing[failures : failures + 3], "CRASH"))
        special.update(dict.fromkeys(failing[failures + 3 : failures + 5], "HANG"))
        special[("mlts", 1)] = "FAIL"
    special[("mlts", len(_MODELS) - 1)] = "DECLINED"
    now = time.time() - 3600
    records: list[dict] = [
        {
            "event": "run",
            "state": "started",
            "time": now,
            "resume": False,
            "identity": {
                "spec": driver,
                "version_string": "ai-edge-litert 2.3.0 (XNNPACK)",
                "type": "CPU",
                "feature_level": "FL7",
                "capabilities": {"operand_performance": {}},
                "extensions": [],
                "cache_files_needed": [1, 1],
            },
            "environment": {
                "nncert": "0.1.0",
                "nncert_commit": "0" * 40,
                "python": "3.11.7",
                "python_implementation": "CPython",
                "packages": {"numpy": "2.4.6", "ai-edge-litert": "2.3.0"},
                "cpu": "AMD EPYC",
                "cpu_count": 2,
                "machine": "x86_64",
                "os": "Linux-6.18-x86_64",
            },
            "expectations_not_applied": [
                {
                    "source": "drivers/litert/expectations.toml:40",
                    "reason": "SOFTMAX quant8 rounds the other way",
                    "why": "ai-edge-litert 2.3.0 is outside the entry's versions <2.2",
                }
            ],
        }
    ]
    for name, suite_tests in tests.items():
        now += 1
        records.append({"event": "suite", "suite": name, "state": "started", "start": 1, "time": now})
        records.append({"event": "collected", "suite": name, "tests": suite_tests})
        stop = len(suite_tests) * 3 // 4 if incomplete and name == "operations" else len(suite_tests)
        for i, t in enumerate(suite_tests[:stop]):
            now += 0.01
            records.append({"event": "start", "suite": name, "id": t["id"], "time": now})
            status = special.get((name, i)) or _status(name, i, t, declined, rng)
            records.append(_outcome(name, i, t, status, rng, hostile, failures > 0))
        state = (
            ("deadline", "stopped at its deadline of 1800 s")
            if stop < len(suite_tests)
            else ("finished", "pytest exit status 1")
        )
        records.append({"event": "suite", "suite": name, "state": state[0], "message": state[1], "time": now})
    (out / JOURNAL_FILE).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return plan, settings


def _collected(outcomes: int, rng: random.Random, hostile: str) -> dict[str, list[dict]]:
    ops = sorted(op.name for op in CATALOGUE)
    types = {op: rng.sample(TYPES, rng.randint(2, 6)) for op in ops}
    fixed = (
        sum(n for _, n, _ in _SMALL_SUITES.values()) + len(_MODELS) + len(_FUZZ_TARGETS) + len(_STRESS_MODES)
    )
    budget = max(outcomes - fixed, 40)
    per = {
        "operations": budget * 45 // 100,
        "validation": budget * 40 // 100,
        "execution": budget * 10 // 100,
    }
    per["random_graphs"] = budget - sum(per.values())
    tests: dict[str, list[dict]] = {
        "operations": [
            {
                "id": f"conformance/test_operations.py::test_operation[{op}-{ty}-{act}-s{s}]",
                "req": _OPERATION_REQ,
                "operation": op,
                "type": ty,
            }
            for op, ty, act, s in _cells(types, _ACTIVATIONS, per["operations"])
        ],
        "validation": [
            {
                "id": f"conformance/test_validation.py::test_mutated_model_is_rejected[{op}-{ty}-{m}-{s}]",
                "req": ["VAL-1", "DRV-2"],
            }
            for op, ty, m, s in _cells(types, _MUTATIONS, per["validation"])
        ],
        "execution": [
            {
                "id": f"conformance/test_execution.py::test_every_path_gives_the_same_results"
                f"[{op}-{ty}-{act}-s{s}]",
                "req": ["EXE-1", "EXE-3", "BURST-1", "BURST-3"],
            }
            for op, ty, act, s in _cells(types, _ACTIVATIONS, per["execution"])
        ],
    }
    for name, (stem, n, req) in _SMALL_SUITES.items():
        tests[name] = [{"id": f"{stem}[case{i}]", "req": req} for i in range(n)]
    graphs = "conformance/test_random_graphs.py::test_random_graph"
    tests["random_graphs"] = [
        {"id": f"{graphs}[{('single', 'small', 'large')[i % 3]}-{ops[i % len(ops)]}-{i}]", "req": ["ACC-5"]}
        for i in range(per["random_graphs"])
    ]
    tests["fuzz"] = [
        {"id": f"fuzz/test_fuzz.py::test_fuzz_target[{t}]", "req": ["VAL-3"]} for t in _FUZZ_TARGETS
    ]
    tests["mlts"] = [
        {"id": f"mlts/test_accuracy.py::test_model[{m}]", "req": ["MLTS-1", "ACC-2" if q else "ACC-5"]}
        for m, _, q in _MODELS
    ]
    tests["mlts_stress"] = [
        {"id": f"mlts/test_stress.py::test_stress[{m}]", "req": ["MLTS-2"]} for m in _STRESS_MODES
    ]
    if hostile:
        tests["qos"].append({"id": f"conformance/test_qos.py::test_prepare[{hostile}]", "req": ["EXE-10"]})
    return tests


def _cells(types: dict[str, list[str]], variants: tuple[str, ...], n: int):
    """``n`` distinct (operation, type, variant, seed) draws, round after round over every
    operation's types."""
    i = 0
    for r in range(n):
        for op, op_types in types.items():
            for ty in op_types:
                if i == n:
                    return
                yield op, ty, variants[r % len(variants)], r // len(variants)
                i += 1


def _status(name: str, i: int, t: dict, declined: set, rng: random.Random) -> str:
    if name == "operations" and (t["operation"], t["type"]) in declined:
        return "DECLINED"
    if name in ("memory_domains", "burst_validation") and i % 7 == 3:
        return "SKIPPED"
    if (
        name == "operations"
        and t["operation"] in ("NOT_EQUAL", "QUANTIZE", "TRANSPOSE_CONV_2D")
        and t["type"].startswith("quant8")
    ):
        return "WAIVED"
    if name == "operations" and t["operation"] == "SOFTMAX" and t["id"].endswith("-none-s0]"):
        return "XPASS"
    return "PASS"


def _outcome(
    suite: str, i: int, t: dict, status: str, rng: random.Random, hostile: str, faults: bool
) -> dict:
    record: dict = {
        "event": "outcome",
        "suite": suite,
        "id": t["id"],
        "status": status,
        "req": t["req"],
        "duration": round(rng.uniform(0.0005, 0.05), 6),
        "message": "",
    }
    op = t.get("operation", "CONV_2D")
    if status == "FAIL":
        record["message"] = (
            f"ACC-1: {op} output 0: element {rng.randint(0, 4095)} is {rng.uniform(-2, 2):.6f}, "
            f"expected {rng.uniform(-2, 2):.6f} (atol 1e-05, rtol 1e-05); "
            f"{rng.randint(1, 80)} of 4096 elements outside"
        )
        if hostile and i % 50 == 0:
            record["message"] += f" {hostile}"
        if rng.random() < 0.4:
            record["verdict"] = (
                "three-way verdict: onnxruntime agrees with reference; litert:kernels=ref "
                "agrees with reference -> litert is the odd one out"
            )
    elif status == "CRASH":
        record.update(
            message="the suite's process died in this test (killed by SIGSEGV)",
            detail='Fatal Python error: Segmentation fault\n\nCurrent thread:\n  File "interpreter.py", '
            "line 941 in invoke\n" * 3,
        )
    elif status == "HANG":
        record.update(message="no outcome within 300 s: the suite's process was killed", detail="...")
    elif status == "DECLINED" and suite == "mlts":
        record["message"] = "the driver declines 3 of the model's operations: CONV_2D (quant8_asymm_signed)"
    elif status == "DECLINED":
        record["message"] = (
            f"{op} {t['type']}: the LiteRT exporter has no {t['type']} kernel for {op} "
            f"(TFLite builtin {op.lower()} accepts float32 and int8 only)"
        )
        if hostile:
            record["message"] += f" {hostile}"
    elif status == "SKIPPED":
        record["message"] = "the driver has no memory domains (allocate returns GENERAL_FAILURE)"
    elif status == "WAIVED":
        exp = _WAIVERS[("NOT_EQUAL", "QUANTIZE").index(op) if op in ("NOT_EQUAL", "QUANTIZE") else 2]
        record.update(message=exp["reason"], expectation=exp)
    elif status == "XPASS":
        record.update(message=_STALE["fixed"], expectation=_STALE)
    if suite == "mlts":
        record["properties"] = {"nncert_mlts": _mlts_row(i, status, rng)}
    elif suite == "fuzz":
        findings = (
            []
            if i % 3 or not faults
            else [
                {
                    "key": f"crash-{rng.getrandbits(40):010x}",
                    "count": rng.randint(1, 9),
                    "kind": "crash",
                    "message": "IndexError: list index out of range",
                    "known": i == 0,
                    "command": f"nncert fuzz replay {_FUZZ_TARGETS[i]} crash-1 --driver=litert",
                    "dir": f"artifacts/fuzz/{_FUZZ_TARGETS[i]}",
                }
            ]
        )
        if findings and not findings[0]["known"]:
            record.update(
                status="FAIL", message=f"VAL-3: crash {findings[0]['key']}: {findings[0]['message']}"
            )
        record["properties"] = {
            "nncert_fuzz": {
                "target": _FUZZ_TARGETS[i],
                "execs": rng.randint(2000, 40000),
                "corpus": rng.randint(9, 3314),
                "seconds": 10.0 + i / 10,
                "findings": findings,
            }
        }
    elif suite == "mlts_stress":
        record["properties"] = {
            "mlts_stress": {"mode": _STRESS_MODES[i], "kind": "SUCCESS", "iterations": 100}
        }
    if hostile and suite == "qos" and hostile in t["id"]:
        record.update(status="FAIL", message=f"EXE-10: {hostile}", verdict=f"three-way verdict: {hostile}")
    return record


def _mlts_row(i: int, status: str, rng: random.Random) -> dict:
    """A row as nncert.mlts.report.model_row writes it (the keys are that function's)."""
    model, task, quantised = _MODELS[i]
    d, b = rng.uniform(1, 80), rng.uniform(0.5, 20)
    row = {
        "model": model,
        "driver": "litert",
        "status": "FAIL" if status == "FAIL" else "PASS",
        "samples": 8,
        "quantised": quantised,
        "task": task,
    }
    if status == "DECLINED":
        return {
            **row,
            "status": "UNSUPPORTED",
            "samples": 0,
            "reasons": ["declined: CONV_2D (quant8)"],
            "outputs": [],
            "latency": {},
            "compile_ms": {},
        }
    if task == "classification":
        top1 = rng.choice([0.75, 0.875, 1.0])
        row.update(
            top1=top1 - (0.25 if status == "FAIL" else 0),
            baseline_top1=top1,
            top1_mark="same",
            top5=1.0,
            baseline_top5=1.0,
            top5_mark="same",
            agreement=0.625 if status == "FAIL" else 1.0,
        )
        if status == "FAIL":
            row["top1_mark"] = "worse"
    row.update(
        p50_ms=d,
        baseline_p50_ms=b,
        latency_ratio=d / b,
        latency_mark="worse" if d > 1.1 * b else "same",
        reasons=["output 0: 12 elements more than 1 step off (ACC-2)"] if status == "FAIL" else [],
        outputs=[
            {
                "output": 0,
                "type": "TENSOR_FLOAT32",
                "elements": 1000,
                "mean_abs_err": 1e-6,
                "max_abs_err": 1e-5,
                "mse": 1e-12,
                "max_steps": None,
                "over_steps": None,
                "verdict": "pass",
            }
        ],
        latency={
            "driver": {"mean_ms": d, "p50_ms": d, "p90_ms": d * 1.1, "p99_ms": d * 1.3, "runs": 10},
            "baseline": {"mean_ms": b, "p50_ms": b, "p90_ms": b * 1.1, "p99_ms": b * 1.2, "runs": 10},
        },
        compile_ms={"plain": rng.uniform(2, 90)},
    )
    return row
