"""The axis figures of a claim: `scale.png`, `context.png`, `budget.png`.

Each draws the primary effect ± its 95% interval against the axis on a log scale, rings the
points left out of the trend fit, draws the primary threshold's edges, and titles the figure
with the trend (matplotlib, imported when a figure is drawn).
"""

from __future__ import annotations

import math
import os
import textwrap

from experiments.verdict.axis_report import budget_sentence, context_sentence
from experiments.verdict.cells import params_text, trend_text
from experiments.verdict.claim import Claim
from experiments.verdict.stats import fmt
from experiments.verdict.thresholds import Threshold, parse_condition


def scale_figure(claim: Claim, scale: dict, run_dir: str, registered: str | None = None) -> str:
  """Draws `run_dir/scale.png`: the primary effect ± 95% CI against parameters; returns its name.

  One series per family, log x axis, each point named by its model, the registered size
  ringed, and the threshold's edge (the margin line) drawn and labelled.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  families = list(dict.fromkeys(r["family"] for r in scale["sizes"]))
  for fam, marker in zip(families, "osD^v<>", strict=False):
    rs = [r for r in scale["sizes"] if r["family"] == fam and r["effect"] is not None
          and math.isfinite(r["effect"])]  # a size whose effect is n/a has no point to draw
    if not rs:
      continue
    line = ax.errorbar([r["params"] for r in rs], [r["effect"] for r in rs],
                       yerr=_error_bars(rs), fmt=f"{marker}-", capsize=3, label=f"{fam} family")
    _hollow_excluded(ax, rs, "params", line[0].get_color(), marker)
    for r in rs:
      ax.annotate(r["model"], (r["params"], r["effect"]), textcoords="offset points",
                  xytext=(6, 6), fontsize=7)
      if r["model"] == registered:
        ax.plot([r["params"]], [r["effect"]], "o", ms=13, mfc="none", mec="k",
                label=f"registered size ({r['model']}): the verdict is read here")
  _threshold_lines(ax, th)
  ticks, last = [], -math.inf
  for p in sorted({r["params"] for r in scale["sizes"]}):
    if math.log10(p) - last >= 0.15:  # keep tick labels apart
      ticks.append(p)
      last = math.log10(p)
  _save_log_x(fig, ax, th, xlabel="parameters (count, log scale; M = millions)",
              title=f"primary effect vs model size (bars: 95% CI)\n{trend_text({'scale': scale})}",
              ticks=ticks, tick_labels=[params_text(p) for p in ticks],
              path=os.path.join(run_dir, "scale.png"))
  return "scale.png"


def context_figure(claim: Claim, context: list[dict], trend_: dict, run_dir: str,
                   models_at=()) -> str:
  """Draws `run_dir/context.png`: the primary effect ± 95% CI against `T`; returns its name."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  rs = [r for r in context if r["effect"] is not None]
  on = f" ({', '.join(models_at)})" if models_at else ""
  line = ax.errorbar([r["T"] for r in rs], [r["effect"] for r in rs], yerr=_error_bars(rs),
                     fmt="o-", capsize=3, label=f"primary effect{on}")
  _hollow_excluded(ax, rs, "T", line[0].get_color())
  _threshold_lines(ax, th)
  sentence = textwrap.fill(context_sentence(context, trend_), 68) if rs else ""
  _save_log_x(fig, ax, th, xlabel="context length T (tokens, log scale)",
              title=f"primary effect vs context length (bars: 95% CI)\n{sentence}",
              ticks=[r["T"] for r in context], tick_labels=[str(r["T"]) for r in context],
              path=os.path.join(run_dir, "context.png"))
  return "context.png"


def budget_figure(claim: Claim, budgets: dict, run_dir: str) -> str:
  """Draws `run_dir/budget.png`: the primary effect ± 95% CI against tokens per parameter
  (or tokens, when the model's parameters are unknown); returns its name."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  per = all(r["tokens_per_param"] for r in budgets["runs"])
  x_of = (lambda r: r["tokens_per_param"]) if per else (lambda r: r["train_tokens"])
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  rs = [r for r in budgets["runs"] if r["effect"] is not None]
  on = f" on {budgets['model']}" if budgets.get("model") else ""
  line = ax.errorbar([x_of(r) for r in rs], [r["effect"] for r in rs], yerr=_error_bars(rs),
                     fmt="o-", capsize=3, label=f"primary effect{on} (1×: the registered tokens)")
  _hollow_excluded(ax, [{**r, "x": x_of(r)} for r in rs], "x", line[0].get_color())
  _threshold_lines(ax, th)
  sentence = textwrap.fill(budget_sentence(budgets).replace("`", ""), 68)  # no markdown
  _save_log_x(fig, ax, th, xlabel=("tokens per parameter" if per else "training tokens")
              + " (log scale)", title=f"primary effect vs training budget (bars: 95% CI)\n"
              f"{sentence}", ticks=[x_of(r) for r in budgets["runs"]],
              tick_labels=[f"{r['multiple']}×\n{fmt(x_of(r))}" for r in budgets["runs"]],
              path=os.path.join(run_dir, "budget.png"))
  return "budget.png"


def _error_bars(rows: list[dict]) -> list[list[float]]:
  """Matplotlib's `yerr` of rows with `effect` and `ci` (no bar where the interval is null)."""
  return [[r["effect"] - r["ci"][0] if r["ci"][0] is not None else 0.0 for r in rows],
          [r["ci"][1] - r["effect"] if r["ci"][1] is not None else 0.0 for r in rows]]


def _hollow_excluded(ax, rows: list[dict], x: str, color, marker: str = "o") -> None:
  """Rings the rows left out of the trend fit (white fill), labelled once."""
  out = [r for r in rows if r.get("excluded")]
  if out:
    ax.plot([r[x] for r in out], [r["effect"] for r in out], marker, ms=9, mfc="white",
            mec=color, ls="none", label="left out of the trend fit (see the report)")


def _threshold_lines(ax, th: Threshold) -> None:
  """The primary threshold's edges as dotted lines, one per value, labelled with its margin."""
  edges: dict[float, list[str]] = {}
  for label, cond in (("supports", th.supports), ("refutes", th.refutes)):
    if cond is not None:
      edges.setdefault(parse_condition(cond)[1], []).append(f"{label} {cond}")
  for value, labels in edges.items():
    if math.isfinite(value):
      margin = f", margin {fmt(th.margin)}" if th.margin is not None else ""
      ax.axhline(value, color="k", ls=":", lw=1,
                 label=f"threshold at {fmt(value)} ({'; '.join(labels)}{margin})")


def _save_log_x(fig, ax, th: Threshold, *, xlabel: str, title: str, ticks, tick_labels,
                path: str) -> None:
  """Finishes an effect-against-log-x figure (labels, ticks, legend) and writes it to `path`."""
  import matplotlib.pyplot as plt
  from matplotlib.ticker import NullFormatter

  unit = f" ({th.unit})" if th.unit else ""
  ax.set(xscale="log", xlabel=xlabel, ylabel=textwrap.fill(th.name + unit, 45), title=title)
  ax.set_xticks(ticks, tick_labels)
  ax.xaxis.set_minor_formatter(NullFormatter())
  ax.margins(x=0.15, y=0.12)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
