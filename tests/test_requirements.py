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


# -- The requirement coverage gate --------------------------------------------------------------
# Every requirement of the document has a test that marks it and a mutant driver (one narrow
# fault, nncert/drivers/mutants/) that breaks it and that a test kills; a requirement no driver
# mutant can show says why in its notes, in a paragraph that starts with NO_MUTANT.

#: Where the tests that mark requirements live.
TEST_TREES = ("conformance", "tests", "mlts", "fuzz")
NO_MUTANT = "**No mutant:**"


def _marked_requirements() -> dict[str, set[str]]:
    """Requirement ID -> the files whose ``pytest.mark.req(...)`` names it (literal IDs)."""
    import ast

    found: dict[str, set[str]] = {}
    for tree in TEST_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "req":
                    for arg in node.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            found.setdefault(arg.value, set()).add(str(path.relative_to(ROOT)))
    return found


def _killing_tests(name: str, outcome: str) -> list[str]:
    """The test files that run mutant ``name`` and fail unless it is caught: every wrong-answer
    mutant is tests/test_mutants.py's; a crashing or hanging one is named by the tests that
    prove the harness survives it (tests/test_process_faults.py, test_hostile_*.py, ...)."""
    if outcome == "FAILURE":
        return ["tests/test_mutants.py"]
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))
            if p.name != "test_mutants.py" and (f"mutant:{name}" in (text := p.read_text())
                                                 or f'"{name}"' in text)]


def test_every_requirement_is_marked_by_a_test():
    marked = _marked_requirements()
    unknown = sorted(set(marked) - set(DOC.requirements))
    assert not unknown, f"tests mark IDs that {requirements.DOCUMENT} does not define: " + \
        ", ".join(f"{i} ({', '.join(sorted(marked[i]))})" for i in unknown)
    missing = sorted(set(DOC.requirements) - set(marked))
    assert not missing, f"no test marks {', '.join(missing)} (@pytest.mark.req)"


def test_every_requirement_has_a_mutant_that_a_test_kills():
    from nncert.drivers.mutants import MUTANTS

    by_requirement: dict[str, list[str]] = {}
    for name, info in MUTANTS.items():
        assert info.breaks in DOC.requirements, f"mutant:{name} breaks {info.breaks}, no requirement"
        assert _killing_tests(name, info.outcome), f"no test runs mutant:{name} ({info.outcome})"
        by_requirement.setdefault(info.breaks, []).append(name)
    exempt = {rid for rid, r in DOC.requirements.items() if NO_MUTANT in r.notes}
    both = sorted(exempt & set(by_requirement))
    assert not both, f"{', '.join(both)}: the document says no mutant can show it, yet one does " \
                     f"({', '.join(n for rid in both for n in by_requirement[rid])}): drop the note"
    missing = sorted(set(DOC.requirements) - set(by_requirement) - exempt)
    assert not missing, (f"no mutant driver breaks {', '.join(missing)}: add one to "
                         f"nncert/drivers/mutants/ with a test that kills it, or say in "
                         f"{requirements.DOCUMENT} why none can ({NO_MUTANT} in the notes)")


def test_the_gate_reads_the_exemption_from_the_notes():
    doc = requirements.parse("## Versions (VER)\n- VER-1 x\n\n### Notes on VER-1: why\n"
                             f"{NO_MUTANT} the harness's own output.\n")
    assert NO_MUTANT in doc.requirements["VER-1"].notes
