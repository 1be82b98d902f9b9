"""The axis sections of a claim's report: scale, context, budget, each a table and a sentence.

Each section tabulates the primary effect at every point of its axis with its 95% interval,
the primary threshold's test applied to that interval (`size_test`), the registered rule there
(`cells.reading_text`) and whether the point entered the trend fit; it ends with one sentence
computed from the fit's slope and interval (`scale_sentence`, `context_sentence`,
`budget_sentence`).
"""

from __future__ import annotations

from experiments.verdict.cells import fit_cell, params_text, reading_text, table
from experiments.verdict.claim import Claim
from experiments.verdict.stats import fmt, holds
from experiments.verdict.thresholds import Threshold


def size_test(th: Threshold, row: dict) -> tuple[str, str]:
  """The primary threshold's test applied to one size's interval: `(outcome, why)`.

  `outcome` is what the threshold alone would say at that size: `supported` (its `supports`
  condition holds over the whole interval), `refuted`, `inconclusive`, or `n/a` (no finite
  effect). The interval is the size's 95% CI, or its single value with one seed.

  Example:
    >>> from experiments.verdict.thresholds import Threshold
    >>> from experiments.verdict.axis_report import size_test
    >>> th = Threshold.beyond("gain", "a", "m", margin=0.1)
    >>> size_test(th, {"effect": 0.3, "ci": [0.2, 0.4]})[0]
    'supported'
  """
  if row["effect"] is None:
    return "n/a", "no finite effect at this size"
  lo, hi = row["ci"] if row["ci"][0] is not None else (row["effect"], row["effect"])
  sup = th.supports is not None and holds(th.supports, (lo, hi))
  ref = th.refutes is not None and holds(th.refutes, (lo, hi))
  outcome = "refuted" if ref else "supported" if sup else "inconclusive"
  met = [f"{label} `{c}`" for label, c, ok in (("supports", th.supports, sup),
                                                ("refutes", th.refutes, ref)) if c and ok]
  unmet = [f"{label} `{c}`" for label, c, ok in (("supports", th.supports, sup),
                                                  ("refutes", th.refutes, ref)) if c and not ok]
  what = "95% interval" if row["ci"][0] is not None else "single value (one seed)"
  why = (f"its {what} [{fmt(lo)}, {fmt(hi)}] meets " + " and ".join(met) if met
         else f"its {what} [{fmt(lo)}, {fmt(hi)}] meets neither " + " nor ".join(unmet))
  return outcome, why


def scale_markdown(claim: Claim, results: dict, h: str) -> list[str]:
  """The scale section: the per-size table, the threshold at each size, the trend sentence."""
  scale, th = results["scale"], claim.primary
  registered = (results["config"].get("sizes") or {}).get("model")
  unit = f" ({th.unit})" if th.unit else ""
  lines = [f"{h}# Scale: the primary effect against model size", "",
           f"The primary effect *{th.name}*{unit} at each size, on the same seeds; the verdict "
           f"above is read only at the registered size `{registered}`. The threshold column "
           "applies the primary threshold's test to that size's interval; where the run "
           "recorded it, the last column applies the registered rule, every threshold and "
           "control, to that size's runs (a failed control blocks what needs it).", ""]
  rows = []
  budgets = any(r.get("tokens_per_param") is not None for r in scale["sizes"])
  read = any("verdict" in r for r in scale["sizes"])
  fitted = "points" in scale
  bits = any(r.get("bits_per_byte") is not None for r in scale["sizes"])
  for r in scale["sizes"]:
    outcome, why = size_test(th, r)
    lo, hi = r["ci"]
    spent = [f"{r['tokens_per_param']:.3g}" if r.get("tokens_per_param") else "—"]
    if bits:
      spent.append(fmt(r.get("bits_per_byte")))
    rows.append([f"`{r['model']}`" + (" (registered)" if r["model"] == registered else ""),
                 r["family"], params_text(r["params"]), *(spent if budgets else []),
                 fmt(r["effect"]),
                 f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n/a (one seed)",
                 f"{outcome}: {why}", *([reading_text(r)] if read else []),
                 *([fit_cell(r)] if fitted else [])])
  lines += table(["model", "family", "parameters", *(["tokens / param"] if budgets else []),
                  *(["held-out bits / byte"] if budgets and bits else []),
                  "effect", "95% CI", "primary threshold at this size",
                  *(["every threshold and control at this size"] if read else []),
                  *(["in the trend fit"] if fitted else [])], rows)
  last = scale["sizes"][-1]
  outcome, why = size_test(th, last)
  note = (" (the verdict reads the range over seeds; this test reads the 95% interval)"
          if th.stat == "range" else "")
  whole = (f"; with every threshold and control the registered rule there gives "
           f"{reading_text(last)}" if "verdict" in last else "")
  lines += [f"At the largest size (`{last['model']}`, {params_text(last['params'])} params) the "
            f"primary threshold would be **{outcome}**: {why}{note}{whole}.", ""]
  if scale.get("families"):
    lines += ["With two families the trend is the slope shared by both, each with its own "
              "intercept, read only when the families' intervals overlap; each family's own "
              "fit:", ""]
    lines += table(["family", "trend", "slope per e-fold of params", "95% CI"],
                   [[f, b["trend"], fmt(b["slope"]),
                     f"[{fmt(b['slope_ci'][0])}, {fmt(b['slope_ci'][1])}]"
                     if b["slope_ci"][0] is not None else "n/a"]
                    for f, b in scale["families"].items()])
  return lines


def scale_sentence(scale: dict) -> str:
  """The one sentence a scaled report ends with, computed from the slope's interval.

  Example:
    >>> from experiments.verdict.axis_report import scale_sentence
    >>> rows = [{"family": "GPT", "model": m, "params": p, "effect": 0.1, "ci": [0.0, 0.2]}
    ...         for m, p in (("mini", 1e5), ("base", 2e6))]
    >>> scale_sentence({"sizes": rows, "slope": -0.012, "slope_ci": [-0.02, -0.004],
    ...                 "trend": "shrinks"})
    'With scale (mini 0.1M → base 2.0M params, GPT family), the effect shrinks:
    slope -0.012 [-0.02, -0.004] per e-fold of parameters.'
  """
  rows = scale["sizes"]
  first, last = rows[0], rows[-1]
  families = sorted({r["family"] for r in rows})
  fam = (f"{families[0]} family" if len(families) == 1
         else " and ".join(families) + " families")
  span = (f"{first['model']} {params_text(first['params'])} → {last['model']} "
          f"{params_text(last['params'])} params, {fam}")
  return f"With scale ({span}), {_trend_clause(scale, 'parameters', 'sizes', 'under 3 points')}."


def context_markdown(claim: Claim, results: dict, h: str, trend_: dict | None) -> list[str]:
  """The context section: the primary effect and its threshold's test at each length `T`."""
  th = claim.primary
  unit = f" ({th.unit})" if th.unit else ""
  lines = [f"{h}# Context: the primary effect against the length T", "",
           f"The primary effect *{th.name}*{unit} at each context length, on the same seeds "
           "(each length's model and counts are the claim's `at_length`; see the notes). The "
           "verdict above is never read from these runs; the threshold column applies the "
           "primary threshold's test to each length's interval, and, where the run recorded "
           "it, the last column the registered rule, every threshold and control, to that "
           "length's runs (a failed control blocks what needs it).", ""]
  rows = []
  read = any("verdict" in r for r in results["context"])
  trend_ = results.get("context_trend") or trend_
  fitted = bool(trend_) and "points" in trend_
  for r in results["context"]:
    outcome, why = size_test(th, r)
    lo, hi = r["ci"]
    rows.append([str(r["T"]), fmt(r["effect"]),
                 f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n/a (one seed)",
                 f"{outcome}: {why}", *([reading_text(r)] if read else []),
                 *([fit_cell(r)] if fitted else [])])
  lines += table(["T (tokens)", "effect", "95% CI", "primary threshold at this T",
                  *(["every threshold and control at this T"] if read else []),
                  *(["in the trend fit"] if fitted else [])], rows)
  if trend_:
    lines += [context_sentence(results["context"], trend_), ""]
  return lines


def context_sentence(context: list[dict], trend_: dict) -> str:
  """The sentence on the trend with context, computed from the slope on `log T`.

  Example:
    >>> from experiments.verdict.axis_report import context_sentence
    >>> rows = [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]},
    ...         {"T": 1024, "effect": 0.3, "ci": [0.2, 0.4]}]
    >>> context_sentence(rows, {"slope": 0.14, "slope_ci": [0.05, 0.23], "trend": "grows"})
    'From T = 256 to T = 1024 the effect grows: slope 0.14 [0.05, 0.23] per e-fold of T.'
  """
  return (f"From T = {context[0]['T']} to T = {context[-1]['T']} "
          f"{_trend_clause(trend_, 'T', 'lengths', 'under 3 points')}.")


def budget_markdown(claim: Claim, results: dict, h: str) -> list[str]:
  """The budget section: the primary effect and its threshold's test at each training budget."""
  th = claim.primary
  unit = f" ({th.unit})" if th.unit else ""
  block = results["budgets"]
  model, registered = block.get("model"), results["config"]["sizes"].get("model")
  if model and model != registered:
    where = (f" on `{model}`, not the registered `{registered}`: at the same multiple of the "
             "tokens a smaller model sees more tokens per parameter, for less compute. The "
             "verdict above is read at the registered size alone; 1× here trains this model "
             "exactly as the scale axis does. The")
  else:
    where = (f"{f' on `{model}`' if model else ''}. The verdict above is read at 1× alone; "
             "the")
  lines = [f"{h}# Budget: the primary effect against the training tokens", "",
           f"The primary effect *{th.name}*{unit} with each reported model trained on a multiple "
           "of the registered run's tokens, on the same seeds, every rate tuned again at each "
           f"budget (the claim's `at_budget`){where} threshold column applies the primary "
           "threshold's test to each budget's interval, the last column the registered rule, "
           "every threshold and control, to that budget's runs.", ""]
  rows = []
  for r in block["runs"]:
    outcome, why = size_test(th, r)
    lo, hi = r["ci"]
    rows.append([f"{r['multiple']}×", f"{r['train_tokens']:,}", fmt(r["tokens_per_param"]),
                 fmt(r["effect"]), f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None
                 else "n/a (one seed)", f"{outcome}: {why}", reading_text(r),
                 *([fit_cell(r)] if "points" in block else [])])
  lines += table(["budget", "tokens per model", "tokens per parameter", "effect", "95% CI",
                  "primary threshold at this budget",
                  "every threshold and control at this budget",
                  *(["in the trend fit"] if "points" in block else [])], rows)
  return lines + [budget_sentence(block), ""]


def budget_sentence(budgets: dict) -> str:
  """The sentence on the trend with training tokens, computed from the slope on `log(tokens)`.

  Example:
    >>> from experiments.verdict.axis_report import budget_sentence
    >>> runs = [{"multiple": 1, "tokens_per_param": 0.07, "effect": 0.3, "ci": [0.2, 0.4]},
    ...         {"multiple": 4, "tokens_per_param": 0.29, "effect": 0.1, "ci": [0.0, 0.2]}]
    >>> text = budget_sentence({"runs": runs, "slope": -0.14, "slope_ci": [-0.2, -0.08],
    ...                         "trend": "shrinks"})
    >>> text[:62]
    'From 1× to 4× the tokens (0.07 to 0.29 tokens per parameter) t'
    >>> text[62:]
    'he effect shrinks: slope -0.14 [-0.2, -0.08] per e-fold of tokens.'
  """
  first, last = budgets["runs"][0], budgets["runs"][-1]
  per = (f" ({fmt(first['tokens_per_param'])} to {fmt(last['tokens_per_param'])} tokens per "
         "parameter)" if first.get("tokens_per_param") and last.get("tokens_per_param") else "")
  on = f"On `{budgets['model']}`, from" if budgets.get("model") else "From"
  return (f"{on} {first['multiple']}× to {last['multiple']}× the tokens{per} "
          f"{_trend_clause(budgets, 'tokens', 'budgets', 'under 3 points')}.")


def _trend_clause(fit: dict, per: str, items: str, no_interval: str) -> str:
  """`the effect grows: slope 0.14 [0.05, 0.23] per e-fold of T` from a fit's slope and trend.

  `per` names the axis (`T`, `tokens`), `items` its points (`lengths`), `no_interval` why a
  fitted slope may have no interval.
  """
  words = TREND_WORDS[fit["trend"]]
  lo, hi = fit["slope_ci"]
  if fit["trend"] == "families disagree":
    fams = "; ".join(f"{f} {b['trend']}, slope {fmt(b['slope'])} [{fmt(b['slope_ci'][0])}, "
                     f"{fmt(b['slope_ci'][1])}]" for f, b in fit["families"].items())
    slope = f"the families' intervals are disjoint ({fams} per e-fold of {per})"
  elif fit["slope"] is None:
    slope = f"no slope could be fitted (fewer than two {items} in the fit)"
  elif lo is None:
    slope = f"slope {fmt(fit['slope'])} per e-fold of {per}, with no interval ({no_interval})"
  else:
    slope = (f"slope {fmt(fit['slope'])} [{fmt(lo)}, {fmt(hi)}] per e-fold of {per}"
             + (" (the interval contains 0)" if fit["trend"] == "no trend" else ""))
  if "dof" in fit and fit["slope"] is not None:
    slope += (f", fitted on the seed mean of each of {fit['points']} {items} "
              f"({fit['dof']} residual degrees of freedom)")
  left = fit.get("excluded") or []
  if left:
    slope += ("; left out of the fit: " + "; ".join(f"{x} ({why})" for x, why in left))
  return f"{words}: {slope}"


TREND_WORDS = {"grows": "the effect grows", "shrinks": "the effect shrinks",
               "no trend": "the effect shows no trend",
               "not measured": "the trend is not measured",
               "families disagree": "no pooled trend is read, the families disagree"}
