"""Markdown for the claims: one `report.md` per claim run, and the tour's verdict table.

Rendering only: every number comes from a `results.json` dict (the runner writes it),
and the thresholds' intervals are recomputed from it, so a report can be re-made from disk.
"""

from __future__ import annotations

import os
import re
import shutil

from experiments.claims.claim import INDICATIVE, Claim
from experiments.claims.stats import evaluate, fmt


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


def key_number(results: dict | None) -> str:
  """The claim's key number: its first effect, `mean [lo, hi]`."""
  if not results or not results["effects"]:
    return "—"
  e = results["effects"][0]
  lo, hi = e["ci95"]
  ci = f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else ""
  return f"{e['name']}: {fmt(e['mean'])}{ci}"


def anchor_text(claim: Claim) -> str:
  if not claim.anchors:
    return "—"
  a = claim.anchors[0]
  return f"{a.what}: {fmt(a.value)} ({a.source})"


def claim_markdown(claim: Claim, results: dict, notes=(), figures=(), *, level: int = 1,
                   figure_path=lambda name: name) -> list[str]:
  """The body of a claim's report: verdict, thresholds, arms, effects, anchors, figures."""
  h = "#" * level
  evals = evaluations(claim, results)
  lines = [f"{h} Claim `{claim.id}` — {claim.topic} ({claim.kind} application)", "",
           f"> {claim.preface}", "> — the preface", "",
           f"**Hypothesis.** {claim.hypothesis}", "",
           f"**Refuted if.** {claim.refuted_if}", "",
           f"**Verdict: {verdict_label(results, results['verdict'])}.** {results['reason']}", "",
           f"Seeds {results['seeds']}, {'quick' if results['quick'] else 'full'} sizes, "
           f"{results['runtime_s']:.1f} s on {results['env']['backend']} "
           f"({results['env']['device']}), git `{results['git']}`.", "",
           f"{h}# Thresholds (frozen before the run)", ""]
  rows = []
  for th, ev in zip(claim.thresholds, evals, strict=True):
    lo, hi = ev["interval"]
    quantity = f"{th.arm}.{th.metric}" + (f" − {th.baseline}.{th.metric}" if th.baseline else "")
    rows.append([("control: " if th.control else "") + th.name, quantity,
                 ev["what"], fmt(ev["mean"]),
                 f"[{fmt(lo)}, {fmt(hi)}]",
                 f"{th.supports or '—'}: {'yes' if ev['supports'] else 'no'}",
                 f"{th.refutes or '—'}: {'yes' if ev['refutes'] else 'no'}"
                 if th.refutes else "—"])
  lines += table(["threshold", "quantity", "interval of", "mean", "interval", "supports",
                  "refutes"], rows)
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
  if notes:
    lines += [f"{h}# Notes", "", *notes, ""]
  if figures:
    lines += [f"{h}# Figures", ""]
    lines += [f"![{name}]({figure_path(name)})" for name in figures] + [""]
  return lines


def write_claim_report(claim: Claim, results: dict, evals, findings: dict, run_dir: str) -> str:
  """Writes `run_dir/report.md`; returns its path."""
  del evals  # recomputed from `results`, so the report depends on nothing but the file
  lines = claim_markdown(claim, results, findings.get("notes", ()), findings.get("figures", ()))
  path = os.path.join(run_dir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path


def _shift_headings(text: str, by: int) -> str:
  return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + by) + " ", text, flags=re.M)


def tour_markdown(claims, entries, results_by_id: dict, *, quick: bool, runtime_s: float,
                  opening: list[str], tour_dir: str) -> list[str]:
  """The tour's report: opening checks, the verdict table of every claim, one section each.

  Each built claim's section is its own `report.md` (headings shifted one level down), and
  its figures are copied into `tour_dir` as `<claim-id>-<name>.png`.
  """
  intro = f"Quick sizes and one seed: every verdict is {INDICATIVE}. " if quick else ""
  lines = ["# The preface, tested: the tour", "",
           f"{intro}Runtime {runtime_s:.0f} s. The verdicts are computed by code from thresholds "
           "frozen in each claim before it ran (`experiments/claims/`).", "",
           "## Verdicts", ""]
  rows = []
  for i, (claim, entry) in enumerate(zip(claims, entries, strict=True), 1):
    res = results_by_id.get(claim.id)
    rows.append([i, claim.topic, f"`{claim.id}`", claim.kind, claim.preface,
                 claim.hypothesis or "—", verdict_label(res, entry["verdict"]),
                 key_number(res), anchor_text(claim) if claim.built else "—"])
  lines += table(["#", "topic", "claim", "kind", "the preface says", "our hypothesis",
                  "verdict", "key number", "published anchor"], rows)
  lines += ["## Opening checks", "", *opening, ""]
  for claim, entry in zip(claims, entries, strict=True):
    if entry["results"] is None:
      lines += [f"## Claim `{claim.id}` — {entry['verdict']}", "", entry["reason"], ""]
      continue
    claim_dir = os.path.dirname(entry["results"])
    with open(os.path.join(claim_dir, "report.md")) as f:
      text = _shift_headings(f.read(), 1)
    for name in sorted(os.listdir(claim_dir)):
      if name.endswith(".png"):
        shutil.copyfile(os.path.join(claim_dir, name), os.path.join(tour_dir, f"{claim.id}-{name}"))
        text = text.replace(f"]({name})", f"]({claim.id}-{name})")
    lines += [text, f"Run folder: `{claim_dir}`.", ""]
  return lines
