"""Packaging beyond what pyproject.toml can say: files that live at the top of the repository
travel in a wheel inside the package (``nncert.resources`` finds them in either place):
datasets/ (the MLTS data sets, with the scripts that made them) as nncert/data, docs/ (the
requirements document that ``nncert requirements`` prints) as nncert/docs, and the suites that
``nncert certify`` runs (conformance/, mlts/, fuzz/) under nncert/suites."""

from setuptools import find_packages, setup

TOP_LEVEL = {
    "nncert.data": ("datasets", ["*.txt", "*.npz", "*.md"]),
    "nncert.docs": ("docs", ["*.md"]),
    "nncert.suites.conformance": ("conformance", []),
    "nncert.suites.mlts": ("mlts", []),
    "nncert.suites.fuzz": ("fuzz", []),
}

setup(
    packages=[*find_packages(include=["nncert", "nncert.*"]), *TOP_LEVEL],
    package_dir={name: directory for name, (directory, _) in TOP_LEVEL.items()},
    package_data={"nncert": ["*.ini", "drivers/*/expectations.toml", "certify/plans/*.toml"],
                  **{name: files for name, (_, files) in TOP_LEVEL.items() if files}},
)
