"""One axis a claim's primary effect is measured along: `Axis`, and its statistics block.

The verdict is read at the registered sizes only. An axis names other points (model sizes,
context lengths, training budgets, or anything a claim's `Sizes` can vary), says what the
claim's sizes are at each (`at(sizes, value)`), which quantity the trend is fitted on (its
row key `x`, on a log scale) and where each point runs (`folder`). The runner measures the
primary effect at every point on the same seeds and writes one block per axis into
`results.json`'s `axes`: `{"rows": [...], "slope", "slope_ci", "trend", "dof", "points",
"excluded", ...}` (`Axis.block`, with `axis_fit`, the one statistics block of every axis).
The report's section and the figure of an axis are drawn from the same block
(`axis_report.axis_markdown`, `figures.axis_figure`), reading the text hooks below.

`Axis` itself is a whole axis: `Axis("batch", (8, 32), at=lambda s, b: replace(s, batch=b))`
measures the effect at batch 8 and 32, rows `{"batch": b, "effect", "ci", ...}`, in folders
`batch-8/`, `batch-32/`. `experiments.verdict.declare.axes` subclasses it for the three axes the
claims share (sizes, lengths, budgets), whose rows and texts say more.

Example:
  >>> import dataclasses
  >>> from experiments.verdict.declare.axis import Axis
  >>> batch = Axis("batch", (8, 32), at=lambda s, b: dataclasses.replace(s, batch=b))
  >>> batch.key, batch.x, batch.folder(8), batch.parse("8, 32")
  ('batch', 'batch', 'batch-8', (8, 32))
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.verdict.arithmetic.rule import reading
from experiments.verdict.arithmetic.stats import (
  UNRESOLVED,
  families_differ,
  fit_trend,
  fmt,
  holds,
  paired_values,
  point_estimate,
  trend_reading,
)


@dataclasses.dataclass(frozen=True)
class Axis:
  """One axis of a claim: its name, the points a full run measures, how sizes change there.

  Attributes:
    name: the key of its block in `results.json`'s `axes`, and of `--axes NAME=v1,v2`.
    values: the points a full run also measures (quick runs measure none unless asked).
    at: `at(sizes, value) -> Sizes`, the claim's sizes at that point. The verdict is never
      read from these runs.

  Class attributes a subclass may override: `key` (the row key holding a point's value),
  `x` (the quantity fitted, on a log scale), `label` (what names a row left out of the fit),
  `family`, `word` (a point, in the report: "at this size"), `field` (the setting
  named in errors) and `min_points` (the fewest points that make a block).
  """

  name: str
  values: tuple = ()
  at: Callable[[Any, Any], Any] | None = None

  family = None
  min_points = 2

  @property
  def key(self) -> str:
    return self.name

  @property
  def x(self) -> str:
    return self.key

  @property
  def label(self) -> str | None:
    return self.key

  @property
  def word(self) -> str:
    return self.name

  @property
  def field(self) -> str:
    return f"axis {self.name!r}"

  # --- planning: checked before any compute ---

  def parse(self, text: str) -> tuple:
    """`"8,32"` -> `(8, 32)`: whole numbers when every value is one, else names."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    try:
      return tuple(int(p) for p in parts)
    except ValueError:
      return parts

  def check(self, claim, values, field: str) -> None:
    """Raises `ValueError` unless `values` are distinct points this claim can run at."""
    values = tuple(values) if not isinstance(values, (str, int)) else ()
    if not values or len(set(values)) != len(values):
      raise ValueError(f"Claim {claim.id!r}: {field}={values!r} must be distinct values of "
                       f"the axis {self.name!r}, e.g. (8, 32).")
    self.check_at(claim, field, "at(sizes, value)", f"the {self.name}")

  def check_at(self, claim, field: str, signature: str, changes: str,
               against: str | None = None) -> None:
    """What every axis needs: its `at` function and a primary effect to measure."""
    if self.at is None:
      raise ValueError(f"Claim {claim.id!r}: {field} asks for runs at other points of the "
                       f"axis {self.name!r}, but the claim declares no {signature}. Fix: "
                       f"declare how its sizes change with {changes}, or drop {field}.")
    if claim.primary is None:
      raise ValueError(f"Claim {claim.id!r}: {field} needs a primary effect to measure against "
                       f"{against or changes}, and every threshold is a control. Fix: declare "
                       "a non-control threshold first.")

  def chosen(self, claim, quick: bool, override=None) -> tuple:
    """The values a run measures: `override` (the command line), else the declared ones
    (none for a quick run); checked."""
    values = tuple(override) if override is not None else (() if quick else self.values)
    if values:
      self.check(claim, values, self.field if override is None else f"--axes {self.name}")
    return values

  def points(self, claim, registered, quick: bool, values) -> list[tuple[Any, Any]]:
    """`[(value, sizes), ...]` in the order they run; `[]` when the axis measures nothing."""
    del claim, quick
    return [(v, self.at(registered, v)) for v in sorted(values)]

  def folder(self, value) -> str:
    """The run's sub-folder of one point."""
    return f"{self.name}-{value}"

  def describe(self, value, sizes) -> str:
    """One point, in a progress line and in a failure's note."""
    del sizes
    return f"{self.name} = {value}"

  # --- the block in results.json ---

  def row(self, claim, value, sizes, seeds) -> dict:
    """The fields that say where a row is (its value and axis quantity)."""
    del claim, sizes, seeds
    return {self.key: value}

  def measured(self, claim, runs: dict, seeds) -> dict:
    """Fields a row reads from its point's runs beside the effect (scale: the bits per byte
    its models reach)."""
    del claim, runs, seeds
    return {}

  def sort_key(self, row: dict):
    return row[self.x]

  def extra(self, sizes_of: dict) -> dict:
    """Fields of the block beside its rows and fit (the budget axis: its model)."""
    del sizes_of
    return {}

  def enough(self, per: dict) -> bool:
    """Whether the points measured make a block."""
    return len(per) >= self.min_points

  def block(self, claim, per: dict, sizes_of: dict, seeds) -> dict:
    """The axis's block: a row per point measured (`per`: `{value: runs}`), and its fit.

    Each row is the axis's own fields (`row`), the primary effect with its interval
    (`stats.point_estimate`: the paired mean and 95% t-interval, or a censored median's), and
    the registered rule there (`rule.reading`); the fit is `axis_fit`'s.
    """
    th = claim.primary
    rows = []
    for value, runs in per.items():
      m, ci = point_estimate(th, runs, seeds)
      rows.append({**self.row(claim, value, sizes_of[value], seeds),
                   **self.measured(claim, runs, seeds), "effect": m,
                   "ci": ci, **reading(claim, runs, seeds)})
    rows.sort(key=self.sort_key)
    return {**self.extra(sizes_of), "rows": rows,
            **self.fit(claim, rows, lambda r: per[r[self.key]], seeds)}

  def fit(self, claim, rows: list[dict], runs_of, seeds) -> dict:
    """`axis_fit` with this axis's keys."""
    return axis_fit(claim, rows, runs_of, seeds, x=self.x, label=self.label,
                    family=self.family)

  def kept_folders(self, row: dict, block: dict) -> list[str]:
    """Where a kept row's per-seed findings may be (refitting a kept result)."""
    del block
    return [self.folder(row[self.key])]

  def is_registered(self, row: dict, block: dict, model: str | None) -> bool:
    """Whether a kept row is the registered run (its findings are the result's `arms`)."""
    del row, block, model
    return False

  def note(self, registered) -> str:
    """The report's note on where the axis's runs are."""
    del registered
    return (f"- The runs at other values of {self.name} ran in `{self.name}-<value>/` (their "
            f"findings and figures); they feed only the trend with {self.name}, never the "
            "verdict.")

  def to_dict(self) -> dict:
    """What `claim.json` records of the declaration."""
    return {"axes": {self.name: list(self.values)}}

  def validate(self, block: dict, need, where: str) -> None:
    """Checks the rows' own fields (`need(ok, where, what)` raises); here: the value."""
    for i, row in enumerate(block["rows"]):
      need(self.key in row, f"{where}.rows[{i}]", f"must hold its {self.key!r}")

  # --- the report: one section, one sentence, one table cell ---

  def title(self) -> str:
    return f"{self.name[0].upper() + self.name[1:]}: the primary effect against {self.name}"

  def intro(self, claim, results: dict, block: dict, effect: str) -> str:
    del claim, results, block
    return (f"The primary effect {effect} at each {self.word}, on the same seeds (each point's "
            "sizes are the claim's `at`). The verdict above is never read from these runs; the "
            f"threshold column applies the primary threshold's test to each {self.word}'s "
            "interval, the last column the registered rule, every threshold and control, to its "
            "runs.")

  def headers(self, block: dict) -> list[str]:
    del block
    return [self.name]

  def cells(self, row: dict, results: dict, block: dict) -> list[str]:
    del results, block
    return [str(row[self.key])]

  def tail(self, claim, results: dict, block: dict) -> list[str]:
    del claim, results
    return [self.sentence(block), ""]

  def sentence(self, block: dict) -> str:
    """The trend's sentence, computed from the fit."""
    rows = block["rows"]
    return (f"From {self.name} = {rows[0][self.key]} to {self.name} = {rows[-1][self.key]} "
            f"{trend_clause(block, self.name, 'points', 'under 3 points')}.")

  def trend_title(self) -> str:
    return self.name

  def cell(self, block: dict) -> str:
    """The block in one table cell: each point's effect, then the fit."""
    return "; ".join([f"{self.name} = {r[self.key]}: {fmt(r['effect'])}" for r in block["rows"]]
                     + [fit_text(block, self.name, "points")])

  # --- the figure (`figures.axis_figure`) ---

  def figure_x(self, row: dict, block: dict) -> float:
    del block
    return row[self.x]

  def series(self, block: dict, registered) -> list[tuple[str, list[dict], str]]:
    """`[(legend label, rows, marker), ...]`: one line per family."""
    del registered
    return [("primary effect", block["rows"], "o")]

  def xlabel(self, block: dict) -> str:
    del block
    return f"{self.name} (log scale)"

  def ticks(self, block: dict) -> tuple[list, list[str]]:
    xs = [self.figure_x(r, block) for r in block["rows"]]
    return xs, [str(r[self.key]) for r in block["rows"]]

  def caption(self, block: dict) -> str:
    return textwrap.fill(self.sentence(block).replace("`", ""), 68)


def excluded(claim, runs: dict | None, seeds, row: dict) -> str | None:
  """Why an axis point is left out of its trend fit, or None.

  In order: a failed control (`row["failed_controls"]`); a censored seed (a value of the
  primary's metric, in its arm or its baseline, that meets the primary's `censored`
  condition: a sentinel or a floor, not a measurement); an effect that is not measured (no
  finite seed); a size trained below the regime's tokens per parameter
  (`row["under_trained"]`, set by `axes.flag_under_trained`).

  Example:
    >>> from experiments.verdict.declare.claim import Claim
    >>> from experiments.verdict.declare.thresholds import Threshold
    >>> th = Threshold.beyond("ratio", "a", "steps", baseline="b", margin=0.1, censored=">= 1.5")
    >>> c = Claim(id="x", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
    ...           thresholds=(th,), trains=False, run=print)
    >>> runs = {"a": {0: {"steps": 1.5}, 1: {"steps": 0.4}},
    ...         "b": {0: {"steps": 1.0}, 1: {"steps": 1.0}}}
    >>> excluded(c, runs, (0, 1), {}), excluded(c, runs, (1,), {"failed_controls": ["edge"]})
    ("censored: a seed's a.steps >= 1.5", 'control failed: edge')
  """
  th = claim.primary
  if row.get("failed_controls"):
    return "control failed: " + ", ".join(row["failed_controls"])
  if runs is None:  # a kept row whose per-seed findings were not kept: what the row says
    finite = row.get("effect") is not None and math.isfinite(row["effect"])
    return row.get("under_trained") if finite else "not measured"
  if th.censored is not None:
    for arm in (th.arm, th.baseline):
      vals = [runs[arm][s].get(th.metric) for s in seeds] if arm in runs else []
      if any(v is not None and holds(th.censored, (float(v), float(v))) for v in vals):
        return f"censored: a seed's {arm}.{th.metric} {th.censored}"
  if not np.isfinite(paired_values(runs, th.arm, th.metric, th.baseline, seeds)).any():
    return "not measured"
  return row.get("under_trained")


def axis_fit(claim, rows: list[dict], runs_of, seeds, *, x: str, label: str | None = None,
             family: str | None = None) -> dict:
  """The one statistics block of every axis: flags why each row is left out, then fits.

  Args:
    claim: the claim; its `primary` threshold is the effect on the axis.
    rows: the axis's rows (`effect`, `ci`, the reading, the axis quantity `x`); each gains
      `excluded` (the reason) when it is left out of the fit (`excluded`), in place.
    runs_of: `runs_of(row) -> {arm: {seed: metrics}}` of that point, or None when its
      per-seed findings are not at hand (a kept row: then only what the row says is used).
    seeds: the seeds every point ran.
    x: the key of the axis quantity (`"params"`, `"T"`, `"train_tokens"`).
    label: the key naming a row in the fit's `excluded` list.
    family: the key of the family label (the scale axis), or None.

  Returns:
    The fit fields of an axis block (`stats.fit_trend`; `per_family` with each family's
    slope, interval, trend, dof and points when there are two families or more).
  """
  for row in rows:
    why = excluded(claim, runs_of(row), seeds, row)
    row.pop("under_trained", None)
    row.pop("excluded", None)
    if why:
      row["excluded"] = why
  fit = fit_trend(rows, x, family=family, label=label)
  if family is not None and len({r[family] for r in rows}) < 2:
    fit.pop("per_family")
    fit.pop("pooled")
  if "per_family" in fit:
    fit["per_family"] = {f: {k: b[k] for k in ("slope", "slope_ci", "trend", "dof", "points")}
                         for f, b in fit["per_family"].items()}
  return fit


def trend_clause(fit: dict, per: str, items: str, no_interval: str) -> str:
  """`the effect grows: slope 0.14 [0.05, 0.23] per e-fold of T` from a fit's slope and trend.

  `per` names the axis (`T`, `tokens`), `items` its points (`lengths`), `no_interval` why a
  fitted slope may have no interval.
  """
  words = TREND_WORDS[trend_reading(fit)]
  lo, hi = fit["slope_ci"]
  if fit["trend"] == "families disagree":
    slope = (f"the families' intervals are disjoint ({family_slopes(fit, ', slope ')} per "
             f"e-fold of {per})")
  elif fit["slope"] is None:
    slope = f"no slope could be fitted (fewer than two {items} in the fit)"
  elif lo is None:
    slope = (f"slope {fmt(fit['slope'])} per e-fold of {per}, with no interval "
             f"({no_interval if fit.get('dof', 0) < 1 else ON_A_LINE})")
  else:
    slope = (f"slope {fmt(fit['slope'])} [{fmt(lo)}, {fmt(hi)}] per e-fold of {per}"
             + (" (the interval contains 0)" if fit["trend"] == "no trend" else ""))
  if "dof" in fit and fit["slope"] is not None:
    dof = fit["dof"]
    slope += (f", fitted on the seed mean of each of {fit['points']} {items} "
              f"({dof} residual degree{'s' if dof != 1 else ''} of freedom)")
  if fit["trend"] != "families disagree" and families_differ(fit):
    slope += f"; the families' own slopes differ: {family_slopes(fit, ', slope ')}"
  left = fit.get("excluded") or []
  if left:
    slope += ("; left out of the fit: " + "; ".join(f"{x} ({why})" for x, why in left))
  return f"{words}: {slope}"


ON_A_LINE = "the means lie exactly on a line, as at a floor: no residual spread"

TREND_WORDS = {"grows": "the effect grows", "shrinks": "the effect shrinks",
               "no trend": "the effect shows no trend",
               UNRESOLVED: "the trend is not resolved",
               "not measured": "the trend is not measured",
               "families disagree": "no pooled trend is read, the families disagree"}


def family_slopes(fit: dict, sep: str = " ") -> str:
  """Each family's own trend and slope, `gpt shrinks -0.2 [-0.3, -0.1]; llama ...`."""
  return "; ".join(f"{f} {trend_reading(b)}{sep}{fmt(b['slope'])}"
                   + (f" [{fmt(b['slope_ci'][0])}, {fmt(b['slope_ci'][1])}]"
                      if b["slope_ci"][0] is not None else " (no interval)")
                   for f, b in fit["per_family"].items())


def fit_text(fit: dict, per: str, items: str) -> str:
  """A fit in one table cell: `grows: slope 0.1 [0.05, 0.2] per e-fold of params`, plus the
  points left out and, when the families' own slopes differ in sign or size
  (`stats.families_differ`), each family's slope; a 1-dof interval containing 0 reads
  `not resolved (1 df)` (`stats.trend_reading`)."""
  left = fit.get("excluded") or []
  out = f" ({len(left)} left out)" if left else ""
  if fit["trend"] == "families disagree":
    return (f"families disagree, no pooled slope: {family_slopes(fit)} per e-fold of "
            f"{per}{out}")
  if fit["slope"] is None:
    return f"{trend_reading(fit)} (no slope: fewer than two {items} in the fit){out}"
  lo, hi = fit["slope_ci"]
  ci = (f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else " (no interval: under 3 points)"
        if fit.get("dof", 0) < 1 else f" (no interval: {ON_A_LINE})")
  fams = (f"; the families' own slopes differ: {family_slopes(fit)}"
          if families_differ(fit) else "")
  return f"{trend_reading(fit)}: slope {fmt(fit['slope'])}{ci} per e-fold of {per}{fams}{out}"
