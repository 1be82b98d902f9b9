"""The scale axis: the primary effect at other base models, and what a base model's row says.

`ScaleAxis` (made by `experiments.verdict.declare.axes.scale`) runs the claim's sizes with their
`model` replaced by each base model (a key of `experiments.models.RECIPES`, or of `SHAPES` for
a claim that trains its shapes), the registered model first; its rows carry the model's card
(`model_card`: family, parameters) and what it trained on (tokens per parameter; for a claim
that reads the shared base models, their held-out bits per byte: `base_row`); sizes trained
below the regime are left out of the fit (`flag_under_trained`).
"""

from __future__ import annotations

import dataclasses
import math

from experiments.verdict.arithmetic.rule import size_test
from experiments.verdict.arithmetic.stats import fmt, trend_reading
from experiments.verdict.declare.axis import Axis, fit_text, trend_clause
from experiments.verdict.render.cells import params_text, reading_text, table


def model_card(name: str) -> dict:
  """`{"family", "model", "params"}` of base model `name`, from `experiments.models.model_card`.

  Example:
    >>> from experiments.verdict.declare.axes import model_card
    >>> model_card("mini")["family"], model_card("mini")["model"]
    ('gpt', 'mini')
  """
  from experiments import models  # deferred: reading a card trains nothing

  card_of = getattr(models, "model_card", None)
  if card_of is None:
    raise ValueError("experiments.models has no model_card(name); the scale axis reads each "
                     "base model's family and parameter count from it. Fix: run at one size "
                     "(drop --sizes) until the base-model family is in experiments.models.")
  card = card_of(name)
  get = card.get if isinstance(card, dict) else (lambda k: getattr(card, k, None))
  family, params = get("family"), get("params")
  if not isinstance(family, str) or not isinstance(params, (int, float)) or not params > 0:
    raise ValueError(f"experiments.models.model_card({name!r}) gave family={family!r}, "
                     f"params={params!r}. Fix: a family name and a positive parameter count.")
  return {"family": family, "model": name, "params": int(params)}


def base_row(name: str, seeds) -> dict:
  """`{"tokens_per_param", "bits_per_byte"}` of the shared base model `name` at `seeds` (the
  held-out bits only when every seed is committed); `{}` for a name that is no recipe.

  Example:
    >>> base_row("mini-20", range(5))["tokens_per_param"] > 20
    True
  """
  from experiments import models

  if name not in models.RECIPES:
    return {}
  out = {"tokens_per_param": models.model_card(name).get("tokens_per_param")}
  bits = models.heldout_bits(name, [int(s) for s in seeds])
  return {**out, **({"bits_per_byte": bits} if bits is not None else {})}


def run_bits(claim, runs: dict, seeds) -> float | None:
  """Mean held-out bits per byte of `runs` (`{arm: {seed: metrics}}`) at `seeds`, read from
  `claim.bits_metric` (nats per byte / ln 2); None when the claim names none or no seed has it.

  Example:
    >>> import math, types
    >>> claim = types.SimpleNamespace(bits_metric=("full", "loss"))
    >>> runs = {"full": {"0": {"loss": math.log(2) * 3.0}, "1": {"loss": math.log(2) * 3.5}}}
    >>> round(run_bits(claim, runs, ["0", "1"]), 6)
    3.25
  """
  if claim.bits_metric is None:
    return None
  arm, metric = claim.bits_metric
  vals = [runs[arm][s].get(metric) for s in seeds] if arm in runs else []
  vals = [v for v in vals if v is not None and math.isfinite(v)]
  return sum(vals) / len(vals) / math.log(2) if vals else None


def flag_under_trained(rows: list[dict]) -> None:
  """Marks the rows trained on fewer tokens per parameter than the regime, when the regime
  holds at all: a size that could not afford it is shown apart and left out of the fit."""
  from experiments.models import TOKENS_PER_PARAM

  tpp = [r.get("tokens_per_param") for r in rows]
  if not any(t is not None and t >= TOKENS_PER_PARAM * 0.995 for t in tpp):
    return  # no size reaches the regime: a run registered before it, read as it was
  for r, t in zip(rows, tpp, strict=True):
    if t is not None and t < TOKENS_PER_PARAM * 0.995:
      r["under_trained"] = f"under-trained: {t:.3g} tokens per parameter"


@dataclasses.dataclass(frozen=True)
class ScaleAxis(Axis):
  """The primary effect at other base models (`values`: keys of `experiments.models.RECIPES`,
  or of `SHAPES` for a claim that trains its shapes). The registered size's `model` is the
  first point (added when missing); each other runs with the sizes' `model` replaced."""

  key, x, label, family, word, field = ("model", "params", "model", "family", "size",
                                        "scale_models")

  def parse(self, text: str) -> tuple:
    return tuple(n.strip() for n in text.split(",") if n.strip())

  def check(self, claim, values, field: str) -> None:
    """Distinct base models, a primary effect, and sizes with a `model` field."""
    from experiments import models  # deferred: a claim's declaration trains nothing

    if isinstance(values, str) or not values or len(set(values)) != len(tuple(values)):
      raise ValueError(f"Claim {claim.id!r}: {field}={values!r} must be distinct model names, "
                       "e.g. ('mini', 'small', 'base').")
    unknown = [n for n in values if n not in models.RECIPES and n not in models.SHAPES]
    if unknown:
      raise ValueError(f"Claim {claim.id!r}: {field} names {unknown}, not base models. Fix: "
                       f"choose from experiments.models.RECIPES: {sorted(models.RECIPES)} (or, "
                       f"for a claim that trains its shape, SHAPES: {sorted(models.SHAPES)}).")
    if claim.primary is None:
      raise ValueError(f"Claim {claim.id!r}: {field} needs a primary effect to scale, and every "
                       "threshold is a control. Fix: declare a non-control threshold first.")
    for label, sizes in (("QUICK", claim.QUICK), ("FULL", claim.FULL)):
      if sizes is not None and "model" not in {f.name for f in dataclasses.fields(sizes)}:
        raise ValueError(f"Claim {claim.id!r}: {field} runs the claim at several base models, "
                         f"but its {label} sizes ({type(sizes).__name__}) have no `model` field. "
                         f"Fix: add `model: str` to {type(sizes).__name__} and read "
                         "`spec.sizes.model` in run(), or drop " + field + ".")

  def chosen(self, claim, quick: bool, override=None) -> tuple:
    values = tuple(override) if override is not None else (() if quick else self.values)
    if values:
      self.check(claim, values, "--sizes" if override is not None else self.field)
    return values

  def points(self, claim, registered, quick: bool, values) -> list:
    if not values:
      return []
    ordered = (registered.model, *(n for n in values if n != registered.model))
    for name in ordered:
      model_card(name)  # before any compute: a missing card fails now
    return ([(n, dataclasses.replace(registered, model=n)) for n in ordered]
            if len(ordered) > 1 else [])

  def folder(self, value) -> str:
    return f"size-{value}"

  def describe(self, value, sizes) -> str:
    card = model_card(value)
    return f"{value} ({card['family']}, {params_text(card['params'])} params)"

  def row(self, claim, value, sizes, seeds) -> dict:
    row = model_card(value)
    tokens = sizes.train_tokens()
    if tokens is not None:
      row["tokens_per_param"] = tokens / row["params"]
    elif claim.reads_base:
      row.update(base_row(value, seeds))
    return row

  def measured(self, claim, runs: dict, seeds) -> dict:
    bits = None if claim.reads_base else run_bits(claim, runs, seeds)
    return {} if bits is None else {"bits_per_byte": bits}

  def sort_key(self, row: dict):
    return (row["params"], row["family"], row["model"])

  def is_registered(self, row: dict, block: dict, model: str | None) -> bool:
    return row["model"] == model

  def note(self, registered) -> str:
    return (f"- Sizes other than the registered `{registered.model}` ran in `size-<model>/` "
            "(their findings and figures); they feed only the trend.")

  def to_dict(self) -> dict:
    return {"scale_models": list(self.values)}

  def validate(self, block: dict, need, where: str) -> None:
    for i, row in enumerate(block["rows"]):
      here = f"{where}.rows[{i}]"
      need(isinstance(row.get("family"), str) and row["family"], f"{here}.family",
           "must be a non-empty string")
      need(isinstance(row.get("model"), str) and row["model"], f"{here}.model",
           "must be a non-empty string (a base model's name)")
      need(isinstance(row.get("params"), (int, float)) and row["params"] > 0, f"{here}.params",
           "must be a positive number")
      tpp = row.get("tokens_per_param")
      need(tpp is None or (isinstance(tpp, (int, float)) and tpp > 0),
           f"{here}.tokens_per_param", "must be a positive number when given")
    models = [row["model"] for row in block["rows"]]
    need(len(block["rows"]) >= 2, f"{where}.rows", "must list at least two sizes")
    need(len(set(models)) == len(models), f"{where}.rows", f"models {models} repeat")

  def title(self) -> str:
    return "Scale: the primary effect against model size"

  def intro(self, claim, results: dict, block: dict, effect: str) -> str:
    registered = (results["config"].get("sizes") or {}).get("model")
    return (f"The primary effect {effect} at each size, on the same seeds; the verdict above is "
            f"read only at the registered size `{registered}`. The threshold column applies the "
            "primary threshold's test to that size's interval; where the run recorded it, the "
            "last column applies the registered rule, every threshold and control, to that "
            "size's runs (a failed control blocks what needs it).")

  def _spent(self, block: dict) -> tuple[bool, bool]:
    rows = block["rows"]
    budgets = any(r.get("tokens_per_param") is not None for r in rows)
    return budgets, budgets and any(r.get("bits_per_byte") is not None for r in rows)

  def headers(self, block: dict) -> list[str]:
    budgets, bits = self._spent(block)
    return ["model", "family", "parameters", *(["tokens / param"] if budgets else []),
            *(["held-out bits / byte"] if bits else [])]

  def cells(self, row: dict, results: dict, block: dict) -> list[str]:
    budgets, bits = self._spent(block)
    registered = (results["config"].get("sizes") or {}).get("model")
    spent = [f"{row['tokens_per_param']:.3g}" if row.get("tokens_per_param") else "—"]
    if bits:
      spent.append(fmt(row.get("bits_per_byte")))
    return [f"`{row['model']}`" + (" (registered)" if row["model"] == registered else ""),
            row["family"], params_text(row["params"]), *(spent if budgets else [])]

  def fit(self, claim, rows: list[dict], runs_of, seeds) -> dict:
    """The fit of every axis, with sizes trained below the regime left out."""
    flag_under_trained(rows)
    return super().fit(claim, rows, runs_of, seeds)

  def tail(self, claim, results: dict, block: dict) -> list[str]:
    th, last = claim.primary, block["rows"][-1]
    outcome, why = size_test(th, last)
    note = (" (the verdict reads the range over seeds; this test reads the 95% interval)"
            if th.stat == "range" else "")
    whole = (f"; with every threshold and control the registered rule there gives "
             f"{reading_text(last)}" if "verdict" in last else "")
    lines = [f"At the largest size (`{last['model']}`, {params_text(last['params'])} params) "
             f"the primary threshold would be **{outcome}**: {why}{note}{whole}.", ""]
    if block.get("per_family"):
      lines += ["With two families the trend is the slope shared by both, each with its own "
                "intercept, read only when the families' intervals overlap; each family's own "
                "fit:", ""]
      lines += table(["family", "trend", "slope per e-fold of params", "95% CI"],
                     [[f, trend_reading(b), fmt(b["slope"]),
                       f"[{fmt(b['slope_ci'][0])}, {fmt(b['slope_ci'][1])}]"
                       if b["slope_ci"][0] is not None else "n/a"]
                      for f, b in block["per_family"].items()])
    return lines

  def sentence(self, block: dict) -> str:
    """The one sentence on the trend with scale, computed from the slope's interval.

    Example:
      >>> from experiments.verdict.declare.axes import scale
      >>> rows = [{"family": "GPT", "model": m, "params": p, "effect": 0.1, "ci": [0.0, 0.2]}
      ...         for m, p in (("mini", 1e5), ("base", 2e6))]
      >>> scale(()).sentence({"rows": rows, "slope": -0.012, "slope_ci": [-0.02, -0.004],
      ...                     "trend": "shrinks"})
      'With scale (mini 0.1M → base 2.0M params, GPT family), the effect shrinks:
      slope -0.012 [-0.02, -0.004] per e-fold of parameters.'
    """
    rows = block["rows"]
    first, last = rows[0], rows[-1]
    families = sorted({r["family"] for r in rows})
    fam = (f"{families[0]} family" if len(families) == 1
           else " and ".join(families) + " families")
    span = (f"{first['model']} {params_text(first['params'])} → {last['model']} "
            f"{params_text(last['params'])} params, {fam}")
    return (f"With scale ({span}), "
            f"{trend_clause(block, 'parameters', 'sizes', 'under 3 points')}.")

  def trend_title(self) -> str:
    return "scale"

  def cell(self, block: dict) -> str:
    """The fit; where no slope can be read, each size's own effect instead, so the cell still
    says how the effect moves with size (a slope through two points would hide that)."""
    if block["trend"] != "not measured":
      return fit_text(block, "params", "sizes")
    points, why, fitted = [], set(), 0
    for r in block["rows"]:
      eff, ci = r.get("effect"), r.get("ci") or [None, None]
      if eff is None or (isinstance(eff, float) and math.isnan(eff)):
        points.append(f"{r['model']} not measured")
        continue
      fitted += not r.get("excluded")
      interval = f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci[0] is not None else ""
      left = r.get("excluded")
      if left:
        why.add(left.split(":")[0])
      points.append(f"{r['model']} {fmt(eff)}{interval}" + ("†" if left else ""))
    why_none = ("a slope with an interval needs 3" if fitted < 3
                else "their means lie exactly on a line: no interval")
    out = (f"not measured ({fitted} of {len(block['rows'])} sizes in the fit, {why_none}): "
           + "; ".join(points))
    return out + (f" († left out: {', '.join(sorted(why))})" if why else "")

  def series(self, block: dict, registered) -> list:
    families = list(dict.fromkeys(r["family"] for r in block["rows"]))
    return [(f"{fam} family", [r for r in block["rows"] if r["family"] == fam], marker)
            for fam, marker in zip(families, "osD^v<>", strict=False)]

  def xlabel(self, block: dict) -> str:
    return "parameters (count, log scale; M = millions)"

  def ticks(self, block: dict) -> tuple[list, list[str]]:
    ticks, last = [], -math.inf
    for p in sorted({r["params"] for r in block["rows"]}):
      if math.log10(p) - last >= 0.15:  # keep tick labels apart
        ticks.append(p)
        last = math.log10(p)
    return ticks, [params_text(p) for p in ticks]

  def caption(self, block: dict) -> str:
    return self.cell(block)


