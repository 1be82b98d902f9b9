"""The one tuner of every rate (issue 38's edge rule): a grid that cannot keep its best rate
on its boundary, and the `Tuned` record it returns.

`Search` hands out a geometric grid of rates; its caller trains or fits at them and records
one loss per rate and which rates are out of the choice (e.g. ended diverged). The chosen rate
has the lowest loss among the rates still in the choice. When it is the grid's first or last,
`Search` hands out one more rate, one step of the grid's ratio beyond that edge, up to `extend`
times. The rule is fixed before any run, so every arm is searched equally hard; a best rate
still at an edge after the extensions is flagged (`Tuned.at_edge`) and the claim's edge
control then keeps the comparison from being read. Every tuner of the claims
(`tuning.tune_on_seeds`, `attention_arms.tune_rate`, `norm_training.tune_fixed`,
`lora.tune_rates`, `kv_arms.tune_fit_rate`) is its own loop over a `Search`: the search decides
and never calls back into the tuner, so a rate goes one way, from the tuner down to the step.
Each list of rates is handed out inside `experiments.data.no_test`: a batch of the `test` split
drawn while tuning is refused, so verdicts read on `test` were never tuned on it. `tune` drives
a `Search` with a pure function of the rates (the hand-worked cases of the tests).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from experiments.data.batch import no_test

Run = Callable[[list[float]], tuple[Sequence[float], Sequence[bool]]]


@dataclasses.dataclass(frozen=True)
class Tuned:
  """A tuned rate and the search that chose it: the one record every tuner returns.

  Attributes:
    learning_rate: the chosen rate.
    index: its position in `grid`.
    grid: every rate run, increasing (extensions included).
    losses: per rate, the loss the choice read (NaN or inf: failed); `()` when not tuned.
    excluded: per rate, whether it was out of the choice (e.g. ended diverged).
    at_edge: the chosen rate is the first or last of a grid of two or more.
    losses_by_seed: per rate, each tuning seed's loss (`()` when the tuner reads one number).
    seeds: the tuning seeds.
    spiked: per rate, a recovered spike on some seed (`()` when not recorded).
    flat: the rates in the choice ended within the caller's tolerance (`flat`).
    extensions: how many rates the edge rule added beyond the first grid.

  `to_dict` is the one shape a claim's `setup` keeps and `experiments.verdict.render.tuning`
  renders (the tuned-rate note, the grid panel).
  """

  learning_rate: float
  index: int
  grid: tuple[float, ...]
  losses: tuple[float, ...]
  excluded: tuple[bool, ...]
  at_edge: bool
  losses_by_seed: tuple[tuple[float, ...], ...] = ()
  seeds: tuple[int, ...] = ()
  spiked: tuple[bool, ...] = ()
  flat: bool = False
  extensions: int = 0

  def to_dict(self) -> dict:
    """JSON-ready fields (tuples become lists).

    Example:
      >>> from experiments.lab.edge import untuned
      >>> untuned(3e-3).to_dict()["grid"]
      [0.003]
    """
    return {k: _lists(v) for k, v in dataclasses.asdict(self).items()}


def _lists(v):
  return [_lists(x) for x in v] if isinstance(v, (tuple, list)) else v


def untuned(learning_rate: float) -> Tuned:
  """The record of an arm run at a fixed rate, without tuning."""
  lr = float(learning_rate)
  return Tuned(learning_rate=lr, index=0, grid=(lr,), losses=(), excluded=(), at_edge=False)


def choice(losses, excluded) -> int | None:
  """Index of the lowest finite loss among rates not `excluded`; None when no rate qualifies.

  Example:
    >>> from experiments.lab.edge import choice
    >>> choice([3.0, 2.0, 1.0], [False, False, True]), choice([float("nan")], [False])
    (1, None)
  """
  loss = np.where(np.asarray(excluded, bool), np.inf, np.asarray(losses, np.float64))
  loss = np.where(np.isfinite(loss), loss, np.inf)
  return int(np.argmin(loss)) if np.isfinite(loss).any() else None


def flat(losses, excluded, tol: float) -> bool:
  """Whether the rates still in the choice ended within `tol` of each other (max − min < tol).

  A flat arm learned the same at every rate, so where its best rate sits on the grid is noise:
  a claim that registers `tol` does not count it at an edge. `tol <= 0` never calls an arm flat.

  Example:
    >>> from experiments.lab.edge import flat
    >>> flat([1.391, 1.390, 1.392], [False] * 3, 0.01), flat([1.30, 1.39], [False] * 2, 0.01)
    (True, False)
  """
  loss = np.asarray(losses, np.float64)[~np.asarray(excluded, bool)]
  loss = loss[np.isfinite(loss)]
  return bool(tol > 0 and loss.size > 1 and np.ptp(loss) < tol)


class Search:
  """The edge rule as a search its caller drives: which rates to run next, and the choice.

  Iterating gives the whole grid, then one rate per extension (one step of the grid's ratio
  past the edge where the best rate sits, up to `extend` times; none once the best rate is
  inside the grid). After each list of rates the caller trains or fits at them and calls
  `record` with one loss and one exclusion flag per rate; `tuned()` is the record of the
  choice. Each list is handed out inside `experiments.data.no_test`, so a run at those rates
  that draws a `test` batch raises. The caller owns the loop: the search never calls back
  into it, so a rate travels one way, from the tuner down to the training step.

  Args:
    grid: increasing rates, geometric when `extend > 0` (the step is `grid[1] / grid[0]`).
    extend: how many rates may be added beyond the edges, in total.
    name: the caller, for error messages.

  Raises:
    ValueError: the grid is empty or not increasing, `extend` has no ratio to step by,
      `record` got the wrong number of values, a list of rates was not recorded, or every
      rate failed (naming the grid and the fix).

  Example:
    >>> from experiments.lab.edge import Search
    >>> search = Search((1e-3, 3e-3, 1e-2), extend=2)
    >>> for rates in search:  # best near 0.05: two steps up
    ...   search.record([(r - 0.05) ** 2 for r in rates], [False] * len(rates))
    >>> t = search.tuned()
    >>> [round(x, 4) for x in t.grid], round(t.learning_rate, 4), t.at_edge
    ([0.001, 0.003, 0.01, 0.03, 0.09], 0.03, False)
  """

  def __init__(self, grid: Sequence[float], *, extend: int = 1, name: str = "tune"):
    rates = [float(x) for x in grid]
    if not rates or np.any(np.diff(rates) <= 0):
      raise ValueError(f"{name}: grid={tuple(grid)} must be non-empty and increasing. Fix: "
                       "list the rates from the smallest up.")
    if extend and len(rates) < 2:
      raise ValueError(f"{name}: extend={extend} needs a grid of two rates or more (its ratio "
                       "is the edge rule's step). Fix: give two rates, or extend=0.")
    self.name, self.extend, self.first = name, extend, rates
    self.seen: dict[float, tuple[float, bool]] = {}
    self.pending: list[float] | None = None

  def __iter__(self):
    new = self.first
    q = new[1] / new[0] if len(new) > 1 else 1.0
    for k in range(self.extend + 1):
      self.pending = list(new)
      with no_test(f"the tuner {self.name} (experiments.lab.edge)"):
        yield list(new)
      if self.pending is not None:
        raise ValueError(f"{self.name}: the rates {tuple(new)} were handed out but not "
                         "recorded. Fix: call record(losses, excluded) once per list.")
      if k == self.extend:
        break
      order, i = self._best()
      if 0 < i < len(order) - 1:
        break
      new = [order[-1] * q] if i == len(order) - 1 else [order[0] / q]

  def record(self, losses: Sequence[float], excluded: Sequence[bool]) -> None:
    """One loss and one exclusion flag (e.g. ended diverged) per rate last handed out."""
    new = self.pending
    if new is None:
      raise ValueError(f"{self.name}: record() without rates handed out. Fix: iterate the "
                       "search, and record once per list of rates.")
    losses, excluded = list(losses), list(excluded)
    if not len(losses) == len(excluded) == len(new):
      raise ValueError(f"{self.name}: run answered {len(losses)} losses and {len(excluded)} "
                       f"flags for {len(new)} rates. Fix: one of each per rate, in order.")
    self.seen.update({lr: (float(v), bool(x))
                      for lr, v, x in zip(new, losses, excluded, strict=True)})
    self.pending = None

  def _best(self) -> tuple[list[float], int]:
    order = sorted(self.seen)
    i = choice([self.seen[lr][0] for lr in order], [self.seen[lr][1] for lr in order])
    if i is None:
      raise ValueError(f"{self.name}: every rate of {tuple(order)} diverged or failed. Fix: "
                       "lower the grid.")
    return order, i

  def tuned(self) -> Tuned:
    """The record of the choice among every rate run so far."""
    order, i = self._best()
    return Tuned(learning_rate=order[i], index=i, grid=tuple(order),
                 losses=tuple(self.seen[lr][0] for lr in order),
                 excluded=tuple(self.seen[lr][1] for lr in order),
                 at_edge=len(order) > 1 and i in (0, len(order) - 1),
                 extensions=len(order) - len(self.first))


def tune(run: Run, grid: Sequence[float], *, extend: int = 1, name: str = "tune") -> Tuned:
  """`Search` driven by a pure function `run` of the rates: the edge rule on hand-worked cases.

  A tuner that trains owns its loop over `Search` instead (`tuning.tune_on_seeds`), so no
  rate climbs back into the module that called it.

  Args:
    run: maps a list of rates to `(losses, excluded)`, one of each per rate. It is called
      once with the whole grid, then once per extension with one rate.
    grid, extend, name: as in `Search`.

  Raises:
    ValueError: as `Search`.

  Example:
    >>> from experiments.lab.edge import tune
    >>> run = lambda rates: ([(r - 0.05) ** 2 for r in rates], [False] * len(rates))
    >>> t = tune(run, (1e-3, 3e-3, 1e-2), extend=2)  # best near 0.05: two steps up
    >>> [round(x, 4) for x in t.grid], round(t.learning_rate, 4), t.at_edge
    ([0.001, 0.003, 0.01, 0.03, 0.09], 0.03, False)
  """
  search = Search(grid, extend=extend, name=name)
  for rates in search:
    search.record(*run(rates))
  return search.tuned()


def on_one_seed(t: Tuned, seed: int, flagged: dict) -> dict:
  """The record of a search on one tuning seed: `t` with its seed, its losses as floats, and
  `spiked` (a rate `flagged` by a spike that did not end diverged), as `to_dict()`.

  Example:
    >>> from experiments.lab.edge import on_one_seed, tune
    >>> t = tune(lambda r: ([1.0 / x for x in r], [False] * len(r)), (1.0, 2.0), extend=0)
    >>> on_one_seed(t, 100, {1.0: True, 2.0: True})["spiked"]
    [True, True]
  """
  return dataclasses.replace(
      t, losses=tuple(float(v) for v in t.losses), seeds=(int(seed),),
      spiked=tuple(flagged[g] and not b for g, b in zip(t.grid, t.excluded, strict=True))
  ).to_dict()
