"""The ``nncert`` command line: ``ops`` and ``drivers`` (more subcommands land with their suites).

Bad input (an unknown driver, a malformed option) gives a one-line error and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from nncert import __version__


def _cmd_ops(args: argparse.Namespace) -> int:
    from nncert.ops import records

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
            "doc": r.doc,
        })
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        variants = "; ".join(f"{ver}: {', '.join(vs)}" for ver, vs in row["variants"].items())
        flags = "".join([" [layout]" if row["layout"] else "", " [activation]" if row["activation"] else ""])
        print(f"{row['operation']:<30} HAL {row['since']:<4} {variants}{flags}")
    n_variants = sum(len(r.variants) for r in records())
    print(f"{len(rows)} operations, {n_variants} type variants")
    return 0


def _cmd_drivers(args: argparse.Namespace) -> int:
    from nncert.drivers import known_drivers
    from nncert.drivers.mutants import MUTANTS

    for name, desc in known_drivers().items():
        print(f"{name:<14} {desc}")
        if name == "mutant":
            for m, info in MUTANTS.items():
                doc = (info.cls.__doc__ or "").strip().splitlines()[0]
                print(f"  mutant:{m:<22} breaks {info.breaks}: {doc}")
    if args.check:
        from nncert.drivers import load_driver
        driver = load_driver(args.check)
        print(f"{args.check}: {driver.version_string()} (HAL {driver.feature_level.label})")
        driver.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nncert", description="Conformance, fuzz and accuracy "
                                     "testing for neural-network accelerator drivers.")
    parser.add_argument("--version", action="version", version=f"nncert {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ops", help="list the operation catalogue")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_ops)
    p = sub.add_parser("drivers", help="list the drivers that can be plugged in")
    p.add_argument("--check", metavar="SPEC", help="also load this driver spec and report it")
    p.set_defaults(func=_cmd_drivers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from nncert.drivers import DriverSpecError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DriverSpecError as e:
        print(f"nncert: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
