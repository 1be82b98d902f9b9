"""Markdown for the claims: one `report.md` per claim run, and the tour's verdict table.

Rendering only: every number comes from a `results.json` dict (the runner writes it),
and the thresholds' intervals are recomputed from it, so a report can be re-made from disk.
A run at several model sizes also gets `scale.png` (`scale_figure`), a per-size table, and
ends with one sentence computed from the slope's interval (`scale_sentence`).
"""

from __future__ import annotations

import math
import os
import textwrap

from experiments.claims.claim import INDICATIVE, Claim, Threshold, parse_condition
from experiments.claims.stats import evaluate, fmt, holds


def _row(cells) -> str:
  return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def table(header, rows) -> list[str]:
  """A markdown table as a list of lines (with a trailing blank line)."""
  return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows), ""]


def verdict_label(results: dict | None, verdict: str) -> str:
  """`supported`, or `supported — indicative (quick)` for quick or under-seeded runs."""
  if results is not None and verdict != "not built" and (
      results["quick"] or len(results["seeds"]) < 3):
    return f"{verdict} — {INDICATIVE}"
  return verdict


def evaluations(claim: Claim, results: dict) -> list[dict]:
  """Each threshold's interval and conditions, recomputed from `results["arms"]`."""
  runs = {arm: body["runs"] for arm, body in results["arms"].items()}
  seeds = [str(s) for s in results["seeds"]]
  return [evaluate(th, runs, seeds) for th in claim.thresholds]


def key_number(results: dict | None, claim: Claim | None = None) -> str:
  """The claim's key number: its first effect, `mean [lo, hi] unit` (95% CI, or one seed)."""
  if not results or not results["effects"]:
    return "—"
  e = results["effects"][0]
  lo, hi = e["ci95"]
  ci = f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else " (one seed)"
  unit = ""
  if claim is not None and claim.thresholds and claim.thresholds[0].unit:
    unit = f" {claim.thresholds[0].unit}"
  return f"{e['name']}: {fmt(e['mean'])}{unit}{ci}"


def params_text(params: float) -> str:
  """A parameter count as reports write it: `0.86M`, `2.0M`, `1.2B`.

  Example:
    >>> from experiments.claims.report import params_text
    >>> params_text(857_000), params_text(2_000_000), params_text(1.2e9)
    ('0.86M', '2.0M', '1.2B')
  """
  if params >= 1e9:
    return f"{params / 1e9:.1f}B"
  if params >= 1e6:
    return f"{params / 1e6:.1f}M"
  return f"{params / 1e6:.2g}M"


def trend_text(results: dict | None) -> str:
  """The trend with model size and the slope's interval, or `—` for a one-size run.

  Example:
    >>> from experiments.claims.report import trend_text
    >>> trend_text({"scale": {"sizes": [], "slope": -0.012, "slope_ci": [-0.02, -0.004],
    ...                       "trend": "shrinks"}})
    'shrinks: slope -0.012 [-0.02, -0.004] per e-fold of params'
    >>> trend_text({"scale": None})
    '—'
  """
  scale = (results or {}).get("scale")
  if not scale:
    return "—"
  return _fit_text(scale, "params", "sizes")


def _fit_text(fit: dict, per: str, items: str) -> str:
  """A fit in one table cell: `grows: slope 0.1 [0.05, 0.2] per e-fold of params`, plus the
  points left out and, when the families disagree, each family's slope."""
  left = fit.get("excluded") or []
  out = f" ({len(left)} left out)" if left else ""
  if fit["trend"] == "families disagree":
    fams = "; ".join(f"{f} {b['trend']} {fmt(b['slope'])} [{fmt(b['slope_ci'][0])}, "
                     f"{fmt(b['slope_ci'][1])}]" for f, b in fit["families"].items())
    return f"families disagree, no pooled slope: {fams} per e-fold of {per}{out}"
  if fit["slope"] is None:
    return f"{fit['trend']} (no slope: fewer than two {items} in the fit){out}"
  lo, hi = fit["slope_ci"]
  ci = f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else " (no interval: under 3 points)"
  return f"{fit['trend']}: slope {fmt(fit['slope'])}{ci} per e-fold of {per}{out}"


def context_text(results: dict | None) -> str:
  """The primary effect at each context length, or `—` when the run measured none.

  Example:
    >>> from experiments.claims.report import context_text
    >>> context_text({"context": [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]},
    ...                           {"T": 1024, "effect": 0.3, "ci": [0.2, 0.4]}]})
    'T = 256: 0.1 [0, 0.2]; T = 1024: 0.3 [0.2, 0.4]'
  """
  rows = (results or {}).get("context")
  if not rows:
    return "—"
  fit = results.get("context_trend")
  return "; ".join([f"T = {r['T']}: {fmt(r['effect'])}"
                    + (f" [{fmt(r['ci'][0])}, {fmt(r['ci'][1])}]" if r["ci"][0] is not None
                       else "") for r in rows] + ([_fit_text(fit, "T", "lengths")] if fit else []))


def regime_text(results: dict | None) -> str:
  """The registered size's model, parameters, tokens per parameter and held-out bits per byte.

  From `config.regime` (runs since 2026-12-05); an older run gives what its config records
  (the model's recipe, `config.budget`) and says its bits per byte were not recorded.

  Example:
    >>> from experiments.claims.report import regime_text
    >>> regime_text({"config": {"regime": {"model": "mini-20", "params": 132864,
    ...              "tokens_per_param": 20.01, "bits_per_byte": 2.48}}})
    '`mini-20`, 0.13M params, 20 tokens/param, 2.48 bits/byte'
  """
  if not results:
    return "—"
  reg = results["config"].get("regime")
  if reg is None:
    from experiments import models

    name = (results["config"].get("sizes") or {}).get("model")
    known = name in models.RECIPES or name in models.SHAPES
    card = models.model_card(name) if known else {}
    spent = results["config"].get("budget")
    reg = {"model": name, "params": card.get("params"), "bits_per_byte": None,
           "tokens_per_param": spent["tokens_per_param"] if spent
           else card.get("tokens_per_param")}
  if reg["model"] is None:
    return "no model"
  parts = [f"`{reg['model']}`"]
  if reg["params"]:
    parts.append(f"{params_text(reg['params'])} params")
  tpp = reg["tokens_per_param"]
  parts.append(f"{tpp:.3g} tokens/param" if tpp else "tokens/param not recorded")
  bits = reg["bits_per_byte"]
  parts.append(f"{bits:.3g} bits/byte" if bits is not None else "bits/byte not recorded")
  return ", ".join(parts)


def budget_text(results: dict | None) -> str:
  """The primary effect at each training budget (with tokens per parameter) and its trend, or
  `—` when the run measured none.

  Example:
    >>> from experiments.claims.report import budget_text
    >>> runs = [{"multiple": 1, "tokens_per_param": 1.47, "effect": 0.2, "ci": [0.1, 0.3]},
    ...         {"multiple": 4, "tokens_per_param": 5.87, "effect": 0.4, "ci": [0.3, 0.5]}]
    >>> text = budget_text({"budgets": {"model": "micro", "runs": runs, "slope": 0.14,
    ...                                 "slope_ci": [0.07, 0.21], "trend": "grows"}})
    >>> for part in text.split("; "):
    ...   print(part)
    on micro: 1× (1.47 tokens/param): 0.2 [0.1, 0.3]
    4× (5.87): 0.4 [0.3, 0.5]
    grows: slope 0.14 [0.07, 0.21] per e-fold of tokens
  """
  block = (results or {}).get("budgets")
  if not block:
    return "—"
  parts = []
  for i, r in enumerate(block["runs"]):
    per = (f" ({fmt(r['tokens_per_param'])}{' tokens/param' if i == 0 else ''})"
           if r.get("tokens_per_param") else "")
    ci = f" [{fmt(r['ci'][0])}, {fmt(r['ci'][1])}]" if r["ci"][0] is not None else ""
    parts.append(f"{r['multiple']}×{per}: {fmt(r['effect'])}{ci}")
  fit = _fit_text(block, "tokens", "budgets")
  on = f"on {block['model']}: " if block.get("model") else ""
  return on + "; ".join(parts) + f"; {fit}"


def scale_sentence(scale: dict) -> str:
  """The one sentence a scaled report ends with, computed from the slope's interval.

  Example:
    >>> from experiments.claims.report import scale_sentence
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


def reading_text(row: dict) -> str:
  """A scale or context row's registered-rule reading, e.g. `inconclusive (failed control: x)`.

  Example:
    >>> from experiments.claims.report import reading_text
    >>> reading_text({"verdict": "inconclusive", "failed_controls": ["full learns"]})
    '**inconclusive** (failed control: full learns)'
  """
  if "verdict" not in row:
    return "—"
  failed = row.get("failed_controls") or []
  return f"**{row['verdict']}**" + (f" (failed control: {', '.join(failed)})" if failed else "")


def size_test(th: Threshold, row: dict) -> tuple[str, str]:
  """The primary threshold's test applied to one size's interval: `(outcome, why)`.

  `outcome` is what the threshold alone would say at that size: `supported` (its `supports`
  condition holds over the whole interval), `refuted`, `inconclusive`, or `n/a` (no finite
  effect). The interval is the size's 95% CI, or its single value with one seed.

  Example:
    >>> from experiments.claims.claim import Threshold
    >>> from experiments.claims.report import size_test
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
  for r in scale["sizes"]:
    outcome, why = size_test(th, r)
    lo, hi = r["ci"]
    spent = [f"{r['tokens_per_param']:.3g}" if r.get("tokens_per_param") else "—"]
    rows.append([f"`{r['model']}`" + (" (registered)" if r["model"] == registered else ""),
                 r["family"], params_text(r["params"]), *(spent if budgets else []),
                 fmt(r["effect"]),
                 f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n/a (one seed)",
                 f"{outcome}: {why}", *([reading_text(r)] if read else []),
                 *([fit_cell(r)] if fitted else [])])
  lines += table(["model", "family", "parameters", *(["tokens / param"] if budgets else []),
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


def context_sentence(context: list[dict], trend_: dict) -> str:
  """The sentence on the trend with context, computed from the slope on `log T`.

  Example:
    >>> from experiments.claims.report import context_sentence
    >>> rows = [{"T": 256, "effect": 0.1, "ci": [0.0, 0.2]},
    ...         {"T": 1024, "effect": 0.3, "ci": [0.2, 0.4]}]
    >>> context_sentence(rows, {"slope": 0.14, "slope_ci": [0.05, 0.23], "trend": "grows"})
    'From T = 256 to T = 1024 the effect grows: slope 0.14 [0.05, 0.23] per e-fold of T.'
  """
  return (f"From T = {context[0]['T']} to T = {context[-1]['T']} "
          f"{_trend_clause(trend_, 'T', 'lengths', 'under 3 points')}.")


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


def fit_cell(row: dict) -> str:
  """Whether a row entered its axis's trend fit: `yes`, or `no: <why>`."""
  return f"no: {row['excluded']}" if row.get("excluded") else "yes"


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


def budget_sentence(budgets: dict) -> str:
  """The sentence on the trend with training tokens, computed from the slope on `log(tokens)`.

  Example:
    >>> from experiments.claims.report import budget_sentence
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

def _error_bars(rows: list[dict]) -> list[list[float]]:
  """Matplotlib's `yerr` of rows with `effect` and `ci` (no bar where the interval is null)."""
  return [[r["effect"] - r["ci"][0] if r["ci"][0] is not None else 0.0 for r in rows],
          [r["ci"][1] - r["effect"] if r["ci"][1] is not None else 0.0 for r in rows]]


def _hollow_excluded(ax, rows: list[dict], x: str, color, marker: str = "o") -> None:
  """Rings the rows left out of the trend fit (white fill), labelled once."""
  out = [r for r in rows if r.get("excluded")]
  if out:
    ax.plot([r[x] for r in out], [r["effect"] for r in out], marker, ms=9, mfc="white",
            mec=color, ls="none", label="left out of the trend fit (see the report)")


def _threshold_lines(ax, th: Threshold) -> None:
  """The primary threshold's edges as dotted lines, one per value, labelled with its margin."""
  edges: dict[float, list[str]] = {}
  for label, cond in (("supports", th.supports), ("refutes", th.refutes)):
    if cond is not None:
      edges.setdefault(parse_condition(cond)[1], []).append(f"{label} {cond}")
  for value, labels in edges.items():
    if math.isfinite(value):
      margin = f", margin {fmt(th.margin)}" if th.margin is not None else ""
      ax.axhline(value, color="k", ls=":", lw=1,
                 label=f"threshold at {fmt(value)} ({'; '.join(labels)}{margin})")


def _save_log_x(fig, ax, th: Threshold, *, xlabel: str, title: str, ticks, tick_labels,
                path: str) -> None:
  """Finishes an effect-against-log-x figure (labels, ticks, legend) and writes it to `path`."""
  import matplotlib.pyplot as plt
  from matplotlib.ticker import NullFormatter

  unit = f" ({th.unit})" if th.unit else ""
  ax.set(xscale="log", xlabel=xlabel, ylabel=textwrap.fill(th.name + unit, 45), title=title)
  ax.set_xticks(ticks, tick_labels)
  ax.xaxis.set_minor_formatter(NullFormatter())
  ax.margins(x=0.15, y=0.12)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def context_figure(claim: Claim, context: list[dict], trend_: dict, run_dir: str,
                   models_at=()) -> str:
  """Draws `run_dir/context.png`: the primary effect ± 95% CI against `T`; returns its name."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  rs = [r for r in context if r["effect"] is not None]
  on = f" ({', '.join(models_at)})" if models_at else ""
  line = ax.errorbar([r["T"] for r in rs], [r["effect"] for r in rs], yerr=_error_bars(rs),
                     fmt="o-", capsize=3, label=f"primary effect{on}")
  _hollow_excluded(ax, rs, "T", line[0].get_color())
  _threshold_lines(ax, th)
  sentence = textwrap.fill(context_sentence(context, trend_), 68) if rs else ""
  _save_log_x(fig, ax, th, xlabel="context length T (tokens, log scale)",
              title=f"primary effect vs context length (bars: 95% CI)\n{sentence}",
              ticks=[r["T"] for r in context], tick_labels=[str(r["T"]) for r in context],
              path=os.path.join(run_dir, "context.png"))
  return "context.png"


def budget_figure(claim: Claim, budgets: dict, run_dir: str) -> str:
  """Draws `run_dir/budget.png`: the primary effect ± 95% CI against tokens per parameter
  (or tokens, when the model's parameters are unknown); returns its name."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  per = all(r["tokens_per_param"] for r in budgets["runs"])
  x_of = (lambda r: r["tokens_per_param"]) if per else (lambda r: r["train_tokens"])
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  rs = [r for r in budgets["runs"] if r["effect"] is not None]
  on = f" on {budgets['model']}" if budgets.get("model") else ""
  line = ax.errorbar([x_of(r) for r in rs], [r["effect"] for r in rs], yerr=_error_bars(rs),
                     fmt="o-", capsize=3, label=f"primary effect{on} (1×: the registered tokens)")
  _hollow_excluded(ax, [{**r, "x": x_of(r)} for r in rs], "x", line[0].get_color())
  _threshold_lines(ax, th)
  sentence = textwrap.fill(budget_sentence(budgets).replace("`", ""), 68)  # no markdown
  _save_log_x(fig, ax, th, xlabel=("tokens per parameter" if per else "training tokens")
              + " (log scale)", title=f"primary effect vs training budget (bars: 95% CI)\n"
              f"{sentence}", ticks=[x_of(r) for r in budgets["runs"]],
              tick_labels=[f"{r['multiple']}×\n{fmt(x_of(r))}" for r in budgets["runs"]],
              path=os.path.join(run_dir, "budget.png"))
  return "budget.png"

def scale_figure(claim: Claim, scale: dict, run_dir: str, registered: str | None = None) -> str:
  """Draws `run_dir/scale.png`: the primary effect ± 95% CI against parameters; returns its name.

  One series per family, log x axis, each point named by its model, the registered size
  ringed, and the threshold's edge (the margin line) drawn and labelled.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  th = claim.primary
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  families = list(dict.fromkeys(r["family"] for r in scale["sizes"]))
  for fam, marker in zip(families, "osD^v<>", strict=False):
    rs = [r for r in scale["sizes"] if r["family"] == fam and r["effect"] is not None
          and math.isfinite(r["effect"])]  # a size whose effect is n/a has no point to draw
    if not rs:
      continue
    line = ax.errorbar([r["params"] for r in rs], [r["effect"] for r in rs],
                       yerr=_error_bars(rs), fmt=f"{marker}-", capsize=3, label=f"{fam} family")
    _hollow_excluded(ax, rs, "params", line[0].get_color(), marker)
    for r in rs:
      ax.annotate(r["model"], (r["params"], r["effect"]), textcoords="offset points",
                  xytext=(6, 6), fontsize=7)
      if r["model"] == registered:
        ax.plot([r["params"]], [r["effect"]], "o", ms=13, mfc="none", mec="k",
                label=f"registered size ({r['model']}): the verdict is read here")
  _threshold_lines(ax, th)
  ticks, last = [], -math.inf
  for p in sorted({r["params"] for r in scale["sizes"]}):
    if math.log10(p) - last >= 0.15:  # keep tick labels apart
      ticks.append(p)
      last = math.log10(p)
  _save_log_x(fig, ax, th, xlabel="parameters (count, log scale; M = millions)",
              title=f"primary effect vs model size (bars: 95% CI)\n{trend_text({'scale': scale})}",
              ticks=ticks, tick_labels=[params_text(p) for p in ticks],
              path=os.path.join(run_dir, "scale.png"))
  return "scale.png"


def anchor_text(claim: Claim) -> str:
  if not claim.anchors:
    return "—"
  a = claim.anchors[0]
  return f"{a.what}: {fmt(a.value)} ({a.source})"


def claim_markdown(claim: Claim, results: dict, notes=(), figures=(), *, level: int = 1,
                   figure_path=lambda name: name, context_trend: dict | None = None
                   ) -> list[str]:
  """The body of a claim's report: verdict, thresholds, arms, effects, anchors, figures.

  `context_trend` (`runner.context_block`'s slope of the effect on `log T`) adds the sentence
  on the trend with context; without it the context table stands alone.
  """
  h = "#" * level
  evals = evaluations(claim, results)
  sizes = results["config"].get("sizes", {}) if isinstance(results["config"], dict) else {}
  lines = [f"{h} Claim `{claim.id}` — {claim.topic} ({claim.kind} application)", "",
           f"> {claim.preface}", "> — the preface", ""]
  if claim.theorem:
    lines += [f"**Settled by proof.** {claim.theorem}", ""]
  lines += [f"**Primary question (the preface's sentence).** {claim.hypothesis}", "",
            f"**Refuted if.** {claim.refuted_if}", "",
            f"**Verdict: {verdict_label(results, results['verdict'])}.** {results['reason']}", ""]
  for ext in results.get("extensions", ()):
    lines += [f"- Extension *{ext['name']}*: **{verdict_label(results, ext['verdict'])}**. "
              f"{ext['reason']}"]
  if results.get("extensions"):
    lines += ["", "Extensions probe a mechanism; they never change the verdict above.", ""]
  lines += [f"Seeds {results['seeds']} (tuning seeds {results.get('tuning_seeds', [])}), "
            f"{'quick' if results['quick'] else 'full'} sizes "
            + ", ".join(f"{k} = {v}" for k, v in sizes.items())
            + f"; {results['runtime_s']:.1f} s on {results['env']['backend']} "
            f"({results['env']['device']}), git `{results['git']}`.", ""]
  if spent := results["config"].get("budget"):
    lines += [f"**Training budget.** Each reported model trains on {spent['train_tokens']:,} "
              f"tokens: {spent['tokens_per_param']:.3g} tokens per parameter "
              f"({params_text(spent['params'])} parameters; compute-optimal training reads "
              "about 20, Hoffmann et al. 2022).", ""]
  groups = [("Thresholds of the primary question (frozen before the run)", claim.thresholds,
             evals)]
  seeds = [str(s) for s in results["seeds"]]
  runs = {arm: body["runs"] for arm, body in results["arms"].items()}
  for ext in claim.extensions:
    groups.append((f"Thresholds of the extension *{ext.name}*: {ext.question}", ext.thresholds,
                   [evaluate(th, runs, seeds) for th in ext.thresholds]))
  for title, thresholds, group_evals in groups:
    lines += [f"{h}# {title}", ""]
    rows = []
    for th, ev in zip(thresholds, group_evals, strict=True):
      lo, hi = ev["interval"]
      quantity = (f"{th.arm}.{th.metric}" + (f" − {th.baseline}.{th.metric}" if th.baseline
                                              else "") + (f" ({th.unit})" if th.unit else ""))
      rows.append([("control: " if th.control else "") + th.name, quantity,
                   ev["what"], fmt(ev["mean"]),
                   f"[{fmt(lo)}, {fmt(hi)}]",
                   "—" if th.margin is None else fmt(th.margin),
                   f"{th.supports or '—'}: {'yes' if ev['supports'] else 'no'}",
                   f"{th.refutes or '—'}: {'yes' if ev['refutes'] else 'no'}"
                   if th.refutes else "—"])
    lines += table(["threshold", "quantity", "interval of", "mean", "interval", "margin",
                    "supports", "refutes"], rows)
  lines += [f"{h}# Arms (mean ± std over {len(results['seeds'])} seed(s))", ""]
  rows = []
  for arm, body in results["arms"].items():
    for metric, m in body["mean"].items():
      per_seed = ", ".join(fmt(body["runs"][s].get(metric)) for s in body["runs"])
      rows.append([arm, metric, fmt(m), fmt(body["std"][metric]), per_seed])
  lines += table(["arm", "metric", "mean", "std", "per seed"], rows)
  lines += [f"{h}# Effects (paired over seeds)", ""]
  rows = []
  for e in results["effects"]:
    lo, hi = e["ci95"]
    rows.append([e["name"], e["arm"] + (f" − {e['baseline']}" if e["baseline"] else ""),
                 e["metric"], fmt(e["mean"]),
                 f"[{fmt(lo)}, {fmt(hi)}]" if lo is not None else "n/a (one seed)"])
  lines += table(["effect", "arm − baseline", "metric", "mean", "95% CI"], rows)
  if claim.anchors:
    lines += [f"{h}# Published anchors", ""]
    lines += table(["what", "value", "source"],
                   [[a.what, fmt(a.value), a.source] for a in claim.anchors])
  if results.get("scale"):
    lines += scale_markdown(claim, results, h)
  if results.get("context"):
    lines += context_markdown(claim, results, h, context_trend)
  if results.get("budgets"):
    lines += budget_markdown(claim, results, h)
  if notes:
    lines += [f"{h}# Notes", "", *notes, ""]
  if figures:
    lines += [f"{h}# Figures", ""]
    lines += [f"![{name}]({figure_path(name)})" for name in figures] + [""]
  if results.get("scale"):
    lines += [f"**Trend with scale.** {scale_sentence(results['scale'])}", ""]
  context_trend = results.get("context_trend") or context_trend
  if results.get("context") and context_trend:
    lines += [f"**Trend with context.** {context_sentence(results['context'], context_trend)}",
              ""]
  if results.get("budgets"):
    lines += [f"**Trend with the training budget.** {budget_sentence(results['budgets'])}", ""]
  return lines


BUDGET_MARK = "<!-- the budget axis, added onto this result (claim ID --onto) -->"


def add_budget_report(claim: Claim, results: dict, path: str, notes=()) -> str:
  """Appends the budget section to the finished report at `path` (an earlier one this wrote is
  replaced): `results["budgets"]` as a table, with its trend, the note on what ran, `notes`
  and `budget.png`. The rest of the report is left as it was."""
  with open(path) as f:
    text = f.read().split(BUDGET_MARK)[0].rstrip("\n")
  block = results["budgets"]
  lines = [text, "", BUDGET_MARK, "", *budget_markdown(claim, results, "#"),
           f"This axis was added onto the finished result at git `{block['git']}` "
           f"({block['runtime_s']:.0f} s here; budgets saved earlier are reused, not run again). "
           "The verdict, sizes and lengths above were not run again.", "", *notes, "",
           "![budget.png](budget.png)", "",
           f"**Trend with the training budget.** {budget_sentence(block)}", ""]
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path


def write_claim_report(claim: Claim, results: dict, evals, findings: dict, run_dir: str) -> str:
  """Writes `run_dir/report.md`; returns its path."""
  del evals  # recomputed from `results`, so the report depends on nothing but the file
  lines = claim_markdown(claim, results, findings.get("notes", ()), findings.get("figures", ()),
                         context_trend=findings.get("context_trend"))
  path = os.path.join(run_dir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path


def tour_markdown(claims, entries, results_by_id: dict, *, quick: bool, runtime_s: float,
                  opening: list[str], tour_dir: str, committed: dict | None = None) -> list[str]:
  """The tour's report, a few screens: one verdict table, then a short paragraph per claim.

  Each paragraph links the claim's own `report.md` (its thresholds, arms, figures). With
  `committed` (`{claim id: results.json of the committed full run}`, from `results/`), a
  quick tour shows the committed verdict beside its indicative one and says where they
  differ.
  """
  committed = committed or {}
  intro = (f"Quick sizes and one seed: every verdict here is {INDICATIVE}; the committed "
           "column is the pre-registered full run kept in `results/`. " if quick else "")
  lines = ["# The preface, tested: the tour", "",
           f"{intro}Runtime {runtime_s:.0f} s. Verdicts are computed by code from thresholds "
           "frozen in each claim before it ran (`experiments/claims/`).", "",
           "## Verdicts", ""]
  rows = []
  for i, (claim, entry) in enumerate(zip(claims, entries, strict=True), 1):
    res = results_by_id.get(claim.id)
    full = committed.get(claim.id)
    row = [i, f"`{claim.id}`", claim.kind + (" (proof)" if claim.theorem else ""),
           verdict_label(res, entry["verdict"])]
    if quick:
      row.append(full["verdict"] if full else "no committed run")
    row += [key_number(res, claim), trend_text(res), anchor_text(claim) if claim.built else "—"]
    rows.append(row)
  header = ["#", "claim", "kind", "primary verdict"] + (["committed full verdict"] if quick
                                                        else [])
  lines += table(header + ["key number", "trend with size", "published anchor"], rows)
  lines += ["## Opening checks", "", *opening, ""]
  for claim, entry in zip(claims, entries, strict=True):
    res = results_by_id.get(claim.id)
    lines += [f"## `{claim.id}` — {claim.topic}", "", f"> {claim.preface}", ""]
    if entry["results"] is None:
      lines += [f"{entry['verdict']}: {entry['reason']}", ""]
      continue
    claim_dir = os.path.dirname(entry["results"])
    rel = os.path.relpath(os.path.join(claim_dir, "report.md"), tour_dir)
    text = [f"**{verdict_label(res, entry['verdict'])}** (primary question)."]
    for ext in res.get("extensions", ()):
      text.append(f"Extension *{ext['name']}*: {ext['verdict']}.")
    text.append(f"Seeds {res['seeds']}, tuning seeds {res.get('tuning_seeds', [])}.")
    full = committed.get(claim.id)
    if quick and full:
      same = "agrees with" if full["verdict"] == res["verdict"] else "differs from"
      text.append(f"This indicative verdict {same} the committed full run's "
                  f"({full['verdict']}, seeds {full['seeds']}).")
    text.append(f"[Its report]({rel}).")
    lines += [" ".join(text), ""]
  return lines
