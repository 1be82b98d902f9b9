"""Refitting a kept result: its axes' trends under the current statistics, nothing run again.

The trend of every axis is a statistic of the axis's rows, so a result kept under older
statistics (or an older schema: `schema.upgrade`) is brought up to the current rule
(`Axis.fit`: one point per size, failed controls, censored seeds and under-trained sizes left
out) from what was kept: the rows in `results.json` and, where kept, each point's per-seed
findings (`<axis folder>/findings.json`; the registered point's runs are the `arms`), which
also give a from-scratch size the held-out bits per byte it reached (`run_bits`). The
verdict, the rows' effects and intervals, and everything else stay as they were
(`refit_results`). The report is then made again from the file alone (`rendered`, with the
claim as its `claim.json` froze it), and the axis figures are drawn again (`redraw`).
`python -m experiments.commands.refit` applies it to every result in `results/`.
"""

from __future__ import annotations

import copy
import os

from experiments import jsonio
from experiments.verdict.declare.axes import base_row, run_bits
from experiments.verdict.declare.claim import Claim
from experiments.verdict.render import report
from experiments.verdict.render.figures import axis_figure


def _kept_runs(folder: str) -> dict | None:
  path = os.path.join(folder, "findings.json")
  if not os.path.exists(path):
    return None
  return jsonio.load_strict(path)["findings"]["runs"]


def refit_results(claim: Claim, res: dict, folder: str) -> dict:
  """`res` (schema 2) with every axis's fit recomputed by its axis from the kept rows, by the
  thresholds the run's `claim.json` froze (its primary and censoring rule), not a later
  registration's."""
  res = copy.deepcopy(res)
  ran = frozen_claim(claim, folder)
  seeds = [str(s) for s in res["seeds"]]
  registered_runs = {arm: body["runs"] for arm, body in res["arms"].items()}
  registered = (res["config"].get("sizes") or {}).get("model")
  for name, block in res["axes"].items():
    axis = claim.axis_of(name)

    def runs_of(row, axis=axis, block=block):
      for sub in axis.kept_folders(row, block):
        runs = _kept_runs(os.path.join(folder, sub))
        if runs is not None:
          return runs
      return registered_runs if axis.is_registered(row, block, registered) else None
    if name == "scale":
      for row in block["rows"]:  # a row kept before rows recorded their regime
        if claim.reads_base and "tokens_per_param" not in row:
          row.update(base_row(row["model"], seeds))
        elif not claim.reads_base and "bits_per_byte" not in row:
          runs = runs_of(row)
          bits = run_bits(claim, runs, seeds) if runs is not None else None
          if bits is not None:
            row["bits_per_byte"] = bits
    keep = {k: v for k, v in block.items() if k in ("model", "added")}
    res["axes"][name] = {**keep, "rows": block["rows"],
                         **axis.fit(ran, block["rows"], runs_of, seeds)}
  return jsonio.strict(res)


def frozen_claim(claim: Claim, folder: str) -> Claim:
  """The claim as the kept run's `claim.json` froze it (its text and thresholds), with the
  registered claim's axes: what its report is rendered with. The live claim when none."""
  path = os.path.join(folder, "claim.json")
  return Claim.from_dict(jsonio.load_strict(path), claim.axes) if os.path.exists(path) else claim


def rendered(claim: Claim, res: dict, folder: str) -> str:
  """The report.md of the kept result in `folder`, made from `res` alone."""
  return "\n".join(report.claim_markdown(frozen_claim(claim, folder), res))


def redraw(claim: Claim, res: dict, folder: str) -> None:
  """Draws again the axis figures `folder` already holds, from `res` (the registered size
  ringed only while the claim's `FULL` sizes are still the ones the result ran at)."""
  same = claim.FULL is not None and jsonio.strict(claim.FULL.to_dict()) == res["config"]["sizes"]
  for name, block in res["axes"].items():
    axis = claim.axis_of(name)
    if os.path.exists(os.path.join(folder, f"{axis.name}.png")):
      axis_figure(axis, claim, block, folder, claim.FULL if same else None)
