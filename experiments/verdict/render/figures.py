"""The figure of any axis of a claim: `<axis>.png` (`scale.png`, `context.png`, `budget.png`).

`axis_figure` draws the primary effect ± its 95% interval against the axis's quantity on a log
scale (one line per family), rings the points left out of the trend fit, draws the primary
threshold's edges, and titles the figure with the trend; the axis (`Axis`) gives the quantity,
the series, the ticks and the caption (matplotlib, imported when a figure is drawn).
"""

from __future__ import annotations

import math
import os
import textwrap

from experiments.verdict.arithmetic.conditions import parse_condition
from experiments.verdict.arithmetic.stats import fmt


def axis_figure(axis, claim, block: dict, run_dir: str, registered=None) -> str:
  """Draws `run_dir/<axis.name>.png` from an axis block; returns its name.

  Args:
    axis: the axis (its quantity, series, ticks and caption).
    claim: the claim; its primary threshold's edges are drawn.
    block: the axis's block of `results.json`.
    run_dir: where the figure goes.
    registered: the registered sizes (the scale axis rings that size's point; the context
      axis names the models its lengths ran on).
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  ring = getattr(registered, "model", None) if axis.key == "model" else None
  for label, rows, marker in axis.series(block, registered):
    rs = [{**r, "_x": axis.figure_x(r, block)} for r in rows
          if r["effect"] is not None and math.isfinite(r["effect"])]  # n/a: no point to draw
    if not rs:
      continue
    line = ax.errorbar([r["_x"] for r in rs], [r["effect"] for r in rs], yerr=_error_bars(rs),
                       fmt=f"{marker}-", capsize=3, label=label)
    _hollow_excluded(ax, rs, "_x", line[0].get_color(), marker)
    _open_ends(ax, rs, line[0].get_color())
    for r in rs if axis.key == "model" else ():
      ax.annotate(r["model"], (r["_x"], r["effect"]), textcoords="offset points",
                  xytext=(6, 6), fontsize=7)
      if r["model"] == ring:
        ax.plot([r["_x"]], [r["effect"]], "o", ms=13, mfc="none", mec="k",
                label=f"registered size ({r['model']}): the verdict is read here")
  _threshold_lines(ax, th)
  ticks, labels = axis.ticks(block)
  what = axis.title().split(": the primary effect against ", 1)[-1]
  name = f"{axis.name}.png"
  _save_log_x(fig, ax, th, xlabel=axis.xlabel(block),
              title=f"primary effect vs {what} (bars: 95% CI)\n{axis.caption(block)}",
              ticks=ticks, tick_labels=labels, path=os.path.join(run_dir, name))
  return name


def _error_bars(rows: list[dict]) -> list[list[float]]:
  """Matplotlib's `yerr` of rows with `effect` and `ci` (no bar where the interval is null)."""
  return [[r["effect"] - r["ci"][0] if r["ci"][0] is not None else 0.0 for r in rows],
          [r["ci"][1] - r["effect"] if r["ci"][1] is not None else 0.0 for r in rows]]


def _open_ends(ax, rows: list[dict], color) -> None:
  """An arrow from the effect for each open end of an interval (one end null: a censored
  median's infinite bound), labelled once."""
  opened = [(r, +1 if r["ci"][1] is None else -1) for r in rows
            if (r["ci"][0] is None) != (r["ci"][1] is None)]
  for r, up in opened:
    ax.annotate("", xy=(r["_x"], r["effect"]), xytext=(0, 24 * up), textcoords="offset points",
                arrowprops=dict(arrowstyle="<-", color=color, lw=1.2))
  if opened:
    ax.plot([], [], color=color, marker=r"$\uparrow$", ls="none",
            label="95% CI open at that end (censored seeds)")


def _hollow_excluded(ax, rows: list[dict], x: str, color, marker: str = "o") -> None:
  """Rings the rows left out of the trend fit (white fill), labelled once."""
  out = [r for r in rows if r.get("excluded")]
  if out:
    ax.plot([r[x] for r in out], [r["effect"] for r in out], marker, ms=9, mfc="white",
            mec=color, ls="none", label="left out of the trend fit (see the report)")


def _threshold_lines(ax, th) -> None:
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


def _save_log_x(fig, ax, th, *, xlabel: str, title: str, ticks, tick_labels,
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


def draw(figure: dict, run_dir: str) -> str:
  """Draws a figure a claim declared as data into `run_dir`; returns its file name.

  Args:
    figure: `{"name": "budgets.png", "size": [w, h], "panels": [panel, ...]}`, the panels side
      by side. A panel is `{"title", "xlabel", "ylabel", "xscale", "yscale", "xbase"` (the log
      base of x)`, "ylog_ticks"` (a log y labelled at 1, 2, 5 × 10^k)`, "xlim", "ylim",
      "xticks", "xticklabels", "yticks", "yticklabels", "legend"` (a font size; absent: no
      legend)`, "legend_loc",
      "legend_below"` (the legend under the axes, in that many columns)`, "note"` (words over
      the plot)`, "lines": [...], "bars": [...], "bands": [...], "hlines": [...], "vlines":
      [...]}`, or
      `{"title", "text"}` (words in place of a plot). A line is `{"x", "y", "style", "color",
      "label", "alpha", "lw", "ms"}` (or matplotlib's `"marker", "ls", "mfc", "mew"` in place of
      the `style` string), with `"yerr"` (and `"capsize"`) drawn with error bars; a histogram
      `{"values", "bins", "alpha", "label"}` counts values; a
      band `{"x", "lo", "hi", "color", "alpha"}` is shaded between; an annotation `{"text",
      "xy", "offset", "ha"}` labels a point (on a white box); bars `{"x", "y", "width",
      "yerr", "capsize", "color", "label"}` stand side by side; an `hline` `{"y", ...}` and
      a `vline` `{"x", ...}` take `style`, `color`, `lw` and `label` (`tuning.grid_panel` makes
      the panel of a tuning record, `median_band` a line and its band). A `"suptitle"` (with
      `"suptitle_size"`) titles the whole figure; `"width_ratios"` sizes the panels.
    run_dir: where the figure goes.

  Example:
    >>> import tempfile
    >>> from experiments.verdict.render.figures import draw
    >>> line = {"x": [1, 2], "y": [3.0, 2.5], "style": "o-", "label": "loss"}
    >>> draw({"name": "f.png", "panels": [{"title": "t", "lines": [line], "legend": 8}]},
    ...      tempfile.mkdtemp())
    'f.png'
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  panels = figure["panels"]
  fig, axes = plt.subplots(1, len(panels), figsize=tuple(figure.get("size", (7.0, 4.4))),
                           squeeze=False,
                           gridspec_kw={"width_ratios": figure.get("width_ratios")})
  for ax, panel in zip(axes[0], panels, strict=True):
    _panel(ax, panel)
  if "suptitle" in figure:
    fig.suptitle(figure["suptitle"], fontsize=figure.get("suptitle_size"))
  fig.tight_layout()
  fig.savefig(os.path.join(run_dir, figure["name"]), dpi=110)
  plt.close(fig)
  return figure["name"]


def _panel(ax, panel: dict) -> None:
  """One declared panel on `ax` (see `draw`)."""
  from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

  if "text" in panel:
    ax.text(0.5, 0.5, panel["text"], ha="center", va="center", transform=ax.transAxes)
    ax.set(xticks=[], yticks=[], title=panel.get("title", ""))
    return
  style = lambda d: {k: d[k] for k in ("color", "alpha", "lw", "ms", "label", "marker", "ls",
                                       "mfc", "mew") if k in d}
  for line in panel.get("lines", ()):
    if "yerr" in line:
      ax.errorbar(line["x"], line["y"], yerr=line["yerr"], fmt=line.get("style", "o-"),
                  capsize=line.get("capsize", 3), **style(line))
    else:
      fmt = () if "marker" in line or "ls" in line else (line.get("style", "o-"),)
      ax.plot(line["x"], line["y"], *fmt, **style(line))
  for h in panel.get("hists", ()):
    ax.hist(h["values"], bins=h.get("bins", 30), **style(h))
  for b in panel.get("bars", ()):
    ax.bar(b["x"], b["y"], b.get("width", 0.8), yerr=b.get("yerr"), capsize=b.get("capsize", 0),
           **style(b))
  for a in panel.get("annotations", ()):
    ax.annotate(a["text"], tuple(a["xy"]), textcoords="offset points",
                xytext=tuple(a.get("offset", (6, 0))), ha=a.get("ha", "left"), va="center",
                fontsize=7, bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.3})
  for b in panel.get("bands", ()):
    ax.fill_between(b["x"], b["lo"], b["hi"], color=b.get("color"), alpha=b.get("alpha", 0.15))
  if "note" in panel:
    ax.text(0.5, 0.5, panel["note"], ha="center", transform=ax.transAxes)
  for h in panel.get("hlines", ()):
    ax.axhline(h["y"], ls=h.get("style", "--"), **style(h))
  for v in panel.get("vlines", ()):
    ax.axvline(v["x"], ls=v.get("style", ":"), **style(v))
  if "xbase" in panel:
    ax.set_xscale("log", base=panel["xbase"])
  ax.set(**{k: panel[k] for k in ("title", "xlabel", "ylabel", "xscale", "yscale", "xticks",
                                   "xticklabels", "yticks", "yticklabels", "xlim", "ylim")
            if k in panel})
  if "xticks" in panel:
    ax.xaxis.set_minor_formatter(NullFormatter())
  if "yticks" in panel:
    ax.yaxis.set_minor_formatter(NullFormatter())
  if panel.get("ylog_ticks"):
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
  if "legend_below" in panel:
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14),
              ncol=panel["legend_below"])
  elif "legend" in panel:
    ax.legend(fontsize=panel["legend"], loc=panel.get("legend_loc", "best"))


def median_band(x, values_SX, *, color: str, label: str) -> tuple[dict, dict]:
  """A line of the median over seeds (rows of `values_SX`, non-finite left out) and its band
  from the smallest to the largest seed: `(line, band)` of a declared panel (`draw`).

  Example:
    >>> from experiments.verdict.render.figures import median_band
    >>> line, band = median_band([0, 1], [[1.0, 2.0], [3.0, float("inf")]], color="C0", label="a")
    >>> line["y"], band["hi"]
    ([2.0, 2.0], [3.0, 2.0])
  """
  import warnings

  import numpy as np

  v = np.asarray(values_SX, np.float64)
  v = np.where(np.isfinite(v), v, np.nan)
  with warnings.catch_warnings():  # every seed non-finite at a reading: a gap, drawn so
    warnings.simplefilter("ignore", RuntimeWarning)
    lo, mid, hi = np.nanmin(v, 0), np.nanmedian(v, 0), np.nanmax(v, 0)
  x = [float(t) for t in x]
  return ({"x": x, "y": mid.tolist(), "style": "o-", "color": color, "label": label},
          {"x": x, "lo": lo.tolist(), "hi": hi.tolist(), "color": color, "alpha": 0.15})
