"""The three axes the claims share: model size, context length, training budget.

Each is an `experiments.verdict.declare.axis.Axis` whose rows and texts say more than a bare one:

| axis | factory | a point | its sizes | fitted on | folder |
| --- | --- | --- | --- | --- | --- |
| `scale` | `scale(models)` | a base model | `model` replaced | `params` | `size-<model>` |
| `context` | `context(Ts, at)` | a length `T` | `at(sizes, T)` | `T` | `context-T<T>` |
| `budget` | `budget(ks, at, model)` | k × the tokens | `at(sizes, k)` | tokens | `budget-x<k>` |

`ScaleAxis` lives in `axis_scale`, `BudgetAxis` in `axis_budget`, `ContextAxis` here. A claim
declares them as `Claim(axes=(scale(...), context(...), budget(...)))`, its only spelling
(the command line's older `--sizes`, `--lengths` and `--budgets` are read into the same
objects). `KINDS` names each, so a result's block is
rendered by its axis even when the claim no longer declares it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from experiments.verdict.arithmetic.stats import fmt, interval_text
from experiments.verdict.declare.axis import Axis, fit_text, trend_clause
from experiments.verdict.declare.budget import BudgetAxis, trained_params
from experiments.verdict.declare.scale import (
  ScaleAxis,
  base_row,
  flag_under_trained,
  model_card,
  run_bits,
)

__all__ = ["KINDS", "BudgetAxis", "ContextAxis", "ScaleAxis", "base_row", "budget", "context",
           "flag_under_trained", "model_card", "run_bits", "scale", "scale_models",
           "trained_params"]


@dataclasses.dataclass(frozen=True)
class ContextAxis(Axis):
  """The primary effect at other context lengths `T` (`values`), at `at(sizes, T)` (typically
  a base model trained at `T` or longer, `seq_len = T`, and fewer windows so the tokens
  measured stay about constant). A length whose sizes are the registered ones reuses its run."""

  key, x, label, word, field, min_points = "T", "T", None, "T", "context_lengths", 1

  def check(self, claim, values, field: str) -> None:
    values = tuple(values) if not isinstance(values, (str, int)) else ()
    if not (values and len(set(values)) == len(values)
            and all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in values)):
      raise ValueError(f"Claim {claim.id!r}: {field} must be distinct positive integers "
                       "(tokens), e.g. (256, 512, 1024).")
    self.check_at(claim, field, "at_length(sizes, T)", "T")

  def chosen(self, claim, quick: bool, override=None) -> tuple:
    values = tuple(override) if override is not None else (() if quick else self.values)
    if values:
      self.check(claim, values, "--lengths" if override is not None else self.field)
    return values

  def folder(self, value) -> str:
    return f"context-T{value}"

  def describe(self, value, sizes) -> str:
    return f"T = {value}" + (f" on `{sizes.model}`" if hasattr(sizes, "model") else "")

  def note(self, registered) -> str:
    return ("- The runs at other lengths ran in `context-T<T>/` (their findings and figures); "
            "they feed only the trend with context, never the verdict.")

  def to_dict(self) -> dict:
    return {"context_lengths": list(self.values)}

  def validate(self, block: dict, need, where: str) -> None:
    for i, row in enumerate(block["rows"]):
      need(isinstance(row.get("T"), int) and not isinstance(row["T"], bool) and row["T"] > 0,
           f"{where}.rows[{i}].T", "must be a positive integer (tokens)")

  def title(self) -> str:
    return "Context: the primary effect against the length T"

  def intro(self, claim, results: dict, block: dict, effect: str) -> str:
    return (f"The primary effect {effect} at each context length, on the same seeds (each "
            "length's model and counts are the claim's `at_length`; see the notes). The verdict "
            "above is never read from these runs; the threshold column applies the primary "
            "threshold's test to each length's interval, and, where the run recorded it, the "
            "last column the registered rule, every threshold and control, to that length's "
            "runs (a failed control blocks what needs it).")

  def headers(self, block: dict) -> list[str]:
    return ["T (tokens)"]

  def sentence(self, block: dict) -> str:
    """The sentence on the trend with context, computed from the slope on `log T`.

    Example:
      >>> from experiments.verdict.declare.axes import context
      >>> rows = [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]},
      ...         {"T": 1024, "effect": 0.3, "ci": [0.2, 0.4]}]
      >>> context(()).sentence({"rows": rows, "slope": 0.14, "slope_ci": [0.05, 0.23],
      ...                       "trend": "grows"})
      'From T = 256 to T = 1024 the effect grows: slope 0.14 [0.05, 0.23] per e-fold of T.'
    """
    rows = block["rows"]
    return (f"From T = {rows[0]['T']} to T = {rows[-1]['T']} "
            f"{trend_clause(block, 'T', 'lengths', 'under 3 points')}.")

  def trend_title(self) -> str:
    return "context"

  def cell(self, block: dict) -> str:
    return "; ".join([f"T = {r['T']}: {fmt(r['effect'])}"
                      + (f" {interval_text(*r['ci'])}" if interval_text(*r["ci"]) else "")
                      for r in block["rows"]] + [fit_text(block, "T", "lengths")])

  def series(self, block: dict, registered) -> list:
    models = sorted({getattr(self.at(registered, r["T"]), "model", "") for r in block["rows"]}
                    - {""}) if self.at and registered is not None else []
    on = f" ({', '.join(models)})" if models else ""
    return [(f"primary effect{on}", block["rows"], "o")]

  def xlabel(self, block: dict) -> str:
    return "context length T (tokens, log scale)"


def scale(models: Sequence[str]) -> ScaleAxis:
  """The scale axis over base models `models` (the registered one is added when missing)."""
  return ScaleAxis("scale", tuple(models))


def context(lengths: Sequence[int], at: Callable | None = None) -> ContextAxis:
  """The context axis over lengths `T`, the claim's sizes at each given by `at(sizes, T)`."""
  return ContextAxis("context", tuple(lengths), at)


def budget(multiples: Sequence[int], at: Callable | None = None,
           model: str | None = None) -> BudgetAxis:
  """The budget axis over multiples `k` of the registered tokens, at `at(sizes, k)` (usually
  `sizes.more_steps`), on base model `model` (default: the registered one)."""
  return BudgetAxis("budget", tuple(multiples), at, model)


KINDS = {"scale": scale, "context": context, "budget": budget}


def scale_models(claim, quick: bool, sizes: Sequence[str] | None = None) -> tuple[str, ...]:
  """The base models a run measures, the registered one first; `()` for a one-size run.

  `sizes` (the command line's `--sizes`) overrides the claim's, and `()` asks for the
  registered size alone; a quick run uses one size unless `sizes` is given.
  """
  axis = claim.axis("scale")
  return tuple(v for v, _ in axis.points(claim, claim.sizes(quick), quick,
                                         axis.chosen(claim, quick, sizes)))
