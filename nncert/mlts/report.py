"""MLTS results as tables (pandas; CSV and JSON) and an HTML page (MLTS-3): per model the
verdict, accuracy against labels and the baseline with same / better / worse marks, the
per-output errors, latency and compilation time, and latency plots."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nncert import files
from nncert.mlts.accuracy import ACCURACY_MARGIN, mark
from nncert.mlts.run import ModelResult

#: Latency within this fraction of the baseline's is "same".
LATENCY_MARGIN = 0.10


#: The keys of ``model_row`` that hold a list or a dict, not a summary column.
DETAIL_KEYS = ("reasons", "outputs", "latency", "compile_ms")


def model_row(r: ModelResult) -> dict[str, Any]:
    """One model's figures as a JSON-able dict: its summary row and what the other tables
    hold of it. The pytest suite records it as the ``nncert_mlts`` property, which the
    certification report reads, so the keys are an interface:

    - ``model``, ``driver`` (the spec), ``task``, ``quantised``, ``samples`` (run), ``status``
      (PASS, FAIL, ERROR, UNSUPPORTED; XFAIL / XPASS once ``apply_expectations`` ran: the pytest
      suite leaves expectations to pytest's strict xfail, so its rows keep the engine's verdict);
    - a classifier's ``top1``, ``top5``, ``baseline_top1``, ``baseline_top5`` (fractions of the
      labelled samples; None when none is labelled), ``top1_mark``, ``top5_mark`` (same / better /
      worse than the baseline) and ``agreement`` (top-1 agreement with the baseline);
    - a model that ran: ``p50_ms``, ``baseline_p50_ms``, ``latency_ratio`` (driver / baseline),
      ``latency_mark``, and ``latency``: {"driver" | "baseline": {mean_ms, p50_ms, p90_ms, p99_ms,
      runs}};
    - ``outputs``: per output against the baseline, {output, type, elements, mean_abs_err,
      max_abs_err, mse, max_steps, over_steps, verdict}: the steps for a quantised output only
      (else None), the verdict "pass" or why the output fails (ACC-2, ACC-5);
    - ``compile_ms``: {plain, and cache_miss / cache_hit for a driver with a compilation cache};
    - ``reasons``: why it is not a plain PASS (a failure, a decline, a cache miss), one line each.
    """
    row: dict[str, Any] = {"model": r.entry.name, "driver": r.driver, "status": r.status,
                           "samples": r.samples, "quantised": r.entry.quantised, "task": r.entry.task}
    c = r.classes
    if c is not None:
        for k, table in (("top1", c.top1), ("top5", c.top5)):
            d, b = c.rate(table, "driver"), c.rate(table, "baseline")
            row.update({f"{k}": d, f"baseline_{k}": b, f"{k}_mark": mark(d, b, ACCURACY_MARGIN)})
        row["agreement"] = c.agreement
    lat = r.latency
    if lat:
        d, b = lat["driver"]["p50_ms"], lat["baseline"]["p50_ms"]
        row.update({"p50_ms": d, "baseline_p50_ms": b, "latency_ratio": d / b if b else None,
                    "latency_mark": mark(d, b, LATENCY_MARGIN * b, higher_is_better=False)})
    row.update(reasons=list(r.reasons),
               outputs=[{**s.row(), "verdict": s.failure() or "pass"} for s in r.outputs],
               latency={who: dict(stats) for who, stats in lat.items()}, compile_ms=dict(r.compile_ms))
    return row


def tables(results: Sequence[ModelResult]) -> dict[str, pd.DataFrame]:
    summary, errors, latency, compile_rows = [], [], [], []
    for r in results:
        row = model_row(r)
        name, driver = row["model"], row["driver"]
        summary.append({**{k: v for k, v in row.items() if k not in DETAIL_KEYS},
                        "reason": "; ".join(row["reasons"])})
        errors += [{"model": name, "driver": driver, **o} for o in row["outputs"]]
        latency += [{"model": name, "driver": driver, "runtime": who, **stats}
                    for who, stats in row["latency"].items()]
        if row["compile_ms"]:
            compile_rows.append({"model": name, "driver": driver, **row["compile_ms"]})
    return {"summary": pd.DataFrame(summary), "errors": pd.DataFrame(errors),
            "latency": pd.DataFrame(latency), "compilation": pd.DataFrame(compile_rows)}


def write(results: Sequence[ModelResult], out: Path, meta: dict) -> dict[str, Path]:
    """CSV and JSON per table, ``report.html`` and ``meta.json`` in ``out``."""
    files.own_dir(out)
    frames = tables(results)
    paths: dict[str, Path] = {}
    for name, df in frames.items():
        files.write_atomic(out / f"{name}.csv", df.to_csv(index=False))
        files.write_atomic(out / f"{name}.json", df.to_json(orient="records", indent=1))
        paths[name] = out / f"{name}.csv"
    files.write_atomic(out / "meta.json", json.dumps(meta, indent=1) + "\n")
    paths["html"] = out / "report.html"
    files.write_atomic(paths["html"], render(frames, meta))
    return paths


_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
td:first-child { text-align: left; }
img { max-width: 100%; }
li { margin: 0.3em 0; max-width: 70em; }
th { background: #f0f0f0; }
td.PASS, td.better, td.same { background: #e3f4e3; }
td.FAIL, td.ERROR, td.worse { background: #f8dcdc; }
td.UNSUPPORTED, td.XFAIL { background: #f4f0d8; }
td.XPASS { background: #f8dcdc; }
.note { color: #555; font-size: 0.9em; max-width: 60em; }
"""


def _cell(column: str, value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "<td></td>"
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    marked = column in ("status", "verdict") or column.endswith("_mark")
    cls = f' class="{html.escape(text)}"' if marked else ""
    return f"<td{cls}>{html.escape(text)}</td>"


def _table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p class='note'>(nothing)</p>"
    df = df.drop(columns=["driver"], errors="ignore")  # the page's title names it
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(_cell(str(c), v) for c, v in zip(df.columns, row, strict=True)) + "</tr>"
                   for row in df.itertuples(index=False))
    return f"<table><tr>{head}</tr>{body}</table>"


def _latency_plot(latency: pd.DataFrame) -> str:
    """A bar chart of p50 latency (p90 as the error bar) per model, driver beside baseline, as
    an inline PNG; empty when matplotlib is missing."""
    if latency.empty:
        return ""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "<p class='note'>(no latency plot: matplotlib is not installed)</p>"
    models = list(dict.fromkeys(latency["model"]))
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.38 * len(models)))  # one row per model
    height = 0.4
    for k, who in enumerate(("driver", "baseline")):
        part = latency[latency["runtime"] == who].set_index("model").reindex(models)
        ys = [i + (k - 0.5) * height for i in range(len(models))]
        upper = (part["p90_ms"] - part["p50_ms"]).clip(lower=0)
        ax.barh(ys, part["p50_ms"], height, xerr=[[0] * len(models), upper],
                label=f"{who} (p50, whisker to p90)", capsize=2)
    ax.set_yticks(range(len(models)), models)
    ax.invert_yaxis()
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    png = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="latency per model" src="data:image/png;base64,{png}">'


def _reasons(summary: pd.DataFrame) -> str:
    """One item per model with something to say (a failure, an expected one, a decline)."""
    if summary.empty or "reason" not in summary.columns:
        return ""
    esc = html.escape
    items = [f"<li><b>{esc(str(r.model))}</b> ({esc(str(r.status))}): {esc(str(r.reason))}</li>"
             for r in summary.itertuples(index=False) if isinstance(r.reason, str) and r.reason]
    return "".join(items) or "<li>every model passes, nothing to explain</li>"


def render(frames: dict[str, pd.DataFrame], meta: dict) -> str:
    summary = frames["summary"]
    counts = summary["status"].value_counts().to_dict() if not summary.empty else {}
    tally = ", ".join(f"{counts[s]} {s}" for s in ("PASS", "FAIL", "ERROR", "XFAIL", "XPASS", "UNSUPPORTED")
                      if counts.get(s))
    title = f"nncert MLTS: {html.escape(str(meta.get('driver')))} against the LiteRT CPU baseline"
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in meta.get("notes", []))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>{_CSS}</style></head><body>
<h1>{title}</h1>
<p>{len(summary)} models: {tally or "none"}. Driver {html.escape(str(meta.get('driver_version', '')))};
baseline {html.escape(str(meta.get('baseline', '')))}; {html.escape(str(meta.get('date', '')))}.</p>
<p class="note">A model passes when every quantised output is within its ACC-2 allowance of the baseline
on every element, every float output meets the ACC-5 large-graph criterion, and a classifier's top-1 /
top-5 accuracy is not below the baseline's by more than {ACCURACY_MARGIN:g} (its top-1 agreement with
the baseline is reported, not judged). XFAIL: a failure the driver's expectations file lists, with its
reason; XPASS: a listed failure that did not happen (the entry is stale: a failure). Marks compare the
driver with the baseline: accuracy within {ACCURACY_MARGIN:g} and latency within {LATENCY_MARGIN:.0%}
are "same".</p>
<h2>Summary</h2>{_table(summary.drop(columns=["reason"], errors="ignore"))}
<h2>Why</h2><ul>{_reasons(summary)}</ul>
<h2>Latency</h2>{_latency_plot(frames['latency'])}{_table(frames['latency'])}
<h2>Compilation (ms)</h2>{_table(frames['compilation'])}
<h2>Errors against the baseline, per output</h2>{_table(frames['errors'])}
<h2>Notes</h2><ul>{notes}</ul>
</body></html>
"""


__all__ = ["DETAIL_KEYS", "LATENCY_MARGIN", "model_row", "render", "tables", "write"]
