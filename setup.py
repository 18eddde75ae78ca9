"""Packaging beyond what pyproject.toml can say: the MLTS data sets live in the repository's
top-level datasets/ (with the scripts that made them) and travel in a wheel as nncert/data, so that
a non-editable install has them too (``nncert.mlts.datasets`` looks there first)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["nncert", "nncert.*"]), "nncert.data"],
    package_dir={"nncert.data": "datasets"},
    package_data={"nncert.data": ["*.txt", "*.npz", "*.md"]},
)
