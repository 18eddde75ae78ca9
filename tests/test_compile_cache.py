"""The content-keyed compile cache (nncert/drivers/compile_cache.py): what is stored is what is
loaded, a damaged entry is compiled again, and nothing is written outside the user's own
private directory."""

from __future__ import annotations

import os
import stat

import pytest

from nncert.drivers.compile_cache import MAGIC, CompileCache, from_option
from nncert.files import UnsafePathError


class Builder:
    def __init__(self):
        self.calls = 0

    def __call__(self, payload=b"artefact"):
        self.calls += 1
        return payload


def _built(cache, content, build):
    return cache.get_or_build(cache.key(content), build)


def test_second_lookup_is_a_hit_across_instances(tmp_path):
    build = Builder()
    first = CompileCache("x", "v1", tmp_path)
    assert first.get_or_build(first.key(b"model"), build) == b"artefact"
    assert first.get_or_build(first.key(b"model"), build) == b"artefact"
    assert build.calls == 1 and first.stats == {"hits": 1, "misses": 1, "corrupt": 0}
    # Another instance (another process) with the same options finds it.
    again = CompileCache("x", "v1", tmp_path)
    assert again.get_or_build(again.key(b"model"), build) == b"artefact" and build.calls == 1
    # Entries are private: the directory 0700, the file 0600.
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700
    (entry,) = tmp_path.glob("*.art")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_key_covers_the_options_and_release(tmp_path):
    build = Builder()
    _built(CompileCache("x", "v1", tmp_path), b"model", build)
    _built(CompileCache("x", "v2", tmp_path), b"model", build)
    _built(CompileCache("x", "v1", tmp_path), b"model2", build)
    assert build.calls == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "magic"])
def test_a_damaged_entry_is_compiled_again_never_loaded(tmp_path, damage):
    cache = CompileCache("x", "v1", tmp_path)
    cache.get_or_build(cache.key(b"model"), Builder())
    (entry,) = tmp_path.glob("*.art")
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[-1] ^= 1
    elif damage == "truncate":
        data = data[:-3]
    elif damage == "empty":
        data = bytearray()
    else:
        data[: len(MAGIC)] = b"X" * len(MAGIC)
    entry.write_bytes(bytes(data))
    build = Builder()
    assert cache.get_or_build(cache.key(b"model"), lambda: build(b"fresh")) == b"fresh"
    assert build.calls == 1 and cache.stats["corrupt"] == 1
    assert cache.get_or_build(cache.key(b"model"), build) == b"fresh" and build.calls == 1


def test_a_symlinked_entry_is_not_followed(tmp_path):
    cache = CompileCache("x", "v1", tmp_path / "c")
    target = tmp_path / "elsewhere"
    target.write_bytes(MAGIC + b"\0" * 32 + b"planted")
    (tmp_path / "c" / f"{cache.key(b'model')}.art").symlink_to(target)
    build = Builder()
    assert cache.get_or_build(cache.key(b"model"), build) == b"artefact" and build.calls == 1
    assert target.read_bytes().endswith(b"planted")  # replaced the link, never wrote through it
    assert not (tmp_path / "c" / f"{cache.key(b'model')}.art").is_symlink()


def test_the_bound_removes_the_entries_used_longest_ago(tmp_path):
    cache = CompileCache("x", "v1", tmp_path, limit_bytes=3000)
    for n in range(5):
        cache.put(cache.key(b"m%d" % n), bytes(1000))
        os.utime(tmp_path / f"{cache.key(b'm%d' % n)}.art", (n, n))
    cache.trim()
    left = {p.name for p in tmp_path.glob("*.art")}
    assert left == {f"{cache.key(b'm%d' % n)}.art" for n in (3, 4)}


def test_another_users_or_a_shared_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafePathError, match="writable by other users"):
        CompileCache("x", "v1", shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="symlink"):
        CompileCache("x", "v1", link)


def test_the_cache_option(tmp_path, monkeypatch):
    monkeypatch.setenv("NNCERT_CACHE_DIR", str(tmp_path))
    assert from_option("off", "x", "v1") is None
    assert from_option("on", "x", "v1").directory == tmp_path / "compiled" / "x"
    assert from_option(str(tmp_path / "mine"), "x", "v1").directory == tmp_path / "mine"
    with pytest.raises(ValueError, match="cache=''"):
        from_option("", "x", "v1")


def test_a_claim_is_held_once_and_taken_over_when_its_process_is_gone(tmp_path):
    """Processes told the same work (pytest-xdist workers compiling ahead) claim keys before
    building them: a held claim keeps the key from another, an ended process's claim does not."""
    import subprocess
    import sys

    cache = CompileCache("x", "v1", tmp_path)
    assert cache.claim(["a", "b"]) == ["a", "b"]
    assert cache.claim(["a", "b", "c"]) == ["c"]  # held by a live process (this one)
    cache.release(["a"])
    assert cache.claim(["a"]) == ["a"]
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (tmp_path / "b.claim").write_text(gone)  # its process has ended: stale
    assert cache.claim(["b"]) == ["b"]
    (tmp_path / "d.claim").symlink_to(tmp_path / "elsewhere")
    assert cache.claim(["d"]) == ["d"] and not (tmp_path / "elsewhere").exists()
    cache.release(["a", "b", "c", "d"])
    assert not list(tmp_path.glob("*.claim"))
