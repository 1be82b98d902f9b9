"""Tuning and budgets for the claims that compare optimizers: one grid, one rule, one schedule.

- `RATE_GRID`: the half-decade peak-rate grid of `condition-lr` (the `muon` and
  `orthogonal-heads` claims freeze their own grids in their sizes);
- `tune` / `tuned_rate`: the best rate of a grid on one tuning seed (a run that `train_many`
  flags as diverged never wins);
- `tune_on_seeds`: the best rate on several tuning seeds, divergence judged at the end
  (`ended_diverged`), the grid extended past an edge that wins (`experiments.lab.edge`); `untuned`
  records a fixed rate;
- `tune_apart`: a two-rate arm's hidden rate (the other tied to it), then its other rate at the
  chosen hidden one (`tied`, `other_at`), the same two searches for every arm;
- `steps_to_loss`: when a loss curve (or a curve of final losses over budgets) first
  reaches a target.

The budget schedule (`budget_schedule`, `on_budget`) and the two-rate combinators (`tied`,
`other_at`) live in `experiments.train.arms`, below the sweep that calls them, and are
re-exported here (the same objects). A tuner owns its search loop (`edge.Search` only decides
which rates to run next), so a rate goes down the house once: this module -> `train.sweep` ->
`train.arms` -> `train.step`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import transformer
from experiments.data.batch import no_test
from experiments.lab import edge
from experiments.train.arms import MakeTx, MakeTx2, budget_schedule, on_budget, other_at, tied

__all__ = ["RATE_GRID", "budget_schedule", "ended_diverged", "on_budget", "other_at",
           "steps_to_loss", "tied", "tune", "tune_apart", "tune_on_seeds", "tuned_rate",
           "untuned"]

# The peak-rate grid every arm of the optimizer claims is tuned on (`small` shape, 120 steps).
RATE_GRID = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)


def steps_to_loss(steps, losses, target: float) -> float | None:
  r"""The first step at which a loss curve reaches `target`, linearly interpolated.

  With `i` the first index where `losses[i] ≤ target`:

  .. math::
    s^* = s_{i-1} + (s_i - s_{i-1}) \frac{\ell_{i-1} - \text{target}}{\ell_{i-1} - \ell_i}

  (`s^* = s_0` when the first point already reaches it). The same function gives the smallest
  *budget* that reaches a target when `steps` are training budgets and `losses` the final
  losses of separate runs with those budgets (the form the `muon` claim uses, since the
  learning-rate schedule depends on the budget).

  Args:
    steps: `(N,)` increasing steps (or budgets).
    losses: `(N,)` losses at those steps; NaN counts as not reached.
    target: the loss to reach.

  Returns:
    The interpolated step as a float, or `None` when the curve never reaches `target`.

  Example:
    >>> from experiments.lab.tuning import steps_to_loss
    >>> steps_to_loss([0, 100, 200], [5.0, 3.0, 2.0], 2.5)
    150.0
  """
  s = np.asarray(steps, np.float64)
  y = np.asarray(losses, np.float64)
  if s.ndim != 1 or s.shape != y.shape or s.size == 0:
    raise ValueError(f"steps_to_loss: steps and losses must be equal-length 1-D, got "
                     f"{s.shape=} {y.shape=}")
  if np.any(np.diff(s) <= 0):
    raise ValueError("steps_to_loss: steps must be strictly increasing")
  hit = np.flatnonzero(y <= target)
  if hit.size == 0:
    return None
  i = int(hit[0])
  if i == 0 or not np.isfinite(y[i - 1]):
    return float(s[i])
  return float(s[i - 1] + (s[i] - s[i - 1]) * (y[i - 1] - target) / (y[i - 1] - y[i]))


# --------------------------------------------------------------------- tuning on one seed


def tuned_rate(val_loss, diverged, grid) -> tuple[float, int]:
  """The rate of `grid` with the lowest final validation loss among runs that did not diverge.

  Args:
    val_loss: `(n_rates,)` final validation losses (NaN: failed).
    diverged: `(n_rates,)` bool.
    grid: the rates.

  Returns:
    `(rate, index)`; raises `ValueError` when every run diverged.

  Example:
    >>> from experiments.lab.tuning import tuned_rate
    >>> tuned_rate([3.0, 2.5, 2.0], [False, False, True], (1e-3, 3e-3, 1e-2))
    (0.003, 1)
  """
  loss = np.where(np.asarray(diverged, bool), np.inf, np.asarray(val_loss, np.float64))
  loss = np.where(np.isfinite(loss), loss, np.inf)
  if not np.isfinite(loss).any():
    raise ValueError(f"tuned_rate: every rate of {tuple(grid)} diverged. Fix: lower the grid.")
  i = int(np.argmin(loss))
  return float(grid[i]), i


def tune(cfg: transformer.Config, make_tx: MakeTx, grid, *, seed: int, steps: int,
         callback=None, eval_every: int | None = None, **train_kwargs) -> dict[str, Any]:
  """Tunes an arm's peak rate on `grid` with one (spare) seed and the full budget schedule.

  Runs `train_many(cfg, on_budget(make_tx, steps), seeds=(seed,), learning_rates=grid, ...)`
  and picks `tuned_rate` of the final validation losses. It runs inside
  `experiments.data.no_test`, as every tuner does (`edge.Search`): no `test` batch is drawn.

  Args:
    cfg: the model.
    make_tx: the arm.
    grid: peak rates.
    seed: the tuning seed (never a reported one).
    steps: the budget.
    callback: passed to `train_many`.
    eval_every: passed to `train_many` (default: only the end).
    **train_kwargs: `data`, `batch_size`, `seq_len`, `eval_batches` of `train_many`.

  Returns:
    `{"learning_rate", "index", "val_loss": per rate, "diverged": per rate}`.

  Example:
    >>> import transformer
    >>> from experiments.lab.optimizers import adamw_arm
    >>> from experiments.lab.tuning import tune
    >>> t = tune(transformer.preset("tiny", d_model=32), adamw_arm(), (1e-3, 1e-2), seed=100,
    ...          steps=4, data="task:modadd", batch_size=2, seq_len=8, eval_batches=1)
    >>> t["learning_rate"] in (1e-3, 1e-2)
    True
  """
  from experiments.train.sweep import train_many

  with no_test("the tuner experiments.lab.tuning.tune"):
    r = train_many(cfg, on_budget(make_tx, steps), seeds=(seed,), learning_rates=tuple(grid),
                   steps=steps, eval_every=eval_every or steps, callback=callback,
                   **train_kwargs)
  val, div = r.val_loss[:, 0, -1], r.diverged[:, 0]
  lr, i = tuned_rate(val, div, grid)
  return {"learning_rate": lr, "index": i, "val_loss": [float(v) for v in val],
          "diverged": [bool(d) for d in div]}


# ------------------------------------------- divergence at the end; tuning on several seeds


def ended_diverged(final_loss, vocab_size: int) -> np.ndarray:
  r"""Whether each run *ended* diverged: its final loss is non-finite or above `ln V`.

  `ln V` is the loss of uniform guessing, the loss a freshly initialised model starts at, so a
  run that ends above it has lost everything it learned. A transient spike that training
  recovers from is not a divergence (`experiments.train.sweep.train_many`'s `diverged` flag
  counts it; report it apart as a spike).

  Args:
    final_loss: final (validation) losses, any shape.
    vocab_size: `V`.

  Returns:
    Bool array of the same shape.

  Example:
    >>> import math
    >>> from experiments.lab.tuning import ended_diverged
    >>> ended_diverged([2.0, float("nan"), math.log(64) + 0.1], 64).tolist()
    [False, True, True]
  """
  x = np.asarray(final_loss, np.float64)
  return ~np.isfinite(x) | (x > np.log(vocab_size))


def tune_on_seeds(cfg: transformer.Config, make_tx: MakeTx, grid, *, seeds, steps: int,
                  extend: int = 0, **train_kwargs) -> dict[str, Any]:
  r"""Tunes an arm's peak rate on `grid` with spare seeds; extends the grid past a best edge.

  Each rate runs `on_budget(make_tx, steps)` on every tuning seed (one `train_many` call).
  The chosen rate has the lowest final validation loss averaged over the seeds, among the
  rates that did not end diverged on any seed (`ended_diverged`: non-finite or above `ln V` at
  the end; a recovered spike does not disqualify a rate). When the chosen rate sits at an
  edge of a geometric grid, the grid is extended by one step of its ratio `q` beyond that
  edge and the new rate is run, up to `extend` times — a rule fixed before any run, so every
  arm is tuned equally hard and none is left at a boundary of its grid:

  .. math:: \eta^* = \arg\min_{\eta \in G,\ \text{not diverged}} \frac{1}{|S|}
     \sum_{s \in S} \ell_N(\eta, s)

  Args:
    cfg: the model.
    make_tx: the arm.
    grid: increasing peak rates (geometric when `extend > 0`).
    seeds: the tuning seeds (never reported ones).
    steps: the budget of every run.
    extend: how many rates may be added beyond the edges (in total).
    **train_kwargs: `data`, `batch_size`, `seq_len`, `eval_batches` of `train_many`.

  Returns:
    The record `edge.Tuned.to_dict()`: `grid` (the rates run, increasing, extensions
    included), `losses` (per rate, mean over seeds), `losses_by_seed`, `excluded` (per rate:
    ended diverged on some seed), `spiked` (per rate: a recovered spike on some seed),
    `seeds`, `at_edge`, ...; raises `ValueError` when every rate diverged.

  Example:
    >>> import transformer
    >>> from experiments.lab.optimizers import adamw_arm
    >>> from experiments.lab.tuning import tune_on_seeds
    >>> t = tune_on_seeds(transformer.preset("tiny", d_model=32), adamw_arm(), (3e-3, 3e-2),
    ...                   seeds=(100, 101), steps=8, data="stdlib", batch_size=2,
    ...                   seq_len=8, eval_batches=1)
    >>> t["learning_rate"] in t["grid"], len(t["losses_by_seed"][0])
    (True, 2)
  """
  from experiments.train.sweep import train_many

  seeds = tuple(int(s) for s in seeds)
  by_rate: dict[float, tuple[np.ndarray, bool]] = {}  # rate -> (final losses, a spike)
  search = edge.Search(grid, extend=extend, name="tune_on_seeds")
  for rates in search:  # the grid, then one rate past a winning edge at a time
    r = train_many(cfg, on_budget(make_tx, steps), seeds=seeds, learning_rates=tuple(rates),
                   steps=steps, eval_every=steps, **train_kwargs)
    final = r.val_loss[:, :, -1]
    ended = ended_diverged(final, cfg.vocab_size)
    for k, lr in enumerate(rates):
      by_rate[lr] = (final[k], bool((r.diverged[k] & ~ended[k]).any()))
    search.record(final.mean(1), ended.any(1))
  t = search.tuned()
  return dataclasses.replace(
      t, losses=tuple(float(v) for v in t.losses),
      losses_by_seed=tuple(tuple(float(v) for v in by_rate[lr][0]) for lr in t.grid),
      spiked=tuple(by_rate[lr][1] for lr in t.grid), seeds=seeds).to_dict()


def untuned(learning_rate: float) -> dict[str, Any]:
  """The record `tune_on_seeds` returns, for an arm run at a fixed rate without tuning.

  Example:
    >>> from experiments.lab.tuning import untuned
    >>> untuned(3e-3)["learning_rate"], untuned(3e-3)["at_edge"]
    (0.003, False)
  """
  return edge.untuned(learning_rate).to_dict()


# ------------------------------------------------- two rates: hidden matrices and the rest


def tune_apart(cfg: transformer.Config, make_tx2: MakeTx2, grid, *, seeds, steps: int,
               extend: int = 0, hidden: dict | None = None, **train_kwargs) -> dict[str, Any]:
  r"""Tunes a two-rate arm coordinate-wise: the hidden rate, then the other rate.

  First `tune_on_seeds` of `tied(make_tx2)` (one rate everywhere) picks the hidden rate
  `η_h`; then `tune_on_seeds` of `other_at(make_tx2, η_h, steps)` picks the other rate on the
  same grid, with the same seeds, budget and edge rule. Every two-rate arm of a comparison is
  tuned by these two searches, so none gets more effort than another:

  .. math:: \eta_h = \arg\min_\eta \bar\ell_N(\eta, \eta), \qquad
     \eta_o = \arg\min_\eta \bar\ell_N(\eta_h, \eta)

  Args:
    cfg, grid, seeds, steps, extend, **train_kwargs: as in `tune_on_seeds`.
    make_tx2: `make_tx(hidden_rate, other_rate)` (`optimizers.split_adamw_arm`, ...).
    hidden: the first search's record when it was already run (a tied arm tuned on the same
      grid and seeds: `tune_on_seeds(cfg, tied(make_tx2), ...)`), so it is not run twice.

  Returns:
    `{"hidden": record, "other": record}`, each `tune_on_seeds`'s.

  Example:
    >>> import transformer
    >>> from experiments.lab.optimizers import split_adamw_arm
    >>> from experiments.lab.tuning import tune_apart
    >>> t = tune_apart(transformer.preset("tiny", d_model=32), split_adamw_arm(), (3e-3, 3e-2),
    ...                seeds=(100,), steps=4, data="stdlib", batch_size=2, seq_len=8,
    ...                eval_batches=1)
    >>> sorted(t), t["other"]["learning_rate"] in t["other"]["grid"]
    (['hidden', 'other'], True)
  """
  kw = dict(seeds=seeds, steps=steps, extend=extend, **train_kwargs)
  if hidden is None:
    hidden = tune_on_seeds(cfg, tied(make_tx2), grid, **kw)
  other = tune_on_seeds(cfg, other_at(make_tx2, hidden["learning_rate"], steps), grid, **kw)
  return {"hidden": hidden, "other": other}
