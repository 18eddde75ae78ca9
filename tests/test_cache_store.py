"""Compilation caching machinery (nncert.drivers.caching): the token store's persistence
and reset on a new driver version, the app-side helper, and ``nncert repro --cache-dir``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.drivers.caching import TokenStore, cache_token, prepare_with_cache, token_store
from nncert.drivers.reference import ReferenceDriver
from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus, OperandType, OperationType
from nncert.testing.graphs import Cell, save_spec, seeded

ROOT = Path(__file__).resolve().parent.parent


def _model():
    b = ModelBuilder()
    x = b.operand(OperandType.TENSOR_FLOAT32, (2,))
    out = b.operand(OperandType.TENSOR_FLOAT32, (2,))
    b.operation(OperationType.ADD, [x, b.constant(OperandType.TENSOR_FLOAT32, np.ones(2, np.float32)),
                                    b.constant(OperandType.INT32, 0)], [out])
    return b.build([x], [out])


class NewerReference(ReferenceDriver):
    """The reference driver after an update: same name, another version string."""

    def version_string(self) -> str:
        return super().version_string() + " (updated)"


def _files(tmp_path: Path) -> tuple[int, int]:
    return (os.open(tmp_path / "model", os.O_RDWR | os.O_CREAT, 0o600),
            os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o600))


def test_store_persists_and_resets_on_a_new_driver_version(tmp_path):
    token = bytes(range(32))
    m, d = _files(tmp_path)
    try:
        first = ReferenceDriver(state_dir=str(tmp_path / "state"))
        first.prepare_model(_model(), model_cache=[m], data_cache=[d], token=token)
        first.close()
        again = ReferenceDriver(state_dir=str(tmp_path / "state"))
        again.prepare_model_from_cache(None, [m], [d], token)  # persisted across instances
        updated = NewerReference(state_dir=str(tmp_path / "state"))
        with pytest.raises(HalError) as info:
            updated.prepare_model_from_cache(None, [m], [d], token)
        assert info.value.status is ErrorStatus.GENERAL_FAILURE
        assert len(token_store(updated)) == 0
        # ...and the old version finds its entries gone too: the store was reset.
        with pytest.raises(HalError):
            ReferenceDriver(state_dir=str(tmp_path / "state")).prepare_model_from_cache(None, [m], [d], token)
    finally:
        os.close(m)
        os.close(d)


def test_state_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NNCERT_STATE_DIR", str(tmp_path / "env"))
    driver = ReferenceDriver()
    m, d = _files(tmp_path)
    try:
        driver.prepare_model(_model(), model_cache=[m], data_cache=[d], token=bytes(32))
    finally:
        os.close(m)
        os.close(d)
    assert (tmp_path / "env" / "reference" / "compilation-cache.sqlite").exists()


def test_store_is_shared_between_two_handles(tmp_path):
    a = TokenStore(tmp_path / "s.sqlite", "v1")
    b = TokenStore(tmp_path / "s.sqlite", "v1")
    a.put(b"t" * 32, b"h")
    assert b.get(b"t" * 32) == b"h"
    b.drop(b"t" * 32)
    assert a.get(b"t" * 32) is None


def _scribble(path: Path) -> None:
    """Overwrite the database's pages after its header: sqlite reads it as malformed."""
    data = bytearray(path.read_bytes())
    data[100:] = b"\xa5" * (len(data) - 100)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["pages", "not a database"])
def test_a_corrupt_store_is_set_aside_and_begun_afresh(tmp_path, damage):
    """A corrupt store costs cache hits, never an exception: the next handle (or the open one,
    at its next use) moves it to .corrupt and starts an empty one."""
    path = tmp_path / "s.sqlite"
    open_handle = TokenStore(path, "v1")
    for i in range(200):
        open_handle.put(i.to_bytes(32, "little"), b"h" * 32)
    open_handle.close()
    if damage == "pages":
        _scribble(path)
    else:
        path.write_bytes(b"this is no sqlite file" * 100)
    fresh = TokenStore(path, "v1")
    assert len(fresh) == 0 and (tmp_path / "s.sqlite.corrupt").exists()
    fresh.put(b"t" * 32, b"h")
    assert TokenStore(path, "v1").get(b"t" * 32) == b"h"


def test_a_store_corrupted_under_an_open_handle_recovers_there(tmp_path):
    path = tmp_path / "s.sqlite"
    store = TokenStore(path, "v1")
    writer = TokenStore(path, "v1")  # written by another handle: none of it in the store's page cache
    for i in range(500):
        writer.put(i.to_bytes(32, "little"), b"h" * 32)
    writer._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the file the damage hits
    writer.close()
    _scribble(path)
    assert store.get((7).to_bytes(32, "little")) is None  # lost with the store, not an error
    store.put(b"t" * 32, b"h")
    assert TokenStore(path, "v1").get(b"t" * 32) == b"h"


def test_a_replaced_store_is_reopened(tmp_path):
    """Another process set the store aside (or someone removed it): this handle writes to the
    file now at the path, where the others read, not to the unlinked one."""
    path = tmp_path / "s.sqlite"
    store = TokenStore(path, "v1")
    store.put(b"a" * 32, b"h")
    for name in tmp_path.iterdir():
        name.unlink()
    store.put(b"b" * 32, b"h")
    assert TokenStore(path, "v1").get(b"b" * 32) == b"h"


def test_a_fork_connects_on_its_own(tmp_path):
    """sqlite forbids using a connection across fork(): the child connects again, and the
    parent's connection goes on working after the child has exited."""
    path = tmp_path / "s.sqlite"
    store = TokenStore(path, "v1")
    store.put(b"p" * 32, b"1")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child = store._db
            for i in range(100):
                store.put(i.to_bytes(32, "little"), b"c")
            code = 0 if store.get(b"p" * 32) == b"1" and store._db is not child else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.put(b"q" * 32, b"2")
    assert len(store) == 102 and store.get((99).to_bytes(32, "little")) == b"c"


@pytest.mark.parametrize("spec", ["reference", "service:reference"])
def test_prepare_with_cache_miss_hit_refused(tmp_path, spec):
    driver = load_driver(f"{spec}:state_dir={tmp_path / 'state'}")
    try:
        model = _model()
        assert prepare_with_cache(driver, model, tmp_path / "cache").kind == "miss"
        assert prepare_with_cache(driver, model, tmp_path / "cache").kind == "hit"
        (path,) = (tmp_path / "cache").glob("*-model0")
        path.write_bytes(path.read_bytes() + b"x")
        refused = prepare_with_cache(driver, model, tmp_path / "cache")
        assert refused.kind == "refused" and "GENERAL_FAILURE" in refused.reason
        assert prepare_with_cache(driver, model, tmp_path / "cache").kind == "hit"  # rewritten
    finally:
        driver.close()


def test_cache_token_depends_on_model_and_driver_version(tmp_path):
    model = _model()
    old, new = ReferenceDriver(state_dir=str(tmp_path)), NewerReference(state_dir=str(tmp_path))
    assert cache_token(model, old) == cache_token(_model(), old)
    assert cache_token(model, old) != cache_token(model, new)


def _repro(spec_file: Path, driver: str, cache_dir: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nncert.cli", "repro", str(spec_file), "--driver", driver,
                           "--cache-dir", str(cache_dir)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


@pytest.mark.parametrize("driver", ["reference", "service:reference"])
def test_cli_repro_with_a_cache_dir(tmp_path, driver):
    spec_file = tmp_path / "graph.json"
    save_spec(spec_file, seeded(Cell.parse("small-float32-rank2"), 0))
    cache = tmp_path / "cache"
    env = {**os.environ, "NNCERT_STATE_DIR": str(tmp_path / "state")}
    outputs = []
    for _ in range(2):
        proc = _repro(spec_file, driver, cache, env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs.append(proc.stdout)
    assert "cache: miss" in outputs[0] and "PASS" in outputs[0]
    assert "cache: hit" in outputs[1] and "PASS" in outputs[1]
    (model_file,) = cache.glob("*-model0")
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 0x10
    model_file.write_bytes(bytes(data))
    proc = _repro(spec_file, driver, cache, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cache: refused (GENERAL_FAILURE" in proc.stdout and "PASS" in proc.stdout
