"""nncert.files.bytecode_for_children: with PYTHONDONTWRITEBYTECODE set, the Python children
of a certification share one private bytecode cache instead of compiling everything again;
nothing is written beside the sources and the environment comes back as it was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from nncert import files


def _child_imports(module_dir, name: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {name}"], cwd=module_dir, check=True)


def test_children_share_a_private_cache_and_the_environment_comes_back(tmp_path, monkeypatch):
    (tmp_path / "somemod.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    with files.bytecode_for_children():
        prefix = os.environ["PYTHONPYCACHEPREFIX"]
        assert "PYTHONDONTWRITEBYTECODE" not in os.environ
        assert stat.S_IMODE(os.stat(prefix).st_mode) == 0o700  # nobody else can plant code in it
        _child_imports(tmp_path, "somemod")
        cached = [p for _, _, names in os.walk(prefix) for p in names if p.startswith("somemod.")]
        assert cached and cached[0].endswith(".pyc")
    assert not (tmp_path / "__pycache__").exists()  # nothing beside the source
    assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1" and "PYTHONPYCACHEPREFIX" not in os.environ
    assert not os.path.exists(prefix)


def test_nothing_changes_without_the_variable_or_with_a_prefix_of_the_users(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    with files.bytecode_for_children():
        assert "PYTHONPYCACHEPREFIX" not in os.environ
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "mine"))
    with files.bytecode_for_children():
        assert os.environ["PYTHONPYCACHEPREFIX"] == str(tmp_path / "mine")
        assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1"
