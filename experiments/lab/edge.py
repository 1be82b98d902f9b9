"""The registered edge rule of every tuned rate (issue 38): a grid that cannot keep its best
rate on its boundary.

`edge_search` runs a geometric grid of rates through any scoring function (lower is better;
`inf` for a run that failed or diverged), and when the best rate is the grid's first or last
it runs one more rate, one step of the grid's ratio beyond that edge, up to `extend` times.
The rule is fixed before any run, so every arm is searched equally hard; a best rate that is
still at an edge after the extensions is reported (`at_edge`) and the claim's edge control
then keeps the comparison from being read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def edge_search(score: Callable[[list[float]], Sequence[float]], grid: Sequence[float], *,
                extend: int = 1) -> dict:
  """Scores `grid`, then extends it past a best edge by one step of its ratio, `extend` times.

  Args:
    score: maps a list of rates to their scores (lower is better; NaN or inf: failed). It is
      called once with the whole grid, then once per extension with one rate.
    grid: increasing rates, geometric when `extend > 0` (the step is `grid[1] / grid[0]`).
    extend: how many rates may be added beyond the edges, in total.

  Returns:
    `{"learning_rate", "index", "grid"` (every rate scored, increasing), `"scores"` (per
    rate), `"at_edge"` (the best rate is still the first or last of a grid of two or more)`}`.

  Raises:
    ValueError: the grid is empty or not increasing, `extend` has no ratio to step by, or every
      rate failed (naming the grid and the fix).

  Example:
    >>> from experiments.lab.edge import edge_search
    >>> loss = lambda rates: [(r - 0.05) ** 2 for r in rates]  # best near 0.05
    >>> r = edge_search(loss, (1e-3, 3e-3, 1e-2), extend=2)
    >>> [round(x, 4) for x in r["grid"]], round(r["learning_rate"], 4), r["at_edge"]
    ([0.001, 0.003, 0.01, 0.03, 0.09], 0.03, False)
  """
  rates = [float(x) for x in grid]
  if not rates or np.any(np.diff(rates) <= 0):
    raise ValueError(f"edge_search: grid={tuple(grid)} must be non-empty and increasing. Fix: "
                     "list the rates from the smallest up.")
  if extend and len(rates) < 2:
    raise ValueError(f"edge_search: extend={extend} needs a grid of two rates or more (its "
                     "ratio is the step). Fix: give two rates, or extend=0.")
  scored: dict[float, float] = {}

  def run(new_rates):
    got = [float(s) for s in score(list(new_rates))]
    if len(got) != len(new_rates):
      raise ValueError(f"edge_search: score returned {len(got)} scores for {len(new_rates)} "
                       "rates. Fix: one score per rate, in order.")
    scored.update({lr: (s if np.isfinite(s) else np.inf) for lr, s in zip(new_rates, got)})

  def best():
    order = sorted(scored)
    values = [scored[lr] for lr in order]
    if not np.isfinite(values).any():
      raise ValueError(f"edge_search: every rate of {tuple(order)} failed. Fix: lower the grid.")
    return order, int(np.argmin(values))

  run(rates)
  q = rates[1] / rates[0] if len(rates) > 1 else 1.0
  for _ in range(extend):
    order, i = best()
    if 0 < i < len(order) - 1:
      break
    run([order[-1] * q] if i == len(order) - 1 else [order[0] / q])
  order, i = best()
  return {"learning_rate": order[i], "index": i, "grid": order,
          "scores": [scored[lr] for lr in order],
          "at_edge": len(order) > 1 and i in (0, len(order) - 1)}
