"""Sharded certification: `nncert certify --shard I/N` runs a deterministic 1/N of every suite,
`nncert certify merge` builds one report of the N shards that equals the unsharded run's test
by test and verifies; shards that are not one run's are refused with a one-line reason; the
partition (round-robin, or balanced by an earlier report's durations) is the same on every
shard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from nncert import __version__
from nncert.certify import shard
from nncert.certify.report import MANIFEST_FILE, manifest_lines

#: Three small suites of unequal size and duration (the two caching tests take seconds).
TINY_PLAN = """
name = "tiny"
description = "three small suites, for the sharding tests"
test_timeout = 120

[[suite]]
name = "caching"
paths = ["conformance/test_caching.py"]
args = ["-k", "float and (model_cache_with_bytes_appended or save_and_retrieve)"]

[[suite]]
name = "qos"
paths = ["conformance/test_qos.py"]
args = ["-k", "priority or prepare_with_a_deadline"]

[[suite]]
name = "burst_validation"
paths = ["conformance/test_burst_validation.py"]
"""


def nncert(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nncert.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def statuses(report: dict) -> dict[tuple[str, str], str | None]:
    return {(t["suite"], t["id"]): t["status"] for t in report["tests"]}


def bad(*args: str) -> str:
    """The one line of a usage error (exit 2, no traceback)."""
    proc = nncert(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nncert: error:"), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The tiny plan unsharded; then in 3 shards balanced by its durations, and shard 3/3 again
    on another driver."""
    base = tmp_path_factory.mktemp("shards")
    (base / "tiny.toml").write_text(TINY_PLAN)
    plan = str(base / "tiny.toml")
    whole = nncert("certify", "--driver", "reference", "--plan", plan, "--out", str(base / "whole"))
    assert whole.returncode == 0, whole.stdout + whole.stderr

    def shard_run(name: str, i: int, driver: str = "reference") -> subprocess.CompletedProcess:
        return nncert("certify", "--driver", driver, "--plan", plan, "--out", str(base / name),
                      "--shard", f"{i}/3", "--durations-from", str(base / "whole"))

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(shard_run, f"s{i}", i) for i in (1, 2, 3)]
        futures.append(pool.submit(shard_run, "other", 3, "mutant:quant_off_by_2"))
        for f in futures:
            proc = f.result()
            assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return base


def test_three_shards_merged_equal_the_unsharded_run_and_verify(runs):
    whole = report_of(runs / "whole")
    parts = [report_of(runs / f"s{i}") for i in (1, 2, 3)]
    # Each shard records its plan, which shard it is, how the plan was dealt, its tests, the
    # driver, nncert and the machine.
    for i, part in enumerate(parts, 1):
        assert part["plan"]["sha256"] == whole["plan"]["sha256"]
        assert part["shard"]["index"] == i and part["shard"]["count"] == 3
        assert part["shard"]["method"] == "durations"
        assert part["driver"]["spec"] == "reference" and part["driver"]["version_string"]
        assert part["run"]["nncert"] == __version__ and part["environment"]["python"]
        for name, counts in part["shard"]["suites"].items():
            assert counts["collected"] == sum(1 for t in whole["tests"] if t["suite"] == name)
    ids = [set(statuses(p)) for p in parts]
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]
    assert ids[0] | ids[1] | ids[2] == set(statuses(whole))
    # Balanced by the unsharded run's durations: the two slow caching tests on two shards.
    slow = {t["id"] for t in whole["tests"] if t["suite"] == "caching"}
    assert [len(slow & {i for _, i in s}) for s in ids].count(1) == 2

    shards = (str(runs / f"s{i}") for i in (3, 1, 2))  # in any order
    proc = nncert("certify", "merge", *shards, "--out", str(runs / "merged"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = report_of(runs / "merged")
    assert statuses(merged) == statuses(whole)
    assert merged["verdict"] == whole["verdict"]
    assert {r: v["verdict"] for r, v in merged["requirements"].items()} == {
        r: v["verdict"] for r, v in whole["requirements"].items()
    }
    assert [s["state"] for s in merged["suites"]] == [s["state"] for s in whole["suites"]]
    assert [p["shard"] for p in merged["merged"]["parts"]] == ["1/3", "2/3", "3/3"]
    junit = ET.parse(runs / "merged" / "junit.xml").getroot()
    assert len(junit.findall(".//testcase")) == len(whole["tests"])
    check = nncert("certify", "verify", str(runs / "merged"))  # the plan collected again, whole
    assert check.returncode == 0, check.stdout
    check = nncert("certify", "verify", str(runs / "s2"))  # its shard of the plan collected again
    assert check.returncode == 0, check.stdout
    same = nncert("certify", "diff", str(runs / "whole"), str(runs / "merged"))
    assert same.returncode == 0 and "no regression" in same.stdout


def test_verify_checks_what_a_merged_report_claims_of_its_parts(runs, tmp_path):
    if not (runs / "merged").exists():
        assert nncert("certify", "merge", *(str(runs / f"s{i}") for i in (1, 2, 3)), "--out",
                      str(runs / "merged")).returncode == 0
    forged = tmp_path / "forged"
    shutil.copytree(runs / "merged", forged)
    kept = forged / "shards" / "2-of-3" / "run.json"
    settings = json.loads(kept.read_text())
    kept.write_text(json.dumps({**settings, "driver": "mutant:quant_off_by_2"}))
    _remanifest(forged)
    proc = nncert("certify", "verify", "--no-recollect", str(forged))
    assert proc.returncode == 1
    assert "shard 2/3: shards/2-of-3/run.json is not the file its manifest hashes" in proc.stdout


def _remanifest(out: Path) -> None:
    """Write the manifest over the directory again, as a careless editor would."""
    (out / MANIFEST_FILE).write_text("".join(line + "\n" for line in manifest_lines(out)))


def _edit(src: Path, dst: Path, name: str, edit) -> Path:
    shutil.copytree(src, dst)
    path = dst / name
    path.write_text(edit(path.read_text()))
    _remanifest(dst)
    return dst


def test_shards_that_are_not_one_runs_are_refused(runs, tmp_path):
    s1, s2, s3 = (str(runs / f"s{i}") for i in (1, 2, 3))
    out = str(tmp_path / "out")
    assert "missing shard 3/3" in bad("certify", "merge", s1, s2, "--out", out)
    copy = shutil.copytree(s2, tmp_path / "s2-again")
    line = bad("certify", "merge", s1, s2, str(copy), s3, "--out", out)
    assert f"shard 2/3 given twice: {s2} and {copy}" in line
    assert "shards of different drivers" in bad("certify", "merge", s1, s2, str(runs / "other"), "--out", out)
    board2 = _edit(runs / "s3", tmp_path / "board2", "journal.jsonl",
                   lambda text: text.replace('"version_string":"nncert-reference', '"version_string":"b2'))
    assert "shards of different driver versions" in bad("certify", "merge", s1, s2, str(board2), "--out", out)
    older = _edit(runs / "s3", tmp_path / "older", "run.json",
                  lambda text: text.replace(f'"nncert": "{__version__}"', '"nncert": "0.0.1"'))
    assert "shards of different nncert versions" in bad("certify", "merge", s1, s2, str(older), "--out", out)
    other_plan = _edit(runs / "s3", tmp_path / "plan", "run.json",
                       lambda text: text.replace('"plan_sha256": "', '"plan_sha256": "0'))
    assert "shards of different plans" in bad("certify", "merge", s1, s2, str(other_plan), "--out", out)
    # Shard 1's tests again, claiming to be shard 2: the partitions overlap.
    twin = _edit(runs / "s1", tmp_path / "twin", "run.json", lambda text: text.replace('"1/3"', '"2/3"'))
    assert "the shards overlap" in bad("certify", "merge", s1, str(twin), s3, "--out", out)
    changed = shutil.copytree(s2, tmp_path / "changed")
    with open(changed / "logs" / "qos.log", "a") as f:
        f.write("edited\n")
    line = bad("certify", "merge", s1, str(changed), s3, "--out", out)
    assert "does not verify: logs/qos.log was changed" in line
    (tmp_path / "plain").mkdir()
    line = bad("certify", "merge", s1, str(tmp_path / "plain"), s3, "--out", out)
    assert "is not a certification report" in line
    assert "is not a shard's report" in bad("certify", "merge", s1, str(runs / "whole"), s3, "--out", out)
    assert not Path(out).exists()  # nothing written by a refused merge


@pytest.mark.parametrize(
    ("given", "message"),
    [("4/3", "--shard 4/3: I must be 1 to 3"), ("x", "--shard 'x': expected I/N"),
     ("0/2", "--shard 0/2: I must be 1 to 2"), ("1/0", "--shard 1/0: N must be 1 to")],
)
def test_a_bad_shard_is_a_one_line_error(tmp_path, given, message):
    assert message in bad("certify", "--driver", "reference", "--plan", "smoke", "--out",
                          str(tmp_path / "out"), "--shard", given)
    assert not (tmp_path / "out").exists()


def test_bad_merge_and_durations_input_is_a_one_line_error(tmp_path):
    (tmp_path / "plain").mkdir()
    assert "is not a certification report" in bad("certify", "merge", str(tmp_path / "plain"), "--out",
                                                   str(tmp_path / "out"))
    line = bad("certify", "merge", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x"))
    assert "no such directory" in line
    assert "give --shard I/N too" in bad("certify", "--driver", "reference", "--out", str(tmp_path / "a"),
                                         "--durations-from", str(tmp_path / "plain"))
    assert "--durations-from: " in bad("certify", "--driver", "reference", "--out", str(tmp_path / "a"),
                                       "--shard", "1/2", "--durations-from", str(tmp_path / "plain"))


# -- the partition, without a run


def test_round_robin_deals_sorted_ids_in_turn_from_the_suites_rotation():
    ids = [f"t{i:02d}" for i in range(10)]
    bins, loads = shard.assign(reversed(ids), 3, rotate=1)
    assert [bins[i] for i in ids] == [1, 2, 0, 1, 2, 0, 1, 2, 0, 1]
    assert loads == [3, 4, 3]
    parts = [shard.select(ids, i, 3, {"rotate": 1}) for i in (1, 2, 3)]
    assert set().union(*parts) == set(ids) and sum(map(len, parts)) == len(ids)


def test_durations_partition_is_longest_first_balanced_and_carried_across_suites():
    previous = {"tests": [
        *({"suite": "a", "id": f"a{i}", "duration": d} for i, d in enumerate([9.0, 7.0, 4.0, 4.0, 3.0, 1.0])),
        {"suite": "a", "id": "a-no-outcome", "duration": None},
        *({"suite": "b", "id": f"b{i}", "duration": d} for i, d in enumerate([5.0, 5.0, 2.0])),
    ]}
    content = shard.partition(["a", "b", "c"], 2, previous, "f" * 64)
    assert content["method"] == "durations"
    assert content == shard.partition(["a", "b", "c"], 2, {"tests": previous["tests"][::-1]}, "f" * 64)
    a, b, c = (content["suites"][n] for n in "abc")
    assert a["loads"] == [0, 0] and a["default"] == 4000  # the median of the suite's known durations
    # LPT over suite a: 9 | 7, 4 -> 1, 4 -> 0, 3 -> 1, 1 -> 0 (14 and 14); b starts there.
    assert b["loads"] == [14000, 14000]
    assert sorted(c["loads"]) == [19000, 21000] and c["default"] == 4000  # no durations: the report's median
    # A shard's child: a test the earlier run did not have weighs the suite's median (4 s).
    ids = ["a5", "a4", "a3", "a2", "a1", "a0", "a-new"]
    first, second = (shard.select(ids, i, 2, a) for i in (1, 2))
    assert first == {"a0", "a2", "a4"} and second == {"a1", "a-new", "a3", "a5"}  # 16 s each


def test_the_plugin_deals_a_suite_into_disjoint_shards(tmp_path):
    """`nncert test --nncert-shard I/N` (what a shard's suite runs) selects disjoint parts
    whose union is the unsharded selection."""
    def collected(*args: str) -> list[str]:
        proc = nncert("test", "conformance/test_burst_validation.py", "--collect-only", "-q",
                      "-p", "no:randomly", *args, cwd=tmp_path)
        assert proc.returncode in (0, 5), proc.stdout + proc.stderr
        return [line for line in proc.stdout.splitlines() if "::" in line]

    everything = collected()
    parts = [collected(f"--nncert-shard={i}/3") for i in (1, 2, 3)]
    assert sorted(i for part in parts for i in part) == sorted(everything)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    proc = nncert("test", "conformance/test_burst_validation.py", "--collect-only", "--nncert-shard=3/2",
                  cwd=tmp_path)
    assert proc.returncode == 4 and "--nncert-shard 3/2: I must be 1 to 2" in proc.stderr
