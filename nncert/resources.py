"""Where the files nncert ships beside its code are: the requirements document and the other
docs, the MLTS data sets, and the suites (conformance, MLTS, fuzz) that ``nncert certify`` and
``nncert test`` run.

A checkout (or an editable install) has them at the top level of the repository; a wheel
carries them inside the package (``nncert/docs``, ``nncert/data``, ``nncert/suites/...``,
mapped in setup.py). The checkout is used when it is there, so an editable install reads
what the developer edits.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
#: The repository root, when nncert runs from a checkout.
CHECKOUT = PACKAGE.parent
#: The suites' directories, relative to the suites root: test ids start with them.
SUITE_DIRS = ("conformance", "mlts", "fuzz")


def _is_checkout() -> bool:
    return (CHECKOUT / "pyproject.toml").is_file() and all((CHECKOUT / d).is_dir() for d in SUITE_DIRS)


def suites_root() -> Path:
    """The directory holding conformance/, mlts/ and fuzz/: test ids are relative to it."""
    return CHECKOUT if _is_checkout() else PACKAGE / "suites"


def docs_dir() -> Path:
    """The documentation (docs/requirements.md, docs/certification.md, ...)."""
    return CHECKOUT / "docs" if _is_checkout() else PACKAGE / "docs"


def data_dir() -> Path:
    """The committed MLTS data sets. A wheel's copy is looked for first: the directory beside an
    installed nncert may be another distribution's (Hugging Face's ``datasets``)."""
    packaged = PACKAGE / "data"
    return packaged if packaged.is_dir() else CHECKOUT / "datasets"


#: The pytest configuration the suites run with, the same from a checkout and from a wheel.
SUITES_INI = PACKAGE / "suites.ini"
