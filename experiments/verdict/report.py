"""Markdown for the claims: one `report.md` per claim run, and the tour's verdict table.

Rendering only: every number comes from a `results.json` dict (the runner writes it), and the
thresholds' intervals are recomputed from it, so a report can be re-made from disk. The axis
sections come from `axis_report`, the cells of the tour's table from `cells`; the figures
(`figures`) are drawn by the runner.
"""

from __future__ import annotations

import os

from experiments.verdict.axis_report import (
  budget_markdown,
  budget_sentence,
  context_markdown,
  context_sentence,
  scale_markdown,
  scale_sentence,
)
from experiments.verdict.cells import (
  anchor_text,
  key_number,
  params_text,
  table,
  trend_text,
  verdict_label,
)
from experiments.verdict.claim import Claim
from experiments.verdict.rule import INDICATIVE
from experiments.verdict.stats import evaluate, fmt


def claim_markdown(claim: Claim, results: dict, notes=(), figures=(), *, level: int = 1,
                   figure_path=lambda name: name, context_trend: dict | None = None
                   ) -> list[str]:
  """The body of a claim's report: verdict, thresholds, arms, effects, anchors, figures.

  `context_trend` (`axes.context_block`'s slope of the effect on `log T`) adds the sentence
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


def evaluations(claim: Claim, results: dict) -> list[dict]:
  """Each threshold's interval and conditions, recomputed from `results["arms"]`."""
  runs = {arm: body["runs"] for arm, body in results["arms"].items()}
  seeds = [str(s) for s in results["seeds"]]
  return [evaluate(th, runs, seeds) for th in claim.thresholds]


def write_claim_report(claim: Claim, results: dict, evals, findings: dict, run_dir: str) -> str:
  """Writes `run_dir/report.md`; returns its path."""
  del evals  # recomputed from `results`, so the report depends on nothing but the file
  lines = claim_markdown(claim, results, findings.get("notes", ()), findings.get("figures", ()),
                         context_trend=findings.get("context_trend"))
  path = os.path.join(run_dir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path


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
