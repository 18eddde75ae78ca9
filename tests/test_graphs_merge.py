"""Random-graph runs that merge (ACC-5): ``nncert graphs --shard I/N`` on each machine, then
``graphs merge``, give the unsharded run's summary cell by cell and its spec files; shards of
different runs, missing or duplicate shards and bad ``--shard`` values are one line, exit 2.
(``nncert fuzz merge``: tests/test_fuzz_merge.py.)"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from nncert.cli import main
from nncert.testing import random_graphs as rg
from nncert.testing.graphs import Cell

# mutant:drift fails the graph cells, not the single operations: with these, each of two
# shards has a failure and a pass to merge.
CELLS = ["small-float32-rank2", "single-ADD-1.0", "small-float32-rank1", "large-float32-rank2"]
GRAPHS = ["--driver", "mutant:drift", "--graphs", "3", "--no-triage",
          *[a for c in CELLS for a in ("--cell", c)]]


def _graphs(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["graphs", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def _without_seconds(results: dict) -> dict:
    return {label: {k: v for k, v in entry.items() if k != "seconds"} for label, entry in results.items()}


def _final_lines(out: str, d: Path) -> list[str]:
    """The run's final lines with its directory and its seconds taken out."""
    text = re.sub(r"\(\d+\.\d s, seed", "(T s, seed", out.replace(str(d), "DIR"))
    return [line for line in text.splitlines() if not line.startswith("summary:")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """An unsharded run of the slice and its two shards."""
    base = tmp_path_factory.mktemp("graphs")
    d = {"whole": base / "whole", "1": base / "shard1", "2": base / "shard2"}
    assert main(["graphs", *GRAPHS, "--out", str(d["whole"])]) == 1
    for i in ("1", "2"):
        main(["graphs", *GRAPHS, "--shard", f"{i}/2", "--out", str(d[i])])
    return d


@pytest.mark.req("ACC-5")
def test_two_shards_merged_are_the_unsharded_run_cell_by_cell(runs, tmp_path, capsys):
    whole, one, two = _summary(runs["whole"]), _summary(runs["1"]), _summary(runs["2"])
    # The shards split the selection: each cell in one shard, each shard with a failure.
    assert sorted(one["cells"] + two["cells"]) == sorted(CELLS) and not set(one["cells"]) & set(two["cells"])
    assert one["totals"]["failed"] >= 1 and two["totals"]["failed"] >= 1
    assert one["selection"] == two["selection"] == whole["selection"] == CELLS
    assert (one["shard"], whole["shard"]) == ({"index": 1, "count": 2}, {"index": 1, "count": 1})

    merged = tmp_path / "merged"
    code, out, _ = _graphs(capsys, "merge", str(runs["2"]), str(runs["1"]), "--out", str(merged))
    assert code == 1
    m = _summary(merged)
    assert m["complete"] and m["cells"] == CELLS
    assert _without_seconds(m["results"]) == _without_seconds(whole["results"])
    assert m["totals"] == whole["totals"] and m["totals"]["failed"] == 2
    assert [p["shard"] for p in m["merged"]] == ["1/2", "2/2"]
    # The same final lines as the unsharded run's, naming the merged directory.
    code, whole_out, _ = _graphs(capsys, *GRAPHS, "--out", str(runs["whole"]))
    assert _final_lines(out, merged) == _final_lines(whole_out, runs["whole"])
    assert f"replay: nncert repro {merged}/" in out
    # The failures' spec files, as the unsharded run wrote them, naming their new place.
    for entry in whole["results"].values():
        if entry["failed"]:
            name = entry["failure"]["spec"]
            mine = json.loads((merged / name).read_text())
            theirs = json.loads((runs["whole"] / name).read_text())
            assert mine.pop("repro") == f"nncert repro {merged / name} --driver mutant:drift"
            theirs.pop("repro")
            assert mine == theirs


def test_shard_cells_deal_every_cell_once_whatever_the_order():
    cells = [Cell.parse(c) for c in [*CELLS, "large-int32-rank1", "single-CONV_2D-1.2"]]
    shards = [rg.shard_cells(cells, i, 3) for i in (1, 2, 3)]
    labels = [c.label for s in shards for c in s]
    assert sorted(labels) == sorted(c.label for c in cells) and all(len(s) == 2 for s in shards)
    assert [c.label for c in rg.shard_cells(list(reversed(cells)), 2, 3)] == \
        [c.label for c in reversed(shards[1])]


def _copy(src: Path, dst: Path, **edit) -> Path:
    shutil.copytree(src, dst)
    summary = _summary(dst)
    summary.update(edit)
    (dst / "summary.json").write_text(json.dumps(summary))
    return dst


@pytest.mark.parametrize("case, message", [
    ("twice", "shard 1/2 given twice"),
    ("missing", "missing shard 2/2: a merge needs all 2 shards"),
    ("seed", "shards of different seeds: SHARD1 has seed 0, OTHER has seed 1"),
    ("graphs", "shards of different graph counts"),
    ("driver", "shards of different drivers"),
    ("version", "shards of different nncert versions"),
    ("count", "shards of different shard counts: SHARD1 has N = 2, WHOLE has N = 1"),
    ("unfinished", "OTHER: the run did not finish"),
    ("no summary", "OTHER holds no summary.json: it is not the --out of a `nncert graphs` run"),
    ("out is a shard", "--out SHARD1 is one of the shards: merge into a new directory"),
    ("out not empty", "--out OUT is not empty"),
])
def test_a_merge_of_shards_of_different_runs_is_refused_in_one_line(runs, tmp_path, capsys, case, message):
    other = tmp_path / "other"
    out = tmp_path / "out"
    dirs = [runs["1"], runs["2"]]
    if case == "twice":
        dirs = [runs["1"], runs["1"]]
    elif case == "missing":
        dirs = [runs["1"]]
    elif case == "count":
        dirs = [runs["1"], runs["whole"]]
    elif case == "no summary":
        other.mkdir()
        dirs = [runs["1"], other]
    elif case == "out is a shard":
        out = runs["1"]
    elif case == "out not empty":
        out.mkdir()
        (out / "x").write_text("")
    else:
        s = _summary(runs["2"])
        edit = {"seed": {"seed": 1}, "graphs": {"graphs": 4}, "version": {"nncert": "0.0.1"},
                "driver": {"driver": {**s["driver"], "spec": "reference"}},
                "unfinished": {"complete": False}}[case]
        dirs = [runs["1"], _copy(runs["2"], other, **edit)]
    before = {p: p.read_bytes() for d in dirs for p in d.iterdir()}
    code, _, err = _graphs(capsys, "merge", *map(str, dirs), "--out", str(out))
    assert code == 2
    expected = (message.replace("SHARD1", str(runs["1"])).replace("OTHER", str(other))
                .replace("WHOLE", str(runs["whole"])).replace("OUT", str(out)))
    assert err.count("\n") == 1 and err.startswith("nncert: error: ") and expected in err, err
    if case != "out is a shard":
        assert not (out / "summary.json").exists()
    assert before == {p: p.read_bytes() for d in dirs for p in d.iterdir()}  # the shards untouched


@pytest.mark.parametrize("shard, message", [
    ("4/3", "--shard 4/3: I must be 1 to 3"),
    ("x", "--shard 'x': expected I/N"),
    ("0/2", "--shard 0/2: I must be 1 to 2"),
])
def test_a_bad_shard_is_one_line(tmp_path, capsys, shard, message):
    code, _, err = _graphs(capsys, "--cell", "single-ADD-1.0", "--shard", shard, "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "o").exists()
