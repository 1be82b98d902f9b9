"""Markdown for the claims: one `report.md` per claim run, and the tour's verdict table.

Rendering only: every number comes from a `results.json` dict (the runner writes it), and the
thresholds' intervals are recomputed from it, so a report can be re-made from disk. The axis
sections come from `axis_report`, the cells of the tour's table from `cells`; the figures
(`figures`) are drawn by the runner.
"""

from __future__ import annotations

import os

from experiments.verdict.arithmetic.rule import INDICATIVE
from experiments.verdict.arithmetic.stats import evaluate, fmt
from experiments.verdict.render.cells import (
  anchor_text,
  key_number,
  params_text,
  table,
  verdict_label,
)
from experiments.verdict.render.section import axis_markdown, axis_text


def claim_markdown(claim, results: dict, *, level: int = 1,
                   figure_path=lambda name: name) -> list[str]:
  """The body of a claim's report: verdict, thresholds, arms, effects, anchors, each axis's
  section, the notes, the figures and each axis's trend, all read from `results` (a
  `results.json` dict, schema 2) and the claim's declaration (`Claim.from_dict` of the run's
  `claim.json` renders a kept result as it ran)."""
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
      what = ev["what"]
      if "reached" in ev:  # a censored median (`censoring`): how many seeds have a value
        r = ev["reached"]
        what += (f"; {r['k']} of {r['n']} seeds reached the target "
                 f"[{fmt(r['ci95'][0])}, {fmt(r['ci95'][1])}]")
      rows.append([("control: " if th.control else "") + th.name, quantity,
                   what, fmt(ev["mean"]),
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
  blocks = [(claim.axis_of(name), block) for name, block in results["axes"].items()]
  for axis, block in blocks:
    lines += axis_markdown(axis, claim, results, block, h)
  if results.get("notes"):
    lines += [f"{h}# Notes", "", *results["notes"], ""]
  if results.get("figures"):
    lines += [f"{h}# Figures", ""]
    lines += [f"![{name}]({figure_path(name)})" for name in results["figures"]] + [""]
  for axis, block in blocks:
    lines += [f"**Trend with {axis.trend_title()}.** {axis.sentence(block)}", ""]
  return lines


def evaluations(claim, results: dict) -> list[dict]:
  """Each threshold's interval and conditions, recomputed from `results["arms"]`."""
  runs = {arm: body["runs"] for arm, body in results["arms"].items()}
  seeds = [str(s) for s in results["seeds"]]
  return [evaluate(th, runs, seeds) for th in claim.thresholds]


def write_claim_report(claim, results: dict, run_dir: str) -> str:
  """Writes `run_dir/report.md` from `results` alone (`claim_markdown`); returns its path."""
  path = os.path.join(run_dir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(claim_markdown(claim, results)))
  return path


_ADDED = "<!-- the budget axis, added onto this result (claim ID --onto) -->"


def lifted(report: str) -> dict:
  """`{"notes", "figures"}` a report written before `results.json` kept them lists: its notes
  section, the figures it shows, and what a budget axis added onto it (`--onto`) appended.

  Example:
    >>> text = ["# Claim", "", "## Notes", "", "- a", "", "- b", "", "## Figures", "",
    ...         "![x.png](x.png)", ""]
    >>> lifted("\\n".join(text))
    {'notes': ['- a', '', '- b'], 'figures': ['x.png']}
  """
  main, _, added = report.partition(_ADDED)
  lines = main.split("\n")
  notes, figures = [], []
  if "## Notes" in lines:
    i = lines.index("## Notes") + 2
    while i < len(lines) and not lines[i].startswith(("## ", "**Trend with ")):
      notes.append(lines[i])
      i += 1
    notes = notes[:-1] if notes and notes[-1] == "" else notes
  if "## Figures" in lines:
    i = lines.index("## Figures") + 2
    while i < len(lines) and lines[i].startswith("!["):
      figures.append(lines[i][2:lines[i].index("]")])
      i += 1
  if added:  # its section, a line on what ran, its notes, its figure, its trend
    tail = added.split("\n")
    start = next(i for i, t in enumerate(tail) if t.startswith("This axis was added")) + 2
    end = next(i for i, t in enumerate(tail) if t.startswith("!["))
    notes += [t for t in tail[start:end] if t]
    figures += [t[2:t.index("]")] for t in tail[end:] if t.startswith("![")]
  return {"notes": notes, "figures": figures}


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
    row += [key_number(res, claim), axis_text(claim, res, "scale"),
            anchor_text(claim) if claim.built else "—"]
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
