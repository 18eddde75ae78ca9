"""A missing optional dependency is a one-line error naming the extra that installs it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from nncert.extras import EXTRA_OF_MODULE, install_hint

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_of_every_extra_is_mapped_to_it():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dist_extras: dict[str, set[str]] = {}  # a distribution several extras need (onnx) is in each
    for name, deps in extras.items():
        for d in deps:
            if name != "test":
                dist_extras.setdefault(re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0].lower(), set()).add(name)
    for module, dists in packages_distributions().items():
        for dist in dists:
            owners = dist_extras.get(dist.lower())
            if owners and not module.startswith("_") and module not in ("pylab", "mpl_toolkits",
                                                                         "atheris_no_libfuzzer"):
                assert EXTRA_OF_MODULE.get(module) in owners, f"{module} ({dist}) belongs to {sorted(owners)}"


def test_the_hint_follows_the_cause_chain():
    try:
        try:
            raise ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")
        except ModuleNotFoundError as e:
            raise ImportError("the driver needs it") from e
    except ImportError as outer:
        assert install_hint(outer) == "onnxruntime is not installed: pip install 'nncert[onnx]'"
    assert install_hint(ModuleNotFoundError("x", name="not_ours")) is None


def _without(module: str, *argv: str) -> subprocess.CompletedProcess:
    code = (f"import sys; sys.modules[{module!r}] = None; from nncert.cli import main; "
            f"sys.exit(main({list(argv)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_driver_whose_runtime_is_missing_names_the_extra():
    proc = _without("flatbuffers", "drivers", "--check", "litert")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("flatbuffers is not installed: pip install 'nncert[litert]'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_command_whose_extra_is_missing_names_it():
    proc = _without("tqdm", "mlts", "--models", "digits_mlp_u8", "--limit", "1", "--out", "/nonexistent/x")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "nncert: error: nncert mlts: tqdm is not installed: pip install 'nncert[mlts]'\n"
