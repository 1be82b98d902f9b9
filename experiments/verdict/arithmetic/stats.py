"""The arithmetic of a verdict: t-quantiles, intervals, paired effects, slopes, rank correlations.

Arms with the same seed share initialisation and data stream, so an effect is the paired
difference `arm − baseline`, seed by seed; its interval is the 95% t-interval of the mean
over seeds. `evaluate` gives the interval a `Threshold` is decided on and whether its
conditions hold (the whole interval must satisfy a condition). `ols_slope` and `trend` read
an effect against model size (the runner's scale axis). `fmt` is how every number in a report
is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from experiments.verdict.arithmetic.censoring import median_evaluation
from experiments.verdict.arithmetic.conditions import parse_condition

# t_{0.975, ν} for ν = 1 … 30 (scipy.stats.t.ppf, 6 decimals); beyond, a Cornish–Fisher series.
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
         2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
         2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
         2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
_Z975 = 1.959963984540054


def t_quantile_975(dof: int) -> float:
  """The 0.975 quantile of Student's t with `dof` degrees of freedom (two-sided 95%).

  .. math:: t_\\nu \\approx z + \\frac{g_1(z)}{\\nu} + \\frac{g_2(z)}{\\nu^2}
     + \\frac{g_3(z)}{\\nu^3} + \\frac{g_4(z)}{\\nu^4}, \\quad z = \\Phi^{-1}(0.975)

  A table for `ν ≤ 30`, the Cornish–Fisher expansion above it (error below 1e-7).

  Args:
    dof: degrees of freedom, `n − 1` for `n` seeds; at least 1.

  Returns:
    The quantile.

  Example:
    >>> from experiments.verdict.arithmetic.stats import t_quantile_975
    >>> round(t_quantile_975(2), 4)
    4.3027
  """
  if dof < 1:
    raise ValueError(f"t_quantile_975: {dof=} must be >= 1 (two seeds or more).")
  if dof <= len(_T975):
    return _T975[dof - 1]
  z = _Z975
  g = ((z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96,
       (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
       (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160)
  return z + sum(gi / dof ** (i + 1) for i, gi in enumerate(g))


def mean_ci95(values: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
  """Mean and 95% t-interval `mean ± t_{n−1} s / √n` of `values` (None below two values).

  Example:
    >>> from experiments.verdict.arithmetic.stats import mean_ci95
    >>> m, (lo, hi) = mean_ci95([1.0, 2.0, 3.0])
    >>> m, round(lo, 3), round(hi, 3)
    (2.0, -0.484, 4.484)
  """
  x = np.asarray(values, np.float64)
  if x.size == 0:
    return math.nan, None
  m = float(x.mean())
  if x.size < 2:
    return m, None
  half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
  return m, (m - half, m + half)


def holds(condition: str, interval: tuple[float, float]) -> bool:
  """Whether every value of `interval = (lo, hi)` satisfies `condition` (False on NaN).

  Example:
    >>> from experiments.verdict.arithmetic.stats import holds
    >>> holds(">= 0.9", (0.92, 0.99)), holds(">= 0.9", (0.85, 0.99))
    (True, False)
  """
  op, v = parse_condition(condition)
  lo, hi = interval
  if math.isnan(lo) or math.isnan(hi):
    return False
  return {"<": hi < v, "<=": hi <= v, ">": lo > v, ">=": lo >= v,
          "==": lo == v and hi == v}[op]


def _num(x) -> float:
  return math.nan if x is None else float(x)


def arm_summary(runs: dict) -> dict:
  """`{seed: {metric: v}}` -> `{"runs", "mean", "std"}` (std with ddof 1; 0 for one seed)."""
  metrics = sorted({m for per_seed in runs.values() for m in per_seed})
  mean, std = {}, {}
  for m in metrics:
    x = np.array([_num(per_seed.get(m)) for per_seed in runs.values()], np.float64)
    mean[m] = float(x.mean())
    std[m] = float(x.std(ddof=1)) if x.size > 1 else 0.0
  return {"runs": {str(s): dict(v) for s, v in runs.items()}, "mean": mean, "std": std}


def paired_values(runs: dict, arm: str, metric: str, baseline: str | None,
                  seeds) -> np.ndarray:
  """Per-seed values of `metric` in `arm`, minus `baseline`'s for the same seed when given.

  Example:
    >>> from experiments.verdict.arithmetic.stats import paired_values
    >>> runs = {"a": {0: {"m": 3.0}, 1: {"m": 5.0}}, "b": {0: {"m": 1.0}, 1: {"m": 1.5}}}
    >>> paired_values(runs, "a", "m", "b", (0, 1)).tolist()
    [2.0, 3.5]
  """
  def get(a):
    if a not in runs:
      raise KeyError(f"arm {a!r} is not among the measured arms {sorted(runs)}")
    return np.array([_num(runs[a][s].get(metric)) for s in seeds], np.float64)

  x = get(arm)
  return x - get(baseline) if baseline is not None else x


def effect(runs: dict, seeds, name: str, arm: str, baseline: str | None, metric: str) -> dict:
  """One `effects` entry: the mean of the (paired) quantity and its 95% t-interval."""
  m, ci = mean_ci95(paired_values(runs, arm, metric, baseline, seeds))
  return {"name": name, "arm": arm, "baseline": baseline, "metric": metric, "mean": m,
          "ci95": list(ci) if ci is not None else [None, None]}


def point_estimate(th, runs: dict, seeds) -> tuple[float, list]:
  """A threshold's effect as tables and axis rows show it: the paired mean with its 95%
  t-interval, or for `stat="median"` the censoring-aware median (NaN when censoring leaves it
  open) with its order-statistic interval, so no sentinel enters an interval anywhere.

  Example:
    >>> from experiments.verdict.declare.thresholds import Threshold
    >>> th = Threshold("steps", "a", "r", stat="median", supports="< 0.9", censored=">= 2.5",
    ...                cap=2.0)
    >>> runs = {"a": {s: {"r": v} for s, v in enumerate([0.5, 0.6, 0.7, 0.8, 2.5, 2.5])}}
    >>> point_estimate(th, runs, range(6))
    (0.75, [0.5, inf])
  """
  if th.stat == "median":
    ev = evaluate(th, runs, seeds)
    return ev["mean"], [float(v) for v in ev["interval"]]
  m, ci = mean_ci95(paired_values(runs, th.arm, th.metric, th.baseline, seeds))
  return m, list(ci) if ci is not None else [None, None]


def threshold_effect(th, runs: dict, seeds) -> dict:
  """One `effects` entry for a threshold (`point_estimate`'s number and interval)."""
  m, ci = point_estimate(th, runs, seeds)
  return {"name": th.name, "arm": th.arm, "baseline": th.baseline, "metric": th.metric,
          "mean": m, "ci95": ci}


def evaluate(th, runs: dict, seeds) -> dict:
  """The interval a threshold is decided on, and whether its conditions hold.

  `stat="median"` reads the censoring-aware median interval (`censoring.median_evaluation`:
  no sentinel enters it); its dict adds `undetermined`, the conditions censoring leaves open.
  """
  if th.stat == "median":
    arm = paired_values(runs, th.arm, th.metric, None, seeds)
    base = paired_values(runs, th.baseline, th.metric, None, seeds) if th.baseline else None
    return median_evaluation(th, arm, base)
  x = paired_values(runs, th.arm, th.metric, th.baseline, seeds)
  m, ci = mean_ci95(x)
  if th.stat == "range" or ci is None:
    interval = (float(x.min()), float(x.max())) if not np.isnan(x).any() else (math.nan,) * 2
  else:
    interval = ci
  what = "range" if th.stat == "range" else ("95% CI" if ci is not None else "one seed")
  return {"mean": m, "interval": interval, "what": what,
          "supports": th.supports is not None and holds(th.supports, interval),
          "refutes": th.refutes is not None and holds(th.refutes, interval)}


def ols_slope(x, y, groups=None) -> tuple[float, tuple[float, float] | None]:
  """Ordinary least squares slope of `y` on `x`, with its 95% t-interval (`n − 2` dof).

  .. math:: \\hat\\beta = \\frac{\\sum (x_i - \\bar x)(y_i - \\bar y)}{\\sum (x_i - \\bar x)^2},
     \\quad \\hat\\beta \\pm t_{n-2}\\,\\sqrt{\\frac{\\sum r_i^2 / (n-2)}{\\sum (x_i - \\bar x)^2}}

  with residuals `r_i = y_i − ŷ_i` (the slope and standard error of `scipy.stats.linregress`).
  With `groups` (e.g. each point's model family) the slope is the common one with an intercept
  per group (x and y centred within each group; `n − g − 1` dof for `g` groups): two families
  at different offsets then share one slope instead of the offset posing as a trend.

  Args:
    x: the regressor, e.g. `log(parameters)` of each (size, seed) point.
    y: the response, e.g. the primary effect of that point; same length as `x`.
    groups: optional labels, same length as `x`; one intercept per distinct label.

  Returns:
    `(slope, (lo, hi))`; the interval is None with no residual dof (under 3 points, or
    `g + 2` with groups).

  Example:
    >>> from experiments.verdict.arithmetic.stats import ols_slope
    >>> slope, (lo, hi) = ols_slope([0.0, 1.0, 2.0, 3.0], [0.1, 1.0, 2.1, 2.9])
    >>> round(slope, 3), round(lo, 3), round(hi, 3)
    (0.95, 0.783, 1.117)
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise ValueError(f"ols_slope: x and y must be 1-D of one length; got {x.shape=}, {y.shape=}.")
  labels = np.zeros(x.shape, np.int64) if groups is None else np.unique(
      np.asarray(groups), return_inverse=True)[1].reshape(-1)
  if labels.shape != x.shape:
    raise ValueError(f"ols_slope: groups must have x's length {x.size}; got {labels.size}.")
  n_groups = int(labels.max()) + 1 if x.size else 0
  dx, dy = x.copy(), y.copy()
  for g in range(n_groups):
    at = labels == g
    dx[at] -= x[at].mean()
    dy[at] -= y[at].mean()
  sxx = float(dx @ dx)
  if x.size < 2 or sxx == 0.0:
    raise ValueError(f"ols_slope: x takes {np.unique(x).size} distinct value(s)"
                     + (" within every group" if n_groups > 1 else "") + "; a slope needs "
                     "at least two. Fix: measure at two sizes or more.")
  slope = float(dx @ dy) / sxx
  dof = x.size - n_groups - 1
  if dof < 1:
    return slope, None
  resid = dy - slope * dx
  se = math.sqrt(float(resid @ resid) / dof / sxx)
  half = t_quantile_975(dof) * se
  return slope, (slope - half, slope + half)


def trend(slope_ci: tuple[float, float] | None, mean_effect: float) -> str:
  """`"grows"`, `"shrinks"` or `"no trend"`: which way an effect's magnitude moves with size.

  `"no trend"` when the slope's 95% interval contains 0 (or there is none); otherwise
  `"grows"` when the slope has the sign of the mean effect across sizes (its magnitude rises
  with size) and `"shrinks"` when the opposite sign. A mean effect of exactly 0 counts as
  positive.

  Example:
    >>> from experiments.verdict.arithmetic.stats import trend
    >>> trend((0.1, 0.3), 2.0), trend((0.1, 0.3), -2.0), trend((-0.1, 0.3), 2.0)
    ('grows', 'shrinks', 'no trend')
  """
  if slope_ci is None or any(v is None or math.isnan(v) for v in slope_ci):
    return "no trend"
  lo, hi = slope_ci
  if lo <= 0.0 <= hi:
    return "no trend"
  if mean_effect is None or math.isnan(mean_effect):
    return "no trend"
  return "grows" if (lo > 0.0) == (mean_effect >= 0.0) else "shrinks"


UNRESOLVED = "not resolved (1 df)"


def trend_reading(fit: dict) -> str:
  """A fit's trend as reports write it: its `trend`, except that a slope interval with one
  residual degree of freedom that contains 0 reads `"not resolved (1 df)"`, never `"no trend"`.

  With 1 dof the interval is `slope ± 12.7·se` (`t_{0.975, 1}`): it contains 0 for almost any
  slope, so it says the fit cannot tell, not that the effect is flat. Rendering only: the
  kept `trend` stays `"no trend"`.

  Example:
    >>> from experiments.verdict.arithmetic.stats import trend_reading
    >>> trend_reading({"trend": "no trend", "dof": 1}), trend_reading({"trend": "no trend",
    ...                                                                 "dof": 3})
    ('not resolved (1 df)', 'no trend')
  """
  if fit.get("trend") == "no trend" and fit.get("dof") == 1:
    return UNRESOLVED
  return fit["trend"]


def families_differ(fit: dict) -> bool:
  """Whether the families' own slopes differ in sign (both non-zero, opposite signs) or in
  size (disjoint 95% intervals): then a report shows each family's slope beside the pooled one.

  Example:
    >>> from experiments.verdict.arithmetic.stats import families_differ
    >>> fams = lambda a, b: {"per_family": {"gpt": a, "llama": b}}
    >>> one = {"slope": 0.2, "slope_ci": [0.1, 0.3]}
    >>> (families_differ(fams(one, {"slope": -0.1, "slope_ci": [None, None]})),
    ...  families_differ(fams(one, {"slope": 0.5, "slope_ci": [0.4, 0.6]})),
    ...  families_differ(fams(one, {"slope": 0.25, "slope_ci": [0.0, 0.5]})))
    (True, True, False)
  """
  fams = list((fit.get("per_family") or {}).values())
  slopes = [b["slope"] for b in fams if b.get("slope") is not None
            and math.isfinite(b["slope"]) and b["slope"] != 0.0]
  if slopes and min(slopes) < 0 < max(slopes):
    return True
  cis = [b["slope_ci"] for b in fams if b.get("slope_ci") and b["slope_ci"][0] is not None]
  return any(a[1] < b[0] or b[1] < a[0] for i, a in enumerate(cis) for b in cis[i + 1:])


def fmt(x) -> str:
  """A number as reports write it: 4 significant digits, `n/a` for None or NaN."""
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "n/a"
  if isinstance(x, str):
    return x
  x = float(x)
  if x == 0 or 1e-3 <= abs(x) < 1e4:
    return f"{x:.4g}"
  return f"{x:.3e}"


def interval_text(lo, hi) -> str:
  """A 95% interval as reports write it; a null end is an open one (a censored median's bound,
  infinite, is stored as null in strict JSON), `""` when both are null (one seed).

  Example:
    >>> from experiments.verdict.arithmetic.stats import interval_text
    >>> interval_text(0.5572, 1.333), interval_text(1.16875, None), interval_text(None, None)
    ('[0.5572, 1.333]', '[1.169, ∞)', '')
  """
  if lo is None and hi is None:
    return ""
  return (f"{'(−∞' if lo is None or lo == -math.inf else '[' + fmt(lo)}, "
          f"{'∞)' if hi is None or hi == math.inf else fmt(hi) + ']'}")


def open_interval(ci) -> tuple[float, float] | None:
  """`ci = [lo, hi]` as floats, a null end as ±inf; None when both ends are null (one seed).

  Example:
    >>> from experiments.verdict.arithmetic.stats import open_interval
    >>> open_interval([1.16875, None]), open_interval([None, None])
    ((1.16875, inf), None)
  """
  lo, hi = ci
  if lo is None and hi is None:
    return None
  return (-math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))


def rankdata(x) -> np.ndarray:
  """Ranks `1 … n` of `x`, ties given their average rank (`scipy.stats.rankdata`); inf ranks last.

  Example:
    >>> from experiments.verdict.arithmetic.stats import rankdata
    >>> rankdata([3.0, 1.0, 3.0, float("inf")]).tolist()
    [2.5, 1.0, 2.5, 4.0]
  """
  x = np.asarray(x, np.float64)
  order = np.argsort(x, kind="mergesort")
  ranks = np.empty(x.size, np.float64)
  ranks[order] = np.arange(1, x.size + 1)
  for v in np.unique(x):
    tie = x == v
    if tie.sum() > 1:
      ranks[tie] = ranks[tie].mean()
  return ranks


def spearman(x, y) -> float:
  """Spearman's rank correlation `ρ`: the Pearson correlation of the average ranks.

  .. math:: \\rho = \\frac{\\operatorname{cov}(r_x, r_y)}{\\sigma_{r_x}\\sigma_{r_y}}

  NaN when either side is constant or fewer than 3 values remain (pairs with a NaN are dropped).

  Example:
    >>> from experiments.verdict.arithmetic.stats import spearman
    >>> spearman([1, 2, 3, 4], [10, 20, 30, 1000]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  keep = ~(np.isnan(x) | np.isnan(y))
  x, y = x[keep], y[keep]
  if x.size < 3:
    return math.nan
  rx, ry = rankdata(x), rankdata(y)
  rx, ry = rx - rx.mean(), ry - ry.mean()
  den = math.sqrt(float((rx**2).sum() * (ry**2).sum()))
  return float((rx * ry).sum() / den) if den > 0 else math.nan


def means_slope(x, y, groups=None) -> tuple[float, tuple[float, float] | None, int]:
  """The slope of `y` on `x` fitted to the mean of `y` at each distinct `(group, x)`.

  Seeds at one size are repeated measurements of one point, not independent sizes: the fit
  has one point per size (per family), so its interval has `sizes − 2` degrees of freedom (with
  `g` families and one intercept each, `sizes − g − 1`), however many seeds each size ran.
  An OLS on every (size, seed) point would count each seed as a size and shrink the interval.

  Args:
    x: the regressor of each point, e.g. `log(params)` of each (size, seed).
    y: the response of that point.
    groups: optional family labels; one intercept per family (`ols_slope`'s `groups`).

  Returns:
    `(slope, (lo, hi) or None, dof)`.

  Example:
    >>> from experiments.verdict.arithmetic.stats import means_slope
    >>> x = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    >>> slope, ci, dof = means_slope(x, [0.0, 0.2, 1.1, 0.9, 2.3, 1.7])
    >>> round(slope, 3), dof
    (0.95, 1)
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  labels = np.zeros(x.shape, np.int64) if groups is None else np.unique(
      np.asarray(groups), return_inverse=True)[1].reshape(-1)
  if x.shape != y.shape or labels.shape != x.shape or x.ndim != 1:
    raise ValueError(f"means_slope: x, y and groups must be 1-D of one length; got {x.shape=}, "
                     f"{y.shape=}, {labels.shape=}.")
  keys = sorted(set(zip(labels.tolist(), x.tolist(), strict=True)))
  gx = np.array([k[1] for k in keys])
  gy = np.array([y[(labels == g) & (x == v)].mean() for g, v in keys])
  gg = np.array([k[0] for k in keys])
  slope, ci = ols_slope(gx, gy, groups=gg if groups is not None else None)
  n_groups = np.unique(gg).size if groups is not None else 1
  return slope, ci, len(keys) - n_groups - 1


def fit_trend(rows: Sequence[dict], x: str, *, family: str | None = None,
              label: str | None = None) -> dict:
  """The trend of an axis: the slope of the per-point mean effect on `log(row[x])`.

  Each row is one point of the axis (a size, a length, a budget) holding the seed mean
  `effect`. A row enters the fit only when its effect is finite and it is not `excluded`
  (a failed control, a censored metric, an under-trained size: the runner writes the reason);
  a row whose effect is not finite is `"not measured"`. With `family` (the key naming each
  row's family) the slope is shared with one intercept per family, each family gets its own
  fit in `per_family`, and the pooled slope is refused (`pooled: false`, `trend`
  `"families disagree"`) when two families' intervals are disjoint.

  Args:
    rows: the axis's rows, each with `effect`, `x` and optionally `excluded`.
    x: the key of the quantity the effect is read against (`"params"`, `"T"`, ...).
    family: the key of the family label, or None for one family.
    label: the key that names a row in `excluded` (default `x`).

  Returns:
    `{"slope", "slope_ci", "dof", "trend", "points", "excluded"}` (+ `"per_family"` and
    `"pooled"` with `family`): `points` is how many rows entered the fit, `excluded` the
    `[label, reason]` of every row that did not. `trend` is `"grows"`, `"shrinks"`, `"no
    trend"` (the interval contains 0), or `"not measured"` (under three points, or means
    exactly on a line, as when every point sits at a floor: no interval either way).

  Example:
    >>> from experiments.verdict.arithmetic.stats import fit_trend
    >>> rows = [{"T": 64, "effect": 0.1}, {"T": 256, "effect": 0.3},
    ...         {"T": 1024, "effect": 0.52}, {"T": 2048, "effect": 0.9, "excluded": "censored"}]
    >>> fit = fit_trend(rows, "T")
    >>> fit["trend"], fit["points"], fit["dof"], fit["excluded"]
    ('grows', 3, 1, [[2048, 'censored']])
  """
  used, excluded = [], []
  for r in rows:
    e = r.get("effect")
    why = r.get("excluded") or (None if e is not None and math.isfinite(e) else "not measured")
    if why:
      excluded.append([r[label or x], why])
    else:
      used.append(r)

  def one(pts, grouped):
    xs = [math.log(r[x]) for r in pts]
    ys = [float(r["effect"]) for r in pts]
    gs = [r[family] for r in pts] if grouped else None
    try:
      slope, ci, dof = means_slope(xs, ys, gs)
    except ValueError:  # fewer than two distinct points
      slope, ci, dof = None, None, 0
    if ci is not None and ci[1] - ci[0] <= 1e-9 * max(abs(ci[0]), abs(ci[1]), 1e-12):
      ci = None  # the means lie on a line (e.g. all at a floor): no spread, no interval
    mean_effect = float(np.mean(ys)) if ys else math.nan
    return {"slope": slope, "slope_ci": list(ci) if ci else [None, None], "dof": max(dof, 0),
            "trend": trend(ci, mean_effect) if ci else "not measured", "points": len(pts)}

  families = sorted({r[family] for r in used}) if family else []
  out = {**one(used, grouped=len(families) > 1), "excluded": excluded}
  if family:
    per = {f: one([r for r in used if r[family] == f], grouped=False) for f in families}
    out["per_family"] = per
    cis = [b["slope_ci"] for b in per.values() if b["slope_ci"][0] is not None]
    disjoint = any(a[1] < b[0] or b[1] < a[0] for i, a in enumerate(cis) for b in cis[i + 1:])
    out["pooled"] = not disjoint
    if disjoint:
      out.update(slope=None, slope_ci=[None, None], trend="families disagree")
  return out
