"""The three axes a claim's primary effect is measured along: model size, context length,
training budget.

The verdict is read at the registered sizes only. A claim that declares `scale_models` (or a
run given `--sizes`) also measures its primary effect (the first non-control threshold) at each
of those base models, on the same seeds; `context_lengths` at each length `T`
(`Claim.at_length`); `budgets` at each multiple of the registered tokens (`Claim.at_budget`).
Each axis becomes a block of `results.json` (`scale_block`, `context_block`, `budget_block`):
the effect at each point with its 95% interval and the registered rule there (`rule.reading`),
and one fit (`axis_fit`: `stats.fit_trend` on one point per size, the points left out named by
`excluded`). Planning an axis (`scale_models`, `context_lengths`, `budget_plan`) checks it
before any compute.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from experiments.verdict.claim import Claim
from experiments.verdict.rule import reading
from experiments.verdict.sizes import Sizes
from experiments.verdict.stats import fit_trend, holds, mean_ci95, paired_values


def model_card(name: str) -> dict:
  """`{"family", "model", "params"}` of base model `name`, from `experiments.models.model_card`.

  Example:
    >>> from experiments.verdict.axes import model_card
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


def scale_models(claim: Claim, quick: bool, sizes: Sequence[str] | None = None) -> tuple[str, ...]:
  """The base models a run measures, the registered one first; `()` for a one-size run.

  `sizes` (the command line's `--sizes`) overrides the claim's `scale_models`, and `()` asks
  for the registered size alone; a quick run uses one size unless `sizes` is given. The
  registered model (the run's `Sizes.model`, where the verdict is read) is added when missing.
  """
  names = tuple(sizes) if sizes is not None else (() if quick else claim.scale_models)
  if not names:
    return ()
  claim.check_scale_models(names, "--sizes" if sizes else "scale_models")
  registered = claim.sizes(quick).model
  ordered = (registered, *(n for n in names if n != registered))
  return ordered if len(ordered) > 1 else ()


def excluded(claim: Claim, runs: dict, seeds, row: dict) -> str | None:
  """Why an axis point is left out of its trend fit, or None.

  In order: a failed control (`row["failed_controls"]`); a censored seed (a value of the
  primary's metric, in its arm or its baseline, that meets the primary's `censored`
  condition: a sentinel or a floor, not a measurement); an effect that is not measured (no
  finite seed); a size trained below the regime's tokens per parameter
  (`row["under_trained"]`, set by `_flag_under_trained`).

  Example:
    >>> from experiments.verdict.claim import Claim
    >>> from experiments.verdict.thresholds import Threshold
    >>> th = Threshold.beyond("ratio", "a", "steps", baseline="b", margin=0.1, censored=">= 1.5")
    >>> c = Claim(id="x", topic="t", kind="new", preface="p", hypothesis="h", refuted_if="r",
    ...           thresholds=(th,), trains=False, run=print)
    >>> runs = {"a": {0: {"steps": 1.5}, 1: {"steps": 0.4}},
    ...         "b": {0: {"steps": 1.0}, 1: {"steps": 1.0}}}
    >>> excluded(c, runs, (0, 1), {}), excluded(c, runs, (1,), {"failed_controls": ["edge"]})
    ("censored: a seed's a.steps >= 1.5", 'control failed: edge')
  """
  th = claim.primary
  if row.get("failed_controls"):
    return "control failed: " + ", ".join(row["failed_controls"])
  if runs is None:  # a kept row whose per-seed findings were not kept: what the row says
    finite = row.get("effect") is not None and math.isfinite(row["effect"])
    return row.get("under_trained") if finite else "not measured"
  if th.censored is not None:
    for arm in (th.arm, th.baseline):
      vals = [runs[arm][s].get(th.metric) for s in seeds] if arm in runs else []
      if any(v is not None and holds(th.censored, (float(v), float(v))) for v in vals):
        return f"censored: a seed's {arm}.{th.metric} {th.censored}"
  if not np.isfinite(paired_values(runs, th.arm, th.metric, th.baseline, seeds)).any():
    return "not measured"
  return row.get("under_trained")


def axis_fit(claim: Claim, rows: list[dict], runs_of, seeds, *, x: str, label: str | None = None,
             family: str | None = None, regime: bool = False) -> dict:
  """The one statistics block of every axis: flags why each row is left out, then fits.

  Args:
    claim: the claim; its `primary` threshold is the effect on the axis.
    rows: the axis's rows (`effect`, `ci`, the reading, the axis quantity `x`); each gains
      `excluded` (the reason) when it is left out of the fit (`excluded`), in place.
    runs_of: `runs_of(row) -> {arm: {seed: metrics}}` of that point, or None when its
      per-seed findings are not at hand (a kept row: then only what the row says is used).
    seeds: the seeds every point ran.
    x: the key of the axis quantity (`"params"`, `"T"`, `"train_tokens"`).
    label: the key naming a row in the fit's `excluded` list.
    family: the key of the family label (the scale axis), or None.
    regime: whether rows trained below `TOKENS_PER_PARAM` are left out (the scale axis).

  Returns:
    The fit fields of a results block (`stats.fit_trend`, `per_family` stored as `families`
    when there are two families or more).
  """
  if regime:
    _flag_under_trained(rows)
  for row in rows:
    why = excluded(claim, runs_of(row), seeds, row)
    row.pop("under_trained", None)
    row.pop("excluded", None)
    if why:
      row["excluded"] = why
  fit = fit_trend(rows, x, family=family, label=label)
  if family is not None and len({r[family] for r in rows}) < 2:
    fit.pop("per_family")
    fit.pop("pooled")
  return _fit_fields(fit)


def _fit_fields(fit: dict) -> dict:
  """The fit as a results block stores it: `per_family` is written as `families`."""
  out = {k: v for k, v in fit.items() if k != "per_family"}
  if "per_family" in fit:
    out["families"] = {f: {k: b[k] for k in ("slope", "slope_ci", "trend", "dof", "points")}
                       for f, b in fit["per_family"].items()}
  return out


def scale_block(claim: Claim, per_size: dict[str, dict], seeds, cards: dict[str, dict],
                tokens: dict[str, int | None] | None = None) -> dict:
  """`results.json`'s `scale`: the primary effect per size, its slope on log(params), the trend.

  Args:
    claim: the claim; its `primary` threshold (first non-control) is the effect that scales.
    per_size: `{model: runs}`, the runs of each size (`{arm: {seed: {metric: value}}}`).
    seeds: the seeds every size ran.
    cards: `{model: model_card(model)}`.
    tokens: `{model: tokens each model trains on}` (`Sizes.train_tokens`); where given, the
      size's row adds `tokens_per_param`. Otherwise, for a claim that reads the shared base
      models (`Claim.reads_base`), it adds that model's `tokens_per_param` and, when
      committed, the held-out `bits_per_byte` of its seeds (`base_row`).

  Returns:
    `{"sizes": [{"family", "model", "params", "effect", "ci", "verdict", "failed_controls"},
    ...] (by params), "slope", "slope_ci", "trend", "dof", "points", "excluded"}`:
    `effect`/`ci` are the paired mean and its 95% t-interval at that size, `verdict` the
    registered rule at that size (`reading`); the fit is `axis_fit`'s (one point per size, the
    seed mean; with two families a shared slope, one intercept each, and `"families"` with
    each family's own fit).
  """
  th = claim.primary
  rows = []
  for name, runs in per_size.items():
    v = paired_values(runs, th.arm, th.metric, th.baseline, seeds)
    m, ci = mean_ci95(v)
    row = {**cards[name], "effect": m, "ci": list(ci) if ci else [None, None],
           **reading(claim, runs, seeds)}
    if (tokens or {}).get(name) is not None:
      row["tokens_per_param"] = tokens[name] / cards[name]["params"]
    elif claim.reads_base:
      row.update(base_row(name, seeds))
    rows.append(row)
  rows.sort(key=lambda r: (r["params"], r["family"], r["model"]))
  return {"sizes": rows, **axis_fit(claim, rows, lambda r: per_size[r["model"]], seeds,
                                    x="params", label="model", family="family", regime=True)}


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


def _flag_under_trained(rows: list[dict]) -> None:
  """Marks the rows trained on fewer tokens per parameter than the regime, when the regime
  holds at all: a size that could not afford it is shown apart and left out of the fit."""
  from experiments.models import TOKENS_PER_PARAM

  tpp = [r.get("tokens_per_param") for r in rows]
  if not any(t is not None and t >= TOKENS_PER_PARAM * 0.995 for t in tpp):
    return  # no size reaches the regime: a run registered before it, read as it was
  for r, t in zip(rows, tpp, strict=True):
    if t is not None and t < TOKENS_PER_PARAM * 0.995:
      r["under_trained"] = f"under-trained: {t:.3g} tokens per parameter"


def context_lengths(claim: Claim, quick: bool, lengths: Sequence[int] | None = None
                    ) -> tuple[int, ...]:
  """The lengths `T` a run also measures the primary effect at; `()` for none.

  `lengths` (the command line's `--lengths`) overrides the claim's `context_lengths`; a quick
  run measures none unless `lengths` is given.
  """
  Ts = tuple(lengths) if lengths else (() if quick else claim.context_lengths)
  if Ts:
    claim.check_context_lengths(Ts, "--lengths" if lengths else "context_lengths")
  return tuple(sorted(Ts))


def context_block(claim: Claim, per_length: dict[int, dict], seeds) -> tuple[list, dict]:
  """`results.json`'s `context` and the trend of the primary effect with `log T`.

  Args:
    claim: the claim; its `primary` threshold is the effect measured against `T`.
    per_length: `{T: runs}` (`{arm: {seed: {metric: value}}}`), the runs at each length.
    seeds: the seeds every length ran.

  Returns:
    `([{"T", "effect", "ci", "verdict", "failed_controls"}, ...] by T, {"slope", "slope_ci",
    "trend"})`: the paired mean and its 95% t-interval at each `T` and the registered rule
    there (`reading`); the least-squares slope of every (T, seed) point's effect
    on `log T` (per e-fold of context) and the trend it implies (`stats.trend`).
  """
  th = claim.primary
  rows = []
  for T in sorted(per_length):
    v = paired_values(per_length[T], th.arm, th.metric, th.baseline, seeds)
    m, ci = mean_ci95(v)
    rows.append({"T": int(T), "effect": m, "ci": list(ci) if ci else [None, None],
                 **reading(claim, per_length[T], seeds)})
  return rows, axis_fit(claim, rows, lambda r: per_length[r["T"]], seeds, x="T")


def budget_multiples(claim: Claim, quick: bool, budgets: Sequence[int] | None = None
                     ) -> tuple[int, ...]:
  """The multiples `k` of the registered tokens a run also measures the primary effect at.

  `budgets` (the command line's `--budgets`) overrides the claim's `budgets`, and `()` asks
  for none; a quick run measures none unless `budgets` is given. `()` for none.
  """
  ks = tuple(budgets) if budgets is not None else (() if quick else claim.budgets)
  if ks:
    claim.check_budgets(ks, "--budgets" if budgets is not None else "budgets")
  return tuple(sorted(ks))


def budget_base(claim: Claim, registered: Sizes, quick: bool) -> Sizes:
  """The sizes the budget axis multiplies: the registered ones, on `claim.budget_model` when
  the claim names one (a quick run keeps its own model)."""
  if quick or claim.budget_model in (None, getattr(registered, "model", None)):
    return registered
  return dataclasses.replace(registered, model=claim.budget_model)


def sizes_at_budget(claim: Claim, base: Sizes, k: int) -> Sizes:
  """`claim.at_budget(base, k)`, checked: it must train on `k` times the tokens."""
  at = claim.at_budget(base, k)
  want, got = k * base.train_tokens(), at.train_tokens()
  if got != want:
    raise ValueError(f"Claim {claim.id!r}: at_budget(sizes, {k}) trains on {got} tokens, not "
                     f"{k} × {base.train_tokens()} = {want}. Fix: scale the steps (or "
                     "batch) by k and nothing else that sets the tokens.")
  return at


def budget_plan(claim: Claim, registered: Sizes, quick: bool, ks) -> tuple[Sizes, dict]:
  """`(base, {k: sizes})` of the budget axis, checked before any compute: the sizes it
  multiplies (`budget_base`) and each multiple's `at_budget` (a wrong one, or a budget model
  without a card, fails now)."""
  base = budget_base(claim, registered, quick)
  at_k = {k: sizes_at_budget(claim, base, k) for k in ks}
  if ks and base != registered:
    model_card(base.model)
  return base, at_k


def budget_block(claim: Claim, per_budget: dict[int, dict], seeds, base: Sizes) -> dict:
  """`results.json`'s `budgets`: the primary effect at each multiple of the tokens, its trend.

  Args:
    claim: the claim; its `primary` threshold is the effect measured against the budget.
    per_budget: `{k: runs}` (`{arm: {seed: {metric: value}}}`); `1` is the run at the
      registered tokens (on `base`).
    seeds: the seeds every budget ran.
    base: the sizes the axis multiplies (`budget_base`): `k` times its `train_tokens()` per
      reported model, over its model's parameters (no `tokens_per_param` when it names no
      model), and its `model`.

  Returns:
    `{"model", "runs": [{"multiple", "train_tokens", "tokens_per_param", "effect", "ci",
    "verdict", "failed_controls"}, ...] (by k), "slope", "slope_ci", "trend"}`: the paired
    mean and its 95% t-interval at each budget and the registered rule there (`reading`);
    the slope of every (budget, seed) point's effect on `log(tokens)` (per e-fold of
    tokens), with one intercept per seed: a seed's models share their init and first
    batches across budgets, so the fit pairs them (`stats.ols_slope`'s `groups`).
  """
  th = claim.primary
  tokens = {k: k * base.train_tokens() for k in per_budget}
  params, model = trained_params(base), getattr(base, "model", None)
  rows = []
  for k in sorted(per_budget):
    v = paired_values(per_budget[k], th.arm, th.metric, th.baseline, seeds)
    m, ci = mean_ci95(v)
    rows.append({"multiple": int(k), "train_tokens": int(tokens[k]),
                 "tokens_per_param": tokens[k] / params if params else None,
                 "effect": m, "ci": list(ci) if ci else [None, None],
                 **reading(claim, per_budget[k], seeds)})
  return {"model": model, "runs": rows, **axis_fit(
      claim, rows, lambda r: per_budget[r["multiple"]], seeds, x="train_tokens",
      label="multiple")}


def trained_params(sizes: Sizes) -> int | None:
  """The parameters of the shape a run trains (its `model`'s card), None when it names none."""
  model = getattr(sizes, "model", None)
  return model_card(model)["params"] if model and sizes.train_tokens() is not None else None
