"""The requirements document (docs/requirements.md) is the source of the requirement IDs, and
``nncert requirements`` prints it, one requirement or one family, from a checkout or a wheel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nncert import requirements
from nncert.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOC = requirements.document()


def test_the_short_titles_are_those_of_the_documents_requirements():
    assert list(requirements.REQUIREMENTS) == list(DOC.requirements)
    assert all(r.family == rid.split("-")[0] for rid, r in DOC.requirements.items())
    assert set(DOC.families) == {rid.split("-")[0] for rid in DOC.requirements}


def test_parse_reads_items_families_and_notes():
    doc = requirements.parse("""# Title

## Lifecycle (DRV)
- DRV-1 First line,
  continued.
- DRV-2 Alone.

### Notes on DRV-1: why
A note.

| a | b |

## Accuracy (ACC)
- ACC-1 Tolerances.
""")
    assert list(doc.families) == ["DRV", "ACC"] and doc.families["ACC"].title == "Accuracy"
    assert doc.requirements["DRV-1"].text == "DRV-1 First line,\ncontinued."
    assert doc.requirements["DRV-1"].notes == "### Notes on DRV-1: why\nA note.\n\n| a | b |"
    assert doc.requirements["DRV-2"].notes == ""
    # A family's section runs to the next family, its notes included.
    assert doc.show("DRV").endswith("| a | b |")
    assert doc.show("acc") == "## Accuracy (ACC)\n- ACC-1 Tolerances."
    with pytest.raises(ValueError, match="notes on DRV-9, which is no requirement"):
        requirements.parse("## Lifecycle (DRV)\n- DRV-1 x\n\n### Notes on DRV-9: y\nz\n")
    with pytest.raises(ValueError, match="DRV-1 is defined twice"):
        requirements.parse("## Lifecycle (DRV)\n- DRV-1 x\n- DRV-1 y\n")


def test_cli_prints_a_requirement_with_its_notes(capsys):
    assert main(["requirements", "ACC-2"]) == 0
    assert capsys.readouterr().out == \
        "ACC-2 Quantised: off by at most 1 (a quantised MobileNet: at most 3).\n"
    assert main(["requirements", "ACC-5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ACC-5 Random graphs:") and "### Notes on ACC-5" in out
    assert "| large graph (40 ops) |" in out and "ACC-6" not in out and "VAL-1" not in out


def test_cli_prints_a_family_and_the_whole_document(capsys):
    assert main(["requirements", "CACHE"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## Compilation caching (CACHE)") and "- CACHE-7 " in out and "MEM-1" not in out
    assert main(["requirements"]) == 0
    assert capsys.readouterr().out == requirements.document_path().read_text().rstrip("\n") + "\n"


@pytest.mark.parametrize("selector", ["ACC-9", "SPEC", "acc-"])
def test_cli_unknown_requirement_is_a_one_line_usage_error(capsys, selector):
    assert main(["requirements", selector]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no requirement or family {selector!r} in docs/requirements.md" in err


def test_an_installed_nncert_prints_the_requirements(tmp_path):
    """A wheel's layout (setup.py's build_py) reads the document from nncert/docs."""
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    script = ("import nncert.requirements as r; from nncert.cli import main; "
              "print(r.document_path()); main(['requirements', 'VAL-3'])")
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    where, text = run.stdout.split("\n", 1)
    assert where == str(tmp_path / "nncert" / "docs" / "requirements.md")
    assert text.startswith("VAL-3 Fuzzing: ")
