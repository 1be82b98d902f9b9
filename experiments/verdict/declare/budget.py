"""The budget axis: the primary effect on a multiple of the registered run's training tokens.

`BudgetAxis` (made by `declare.axes.budget`) runs the whole protocol again, every
rate tuned again, at `at(sizes, k)` for each whole `k ≥ 2` (checked: `k` times the tokens),
on its `model` when it names one; its 1× is a run already made at those sizes when there is
one (the registered run, or the scale axis's run of that model).
"""

from __future__ import annotations

import dataclasses

from experiments.verdict.arithmetic.stats import fmt, interval_text
from experiments.verdict.declare.axis import Axis, fit_text, trend_clause
from experiments.verdict.declare.scale import model_card


def trained_params(sizes) -> int | None:
  """The parameters of the shape a run trains (its `model`'s card), None when it names none."""
  model = getattr(sizes, "model", None)
  return model_card(model)["params"] if model and sizes.train_tokens() is not None else None


@dataclasses.dataclass(frozen=True)
class BudgetAxis(Axis):
  """The primary effect on `k` times the registered run's training tokens (`values`: whole
  `k ≥ 2`), the whole protocol again at `at(sizes, k)` (checked: `k` times the tokens), on
  `model` when given (a smaller model sees more tokens per parameter for the same compute;
  quick runs keep their own). Its 1× is a run already made at those sizes when there is one."""

  model: str | None = None

  key, x, label, word, field = "multiple", "train_tokens", "multiple", "budget", "budgets"

  def check(self, claim, values, field: str) -> None:
    values = tuple(values) if not isinstance(values, (str, int)) else ()
    if not (values and len(set(values)) == len(values)
            and all(isinstance(k, int) and not isinstance(k, bool) and k >= 2 for k in values)):
      raise ValueError(f"Claim {claim.id!r}: {field}={values!r} must be distinct whole "
                       "multiples of the registered run's tokens, each at least 2, e.g. (4,).")
    self.check_at(claim, field, "at_budget(sizes, k)", "the budget (e.g. steps times k)",
                  "the budget")
    if claim.FULL is not None and claim.FULL.train_tokens() is None:
      raise ValueError(f"Claim {claim.id!r}: {field} multiplies the training tokens, but its FULL "
                       f"sizes ({type(claim.FULL).__name__}) train nothing (train_tokens() is "
                       "None). Fix: give its Sizes a train_tokens (e.g. subclass TrainedSizes), "
                       "or drop " + field + ".")

  def check_model(self, claim) -> None:
    """Raises `ValueError` unless `model` names a base model the budget axis can train."""
    from experiments import models  # deferred: a claim's declaration trains nothing

    known = sorted({*models.RECIPES, *models.SHAPES})
    if not isinstance(self.model, str) or self.model not in known:
      raise ValueError(f"Claim {claim.id!r}: budget_model={self.model!r} is not a base "
                       f"model. Fix: name one of {known}.")
    if not self.values:
      raise ValueError(f"Claim {claim.id!r}: budget_model={self.model!r} names the "
                       "model of a budget axis, but the claim declares no budgets. Fix: "
                       "declare axes.budget((4,), at, model) (or drop the model).")
    if claim.FULL is not None and not hasattr(claim.FULL, "model"):
      raise ValueError(f"Claim {claim.id!r}: budget_model needs FULL sizes with a `model` field "
                       f"({type(claim.FULL).__name__} has none). Fix: add one, or drop "
                       "the budget axis's model.")

  def chosen(self, claim, quick: bool, override=None) -> tuple:
    values = tuple(override) if override is not None else (() if quick else self.values)
    if values:
      self.check(claim, values, "--budgets" if override is not None else self.field)
    return values

  def base(self, registered, quick: bool):
    """The sizes the axis multiplies: the registered ones, on `model` when the axis names one
    (a quick run keeps its own model)."""
    if quick or self.model in (None, getattr(registered, "model", None)):
      return registered
    return dataclasses.replace(registered, model=self.model)

  def sizes_at(self, claim, base, k: int):
    """`at(base, k)`, checked: it must train on `k` times the tokens."""
    at = self.at(base, k)
    want, got = k * base.train_tokens(), at.train_tokens()
    if got != want:
      raise ValueError(f"Claim {claim.id!r}: at_budget(sizes, {k}) trains on {got} tokens, not "
                       f"{k} × {base.train_tokens()} = {want}. Fix: scale the steps (or "
                       "batch) by k and nothing else that sets the tokens.")
    return at

  def points(self, claim, registered, quick: bool, values) -> list:
    if not values:
      return []
    base = self.base(registered, quick)
    if base != registered:
      model_card(base.model)
    return [(1, base), *((k, self.sizes_at(claim, base, k)) for k in sorted(values))]

  def folder(self, value) -> str:
    return f"budget-x{value}"

  def describe(self, value, sizes) -> str:
    on = f" on `{sizes.model}`" if getattr(sizes, "model", None) else ""
    return f"{value}× the registered tokens{on} ({sizes.train_tokens():,} per model)"

  def row(self, claim, value, sizes, seeds) -> dict:
    tokens, params = sizes.train_tokens(), trained_params(sizes)
    return {"multiple": int(value), "train_tokens": int(tokens),
            "tokens_per_param": tokens / params if params else None}

  def extra(self, sizes_of: dict) -> dict:
    return {"model": getattr(sizes_of[1], "model", None)}

  def enough(self, per: dict) -> bool:
    return 1 in per and len(per) > 1

  def kept_folders(self, row: dict, block: dict) -> list[str]:
    k = row["multiple"]
    return [self.folder(k), *([f"size-{block['model']}"] if k == 1 and block.get("model")
                              else [])]

  def is_registered(self, row: dict, block: dict, model: str | None) -> bool:
    return row["multiple"] == 1 and block.get("model") in (None, model)

  def note(self, registered) -> str:
    return ("- The runs on more tokens ran in `budget-x<k>/` (their findings and figures); "
            "they feed only the trend with the budget, never the verdict.")

  def to_dict(self) -> dict:
    return {"budgets": list(self.values),
            **({"budget_model": self.model} if self.model is not None else {})}

  def validate(self, block: dict, need, where: str) -> None:
    need(block.get("model") is None or isinstance(block["model"], str), f"{where}.model",
         "must be the base model's name or null")
    for i, row in enumerate(block["rows"]):
      here = f"{where}.rows[{i}]"
      for key in ("multiple", "train_tokens"):
        need(isinstance(row.get(key), int) and not isinstance(row[key], bool) and row[key] > 0,
             f"{here}.{key}", "must be a positive integer")
      tpp = row.get("tokens_per_param")
      need(tpp is None or (isinstance(tpp, (int, float)) and tpp > 0),
           f"{here}.tokens_per_param", "must be a positive number or null")
    ks = [row["multiple"] for row in block["rows"]]
    need(len(ks) >= 2 and ks[0] == 1 and ks == sorted(set(ks)), f"{where}.rows",
         f"multiples {ks} must be at least two, start at 1 (the registered run) and increase")

  def title(self) -> str:
    return "Budget: the primary effect against the training tokens"

  def intro(self, claim, results: dict, block: dict, effect: str) -> str:
    model, registered = block.get("model"), results["config"]["sizes"].get("model")
    if model and model != registered:
      where = (f" on `{model}`, not the registered `{registered}`: at the same multiple of the "
               "tokens a smaller model sees more tokens per parameter, for less compute. The "
               "verdict above is read at the registered size alone; 1× here trains this model "
               "exactly as the scale axis does. The")
    else:
      where = (f"{f' on `{model}`' if model else ''}. The verdict above is read at 1× alone; "
               "the")
    return (f"The primary effect {effect} with each reported model trained on a multiple of the "
            "registered run's tokens, on the same seeds, every rate tuned again at each budget "
            f"(the claim's `at_budget`){where} threshold column applies the primary threshold's "
            "test to each budget's interval, the last column the registered rule, every "
            "threshold and control, to that budget's runs.")

  def headers(self, block: dict) -> list[str]:
    return ["budget", "tokens per model", "tokens per parameter"]

  def cells(self, row: dict, results: dict, block: dict) -> list[str]:
    return [f"{row['multiple']}×", f"{row['train_tokens']:,}", fmt(row["tokens_per_param"])]

  def sentence(self, block: dict) -> str:
    """The sentence on the trend with training tokens, from the slope on `log(tokens)`.

    Example:
      >>> from experiments.verdict.declare.axes import budget
      >>> runs = [{"multiple": 1, "tokens_per_param": 0.07, "effect": 0.3, "ci": [0.2, 0.4]},
      ...         {"multiple": 4, "tokens_per_param": 0.29, "effect": 0.1, "ci": [0.0, 0.2]}]
      >>> budget(()).sentence({"rows": runs, "slope": -0.14, "slope_ci": [-0.2, -0.08],
      ...                      "trend": "shrinks"})[:62]
      'From 1× to 4× the tokens (0.07 to 0.29 tokens per parameter) t'
    """
    first, last = block["rows"][0], block["rows"][-1]
    per = (f" ({fmt(first['tokens_per_param'])} to {fmt(last['tokens_per_param'])} tokens per "
           "parameter)" if first.get("tokens_per_param") and last.get("tokens_per_param") else "")
    on = f"On `{block['model']}`, from" if block.get("model") else "From"
    return (f"{on} {first['multiple']}× to {last['multiple']}× the tokens{per} "
            f"{trend_clause(block, 'tokens', 'budgets', 'under 3 points')}.")

  def trend_title(self) -> str:
    return "the training budget"

  def cell(self, block: dict) -> str:
    parts = []
    for i, r in enumerate(block["rows"]):
      per = (f" ({fmt(r['tokens_per_param'])}{' tokens/param' if i == 0 else ''})"
             if r.get("tokens_per_param") else "")
      ci = interval_text(*r["ci"])
      parts.append(f"{r['multiple']}×{per}: {fmt(r['effect'])}{' ' + ci if ci else ''}")
    on = f"on {block['model']}: " if block.get("model") else ""
    return on + "; ".join(parts) + f"; {fit_text(block, 'tokens', 'budgets')}"

  def _per_param(self, block: dict) -> bool:
    return all(r["tokens_per_param"] for r in block["rows"])

  def figure_x(self, row: dict, block: dict) -> float:
    return row["tokens_per_param"] if self._per_param(block) else row["train_tokens"]

  def series(self, block: dict, registered) -> list:
    on = f" on {block['model']}" if block.get("model") else ""
    return [(f"primary effect{on} (1×: the registered tokens)", block["rows"], "o")]

  def xlabel(self, block: dict) -> str:
    return ("tokens per parameter" if self._per_param(block) else "training tokens") + (
        " (log scale)")

  def ticks(self, block: dict) -> tuple[list, list[str]]:
    xs = [self.figure_x(r, block) for r in block["rows"]]
    return xs, [f"{r['multiple']}×\n{fmt(x)}" for r, x in zip(block["rows"], xs, strict=True)]


