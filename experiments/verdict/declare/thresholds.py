"""The conditions a verdict is computed from: `Threshold`, `Extension`, `Anchor`.

A threshold names one quantity (an arm's metric, or its paired effect against a baseline), the
interval it is read on, and the conditions that support or refute; an extension groups
thresholds under a question we add; an anchor is a published number the key number is read
beside. Nothing here computes: `experiments.verdict.arithmetic.stats` evaluates a threshold on
the runs, `experiments.verdict.arithmetic.rule` decides a group of them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from experiments.verdict.arithmetic.conditions import parse_condition


@dataclasses.dataclass(frozen=True)
class Threshold:
  """One number the verdict is computed from, with the conditions that decide it.

  Attributes:
    name: what is measured, in words (also the name of its effect in `results.json`).
    arm: the arm measured.
    metric: the metric of that arm.
    baseline: if set, the quantity is the paired effect `arm − baseline`, seed by seed.
    stat: `"ci"`: the 95% t-interval of the mean over seeds; `"range"`: min to max over seeds;
      `"median"`: the median with its distribution-free 95% interval, a seed meeting
      `censored` counting as known only to be at least `cap` (`verdict.censoring`; for a
      steps-to-target metric, first used by `condition-lr` v3). It needs six seeds or more.
    supports: condition (e.g. `">= 0.9"`) that the whole interval must meet to support.
    refutes: condition that, met by the whole interval, refutes the claim.
    control: a sanity check of the instrument: if its `supports` fails, every threshold that
      `needs` it is blocked (decides nothing), so its group cannot be supported or refuted
      through it.
    margin: the practical margin of a comparison, stated in the claim (e.g. 0.005 for half a
      percent of loss); set by `Threshold.beyond`, which writes the two conditions from it.
    needs: the names of the controls this threshold depends on; None: every control of its
      group (the primary question or its extension).
    unit: the unit of the quantity, as reports print it (e.g. `"nats"`, `"% of loss"`,
      `"fraction of heads"`).
    censored: a condition on one seed's value (e.g. `">= 0.5"`) that marks it a sentinel or
      a floor rather than a measurement (a run that never reached its target, a loss at its
      floor); an axis point where any seed meets it is left out of the trend fit, flagged
      `censored` (`stats.fit_trend`). Written into `to_dict` only when set.
    cap: with `stat="median"`, what a censored seed's value is known to exceed (the budget it
      ran, e.g. `1.0` of `N` for a steps fraction). Written into `to_dict` only when set.
  """

  name: str
  arm: str
  metric: str
  baseline: str | None = None
  stat: Literal["ci", "range", "median"] = "ci"
  supports: str | None = None
  refutes: str | None = None
  control: bool = False
  margin: float | None = None
  needs: tuple[str, ...] | None = None
  unit: str = ""
  censored: str | None = None
  cap: float | None = None

  @classmethod
  def beyond(cls, name: str, arm: str, metric: str, *, margin: float,
             direction: Literal[">", "<"] = ">", reference: float = 0.0,
             baseline: str | None = None, **kw) -> Threshold:
    """A comparison with a practical margin: the verdict rule of every claim, in one place.

    With `direction=">"` the claim is that the quantity exceeds `reference` by more than
    `margin`: supported when the whole 95% interval lies above `reference + margin`; refuted
    when it lies below it (inside the margin, or on the other side); otherwise (the interval
    straddles `reference + margin`) inconclusive. `"<"` mirrors it below `reference − margin`.

    Example:
      >>> from experiments.verdict.declare.thresholds import Threshold
      >>> th = Threshold.beyond("loss drop", "muon", "loss", baseline="adamw", direction="<",
      ...                       margin=0.01)
      >>> th.supports, th.refutes
      ('< -0.01', '> -0.01')
    """
    if not (margin >= 0):
      raise ValueError(f"Threshold {name!r}: margin={margin} must be >= 0. Fix: state the "
                       "smallest effect that matters in practice, e.g. margin=0.005.")
    if direction not in (">", "<"):
      raise ValueError(f"Threshold {name!r}: direction={direction!r} is unknown. Fix: '>' or "
                       "'<', the direction the claim predicts.")
    edge = reference + margin if direction == ">" else reference - margin
    other = "<" if direction == ">" else ">"
    return cls(name, arm, metric, baseline=baseline, supports=f"{direction} {edge:.12g}",
               refutes=f"{other} {edge:.12g}", margin=float(margin), **kw)

  def __post_init__(self):
    if self.stat not in ("ci", "range", "median"):
      raise ValueError(f"Threshold.stat={self.stat!r} is unknown. Fix: use 'ci', 'range' or "
                       "'median'.")
    if (self.cap is not None) != (self.stat == "median" and self.censored is not None):
      raise ValueError(f"Threshold {self.name!r}: cap={self.cap} goes with stat='median' and a "
                       f"`censored` condition (got stat={self.stat!r}, censored="
                       f"{self.censored!r}). Fix: give both, e.g. censored='>= 1.5', cap=1.0 "
                       "(the budget a censored seed ran), or neither.")
    if self.supports is None and self.refutes is None:
      raise ValueError(f"Threshold {self.name!r} has neither `supports` nor `refutes`. Fix: give "
                       "at least one condition, e.g. supports='>= 0.9'.")
    if self.control and self.supports is None:
      raise ValueError(f"Threshold {self.name!r} is a control without `supports`. Fix: a control "
                       "states what must hold, e.g. supports='== 1'.")
    for cond in (self.supports, self.refutes, self.censored):
      if cond is not None:
        parse_condition(cond)

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["needs"] = None if self.needs is None else list(self.needs)
    for optional in ("censored", "cap"):
      if d[optional] is None:
        del d[optional]
    return d

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Threshold:
    """The threshold `to_dict` wrote (a kept `claim.json`'s), e.g. to replay its verdict.

    Example:
      >>> from experiments.verdict.declare.thresholds import Threshold
      >>> th = Threshold.beyond("gain", "a", "m", margin=0.1, needs=("works",))
      >>> Threshold.from_dict(th.to_dict()) == th
      True
    """
    d = dict(d)
    if d.get("needs") is not None:
      d["needs"] = tuple(d["needs"])
    return cls(**d)


@dataclasses.dataclass(frozen=True)
class Extension:
  """A question we add to probe a mechanism: its own thresholds and verdict, never the headline.

  Attributes:
    name: short, e.g. `"the gain is the split, not κ"`.
    question: the question in one sentence.
    thresholds: decided by the same rule as the primary question's (`Threshold`).
  """

  name: str
  question: str
  thresholds: tuple[Threshold, ...]

  def __post_init__(self):
    if not self.thresholds:
      raise ValueError(f"Extension {self.name!r} has no thresholds. Fix: give at least one.")

  def to_dict(self) -> dict[str, Any]:
    return {"name": self.name, "question": self.question,
            "thresholds": [t.to_dict() for t in self.thresholds]}

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> Extension:
    """The extension `to_dict` wrote."""
    return cls(d["name"], d["question"], tuple(Threshold.from_dict(t) for t in d["thresholds"]))


@dataclasses.dataclass(frozen=True)
class Anchor:
  """A published number (or finding) a claim's key number is read beside."""

  what: str
  value: float | str
  source: str

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)
