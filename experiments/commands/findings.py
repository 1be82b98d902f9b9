"""What `make demo` shows: the committed findings first, then what can be measured again now.

    make demo        # python -m experiments tour --quick

A quick tour (`tour.run_tour(quick=True)`) prints three parts, and writes them to its report:

1. **The committed findings**: one line per claim (its verdict with its registration, the key
   number with its 95% interval, the registered model), every cell from `table.findings_rows`,
   the rows of the README's table: each kept result's verdicts and intervals recomputed from
   its per-seed runs (`table.replayed`). These are the project's findings; a kept file that
   its own runs no longer give is named.
2. **Measured again** (`REMEASURED`): the claims that read the committed base models without
   training and finish in seconds run in full, on their registered seeds and size (no axes),
   and their key number is shown beside the kept one.
3. **Pipeline checks**: every other claim at its quick sizes on one seed. These check that the
   claim's code runs end to end on this machine; one seed of a small model decides nothing, so
   their lines carry no verdict (the run's own `results.json` still records what the rule
   gave, for the schema check CI makes).
"""

from __future__ import annotations

import os

from experiments.commands import table
from experiments.commands.refit import same
from experiments.verdict.render import cells
from experiments.verdict.running.folders import RESULTS_DIR

# Claims that read the committed base models without training, measured again in full by
# `make demo` (in the tour's own process, at XLA's default optimization, as `claim ID` runs
# them): alone on 2 cores at load ~7 (2026-12-07) softmax-kernel took 20 s (13 s of
# CPU), adaptive-rank 60 s (21 s of CPU). causal-mask also reads them without training, but
# its registered size had not finished in 5 min.
REMEASURED = ("softmax-kernel", "adaptive-rank")

PIPELINE = "pipeline check"
_DECIDED = ("verdict", "reason", "effects", "extensions", "axes")


def _plain(cell: str) -> str:
  return cell.replace("`", "")


def committed_lines(root: str = RESULTS_DIR) -> list[str]:
  """The console lines of the committed findings: a heading, one line per claim
  (`table.findings_rows`), and a line per kept result that its own runs no longer give."""
  rows = table.findings_rows(root)
  lines = [f"The committed findings ({os.path.relpath(root)}/: the full runs on the "
           "pre-registered seeds; every verdict and 95% interval recomputed from the kept "
           "per-seed runs):"]
  width = max(len(r["verdict"]) for r in rows)
  for i, r in enumerate(rows, 1):
    holm = "" if r["holm"] == "—" else f"{r['holm']};  "
    rep = "" if r["replicates"] == "—" else f"replicates v-1: {r['replicates']};  "
    lines.append(f"  {i:2d} {r['id']:<23} {r['verdict']:<{width}}  {holm}{rep}{_plain(r['key'])}  "
                 f"({_plain(r['model'])})")
  for r in rows:
    kept = table.load_committed(r["id"], root)
    if kept is None:
      continue
    replay = table.replayed(r["id"], root)
    changed = [k for k in _DECIDED if not same(replay[k], kept[k])]
    if changed:
      lines.append(f"  ! {r['id']}: its results.json keeps {changed} that its per-seed runs no "
                   "longer give; the line above is what they give. Fix: python -m "
                   "experiments.commands.refit, or look for a change to the verdict machinery.")
  return lines


def _key(res: dict, claim) -> tuple[str, str]:
  """`(effect name, "mean unit [lo, hi]")` of `cells.key_number`."""
  text = cells.key_number(res, claim)
  name = max((e["name"] for e in res["effects"] if text.startswith(e["name"] + ": ")),
             key=len, default="")
  return name, text[len(name) + 2:] if name else text


def remeasure_line(claim, res: dict, kept: dict | None, seconds: float) -> str:
  """`claim` measured again in full (`res`), beside its kept result (`kept`, replayed)."""
  seeds = ", ".join(map(str, res["seeds"]))
  name, now = _key(res, claim)
  if kept is None:
    return f"{name}: now {now} (seeds {seeds}, {seconds:.0f} s); no kept result to compare"
  agrees = ("the kept verdict again" if res["verdict"] == kept["verdict"] else
            f"VERDICT DIFFERS: now {res['verdict']}, kept {kept['verdict']}")
  return (f"{name}: now {now}, kept {_key(kept, claim)[1]} (seeds {seeds}, {seconds:.0f} s): "
          f"{agrees}")


def pipeline_line(res: dict, seconds: float, report: str) -> str:
  """A quick run's line: it ran, in how long, and where its report is; no verdict."""
  return (f"{PIPELINE}: ran end to end (quick sizes, seed {res['seeds'][0]}) "
          f"{seconds:6.1f} s  {report}")


def quick_markdown(claims, entries, results_by_id: dict, *, runtime_s: float, opening,
                   tour_dir: str, root: str = RESULTS_DIR) -> list[str]:
  """The report of a quick tour: the committed findings (the README's table), the claims
  measured again beside their kept numbers, the opening checks and the pipeline checks."""
  lines = ["# The preface, tested: the committed findings and a quick check", "",
           f"Runtime {runtime_s:.0f} s. The verdicts are the committed full runs in "
           f"`{os.path.relpath(root)}/` "
           "(pre-registered seeds, thresholds frozen before each run), recomputed from their "
           "per-seed runs; the quick runs below check the pipeline and decide nothing.", "",
           "## The committed findings", "", *table.findings_lines(root), "",
           "## Measured again now", ""]
  rows, checks = [], []
  for claim, entry in zip(claims, entries, strict=True):
    res = results_by_id.get(claim.id)
    if res is None:
      built = entry["verdict"] != "not built"  # else the claim has no run to check
      checks.append([f"`{claim.id}`", entry["reason"] if built else
                     f"not built: {entry['reason']}", "—"])
      continue
    rel = os.path.relpath(os.path.join(os.path.dirname(entry["results"]), "report.md"),
                          tour_dir)
    if claim.id in REMEASURED:
      kept = table.replayed(claim.id, root)
      rows.append([f"`{claim.id}`", cells.key_number(res, claim),
                   cells.key_number(kept, claim) if kept else "no kept result",
                   ", ".join(map(str, res["seeds"])), f"[report]({rel})"])
    else:
      checks.append([f"`{claim.id}`", f"ran end to end (quick sizes, seed {res['seeds'][0]})",
                     f"[report]({rel})"])
  lines += (cells.table(["claim", "key number now (95% CI)", "kept", "seeds", "run"], rows)
            if rows else ["None in this tour.", ""])
  lines += ["## Opening checks", "", *opening, "",
            f"## {PIPELINE[0].upper() + PIPELINE[1:]}s", "",
            "Quick sizes, one seed: each claim's code run end to end. No verdict is read here; "
            "the committed findings above are the verdicts.", "",
            *cells.table(["claim", "pipeline", "run"], checks)]
  return lines
