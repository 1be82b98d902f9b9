"""Refitting a kept result: its axes' trends under the current statistics, nothing run again.

The trend of every axis (scale, context, budgets) is a statistic of the axis's rows, so a
result kept under older statistics (a slope over every (size, seed) point, no exclusions) is
brought up to the current rule (`axes.axis_fit`: one point per size, failed controls, censored
seeds and under-trained sizes left out) from what was kept: the rows in `results.json` and,
where kept, each point's per-seed findings (`size-<model>/`, `context-T<T>/`,
`budget-x<k>/findings.json`; the registered point's runs are the `arms`). The verdict, the
rows' effects and intervals, and everything else stay as they were (`refit_results`). The
report gets its axis sections and trend sentences rendered again (`rerender`; the rest of it,
notes included, is kept), and the axis figures are drawn again (`redraw`).
`python -m experiments.commands.refit` applies it to every result in `results/`.
"""

from __future__ import annotations

import copy
import os
import re

from experiments import jsonio
from experiments.verdict import axis_report, figures
from experiments.verdict.axes import axis_fit, base_row
from experiments.verdict.claim import Claim


def _kept_runs(folder: str) -> dict | None:
  path = os.path.join(folder, "findings.json")
  if not os.path.exists(path):
    return None
  return jsonio.load_strict(path)["findings"]["runs"]


def refit_results(claim: Claim, res: dict, folder: str) -> dict:
  """`res` with every axis's fit recomputed by `axes.axis_fit` from the kept rows."""
  res = copy.deepcopy(res)
  seeds = [str(s) for s in res["seeds"]]
  registered_runs = {arm: body["runs"] for arm, body in res["arms"].items()}
  registered = (res["config"].get("sizes") or {}).get("model")
  if res.get("scale"):
    def size_runs(row):
      if row["model"] == registered:
        return registered_runs
      return _kept_runs(os.path.join(folder, f"size-{row['model']}"))
    rows = res["scale"]["sizes"]
    for row in rows:  # a base-model row kept before rows recorded their model's regime
      if claim.reads_base and "tokens_per_param" not in row:
        row.update(base_row(row["model"], seeds))
    fit = axis_fit(claim, rows, size_runs, seeds, x="params", label="model",
                          family="family", regime=True)
    res["scale"] = {"sizes": rows, **fit}
  if res.get("context"):
    res["context_trend"] = axis_fit(
        claim, res["context"], lambda r: _kept_runs(os.path.join(folder, f"context-T{r['T']}")),
        seeds, x="T")
  if res.get("budgets"):
    block = res["budgets"]

    def budget_runs(row):
      k = row["multiple"]
      if k == 1 and block.get("model") in (None, registered):
        return registered_runs
      here = os.path.join(folder, f"budget-x{k}")
      if k == 1 and not os.path.isdir(here):
        here = os.path.join(folder, f"size-{block['model']}")
      return _kept_runs(here)
    keep = {k: block[k] for k in ("model", "runs", "git", "runtime_s") if k in block}
    res["budgets"] = {**keep, **axis_fit(claim, block["runs"], budget_runs, seeds,
                                                x="train_tokens", label="multiple")}
  return jsonio.strict(res)


_SECTION = re.compile(r"^#+ (Scale|Context|Budget): ")


_TREND = re.compile(r"^\*\*Trend with (scale|context|the training budget)\.\*\* ")


def rerender(claim: Claim, res: dict, text: str) -> str:
  """`text` (a report.md) with its axis sections and trend sentences rendered from `res`."""
  h = "#"
  sections = {"Scale": lambda: axis_report.scale_markdown(claim, res, h),
              "Context": lambda: axis_report.context_markdown(claim, res, h,
                                                              res.get("context_trend")),
              "Budget": lambda: axis_report.budget_markdown(claim, res, h)}
  trends = {"scale": lambda: axis_report.scale_sentence(res["scale"]),
            "context": lambda: axis_report.context_sentence(res["context"], res["context_trend"]),
            "the training budget": lambda: axis_report.budget_sentence(res["budgets"])}
  out, lines, i = [], text.split("\n"), 0
  while i < len(lines):
    line = lines[i]
    if (m := _SECTION.match(line)) and line.startswith("## "):
      out += sections[m.group(1)]()
      i = _section_end(lines, i, m.group(1))
      continue
    if m := _TREND.match(line):
      out.append(f"**Trend with {m.group(1)}.** {trends[m.group(1)]()}")
      i += 1
      continue
    out.append(line)
    i += 1
  return "\n".join(out)


def _section_end(lines: list[str], i: int, kind: str) -> int:
  """The index just past the axis section that starts at `lines[i]`, as `axis_report` renders it:
  heading, intro, table, then the paragraphs that section ends with (the largest size and the
  families' table; the trend sentence of a context or budget section)."""
  def paragraph(j, starts=None):  # one paragraph (or table) and the blank line after it
    if j < len(lines) and lines[j] and (starts is None or lines[j].startswith(starts)):
      while j < len(lines) and lines[j]:
        j += 1
      return j + 1, True
    return j, False

  j = i + 2  # the heading and its blank line
  j, _ = paragraph(j)  # the intro
  j, _ = paragraph(j, "|")  # the table
  if kind == "Scale":
    j, _ = paragraph(j, "At the largest size")
    j, fams = paragraph(j, "With two families")
    if fams:
      j, _ = paragraph(j, "|")
  elif kind == "Context":
    j, _ = paragraph(j, "From T = ")
  else:
    j, _ = paragraph(j, ("On `", "From "))
  return j


def redraw(claim: Claim, res: dict, folder: str) -> None:
  """Draws again the axis figures `folder` already holds, from `res`."""
  registered = (res["config"].get("sizes") or {}).get("model")
  if res.get("scale") and os.path.exists(os.path.join(folder, "scale.png")):
    figures.scale_figure(claim, res["scale"], folder, registered)
  if res.get("context") and os.path.exists(os.path.join(folder, "context.png")):
    models_at = sorted({getattr(claim.at_length(claim.FULL, r["T"]), "model", "")
                        for r in res["context"]} - {""}) if claim.at_length else []
    figures.context_figure(claim, res["context"], res["context_trend"], folder, models_at)
  if res.get("budgets") and os.path.exists(os.path.join(folder, "budget.png")):
    figures.budget_figure(claim, res["budgets"], folder)
