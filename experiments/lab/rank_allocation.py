"""The `adaptive-rank` claim's allocation: ranks over sequences at an average budget.

`allocate` minimises the summed loss of the curves it is given at mean rank ≤ the budget
(Lagrangian relaxation, then a greedy fill, `_fill`), falling back to uniform when uniform is
lower on those curves; `picked_loss` reads a choice's loss; `needed_rank` is the smallest rank
within a tolerance of each sequence's full-rank loss. The claim
(`experiments.claims.adaptive_rank`) states the protocol.
"""

from __future__ import annotations

import numpy as np

TOL = 0.01  # needed rank: within 1% of the mean full-rank loss


def _fill(losses_NB, ranks, idx, cap: float) -> np.ndarray:
  """Greedy upgrades to the next grid rank, best loss drop per added rank first, within `cap`."""
  n, B = losses_NB.shape
  idx = idx.copy()
  cols = np.arange(B)
  spent = float(ranks[idx].sum())
  while True:
    up = idx < n - 1
    nxt = np.minimum(idx + 1, n - 1)
    cost = np.where(up, ranks[nxt] - ranks[idx], np.inf)
    gain = losses_NB[idx, cols] - losses_NB[nxt, cols]
    score = np.where(up & (spent + cost <= cap) & (gain > 0), gain / cost, -np.inf)
    b = int(np.argmax(score))
    if not np.isfinite(score[b]):
      return idx
    spent += cost[b]
    idx[b] += 1


def allocate(losses_NB, ranks, budget: float) -> np.ndarray:
  """Per sequence a rank of `ranks`, mean `≤ budget`, minimising the summed loss of the curves.

  .. math:: \\min_{r_b} \\sum_b \\ell_b(r_b) \\quad \\text{s.t.} \\quad
     \\tfrac1B \\sum_b r_b \\le \\rho

  Lagrangian relaxation: for a price `λ` per rank each sequence takes
  `argmin_r ℓ_b(r) + λ r` (the lower convex hull of its curve); the smallest `λ` within the
  budget is found by bisection, the leftover budget is spent greedily, and if uniform rank
  `budget` (when on the grid) has a lower summed loss on these curves, uniform is returned.

  Args:
    losses_NB: `(len(ranks), B)` loss of each sequence at each rank (increasing ranks).
    ranks: the grid.
    budget: average rank allowed per sequence, at least `ranks[0]`.

  Returns:
    `(B,)` chosen ranks.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.rank_allocation import allocate
    >>> losses = np.array([[3.0, 2.0], [1.0, 1.9], [0.9, 1.8]])  # ranks 1, 2, 4
    >>> allocate(losses, [1, 2, 4], 1.5).tolist()  # sequence 0 gains most from rank 2
    [2, 1]
  """
  L = np.asarray(losses_NB, np.float64)
  ranks = np.asarray(ranks)
  n, B = L.shape
  if budget < ranks[0]:
    raise ValueError(f"allocate: budget={budget} is below the smallest rank {ranks[0]}.")
  cap = float(budget) * B + 1e-9

  def pick(lam):
    return np.argmin(L + lam * ranks[:, None], axis=0)

  lo, hi = 0.0, float(np.ptp(L)) + 1.0  # ranks differ by ≥ 1: above hi all take ranks[0]
  if ranks[pick(lo)].sum() > cap:
    for _ in range(100):
      mid = 0.5 * (lo + hi)
      lo, hi = (lo, mid) if ranks[pick(mid)].sum() <= cap else (mid, hi)
    idx = pick(hi)
  else:
    idx = pick(lo)
  idx = _fill(L, ranks, idx, cap)
  if budget in ranks:
    u = int(np.searchsorted(ranks, budget))
    if L[u].sum() <= L[idx, np.arange(B)].sum():
      return np.full(B, ranks[u])
  return ranks[idx]


def picked_loss(losses_NB, ranks, chosen_B) -> float:
  """Mean over sequences of each one's loss at its chosen rank."""
  row = np.searchsorted(np.asarray(ranks), np.asarray(chosen_B))
  return float(np.asarray(losses_NB)[row, np.arange(len(chosen_B))].mean())


def needed_rank(losses_NB, ranks, tol: float = TOL) -> np.ndarray:
  """Per sequence the smallest rank whose loss is within `tol × mean full-rank loss` of its own
  full-rank loss (the last row): an absolute tolerance, the same for easy and hard sequences.

  Example:
    >>> import numpy as np
    >>> from experiments.lab.rank_allocation import needed_rank
    >>> needed_rank(np.array([[3.0, 2.0], [2.01, 2.0], [2.0, 1.0]]), [1, 2, 4]).tolist()
    [2, 4]
  """
  L = np.asarray(losses_NB, np.float64)
  ok = L <= L[-1] + tol * L[-1].mean()
  return np.asarray(ranks)[np.argmax(ok, axis=0)]
