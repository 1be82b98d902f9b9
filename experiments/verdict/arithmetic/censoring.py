"""Censored seeds: a run that never reached its target has no number, only a bound.

A steps-to-target metric is right-censored: a seed that did not reach the target within its
budget ran at least `cap` (its budget), and nothing more is known. A sentinel written in its
place (`condition-lr` v2 writes 1.5) is not a measurement, and a t-interval over it is not an
interval of anything. What can be said without one:

* `reached`: the fraction of seeds that reached the target, with its exact (Clopper–Pearson)
  interval;
* `median_interval`: the median, with the distribution-free order-statistic interval, where a
  censored seed is known only to lie in `[cap, ∞)`: each bound of the interval is then itself
  known only within a range, and a condition on it can be true, false, or undetermined
  (`undetermined`). The registered rule (`rule.decide`) reads an undetermined bound as
  inconclusive, saying so.

A threshold opts in with `stat="median"` and its `censored` condition and `cap`
(`thresholds.Threshold`); `stats.evaluate` then calls `median_evaluation`. No kept result uses
it: the first is `condition-lr`'s next registered version (v3), whose steps-to-target runs to a
real cap (issue 47 item 5).
"""

from __future__ import annotations

import math

import numpy as np

from experiments.verdict.arithmetic.conditions import parse_condition
from experiments.verdict.arithmetic.distributions import binom_sf, clopper_pearson


def order_rank(n: int, level: float = 0.95) -> tuple[int, float]:
  """The rank `r` of the order-statistic interval `[x_(r), x_(n+1−r)]` of the median, and its
  coverage; `r = 0` (an unbounded interval, coverage 1) when no rank reaches `level`.

  .. math:: P(x_{(r)} \\le m < x_{(n+1-r)}) = 1 - 2\\,P(B \\le r - 1),
     \\qquad B \\sim \\text{Binomial}(n, 1/2)

  for the median `m` of any continuous distribution; `r` is the largest rank whose coverage
  is at least `level`. Five seeds give at most `1 − 2/32 = 0.9375`, so a 95% interval needs
  six (`[x_(1), x_(6)]`, 0.969): `condition-lr` v3 must register six seeds or more.

  Example:
    >>> from experiments.verdict.arithmetic.censoring import order_rank
    >>> order_rank(5), order_rank(6), order_rank(10)
    ((0, 1.0), (1, 0.96875), (2, 0.978515625))
  """
  if n < 1:
    raise ValueError(f"order_rank: {n=} must be >= 1.")
  r, coverage = 0, 1.0
  for cand in range(1, (n + 1) // 2 + 1):
    c = 1.0 - 2.0 * binom_sf(n - cand + 1, n, 0.5)  # P(B <= r − 1) = P(B >= n − r + 1)
    if c < level:
      break
    r, coverage = cand, c
  return r, coverage


def median_interval(lower, upper, level: float = 0.95) -> dict:
  """The median and its distribution-free interval when each seed is known only within
  `[lower_i, upper_i]` (a point when measured; `[cap, ∞)` when right-censored).

  Order statistics are monotone, so `L_(j) ≤ x_(j) ≤ U_(j)` for the sorted lower and upper
  bounds: the interval `[L_(r), U_(n+1−r)]` contains `[x_(r), x_(n+1−r)]` and covers the median
  with at least `order_rank`'s coverage. Censored seeds sort last in `U`, so a bound lands on
  one only when as many seeds are censored. Each bound is returned with the range the true
  order statistic is known to lie in (`bounds`), which is what `truth` reads. For
  `condition-lr` v3's steps to target (through `median_evaluation`).

  Args:
    lower, upper: per-seed bounds, equal for a measured seed; `upper = inf` for a censored one.
    level: the coverage asked for.

  Returns:
    `{"interval": (lo, hi), "bounds": {"lo": (L_(r), U_(r)), "hi": (L_(s), U_(s))},
    "median": (lo, hi) of the median itself, "coverage", "rank": r, "n"}`; with no rank
    reaching `level`, the interval and both bounds are `(−inf, inf)`.

  Example:
    >>> from experiments.verdict.arithmetic.censoring import median_interval
    >>> inf = float("inf")
    >>> obs = [0.4, 0.5, 0.6, 0.7, 0.8]
    >>> m = median_interval(obs + [1.0, 1.0], obs + [inf, inf])
    >>> m["interval"], m["bounds"]["hi"], m["median"], m["coverage"]
    ((0.4, inf), (1.0, inf), (0.7, 0.7), 0.984375)
  """
  lo_b, up_b = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
  if lo_b.shape != up_b.shape or lo_b.ndim != 1 or lo_b.size == 0:
    raise ValueError(f"median_interval: lower and upper must be 1-D of one length; got "
                     f"{lo_b.shape=}, {up_b.shape=}.")
  if np.isnan(lo_b).any() or np.isnan(up_b).any() or (lo_b > up_b).any():
    raise ValueError("median_interval: every seed needs lower <= upper, no NaN. Fix: mark an "
                     "unmeasured seed censored with its cap, or leave it out.")
  n = lo_b.size
  L, U = np.sort(lo_b), np.sort(up_b)
  r, coverage = order_rank(n, level)
  mid = ((n - 1) // 2, n // 2)
  median = (float(L[list(mid)].mean()), float(U[list(mid)].mean()))
  if r == 0:
    inf = math.inf
    return {"interval": (-inf, inf), "bounds": {"lo": (-inf, -inf), "hi": (inf, inf)},
            "median": median, "coverage": coverage, "rank": 0, "n": n}
  s = n - r  # 0-based index of x_(n+1−r)
  return {"interval": (float(L[r - 1]), float(U[s])),
          "bounds": {"lo": (float(L[r - 1]), float(U[r - 1])), "hi": (float(L[s]), float(U[s]))},
          "median": median, "coverage": coverage, "rank": r, "n": n}


def reached(censored) -> dict:
  """The fraction of seeds that reached the target and its exact 95% interval (Clopper–Pearson),
  reported beside `condition-lr` v3's censored median (`median_evaluation`).

  Example:
    >>> from experiments.verdict.arithmetic.censoring import reached
    >>> r = reached([True, True, True, False, False])
    >>> r["k"], r["n"], r["fraction"], [round(v, 4) for v in r["ci95"]]
    (2, 5, 0.4, [0.0527, 0.8534])
  """
  c = np.asarray(censored, bool)
  n, k = int(c.size), int((~c).sum())
  return {"k": k, "n": n, "fraction": k / n, "ci95": clopper_pearson(k, n, 0.95)}


def seed_bounds(arm, base, arm_censored, base_censored, cap: float):
  """Per-seed `(lower, upper)` of `arm − base` (or `arm` alone when `base` is None) when a
  censored value is known only to be at least `cap`.

  A censored arm seed gives `[cap − base, ∞)`; a censored baseline seed `(−∞, arm − cap]`;
  both censored, `(−∞, ∞)`.

  Example:
    >>> from experiments.verdict.arithmetic.censoring import seed_bounds
    >>> lo, up = seed_bounds([0.7, 1.5], [1.0, 1.0], [False, True], [False, False], cap=1.0)
    >>> lo.round(6).tolist(), up.round(6).tolist()
    ([-0.3, 0.0], [-0.3, inf])
  """
  a = np.asarray(arm, np.float64)
  ac = np.asarray(arm_censored, bool)
  lo = np.where(ac, cap, a)
  up = np.where(ac, math.inf, a)
  if base is None:
    return lo, up
  b = np.asarray(base, np.float64)
  bc = np.asarray(base_censored, bool)
  return (np.where(bc, -math.inf, lo - np.where(bc, 0.0, b)),
          np.where(bc, np.where(ac, math.inf, a - cap), up - b))


def _meets(op: str, v: float, edge: float) -> bool:
  return {"<": v < edge, "<=": v <= edge, ">": v > edge, ">=": v >= edge, "==": v == edge}[op]


def truth(condition: str, bounds: dict) -> bool | None:
  """Whether `condition` holds of the whole interval when its bounds are known only within
  ranges (`median_interval`'s `bounds`): True, False, or None (undetermined by censoring).

  A `>`/`>=` condition reads the lower bound, a `<`/`<=` one the upper bound: it is true when
  every value of that bound's range meets it, false when none does; `==` needs both.

  Example:
    >>> from experiments.verdict.arithmetic.censoring import truth
    >>> inf = float("inf")
    >>> b = {"lo": (0.2, 0.2), "hi": (0.9, inf)}
    >>> truth("< 0.95", b), truth("< 0.5", b), truth("> 0.1", b), truth("> 0.3", b)
    (None, False, True, False)
  """
  op, edge = parse_condition(condition)
  sides = {">": ["lo"], ">=": ["lo"], "<": ["hi"], "<=": ["hi"], "==": ["lo", "hi"]}[op]
  every = all(_meets(op, v, edge) for side in sides for v in bounds[side])
  some = all(any(_meets(op, v, edge) for v in bounds[side]) for side in sides)
  return True if every else (None if some else False)


def threshold_bounds(th, arm, base):
  """Per-seed `(lower, upper)` of a `stat="median"` threshold's (paired) values, and which
  seeds are censored: a value meeting `th.censored` is known only to be at least `th.cap`
  (`seed_bounds`), never its sentinel."""
  a = np.asarray(arm, np.float64)
  op, edge = parse_condition(th.censored) if th.censored is not None else ("<", -math.inf)
  marked = lambda v: np.array([_meets(op, float(x), edge) for x in v], bool)
  ac = marked(a)
  bc = marked(np.asarray(base, np.float64)) if base is not None else np.zeros_like(ac)
  lower, upper = seed_bounds(a, base, ac, bc, th.cap if th.cap is not None else math.nan)
  return lower, upper, ac | bc


def median_evaluation(th, arm, base, level: float = 0.95) -> dict:
  """`stats.evaluate` for a `stat="median"` threshold: the censoring-aware median interval of
  the (paired) values and each condition's truth, for `arm` and `base` (per-seed values of
  the threshold's metric; `base` None without a baseline).

  A seed is censored when its value meets `th.censored` (e.g. `>= 1.5`, the sentinel); it
  then counts as `[th.cap, ∞)`, never as its sentinel. For `condition-lr` v3.

  Returns:
    `evaluate`'s dict (`mean` is the median when it is determined, else NaN; `interval`
    `(lo, hi)`, `what`, `supports`, `refutes`) with `undetermined` (the conditions whose
    truth the censoring leaves open), `bounds`, `coverage` and `reached`.
  """
  a = np.asarray(arm, np.float64)
  lower, upper, censored = threshold_bounds(th, arm, base)
  m = median_interval(lower, upper, level)
  verdicts = {label: truth(cond, m["bounds"]) if cond is not None else False
              for label, cond in (("supports", th.supports), ("refutes", th.refutes))}
  n_cens = int(censored.sum())
  cens = f" ({n_cens} of {a.size} seeds censored at {th.cap:g})" if th.cap is not None else ""
  what = (f"median, {level:.0%} order-statistic interval{cens}" if m["rank"] else
          f"median: no {level:.0%} order-statistic interval with {a.size} seeds (needs "
          f"{next(n for n in range(a.size, 10 * a.size + 10) if order_rank(n, level)[0])})")
  med = m["median"][0] if m["median"][0] == m["median"][1] else math.nan
  return {"mean": med, "interval": m["interval"], "what": what,
          "supports": verdicts["supports"] is True, "refutes": verdicts["refutes"] is True,
          "undetermined": [k for k, v in verdicts.items() if v is None],
          "bounds": m["bounds"], "coverage": m["coverage"], "reached": reached(censored)}


def censoring_reason(thresholds, evals) -> str | None:
  """Why a group is inconclusive because of censoring, or None: the unblocked thresholds
  whose `supports` or `refutes` the censored seeds leave undetermined (`truth` None).

  The registered rule (`rule.decide`) appends it to an inconclusive verdict's reason; an
  undetermined condition never supports or refutes. Reached only through a `stat="median"`
  threshold (`condition-lr` v3 first); no kept result has one.
  """
  open_ = [f"{th.name} ({', '.join(ev['undetermined'])})"
           for th, ev in zip(thresholds, evals, strict=True)
           if ev.get("undetermined") and not ev.get("blocked")]
  if not open_:
    return None
  return ("censored seeds leave the deciding bound of the interval undetermined (known only "
          "to lie beyond a cap): " + "; ".join(open_))
