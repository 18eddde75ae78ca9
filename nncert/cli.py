"""The ``nncert`` command line: ``ops``, ``drivers``, ``graphs``, ``repro``, ``mlts stress`` and ``fuzz``
(more subcommands land with their suites).

Bad input (an unknown driver, a malformed option, an output directory that is a symlink or
another user's: nncert.files) gives a one-line error and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from nncert import __version__, files


class UsageError(Exception):
    """Bad command-line input found after parsing: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line like every other usage error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # the subcommands as typed: `certify merge`, not the parser's name for it, certify-merge
        message = re.sub(r"'(fuzz|graphs|certify)-(\w+)'", r"'\1 \2'", message)
        where = self.prog.removeprefix("nncert").strip().replace("-", " ")
        self.exit(2, f"nncert: error: {where + ': ' if where else ''}{message}\n")


def _cmd_ops(args: argparse.Namespace) -> int:
    from nncert.ops import records
    from nncert.ops.control_flow import CONTROL_FLOW

    rows = []
    for r in records():
        by_version: dict[str, list[str]] = {}
        for v in r.variants:
            by_version.setdefault(v.version.label, []).append(v.label)
        rows.append({
            "operation": r.name,
            "code": int(r.type),
            "since": r.type.version.label,
            "variants": {k: sorted(set(v)) for k, v in sorted(by_version.items())},
            "signatures": [s.name or "default" for s in r.signatures],
            "layout": bool(r.layout),
            "activation": bool(r.activation),
            "criterion": r.criterion,
            "state": [name for name, _ in r.state],
            "own_criterion": r.compare is not None,
            "random_graphs": r.graphs or True,
            "doc": r.doc,
        })
    for flow in CONTROL_FLOW.values():  # IF / WHILE: subgraph arguments, no OpRecord (EXE-9)
        rows.append({"operation": flow.name, "code": int(flow.type), "since": flow.version.label,
                     "variants": {}, "signatures": [flow.signature], "layout": False,
                     "activation": False, "criterion": None, "state": [], "own_criterion": False,
                     "random_graphs": "control flow has its own suite (conformance/test_control_flow.py)",
                     "doc": flow.doc})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        variants = "; ".join(f"{ver}: {', '.join(vs)}" for ver, vs in row["variants"].items())
        flags = "".join([" [layout]" if row["layout"] else "", " [activation]" if row["activation"] else "",
                         " [state]" if row["state"] else ""])
        print(f"{row['operation']:<30} HAL {row['since']:<4} {variants or row['signatures'][0]}{flags}")
    n_variants = sum(len(r.variants) for r in records())
    print(f"{len(rows)} operations ({len(CONTROL_FLOW)} control flow), {n_variants} type variants")
    return 0


def _cmd_drivers(args: argparse.Namespace) -> int:
    from nncert.drivers import known_drivers, runtime_status
    from nncert.drivers.mutants import MUTANTS

    for name, desc in known_drivers().items():
        print(f"{name:<14} {desc}")
        status = runtime_status(name)
        if status:
            print(f"{'':<14} {status}")
        if name == "mutant":
            for m, info in MUTANTS.items():
                doc = (info.cls.__doc__ or "").strip().splitlines()[0].replace("``", "")
                ends = "" if info.outcome == "FAILURE" else f" [{info.outcome}: run it isolated]"
                print(f"  mutant:{m:<22} breaks {info.breaks}: {doc}{ends}")
    if args.check:
        from nncert.drivers import load_driver
        driver = load_driver(args.check)
        print(f"{args.check}: {driver.version_string()} (HAL {driver.feature_level.label})")
        driver.close()
    return 0


def _cmd_requirements(args: argparse.Namespace) -> int:
    from nncert.requirements import DOCUMENT, document

    try:
        text = document().show(args.selector or "")
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    except OSError as e:  # an install without the document: say which file is missing
        print(f"nncert: error: cannot read the requirements document {DOCUMENT}: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


def _cmd_mlts_stress(args: argparse.Namespace) -> int:
    from nncert.drivers import load_driver
    from nncert.mlts.stress import MODES, NOT_FAILED, SUMMARY_COLUMNS, Journal, StressConfig, run_suite

    modes = [m.strip() for m in args.modes.split(",") if m.strip()] if args.modes else list(MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise UsageError(f"--modes: unknown mode {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(MODES)}")
    try:
        config = StressConfig(args.duration, args.threads, args.processes, args.seed, args.margin,
                              args.max_slowdown)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        journal = Journal(Path(args.out))
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    driver = load_driver(args.driver)
    try:
        summary = run_suite(driver, args.driver, modes, config, journal,
                            lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        driver.close()
    table = summary[[c for c in SUMMARY_COLUMNS if c in summary.columns]].copy()
    table["reason"] = table["reason"].str.slice(0, 80)
    print(table.to_string(index=False))
    print(f"journal: {journal.path}; summary: {journal.out_dir / 'summary.csv'}, "
          f"{journal.out_dir / 'summary.json'}")
    return 0 if summary["kind"].isin(NOT_FAILED).all() else 1  # a declined case is no failure


def _mlts_config(args: argparse.Namespace):
    from nncert.mlts.run import RunConfig
    from nncert.mlts.zoo import ZooError, select, zoo_dir

    try:
        entries = select(args.models)
        config = RunConfig(args.limit, args.warmup, args.runs, not args.no_cache_timing)
    except (ZooError, ValueError) as e:
        raise UsageError(str(e)) from None
    return entries, config, zoo_dir(args.zoo_dir)


def _cmd_mlts_build(args: argparse.Namespace) -> int:
    from nncert.mlts.zoo import ZooError, load

    entries, _, directory = _mlts_config(args)
    failed = 0
    for entry in entries:
        try:
            built = load(entry, directory, lambda line: print(line, file=sys.stderr, flush=True))
        except ZooError as e:
            print(f"ERROR {entry.name}: {e}")
            failed += 1
            continue
        main = built.model.main
        print(f"{entry.name}: {len(main.operations)} operations, {len(built.tflite):,} bytes of .tflite "
              f"(built in {built.info.get('build_s', '?')} s)")
    print(f"zoo: {directory}")
    return 1 if failed else 0


def _cmd_mlts_list(args: argparse.Namespace) -> int:
    from nncert.mlts.zoo import ZOO

    for entry in ZOO.values():
        kind = "quantised" if entry.quantised else "float"
        print(f"{entry.name:26s} {entry.task:15s} {kind:9s} {entry.description}")
        print(f"{'':26s} from {entry.source}")
    return 0


def _cmd_mlts_run(args: argparse.Namespace) -> int:
    import datetime

    from tqdm import tqdm

    from nncert.drivers import load_driver
    from nncert.mlts import report
    from nncert.mlts.run import ModelResult, apply_expectations, evaluate
    from nncert.mlts.zoo import MISSING_MODELS, ZooError, load
    from nncert.testing.expectations import ExpectationsError
    from nncert.testing.expectations import load as load_expectations

    entries, config, directory = _mlts_config(args)
    out = files.own_dir(args.out)
    driver = load_driver(args.driver)
    try:
        expectations = load_expectations(args.driver, args.expectations or ())
    except ExpectationsError as e:
        driver.close()
        raise UsageError(str(e)) from None
    results: list[ModelResult] = []
    notes = list(MISSING_MODELS)
    try:
        prepared_entries = []
        for entry in entries:  # build first: the progress bar then counts samples only
            try:
                built = load(entry, directory, lambda line: print(line, file=sys.stderr, flush=True))
                prepared_entries.append((entry, built, entry.samples(config.limit)))
            except ZooError as e:
                result = ModelResult(entry, args.driver)
                result.fail(str(e), "ERROR")
                results.append(result)
        total = sum(len(samples) for _, _, samples in prepared_entries)
        with tqdm(total=total, unit="sample", file=sys.stderr, disable=args.quiet) as bar:
            for entry, built, samples in prepared_entries:
                bar.set_description(entry.name)
                results.append(evaluate(entry, built, driver, args.driver, samples, config,
                                        lambda: bar.update(1)))
        meta = {"driver": args.driver, "driver_version": driver.version_string(),
                "baseline": _baseline_label(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "limit": config.limit, "warmup": config.warmup, "runs": config.runs, "notes": notes}
    finally:
        driver.close()
    apply_expectations(results, expectations)
    paths = report.write(results, out, meta)
    summary = report.tables(results)["summary"]
    columns = [c for c in ("model", "status", "samples", "top1", "baseline_top1", "agreement", "p50_ms",
                           "baseline_p50_ms") if c in summary.columns]
    print(summary[columns].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for r in results:
        for reason in r.reasons:
            print(f"{r.status} {r.entry.name}: {reason}")
    print(f"report: {paths['html']}; tables: {out}/{{summary,errors,latency,compilation}}.{{csv,json}}")
    return 0 if all(r.status in ("PASS", "UNSUPPORTED", "XFAIL") for r in results) else 1


def _baseline_label() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"LiteRT CPU (ai-edge-litert {version('ai-edge-litert')}, XNNPACK, 1 thread)"
    except PackageNotFoundError:
        return "LiteRT CPU"


def _add_mlts(sub: argparse._SubParsersAction) -> None:
    from nncert.mlts.stress import MODES

    mlts = sub.add_parser("mlts", help="the ML test suite: real models against the LiteRT CPU baseline "
                          "(MLTS-1), `mlts build`, `mlts list`, and `mlts stress` (MLTS-2)",
                          description="Run the zoo's real models on real data through --driver and through "
                          "the LiteRT CPU baseline: accuracy (labels, agreement, per-output errors, ACC-2), "
                          "latency and compilation time; tables (CSV, JSON) and report.html in --out. Exit "
                          "status 1 when a model fails or cannot run (a model whose operations the driver "
                          "declines is UNSUPPORTED, not a failure).")
    _mlts_model_args(mlts)
    mlts.add_argument("--driver", default="reference", metavar="SPEC",
                      help="driver under test (default: reference)")
    mlts.add_argument("--out", default="mlts-out", metavar="DIR",
                      help="where the report goes (default: mlts-out)")
    mlts.add_argument("--limit", type=int, metavar="N",
                      help="samples per model (default: the whole data set)")
    mlts.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed runs first (default: 5)")
    mlts.add_argument("--runs", type=int, default=30, metavar="N", help="timed runs per model (default: 30)")
    mlts.add_argument("--no-cache-timing", action="store_true",
                      help="do not time the compilation with the compilation cache")
    mlts.add_argument("--quiet", action="store_true", help="no progress bar")
    mlts.add_argument("--expectations", action="append", metavar="FILE",
                      help="more expectations files (strict xfails; a model's test id is its pytest "
                           "node id, mlts/test_accuracy.py::test_model[MODEL]), besides the driver's own; "
                           "repeatable")
    mlts.set_defaults(func=_cmd_mlts_run)
    suites = mlts.add_subparsers(dest="suite")
    p = suites.add_parser("build", help="build the zoo's models into the zoo directory (cached)")
    _mlts_model_args(p)
    p.set_defaults(func=_cmd_mlts_build)
    p = suites.add_parser("list", help="list the zoo's models")
    p.set_defaults(func=_cmd_mlts_list)
    p = suites.add_parser("stress", help="run the stress / crash modes against a driver, each case "
                          "isolated and classified SUCCESS / FAILURE / HANG / CRASH, or DECLINED when the "
                          "driver declines the mode's models (exit status 1 for FAILURE, HANG, CRASH)",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="modes:\n" + "\n".join(f"  {m.name:<24} {m.doc}" for m in MODES.values()))
    p.add_argument("--driver", default="reference", metavar="SPEC",
                   help="driver under test (default: reference)")
    p.add_argument("--duration", type=float, default=10.0, metavar="SECONDS",
                   help="work per case (default: 10)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where journal.jsonl, summary.csv and summary.json go")
    p.add_argument("--modes", metavar="A,B", help=f"comma-separated subset of: {', '.join(MODES)}")
    p.add_argument("--threads", type=int, default=4, metavar="N",
                   help="threads of parallel_threads (default: 4)")
    p.add_argument("--processes", type=int, default=3, metavar="N",
                   help="client processes at once in the multi-process modes (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="seeds models, inputs and random choices (default: 0)")
    p.add_argument("--margin", type=float, default=20.0, metavar="SECONDS",
                   help="how long past its duration a case may go before it is a HANG (default: 20)")
    p.add_argument("--max-slowdown", type=float, default=1.5, metavar="RATIO",
                   help="performance_degradation: the most the inference latency (its fastest fifth) "
                        "may grow beside a compilation (default: 1.5)")
    p.set_defaults(func=_cmd_mlts_stress)


def _graph_cells(args: argparse.Namespace) -> list:
    from nncert.testing.graphs import KINDS, TYPES, Cell, matrix

    if args.cell:
        try:
            cells = [Cell.parse(label) for label in args.cell]
        except ValueError as e:
            raise UsageError(f"--cell: {e}") from None
        return list({c.label: c for c in cells}.values())  # a cell named twice runs once
    cells = matrix(quantised=not args.cts_types)
    kinds = args.kind.split(",") if args.kind else list(KINDS)
    types = args.type.split(",") if args.type else list(TYPES)
    for what, given, known in (("--kind", kinds, KINDS), ("--type", types, TYPES)):
        bad = [k for k in given if k not in known]
        if bad:
            raise UsageError(f"{what}: unknown {', '.join(bad)}; known: {', '.join(known)}")
    return [c for c in cells if c.kind in kinds and (c.kind == "single" or c.type in types)]


def _shard(text: str | None) -> tuple[int, int] | None:
    from nncert.certify.shard import ShardError, parse_shard

    if text is None:
        return None
    try:
        return parse_shard(text)
    except ShardError as e:
        raise UsageError(str(e)) from None


def _cmd_graphs(args: argparse.Namespace) -> int:
    from nncert.drivers import DriverSpecError, load_driver
    from nncert.testing import expectations, graph_summary, triage
    from nncert.testing import random_graphs as rg

    shard = _shard(args.shard)
    selection = _graph_cells(args)
    cells = rg.shard_cells(selection, *shard) if shard else selection
    if args.graphs < 1:
        raise UsageError("--graphs must be at least 1")
    out = Path(args.out)
    if os.path.lexists(out):  # refused now rather than at the first failure
        files.check_dir(out)
    peers = None
    if args.triage_peers is not None:
        try:
            peers = triage.parse_peers(args.triage_peers)
        except ValueError as e:
            raise UsageError(str(e)) from None
    known: list = []
    if not args.no_expectations:
        try:
            known = expectations.load(args.driver, args.expectations or [])
        except (expectations.ExpectationsError, DriverSpecError) as e:
            raise UsageError(str(e)) from None
    driver = load_driver(args.driver)
    shrink_runs = 0 if args.no_shrink else rg.SHRINK_RUNS
    run = graph_summary.Run(args.driver, driver.version_string(), args.seed, args.graphs, shrink_runs,
                            not args.no_triage, [c.label for c in selection], shard or (1, 1))
    labels = [c.label for c in cells]
    results: dict[str, dict] = {}
    started = time.perf_counter()

    def summarise(complete: bool) -> Path:
        summary = graph_summary.build(run, labels, results, time.perf_counter() - started, complete)
        return graph_summary.write(out, summary, sync=complete)

    try:
        summarise(False)  # the directory is made, and its summary says the run is under way
    except files.UnsafePathError:
        raise
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    # One set of peers for the whole run, started at the first failure (not one per failure).
    triage.set_active(None if args.no_triage else triage.Triage(args.driver, peers=peers))

    def progress(r: rg.CellResult, i: int, n: int) -> None:
        state = "FAIL" if r.failure else "ok"
        print(f"[{i}/{n}] {r.cell.label:<40} {state:<4} passed {r.passed} declined {r.declined} "
              f"({r.seconds:.1f} s)", file=sys.stderr, flush=True)
        if r.failure:
            f = r.failure
            if not args.no_triage:
                f.verdict = rg.triage(f, args.driver)
            path = rg.dump(f, out, args.driver)
            print(f"  {f.headline}", file=sys.stderr)
            if f.verdict:
                print(f"  {f.verdict['summary']}", file=sys.stderr)
            print(f"  spec: {path}", file=sys.stderr, flush=True)
        results[r.cell.label] = entry = graph_summary.cell_entry(r)
        exp = expectations.match(known, graph_summary.test_id(r.cell.label), args.graphs)
        if exp is not None:  # a strict xfail of the driver's expectations: known, or fixed
            entry["expected" if r.failure else "unexpected_pass"] = \
                exp.describe() if r.failure else exp.fixed_message()
            print(f"  {'known: ' + exp.source if r.failure else 'XPASS(strict): ' + exp.fixed_message()}",
                  file=sys.stderr, flush=True)
        summarise(False)

    try:
        rg.run_cells(driver, cells, args.seed, args.graphs, shrink_runs=shrink_runs, progress=progress)
    finally:
        triage.set_active(None)
        driver.close()
    path = summarise(True)
    return _print_graphs_summary(json.loads(path.read_text()), out, shard)


def _print_graphs_summary(summary: dict, out: Path, shard: tuple[int, int] | None) -> int:
    from nncert.testing import graph_summary

    for line in graph_summary.final_lines(summary, out):
        print(line)
    of = (f" (shard {shard[0]}/{shard[1]}: merge the shards' directories with `nncert graphs merge "
          f"DIR... --out DIR`)") if shard else ""
    print(f"summary: {out / graph_summary.SUMMARY_FILE}{of}")
    return 1 if graph_summary.unexpected(summary) else 0


def _cmd_graphs_merge(args: argparse.Namespace) -> int:
    from nncert.testing import graph_summary

    out = Path(args.out)
    try:
        summary = graph_summary.merge([Path(d) for d in args.dirs], out)
    except graph_summary.MergeError as e:
        raise UsageError(str(e)) from None
    return _print_graphs_summary(summary, out, None)


def _cmd_repro(args: argparse.Namespace) -> int:
    from nncert.drivers import DriverSpecError, load_driver
    from nncert.testing.graphs import SpecError, load_spec
    from nncert.testing.outcome import Kind, run_isolated
    from nncert.testing.random_graphs import run

    if args.standalone is not None:
        return _repro_standalone(args)
    from nncert.repro.fuzzed import is_finding, load_finding
    from nncert.repro.standalone import StandaloneError

    if is_finding(args.file):
        try:
            finding = load_finding(args.file)
        except StandaloneError as e:
            raise UsageError(str(e)) from None
        replay = finding.spec.get("command") or "nncert fuzz replay TARGET FILE --driver X"
        raise UsageError(f"{args.file} is a fuzz finding: replay it with `{replay}`, or write its standalone "
                         f"reproducer with --standalone DIR")
    args.driver = args.driver or "reference"
    if "::" in args.file:
        raise UsageError(f"{args.file} is a test id: rerun it with `nncert test ID --driver X`, or write "
                         f"its standalone reproducer with --standalone DIR")
    try:
        graph, doc = load_spec(args.file)
    except SpecError as e:
        raise UsageError(str(e)) from None
    if not 0 < args.timeout < math.inf:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout}")
    if args.cache_dir:  # here, so that a directory nncert may not use is the one-line error
        files.private_dir(args.cache_dir)

    def replay() -> tuple[str | None, list[str], list[str]]:
        """In a child: a runtime that aborts or hangs on the graph is the driver's CRASH or HANG,
        never the end of nncert. The driver is loaded there too: a fork of a process that has
        loaded TVM hangs. (None, [why], []) for a spec that cannot be loaded."""
        try:
            driver = load_driver(args.driver)
        except DriverSpecError as e:
            return None, [str(e)], []
        cache: list[str] = []

        def prepare_with_cache(model):  # CACHE-1: the runtime's side, as an app would use it
            from nncert.drivers.caching import prepare_with_cache
            got = prepare_with_cache(driver, model, args.cache_dir)
            cache.append(got.describe())
            return got.prepared

        try:
            outcome = run(driver, graph, prepare_with_cache if args.cache_dir else None)
        finally:
            driver.close()
        return outcome.status, outcome.reasons, cache

    ended = run_isolated(replay, timeout=args.timeout)
    if ended.kind is Kind.SUCCESS and ended.value[0] is None:
        raise DriverSpecError(ended.value[1][0])
    print(graph.describe())
    if ended.kind is not Kind.SUCCESS:  # CRASH, HANG, or the replay itself raised
        print(f"{ended.kind}: {args.driver} on {args.file}: {ended.reason}")
        return 1
    status, reasons, cache = ended.value
    if cache:
        print(f"cache: {cache[0]}")
    verdict = {"passed": "PASS", "failed": "FAIL", "declined": "DECLINED"}[status]
    detail = "; ".join(reasons)
    print(f"{verdict}: {args.driver} on {args.file} ({len(graph.ops)} operations, "
          f"{graph.criterion_class} criteria){': ' + detail if detail else ''}")
    recorded = (doc.get("verdict") or {}).get("summary")
    if recorded:
        print(f"recorded {recorded}")
    return {"passed": 0, "failed": 1, "declined": 3}[status]


def _repro_standalone(args: argparse.Namespace) -> int:
    """``repro FILE|TEST_ID --driver X --standalone DIR``: the finding as a directory that runs
    without nncert (nncert.repro.standalone)."""
    from nncert.drivers import load_driver
    from nncert.drivers.compiled import CompiledDriver
    from nncert.repro import standalone
    from nncert.testing.graphs import SpecError, load_spec

    if args.cache_dir:
        raise UsageError("--standalone and --cache-dir do not mix: a standalone reproducer runs the "
                         "runtime's model file without nncert's compilation cache")
    try:
        out = standalone.check_out_dir(args.standalone)
    except standalone.StandaloneError as e:
        raise UsageError(f"--standalone {e}") from None
    from nncert.repro import fuzzed

    if fuzzed.is_finding(args.file):
        return _repro_finding(args, out)
    args.driver = args.driver or "reference"
    is_test = "::" in args.file
    graph = doc = None
    if not is_test:
        try:
            graph, doc = load_spec(args.file)
        except SpecError as e:
            raise UsageError(str(e)) from None
    driver = load_driver(args.driver)
    try:
        if not isinstance(driver, CompiledDriver):
            raise UsageError(f"--driver {args.driver} does not compile for another runtime (litert, "
                             f"onnxruntime, openvino, iree, tvm): it has no runtime model file to "
                             f"reproduce with")
        if not is_test:
            recorded = doc.get("verdict")
            verdict = recorded.get("summary") if isinstance(recorded, dict) else None
            seed = doc.get("seed")
            source = f"spec file {args.file} (cell {graph.cell.label}" + \
                (f", seed {seed}, graph {doc.get('graph_index')})" if isinstance(seed, int) else ")")
            path = standalone.write_graph(driver, graph, out, source=source,
                                          verdict=verdict if isinstance(verdict, str) else None)
    except standalone.StandaloneError as e:
        raise UsageError(str(e)) from None
    finally:
        driver.close()
    if is_test:
        try:
            path = standalone.write_of_test(args.file, args.driver, out)
        except standalone.StandaloneError as e:
            raise UsageError(str(e)) from None
    return _print_standalone(path)


def _print_standalone(path: Path) -> int:
    from nncert.repro import standalone

    case = standalone.load_case(path)
    worst = f", max abs difference {case['max_abs_diff']:g}" if case.get("max_abs_diff") is not None else ""
    print(f"standalone reproducer: {path}\n  {case['outcome']} ({case.get('ended', '')}{worst})")
    for line in case.get("output", [])[-1:]:
        print(f"  {line}")
    print(f"  run it: cd {path} && python run.py  (pip install {' '.join(case['packages'])} numpy)")
    return 0


def _repro_finding(args: argparse.Namespace, out: Path) -> int:
    """``repro FINDING --standalone DIR``: a fuzz campaign's finding, decoded, minimised on its
    model and written (nncert.repro.fuzzed)."""
    from nncert.drivers import load_driver
    from nncert.drivers.compiled import CompiledDriver
    from nncert.repro import fuzzed, standalone

    try:
        finding = fuzzed.load_finding(args.file)
        fuzzed.symptom_of(finding)  # a finding no runtime shows: refused before loading a driver
    except standalone.StandaloneError as e:
        raise UsageError(str(e)) from None
    spec = args.driver or finding.spec.get("driver")
    if not isinstance(spec, str) or not spec:
        raise UsageError(f"{args.file}: the finding names no driver: give --driver X")
    driver = load_driver(spec)
    try:
        if not isinstance(driver, CompiledDriver):
            raise UsageError(f"--driver {spec} does not compile for another runtime (litert, onnxruntime, "
                             f"openvino, iree, tvm): it has no runtime model file to reproduce with")
        path = fuzzed.write_of_finding(args.file, driver, out, minimise=not args.no_minimise,
                                       progress=lambda line: print(line, file=sys.stderr, flush=True))
    except standalone.StandaloneError as e:
        raise UsageError(str(e)) from None
    finally:
        driver.close()
    return _print_standalone(path)


def _add_graphs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("graphs", help="random-graph testing (ACC-5): seeded graphs judged by the "
                       "CTS criteria; failures shrunk and written as spec files; also `graphs merge`",
                       usage="nncert graphs [--driver SPEC] [--seed N] [--graphs N] [--kind A,B] "
                             "[--type A,B] [--cell LABEL] [--out DIR] [--shard I/N] ...\n"
                             "       nncert graphs merge SHARD_DIR... --out DIR")
    p.add_argument("--driver", default="reference", metavar="SPEC",
                   help="driver under test (default: reference)")
    p.add_argument("--seed", type=int, default=0, help="seed of the whole run (default: 0)")
    p.add_argument("--graphs", type=int, default=50, metavar="N",
                   help="graphs per cell (default: 50, the CTS's)")
    p.add_argument("--kind", metavar="A,B", help="single, small and/or large (default: all: the CTS matrix)")
    p.add_argument("--type", metavar="A,B", help="graph data types of small/large cells (default: all)")
    p.add_argument("--cts-types", action="store_true",
                   help="leave out the quantised graph types, as the CTS does")
    p.add_argument("--cell", action="append", metavar="LABEL",
                   help="run only this cell (single-OP-VERSION or small|large-TYPE-rankN); repeatable")
    p.add_argument("--out", default="nncert-graphs", metavar="DIR",
                   help="where failing graphs are written as spec files (default: nncert-graphs)")
    p.add_argument("--no-triage", action="store_true", help="do not replay failures on the peer runtimes")
    p.add_argument("--triage-peers", metavar="NAMES",
                   help="the peer runtimes of the N-way verdict, comma-separated, or all (default: "
                        "the installed ones of litert, onnxruntime, openvino; iree and tvm compile "
                        "each case)")
    p.add_argument("--no-shrink", action="store_true", help="keep failing graphs as generated")
    p.add_argument("--expectations", action="append", metavar="PATH",
                   help="an expectations file of known discrepancies (strict xfails by cell, as "
                        "conformance/test_random_graphs.py's), besides the driver's own; repeatable")
    p.add_argument("--no-expectations", action="store_true",
                   help="ignore every expectations file: known discrepancies fail as they are")
    p.add_argument("--shard", metavar="I/N",
                   help="run shard I of N: a deterministic 1/N of the selected cells (one shard a machine; "
                        "then `nncert graphs merge`)")
    p.set_defaults(func=_cmd_graphs)
    p = sub.add_parser("graphs-merge", prog="nncert graphs merge",
                       help="one summary from the N shards of a sharded `nncert graphs` run "
                            "(as `nncert graphs merge DIR... --out DIR`)")
    p.add_argument("dirs", nargs="+", metavar="SHARD_DIR", help="the shards' --out directories, 1/N to N/N")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the merged summary's directory, with the failures' spec files (new or empty)")
    p.set_defaults(func=_cmd_graphs_merge)
    p = sub.add_parser("repro", help="replay a spec file written by `nncert graphs` on a driver; with "
                       "--standalone, write a reproducer of it (or of a failing test id) that runs "
                       "without nncert")
    p.add_argument("file", help="the spec file (or, with --standalone, a test id such as "
                                "'conformance/test_operations.py::test_operation[ADD-float32-none-s0]', "
                                "or a fuzz finding: its findings/NNN-KEY directory, minimized file or "
                                "spec.json)")
    p.add_argument("--driver", default=None, metavar="SPEC",
                   help="driver to replay on (default: reference; for a fuzz finding, the finding's)")
    p.add_argument("--no-minimise", action="store_true",
                   help="with --standalone and a fuzz finding: write its decoded model as it is")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="compile through a compilation cache in DIR, as the NNAPI runtime does, "
                        "and say whether it was a hit, a miss or refused")
    p.add_argument("--timeout", type=float, default=REPRO_TIMEOUT_S, metavar="S",
                   help="the replay runs in a child process: one that dies is the driver's CRASH, one "
                        f"still running after S seconds its HANG (default: {REPRO_TIMEOUT_S:g})")
    p.add_argument("--standalone", metavar="OUT_DIR",
                   help="write a standalone reproducer into OUT_DIR (new or empty): the runtime's model "
                        "file, inputs.npz, expected.npz, case.json, README.md and a run.py that needs only "
                        "numpy and the runtime (--driver: litert, onnxruntime, openvino, iree or tvm); "
                        "docs/reproducers.md")
    p.set_defaults(func=_cmd_repro)


def _fuzz_target(name: str) -> tuple:
    from nncert.fuzz.campaign import CampaignError, resolve_target

    try:
        return resolve_target(name)
    except CampaignError as e:
        raise UsageError(str(e)) from None


#: Seconds ``nncert repro`` lets a replay run before it is the driver's HANG.
REPRO_TIMEOUT_S = 300.0

#: Seconds loading a driver may take when its spec is checked (a runtime's import included).
DRIVER_CHECK_S = 300.0


def _check_driver(target, spec: str) -> str | None:
    """The driver spec a target runs on, checked by loading it once (None if it needs none),
    in a child process: the campaign and the replay run each input in a fork of this process,
    which loads the driver afresh, and a fork of a process that has run TVM, IREE or OpenVINO
    hangs (TVM's: its executor thread is gone, every replay waited on it: HANG|threading.py:wait|)."""
    from nncert.drivers import DriverSpecError
    from nncert.testing.outcome import Kind, run_isolated

    if not target.needs_driver:
        return None
    outcome = run_isolated(_driver_problem, spec, timeout=DRIVER_CHECK_S)
    if outcome.kind is not Kind.SUCCESS:
        raise DriverSpecError(f"{spec}: loading the driver ended with {outcome}")
    if outcome.value is not None:
        raise DriverSpecError(outcome.value)
    return spec


def _driver_problem(spec: str) -> str | None:
    """Why the driver ``spec`` cannot be loaded (DriverSpecError's line), or None."""
    from nncert.drivers import DriverSpecError, load_driver

    try:
        load_driver(spec).close()
    except DriverSpecError as e:
        return str(e)
    return None


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from nncert.fuzz.campaign import Campaign, CampaignConfig, CampaignError

    target, script = _fuzz_target(args.target)
    try:
        config = CampaignConfig(args.time, args.jobs, args.timeout, args.seed, args.minimize_time,
                                args.progress_every, list(args.libfuzzer_flags), args.max_seeds,
                                **({} if args.startup is None else {"startup": args.startup}))
    except ValueError as e:
        raise UsageError(str(e)) from None
    for directory in args.corpus or []:
        if not Path(directory).is_dir():
            raise UsageError(f"--corpus {directory}: not a directory")
    driver = _check_driver(target, args.driver)
    out = Path(args.out)
    try:
        campaign = Campaign(target, script, driver, out, config, [Path(d) for d in args.corpus or []],
                            lambda line: print(line, file=sys.stderr, flush=True), args.target)
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    print(f"fuzzing {args.target}{' on ' + driver if driver else ''}: {config.jobs} worker(s), "
          f"{config.time:g} s, {campaign.n_seeds} seeds, per-input timeout {config.timeout} s; "
          f"output in {out}", file=sys.stderr, flush=True)
    try:
        summary = campaign.run()
    except CampaignError as e:
        raise UsageError(str(e)) from None
    kept = summary["earlier_findings"]
    print(f"{summary['execs']} executions in {summary['elapsed_s']} s, corpus {summary['corpus']}, "
          f"{summary['findings']} finding(s), {summary['duplicates']} duplicate(s)"
          + (f"; {kept} finding(s) of earlier campaigns kept in {out}" if kept else "")
          + ("; interrupted (Ctrl-C) before its time was up" if summary["interrupted"] else ""))
    new = 0
    for key, f in summary["findings_by_key"].items():
        known = f.get("known")
        new += not known
        label = f"KNOWN (an expected failure of {known['test']}, {known['source']})" if known else "FINDING"
        again = f", recorded by an earlier campaign as #{f['number']}" if f["earlier"] else ""
        print(f"{label} {key} (x{f['count']}{again}): {f['message']}\n  replay: {f['command']}")
        if f.get("standalone_command"):
            print(f"  standalone reproducer: {f['standalone_command']}")
    print(f"journal: {campaign.journal}; summary: {out / 'summary.json'}")
    # discrepancies the driver's expectations already list do not fail it; a campaign cut
    # short by Ctrl-C says so in its status too (130, as a shell does)
    return 1 if new else 130 if summary["interrupted"] else 0


def _cmd_fuzz_corpus(args: argparse.Namespace) -> int:
    from nncert.fuzz.campaign import write_seeds

    target, _ = _fuzz_target(args.target)
    try:
        paths = write_seeds(target, Path(args.out))
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    print(f"{len(paths)} seeds of {args.target} in {args.out}")
    return 0


def _cmd_fuzz_replay(args: argparse.Namespace) -> int:
    from nncert.fuzz.campaign import replay

    target, _ = _fuzz_target(args.target)
    try:
        data = Path(args.file).read_bytes()
    except OSError as e:
        raise UsageError(f"{args.file}: cannot read it: {e.strerror or e}") from None
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {args.timeout}")
    driver = _check_driver(target, args.driver)
    try:
        print(target.describe(data))
    except Exception as e:  # the description is a courtesy; the replay is what counts
        print(f"(cannot describe the input: {type(e).__name__}: {e})")
    verdict = replay(target, driver, data, args.timeout)
    on = f" on {driver}" if driver else ""
    if not verdict.found:
        print(f"PASS: {args.target}{on}: no finding ({len(data)} bytes)")
        return 0
    print(f"{verdict.kind} {verdict.key}: {verdict.message}")
    for frame in verdict.frames[:5]:
        print(f"  at {frame}")
    return 1


def _cmd_fuzz_merge(args: argparse.Namespace) -> int:
    from nncert.fuzz.campaign import CampaignError
    from nncert.fuzz.merge import merge

    if args.timeout is not None and args.timeout < 1:
        raise UsageError(f"--timeout must be at least 1 second, not {args.timeout}")
    if not args.deadline > 0:
        raise UsageError(f"--deadline must be positive, not {args.deadline}")
    out = Path(args.out)
    try:
        summary = merge([Path(d) for d in args.dirs], out, args.timeout, args.deadline,
                        lambda line: print(line, file=sys.stderr, flush=True))
    except CampaignError as e:
        raise UsageError(str(e)) from None
    c = summary["corpus_merge"]
    print(f"{len(summary['merged'])} campaigns of {summary['target']}"
          f"{' on ' + summary['driver'] if summary['driver'] else ''}: {summary['execs']} executions, "
          f"corpus {c['kept']} inputs ({c['method']}; of {c['distinct']} distinct, {c['inputs']} in all), "
          f"{summary['findings']} finding(s), {summary['duplicates']} duplicate(s)")
    new = 0
    for key, f in summary["findings_by_key"].items():
        known = f.get("known")
        new += not known
        label = f"KNOWN (an expected failure of {known['test']}, {known['source']})" if known else "FINDING"
        by = ", ".join(f"{s['dir']} #{s['number']} x{s['count']}" for s in f["sources"])
        print(f"{label} {key} (x{f['count']}; found by {by}): {f['message']}\n  replay: {f['command']}")
        if f.get("standalone_command"):
            print(f"  standalone reproducer: {f['standalone_command']}")
    print(f"journal: {out / 'findings.jsonl'}; summary: {out / 'summary.json'}")
    return 1 if new else 0


def _add_fuzz(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fuzz", help="a coverage-guided fuzz campaign on a target (VAL-3); also "
                       "`fuzz merge`, `fuzz corpus` and `fuzz replay`",
                       usage="nncert fuzz TARGET [--driver SPEC] [--time S] [--jobs N] --out DIR "
                             "[--corpus DIR] [--seed N] [--max-seeds N] [-- LIBFUZZER_FLAGS]\n"
                             "       nncert fuzz merge DIR... --out DIR\n"
                             "       nncert fuzz corpus TARGET --out DIR\n"
                             "       nncert fuzz replay TARGET FILE [--driver SPEC]",
                       description="Run TARGET's atheris script under libFuzzer in --jobs worker "
                       "processes; every crash, hang or Finding is replayed in a child process, "
                       "de-duplicated by key, journaled in DIR/findings.jsonl, minimised and written "
                       "under DIR/findings with the command that replays it. Exit status 1 when "
                       "there are findings. TARGET is a registered target or the path of a script "
                       "that defines TARGET. Flags after -- go to libFuzzer as they are "
                       "(each -name=value, e.g. -max_len=4096).")
    p.add_argument("target", help="fuzz target name (or path of a fuzz script)")
    p.add_argument("--driver", default="reference", metavar="SPEC",
                   help="driver under test (default: reference)")
    p.add_argument("--time", type=float, default=60.0, metavar="S",
                   help="seconds of fuzzing, from the first worker ready (default: 60)")
    p.add_argument("--startup", type=float, metavar="S",
                   help="seconds the workers may take to import and run the seed corpus before the "
                        "fuzzing time starts (default: 120)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="libFuzzer worker processes (default: 1)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where corpus/, artifacts/, findings/, findings.jsonl and summary.json go")
    p.add_argument("--corpus", action="append", metavar="DIR",
                   help="extra inputs to start from, besides the target's seeds; repeatable")
    p.add_argument("--seed", type=int, help="libFuzzer -seed of the first worker (default: random)")
    p.add_argument("--max-seeds", type=int, metavar="N",
                   help="start from at most N of the target's seeds, spread over its catalogue "
                        "(default: all)")
    p.add_argument("--timeout", type=int, default=10, metavar="S",
                   help="per-input time limit; an input that runs longer is a HANG (default: 10)")
    p.add_argument("--minimize-time", type=float, default=30.0, metavar="S",
                   help="time spent minimising each new finding (default: 30)")
    p.add_argument("--progress-every", type=float, default=5.0, metavar="S",
                   help="seconds between progress lines (default: 5)")
    p.set_defaults(func=_cmd_fuzz)

    p = sub.add_parser("fuzz-merge", prog="nncert fuzz merge",
                       help="one campaign directory from campaigns of one target and driver (as "
                            "`nncert fuzz merge DIR... --out DIR`): findings by key with every campaign "
                            "that found them, corpora merged by libFuzzer -merge=1")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="the campaigns' --out directories")
    p.add_argument("--out", required=True, metavar="DIR", help="the merged campaign directory (new or empty)")
    p.add_argument("--timeout", type=int, metavar="S",
                   help="per-input time limit of the corpus merge (default: the campaigns' longest)")
    p.add_argument("--deadline", type=float, default=600.0, metavar="S",
                   help="the most seconds the corpus merge may run; past it the corpora are kept whole "
                        "(default: 600)")
    p.set_defaults(func=_cmd_fuzz_merge)
    p = sub.add_parser("fuzz-corpus", prog="nncert fuzz corpus",
                       help="write a fuzz target's seeds (as `nncert fuzz corpus`)")
    p.add_argument("target", help="fuzz target name (or path of a fuzz script)")
    p.add_argument("--out", required=True, metavar="DIR", help="one file per seed, named by its SHA-1")
    p.set_defaults(func=_cmd_fuzz_corpus)
    p = sub.add_parser("fuzz-replay", prog="nncert fuzz replay",
                       help="replay one fuzz input in a child process (as `nncert fuzz replay`)")
    p.add_argument("target", help="fuzz target name (or path of a fuzz script)")
    p.add_argument("file", help="the input (a finding's `minimized` file, an artifact)")
    p.add_argument("--driver", default="reference", metavar="SPEC",
                   help="driver to replay on (default: reference)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="longer than this is a HANG (default: 30)")
    p.set_defaults(func=_cmd_fuzz_replay)


def _cmd_certify(args: argparse.Namespace) -> int:
    from nncert.certify.runner import CertifyError, Request, certify

    suites = [s.strip() for s in args.suites.split(",") if s.strip()] if args.suites else None
    if args.resume is not None and args.out is not None and Path(args.out) != Path(args.resume):
        raise UsageError(f"--resume {args.resume} and --out {args.out}: give one directory")
    out = args.resume or args.out
    if out is None:
        raise UsageError("--out DIR is required (or --resume DIR)")
    request = Request(Path(out), args.driver, args.plan, suites, args.expectations or [], args.jobs,
                      args.resume is not None, args.shard, args.durations_from)
    try:
        report = certify(request)
    except CertifyError as e:
        raise UsageError(str(e)) from None
    return _print_verdict(report, request.out)


def _print_verdict(report: dict, out: Path) -> int:
    from nncert.certify import report as reports

    verdict = report["verdict"]
    part = report.get("shard")
    of = f" (shard {part['index']}/{part['count']}: merge the shards' reports)" if part else ""
    print(f"{verdict['overall']}: {report['driver'].get('spec')} on plan {report['plan']['name']}{of}")
    for reason in verdict["reasons"]:
        print(f"  {reason}")
    print(f"report: {out / reports.HTML_FILE} (data: {out / reports.REPORT_FILE}; "
          f"check it with: nncert certify verify {out})")
    return verdict["exit_status"]


def _cmd_certify_merge(args: argparse.Namespace) -> int:
    from nncert.certify.merge import merge
    from nncert.certify.runner import CertifyError

    try:
        report = merge([Path(d) for d in args.dirs], Path(args.out))
    except CertifyError as e:
        raise UsageError(str(e)) from None
    return _print_verdict(report, Path(args.out))


def _add_certify(sub: argparse._SubParsersAction) -> None:
    from nncert.certify.plan import known_plans

    p = sub.add_parser("certify", help="certify a driver: every suite of a plan, one verifiable report; "
                       "also `certify merge`, `certify verify` and `certify diff`",
                       usage="nncert certify --driver SPEC --out DIR [--plan NAME] [--suites A,B] "
                             "[--expectations FILE] [--jobs N] [--shard I/N [--durations-from REPORT]]\n"
                             "       nncert certify --resume DIR\n"
                             "       nncert certify merge SHARD_DIR... --out DIR\n"
                             "       nncert certify verify DIR\n"
                             "       nncert certify diff OLD NEW [--json FILE]",
                       description="Run the plan's suites against the driver, each in a child process "
                       "with deadlines (a crash or hang is recorded and the run goes on), journal every "
                       "outcome, and write DIR/report.json, report.html, junit.xml, tables/*.csv and "
                       "MANIFEST.sha256. Exit status: 0 CONFORMANT or CONFORMANT WITH WAIVERS, 1 NOT "
                       "CONFORMANT, 3 INCOMPLETE (continue with --resume DIR), 2 a usage error. "
                       "docs/certification.md.")
    p.add_argument("--driver", metavar="SPEC", help="driver under test (e.g. litert, my_pkg.module:factory)")
    p.add_argument("--out", metavar="DIR", help="the report's directory (new or empty)")
    p.add_argument("--plan", metavar="NAME",
                   help=f"{', '.join(known_plans())} or a plan file (default: standard)")
    p.add_argument("--suites", metavar="A,B", help="run only these suites of the plan")
    p.add_argument("--expectations", action="append", metavar="FILE",
                   help="a vendor's expectations file (strict xfails) besides the driver's own; repeatable")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="processes running tests: suites side by side, and slots no waiting suite needs as "
                        "pytest-xdist workers of the suite starting (default: 2, or 1 on one core)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR: only what has no outcome runs")
    p.add_argument("--shard", metavar="I/N",
                   help="run shard I of N: a deterministic 1/N of every suite's tests (one shard a "
                        "machine; then `certify merge`)")
    p.add_argument("--durations-from", metavar="REPORT",
                   help="with --shard: balance the shards by the test durations of this earlier report "
                        "(every shard must be given the same one; default: round-robin)")
    p.set_defaults(func=_cmd_certify)
    p = sub.add_parser("certify-merge", prog="nncert certify merge",
                       help="one report from the reports of a sharded run's N shards "
                            "(as `nncert certify merge DIR... --out DIR`)")
    p.add_argument("dirs", nargs="+", metavar="SHARD_DIR", help="the shards' report directories, 1/N to N/N")
    p.add_argument("--out", required=True, metavar="DIR", help="the merged report's directory (new or empty)")
    p.set_defaults(func=_cmd_certify_merge)
    p = sub.add_parser("certify-verify", prog="nncert certify verify",
                       help="re-check a certification report (as `nncert certify verify DIR`)")
    p.add_argument("dir", help="the report's directory")
    p.add_argument("--no-recollect", action="store_true",
                   help="do not collect the plan's tests again to check that none is missing (faster)")
    p.set_defaults(func=_cmd_certify_verify)
    p = sub.add_parser("certify-diff", prog="nncert certify diff",
                       help="what changed between two reports of one plan (as `nncert certify diff OLD NEW`)")
    p.add_argument("old", help="the earlier report's directory")
    p.add_argument("new", help="the later report's directory")
    p.add_argument("--json", metavar="FILE", help="also write the changes as JSON")
    p.add_argument("--latency-threshold", type=float, default=0.25, metavar="FRACTION",
                   help="an MLTS median latency change beyond this is reported; growth is a regression "
                        "(default: 0.25)")
    p.set_defaults(func=_cmd_certify_diff)


def _cmd_certify_verify(args: argparse.Namespace) -> int:
    from nncert.certify.verify import NotAReport, verify

    try:
        problems = verify(Path(args.dir), recollect=not args.no_recollect)
    except NotAReport as e:
        raise UsageError(str(e)) from None
    for problem in problems:
        print(f"FAIL: {problem}")
    if problems:
        print(f"{args.dir}: does not verify ({len(problems)} problem(s))")
        return 1
    print(f"OK: {args.dir} verifies: manifest intact, every test of the plan has its journaled outcome, "
          f"the verdicts follow from the outcomes")
    return 0


def _cmd_certify_diff(args: argparse.Namespace) -> int:
    from nncert.certify import diff
    from nncert.certify.report import load

    if not args.latency_threshold > 0:
        raise UsageError("--latency-threshold must be positive")
    try:
        result = diff.diff(load(Path(args.old)), load(Path(args.new)), args.latency_threshold)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(diff.text(result))
    if args.json:
        try:
            files.write_atomic(args.json, json.dumps(result, indent=1) + "\n")
        except OSError as e:
            raise UsageError(f"--json {args.json}: cannot write it: {e.strerror or e}") from None
    return 1 if result["regressed"] else 0


def _findings_selected(ids: Sequence[str]) -> list:
    from nncert.repro import findings

    try:
        catalogue = findings.load()
    except findings.CatalogueError as e:
        raise UsageError(str(e)) from None
    known = {f.id: f for f in catalogue}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise UsageError(f"no finding {', '.join(unknown)} in {findings.CATALOGUE} (`nncert findings list`)")
    return [known[i] for i in ids] if ids else catalogue


def _cmd_findings(args: argparse.Namespace) -> int:
    """``nncert findings list | replay [ID...] | render | build ID...``."""
    from nncert.repro import findings, standalone

    if args.action == "list":
        for f in _findings_selected(args.ids):
            print(f"{f.id:<44} {f.driver:<22} {f.symptom:<22} {f.title}")
        return 0
    if args.action == "render":
        catalogue = _findings_selected([])
        try:
            page = findings.render(catalogue)
        except standalone.StandaloneError as e:
            raise UsageError(str(e)) from None
        out = Path(args.out) if args.out else findings.PAGE
        files.write_atomic(out, page)
        print(f"{out}: {len(catalogue)} findings")
        return 0
    if args.action == "build":
        if not args.ids:
            raise UsageError("findings build needs the ids of the findings to build (or `all`)")
        failed = 0
        for f in _findings_selected([] if args.ids == ["all"] else args.ids):
            try:
                path = findings.build(f)
            except standalone.StandaloneError as e:
                print(f"{f.id}: not built: {e}", flush=True)
                failed += 1
                continue
            case = standalone.load_case(path)
            print(f"{f.id}: {case['outcome']} ({case.get('ended', '')})", flush=True)
        return 1 if failed else 0
    failed = 0  # replay
    for f in _findings_selected(args.ids):
        try:
            result = findings.replay(f)
        except standalone.StandaloneError as e:
            raise UsageError(f"{f.id}: {e}") from None
        print(result.line(), flush=True)
        failed += result.installed is not None and result.reproduces != result.expected
    return 1 if failed else 0


def _add_findings(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("findings", help="the catalogue of real runtime defects (findings/, "
                       "docs/findings.md): list, replay their standalone reproducers, render the page, "
                       "build a reproducer")
    p.add_argument("action", choices=("list", "replay", "render", "build"),
                   help="list the findings; replay their reproducers on the installed runtimes (exit 1 "
                        "when one no longer reproduces, or reproduces past its fixed_in); render "
                        "docs/findings.md; build (rewrite) the reproducers of IDs (or all) from their "
                        "sources")
    p.add_argument("ids", nargs="*", metavar="ID", help="findings to act on (default: all)")
    p.add_argument("--out", metavar="FILE", help="render: write the page here (default: docs/findings.md)")
    p.set_defaults(func=_cmd_findings)


def _cmd_test(args: argparse.Namespace) -> int:
    import pytest

    from nncert.certify.runner import pytest_arguments

    return int(pytest.main(pytest_arguments(list(args.pytest_args))))


def _mlts_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", metavar="A,B",
                   help="comma-separated zoo models (default: all; see `mlts list`)")
    p.add_argument("--zoo-dir", metavar="DIR", help="where built models are cached (default: STATE/mlts-zoo)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nncert", description="Conformance, fuzz and accuracy "
                     "testing for neural-network accelerator drivers.")
    parser.add_argument("--version", action="version", version=f"nncert {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ops", help="list the operation catalogue")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_ops)
    p = sub.add_parser("drivers", help="list the drivers that can be plugged in")
    p.add_argument("--check", metavar="SPEC", help="also load this driver spec and report it")
    p.set_defaults(func=_cmd_drivers)
    p = sub.add_parser("requirements", help="print the requirements document (docs/requirements.md), "
                       "one requirement with its notes, or one family")
    p.add_argument("selector", nargs="?", metavar="ID|FAMILY",
                   help="a requirement ID (ACC-2) or a family (ACC); default: the whole document")
    p.set_defaults(func=_cmd_requirements)
    _add_mlts(sub)
    _add_graphs(sub)
    _add_fuzz(sub)
    _add_certify(sub)
    _add_findings(sub)
    sub.add_parser("test", help="run nncert's suites with pytest from anywhere (all arguments are "
                   "pytest's): `nncert test 'conformance/test_operations.py::test_operation"
                   "[ADD-float32-none-s0]' --driver litert`, as a report's reproducers do")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from nncert.drivers import DriverSpecError
    from nncert.extras import install_hint

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["test"]:  # everything after `test` is pytest's
        return _cmd_test(argparse.Namespace(pytest_args=argv[1:]))
    if argv[:1] == ["fuzz"] and argv[1:2] in (["corpus"], ["replay"], ["merge"]):  # `fuzz corpus`, ...
        argv = [f"fuzz-{argv[1]}", *argv[2:]]
    if argv[:2] == ["graphs", "merge"]:
        argv = ["graphs-merge", *argv[2:]]
    if argv[:1] == ["certify"] and argv[1:2] in (["verify"], ["diff"], ["merge"]):  # `certify verify`, ...
        argv = [f"certify-{argv[1]}", *argv[2:]]
    flags: list[str] = []
    if argv[:1] == ["fuzz"] and "--" in argv:  # `nncert fuzz ... -- LIBFUZZER_FLAGS`
        at = argv.index("--")
        argv, flags = argv[:at], argv[at + 1:]
    args = build_parser().parse_args(argv)
    args.libfuzzer_flags = flags
    try:
        return args.func(args)
    except (DriverSpecError, UsageError, files.UnsafePathError) as e:
        print(f"nncert: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # a command whose optional dependency is not installed
        hint = install_hint(e)
        if hint is None:
            raise
        print(f"nncert: error: nncert {args.command}: {hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C: what was written stays written (journals are appended as they go)
        print(f"nncert: {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
